"""Names from flags and spec files never write outside ``--output``: they are refused with exit 2 (flags) or 5 (files)."""

from __future__ import annotations

from conftest import DATA


def _nothing_written_outside(root, out):
    """Only ``out`` (if anything) was created under ``root``."""
    return sorted(p.name for p in root.iterdir() if p != out) == []


def test_run_name_with_dot_dot_is_a_usage_error(cli, tmp_path):
    out = tmp_path / "a" / "b" / "out"
    result = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--fuse", "rrf", "--name", "../../x", "--no-cache")
    assert result.code == 2, result.err
    assert ("r2med: error: --name '../../x' cannot be used as a folder or file name: it contains '/'; "
            "use a plain name such as 'bm25+minilm'") in result.err
    assert not (tmp_path / "a" / "x").exists() and not out.exists()


def test_run_absolute_name_is_a_usage_error(cli, tmp_path):
    target = tmp_path / "elsewhere"
    result = cli("run", "--data-dir", DATA / "tiny", "--output", tmp_path / "out", "--fuse", "rrf", "--name", target,
                 "--no-cache")
    assert result.code == 2 and f"--name '{target}' cannot be used" in result.err
    assert not target.exists() and _nothing_written_outside(tmp_path, tmp_path / "out")


def test_spec_file_name_with_dot_dot_is_invalid_input_naming_the_key(cli, tmp_path):
    spec = tmp_path / "p.toml"
    spec.write_text(f'[pipeline]\nname = "../../x"\ndata_dir = "{DATA / "tiny"}"\noutput = "out"\n'
                    '[[retriever]]\nname = "bm25"\n[fusion]\nmethod = "rrf"\n')
    result = cli("run", "--config", spec, "--no-cache")
    assert result.code == 5, result.err
    assert f"r2med: error: {spec} [pipeline] name '../../x' cannot be used as a folder or file name: it contains '/'" \
        in result.err
    assert _nothing_written_outside(tmp_path, tmp_path / "p.toml")


def test_rerank_llm_name_and_system_are_checked_before_any_work(cli, tmp_path):
    base = ["rerank", "--run", "bm25", "--data-dir", DATA / "tiny", "--output", tmp_path / "out"]
    result = cli(*base, "--reranker", "listwise", "--llm-model", "m", "--llm-name", "../..",
                 "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == 2, result.err
    # reported with the plan's other problem (no stored run 'bm25' under out/): every problem at once
    assert "  - --llm-name '../..' cannot be used as a folder or file name: it contains '/'" in result.err
    assert "  - no first-stage run for tiny in " in result.err
    result = cli(*base, "--reranker", "listwise", "--llm-model", "m", "--llm-name", "..",
                 "--base-url", "http://127.0.0.1:9/v1")
    assert result.code == 2 and "--llm-name '..' cannot be used as a folder or file name: it is '..'" in result.err
    result = cli(*base, "--reranker", "bge-reranker", "--system", "../../x")
    assert result.code == 2 and "--system '../../x' cannot be used as a folder or file name" in result.err
    assert not (tmp_path / "out").exists()


def test_run_reranker_llm_name_in_spec_file_is_invalid_input(cli, tmp_path):
    spec = tmp_path / "p.toml"
    spec.write_text(f'[pipeline]\ndata_dir = "{DATA / "tiny"}"\n[[retriever]]\nname = "bm25"\n'
                    '[reranker]\nname = "listwise"\nllm_model = "m"\nllm_name = "../x"\n')
    result = cli("run", "--config", spec, "--no-cache")
    assert result.code == 5
    assert f"{spec} [reranker] llm_name '../x' cannot be used as a folder or file name: it contains '/'" in result.err


def test_expand_llm_name_is_used_as_given_or_refused(cli, tmp_path, isolated_home):
    base = ["expand", "--method", "hyde", "--llm-model", "m", "--base-url", "http://127.0.0.1:9/v1",
            "--data-dir", DATA / "tiny"]
    result = cli(*base, "--llm-name", "../x")
    assert result.code == 2
    assert "r2med: error: --llm-name '../x' cannot be used as a folder or file name: it contains '/'" in result.err
    result = cli(*base, "--llm-name", "my model")
    assert result.code == 2
    assert ("r2med: error: --llm-name 'my model' would be stored as 'my_model', which 'r2med run --expansion "
            "hyde/my model' cannot find; pass --llm-name my_model") in result.err
    assert not (isolated_home / "expansions").exists()


def test_paths_are_printed_as_the_user_gave_them(cli, tmp_path, monkeypatch):
    """Issue 38, finding 5: a pipeline file's relative output is printed relative (as docs/pipelines.md shows it), to
    the file's folder as seen from here; an absolute one stays absolute."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "p.toml").write_text(f'[pipeline]\ndata_dir = "{DATA / "tiny"}"\noutput = "res"\n'
                                               '[[retriever]]\nname = "bm25"\n')
    done = cli("run", "--config", "conf/p.toml", "--no-cache")
    assert done.code == 0, done.err
    assert done.err.endswith("-> conf/res/base retriever/bm25/tiny.json\n"), done.err
    assert done.out.startswith("nDCG@10 x100 -> conf/res\n")
    assert (tmp_path / "conf" / "res" / "base retriever" / "bm25" / "tiny.json").is_file()
    given = cli("run", "--data-dir", DATA / "tiny", "--output", tmp_path / "abs", "--no-cache")
    assert given.err.endswith(f"-> {tmp_path}/abs/base retriever/bm25/tiny.json\n"), given.err
