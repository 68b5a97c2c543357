"""Values that pass a type check but not what r2med can compute: refused before any work, naming where they came from."""

from __future__ import annotations

import pytest

from conftest import DATA
from r2med.cli import main
from r2med.errors import UsageError
from r2med.retrievers.bm25.index import BM25Params

TINY = DATA / "tiny"
FUSED = '[[retriever]]\nname = "bm25"\n[[retriever]]\nname = "bm25-lucene"\n[fusion]\nmethod = "rrf"\n'


def test_a_weight_count_that_does_not_match_the_retrievers_fails_before_any_work(tmp_path, capsys):
    file = tmp_path / "p.toml"
    file.write_text(FUSED + "weights = [1.0]\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", "-q", "--config", str(file), "--data-dir", str(TINY), "--output", str(out)]) == 5
    assert (f"r2med: error: {file}: 1 fusion weights for 2 retrievers; give one weight per retriever, in their order "
            "([fusion] weights = [1, 2], or --fuse rrf:weights=1,2)") in capsys.readouterr().err
    assert not out.exists()  # no retriever ran first
    code = main(["run", "-q", "--retriever", "bm25", "--retriever", "bm25-lucene", "--fuse", "rrf:weights=1,2,3",
                 "--data-dir", str(TINY), "--output", str(out)])
    assert code == 2
    assert "3 fusion weights for 2 retrievers" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(("line", "message"), [
    ("k = -60", "[fusion]: k must be at least 0, got -60"),
    ("weights = [1.0, -2.0]", "[fusion]: weights must be at least 0, got -2.0"),
])
def test_a_range_error_in_a_pipeline_file_names_the_file_and_table(tmp_path, capsys, line, message):
    file = tmp_path / "p.toml"
    file.write_text(FUSED + line + "\n", encoding="utf-8")
    assert main(["run", "-q", "--config", str(file), "--data-dir", str(TINY), "--output", str(tmp_path / "o")]) == 5
    assert f"r2med: error: {file} {message}" in capsys.readouterr().err


def test_the_data_dir_and_output_flags_apply_to_a_pipeline_file(tmp_path):
    """They were silently ignored: the file's pipeline ran on the hub's datasets into ./results."""
    file = tmp_path / "p.toml"
    file.write_text(FUSED, encoding="utf-8")
    out = tmp_path / "elsewhere"
    assert main(["run", "-q", "--config", str(file), "--data-dir", str(TINY), "--output", str(out)]) == 0
    assert (out / "fusion" / "bm25+bm25-lucene" / "tiny.run").is_file()


def test_a_k1_float32_scores_cannot_hold_is_refused(capsys):
    """k1 = 1e25 passed and every score underflowed to 0: the run printed nDCG 0.00 with exit 0."""
    with pytest.raises(UsageError, match=r"k1=1e25: must be at most 1000, got 1e\+25"):
        from r2med.retrievers.registry import RetrieverSpec

        RetrieverSpec.parse("bm25:k1=1e25")
    with pytest.raises(UsageError, match=r"BM25 k1 must be a number in \[0, 1000\]"):
        BM25Params(k1=1e25)
    assert BM25Params(k1=1000).k1 == 1000.0
    with pytest.raises(SystemExit):
        main(["run", "--k1", "1e25"])
    assert "argument --k1: must be at most 1000, got 1e+25" in capsys.readouterr().err
