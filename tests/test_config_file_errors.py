"""Every invalid value in a pipeline file is exit 5 naming the file (issue 35, finding 13a), found before any work.

``weights = [nan, 1.0]`` passed the file's checks (nan < 0 is false) and was refused by fusion after both retrievers
had run, as a usage error (exit 2) without the file; an unknown ``search_with`` (or ``[[retriever]] name``) was
refused when the retriever was built, exit 2 without the file.
"""

from __future__ import annotations

import pytest

from r2med.cli import main

AGENT = ('[agent]\nllm_name = "x"\nstyle = "search-r1"\nllm_model = "m"\nbase_url = "http://127.0.0.1:9/v1"\n')
TWO = '[[retriever]]\nname = "bm25"\n[[retriever]]\nname = "bm25-lucene"\n'


@pytest.mark.parametrize(("body", "message"), [
    (TWO + '[fusion]\nweights = [nan, 1.0]\n', "[fusion]: weights must be a list of finite numbers, got [nan, 1.0]"),
    (TWO + '[fusion]\nweights = [inf, 1.0]\n', "[fusion]: weights must be a list of finite numbers, got [inf, 1.0]"),
    (TWO + '[fusion]\nmethod = "combsum"\nweights = [1.0, -nan]\n', "[fusion]: weights must be a list of finite numbers"),
    (TWO + '[fusion]\nweights = [-1, 1]\n', "[fusion]: weights must be at least 0, got -1"),
    (AGENT + 'search_with = "nosuchretriever"\n',
     "[agent]: search_with 'nosuchretriever': unknown retriever 'nosuchretriever'; did you mean 'contriever'?"),
    (AGENT + 'search_with = "bgee"\n', "[agent]: search_with 'bgee': unknown retriever 'bgee'; did you mean 'bge'?"),
    ('[[retriever]]\nname = "nosuchretriever"\n',
     "[[retriever]] #1: unknown retriever 'nosuchretriever'; did you mean 'contriever'?"),
])
def test_a_bad_value_in_the_file_is_exit_5_naming_it(tmp_path, capsys, body, message):
    path = tmp_path / "pipeline.toml"
    path.write_text('[pipeline]\ndatasets = ["scifact"]\n' + body, encoding="utf-8")
    code = main(["run", "--config", str(path), "--data-dir", str(tmp_path / "none"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 5, err
    assert err.startswith(f"r2med: error: {path} ") and message in err
    assert not (tmp_path / "out").exists()  # refused before any work


def test_known_names_pass(tmp_path):
    from r2med.config import load_spec

    path = tmp_path / "p.toml"
    path.write_text('[[retriever]]\nname = "bge"\n[[retriever]]\nname = "org/model"\n[[retriever]]\nname = "bm25"\n'
                    '[fusion]\nweights = [1, 0.5, 2]\n', encoding="utf-8")
    spec = load_spec(path)
    assert [r.name for r in spec.retrievers] == ["bge", "org/model", "bm25"]
    assert spec.fusion.options["weights"] == [1.0, 0.5, 2.0]
    path.write_text(AGENT + 'search_with = "http://127.0.0.1:8000/retrieve"\n', encoding="utf-8")
    assert load_spec(path).agent.search_with == "http://127.0.0.1:8000/retrieve"


def test_the_flag_refuses_a_nan_weight_before_any_work(capsys):
    code = main(["run", "--retriever", "bm25", "--retriever", "bm25-lucene", "--fuse", "rrf:weights=nan,1",
                 "--tasks", "scifact"])
    assert code == 2
    assert ("--fuse rrf:weights=nan,1: weights=nan,1: expected comma-separated numbers, got 'nan,1' "
            "('nan': it is not finite; write a finite number, e.g. 0.9)") in capsys.readouterr().err
