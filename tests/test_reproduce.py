"""``r2med reproduce``: a directory named like an R2MED dataset (SciFact inside), reference numbers, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shared_path
from r2med.errors import UsageError
from r2med.reproduction import plan_for


@pytest.fixture
def biology(tmp_path) -> Path:
    """SciFact's files under a directory named like an R2MED dataset."""
    root = tmp_path / "data"
    folder = root / "Biology"
    folder.mkdir(parents=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (folder / name).symlink_to(shared_path("data", "scifact", name))
    return root


def _reference(tmp_path: Path, value: float) -> Path:
    path = tmp_path / "reference.json"
    path.write_text(json.dumps({"Biology": {"ndcg_at_10": value}, "PMC-Treatment": {"ndcg_at_10": 0.2}}))
    return path


def test_matching_numbers_exit_0_with_the_comparison_printed(cli, tmp_path, biology):
    result = cli("reproduce", "base retriever/bm25", "--data-dir", biology, "--output", tmp_path / "out",
                 "--reference", _reference(tmp_path, 0.67075))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "base retriever/bm25 (bm25): ndcg_at_10 x100, ours vs the paper, tolerance 0.01"
    assert lines[1] == "| dataset       |  ours | paper |  diff | status       |"
    assert lines[3] == "| Biology       | 67.08 | 67.08 | +0.00 | ok           |"
    assert lines[4] == "| PMC-Treatment |     - | 20.00 |     - | not compared |"
    assert lines[-1] == "all 1 compared datasets match"
    assert (tmp_path / "out" / "base retriever" / "bm25" / "Biology.manifest.json").is_file()


def test_a_difference_beyond_the_tolerance_exits_1(cli, tmp_path, biology):
    ref = _reference(tmp_path, 0.66)
    result = cli("reproduce", "base retriever/bm25", "--data-dir", biology, "--output", tmp_path / "out", "--reference", ref)
    assert result.code == 1
    # 0.67075 - 0.66 = 0.01075: +1.08 half up
    assert "| Biology       | 67.08 | 66.00 | +1.08 | DIFFERENT    |" in result.out
    assert "1 of 1 datasets differ by more than the tolerance: Biology" in result.out
    # a looser tolerance accepts it; --json says the same
    loose = cli("reproduce", "base retriever/bm25", "--data-dir", biology, "--output", tmp_path / "out",
                "--reference", ref, "--tolerance", "0.02", "--json")
    assert loose.code == 0
    assert loose.json()["datasets"]["Biology"] == {"ours": 0.67075, "paper": 0.66, "difference": 0.01075, "ok": True}


def test_published_reference_and_plans():
    from r2med.reproduction import published_reference

    bm25 = published_reference("base retriever/bm25", "ndcg_at_10")
    assert len(bm25) == 8 and round(sum(bm25.values()) / 8 * 100, 2) == 15.13
    assert plan_for("gar/query2doc/gpt4/nv").expansion == ("query2doc", "gpt4")
    assert plan_for("base retriever/bm25").retriever == "bm25"
    assert (plan_for("reranker/bge-reranker/nv/top_10").reranker, plan_for("reranker/bge-reranker/nv/top_10").rerank_top_k) == (
        "bge-reranker", 10)
    with pytest.raises(UsageError, match="not a published system"):
        plan_for("fusion/x")
    with pytest.raises(UsageError, match="not a system path"):
        plan_for("bm25")


def test_an_unknown_system_exits_2(cli, tmp_path, biology):
    result = cli("reproduce", "base retriever/bm52", "--data-dir", biology, "--output", tmp_path)
    assert result.code == 2 and "bm25" in result.err


def test_nothing_compared_exits_4_never_a_quiet_pass(cli, tmp_path):
    folder = tmp_path / "data" / "scifact"
    folder.mkdir(parents=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (folder / name).symlink_to(shared_path("data", "scifact", name))
    result = cli("reproduce", "base retriever/bm25", "--data-dir", folder, "--output", tmp_path / "out")
    assert result.code == 4, result.err
    assert "| scifact  " in result.out and "match" not in result.out  # the table, and no claim of a match
    errors = [line for line in result.err.splitlines() if line.startswith("r2med: error:")]
    assert errors == [(
        "r2med: error: no dataset was compared: none of scifact has a reference ndcg_at_10 (the paper's numbers cover "
        "the eight R2MED datasets, by their names); run R2MED datasets (--tasks, or a directory named like one) or "
        'pass --reference FILE with {"<Dataset>": {"ndcg_at_10": ...}}'
    )]
    as_json = cli("reproduce", "base retriever/bm25", "--data-dir", folder, "--output", tmp_path / "out", "--json")
    assert as_json.code == 4 and as_json.json()["ok"] is False and as_json.json()["compared"] == 0
    # a reference naming the dataset makes it a comparison again
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"scifact": {"ndcg_at_10": 0.67075}}))
    matched = cli("reproduce", "base retriever/bm25", "--data-dir", folder, "--output", tmp_path / "out", "--reference", ref)
    assert matched.code == 0 and matched.out.splitlines()[-1] == "all 1 compared datasets match"


def test_the_library_call_returns_the_comparison_the_command_prints(tmp_path, biology):
    import r2med
    from r2med.reproduction import Reproduction

    done = r2med.reproduce("base retriever/bm25", data_dir=biology, output=tmp_path / "out", progress=False)
    assert isinstance(done, Reproduction) and (done.system, done.retriever, done.metric) == ("base retriever/bm25",
                                                                                           "bm25", "ndcg_at_10")
    # ours on Biology (SciFact inside) beside the paper's BM25 on Biology (19.19), then the paper's other datasets
    biology_row, *others = done.rows
    assert (biology_row.dataset, biology_row.ours, biology_row.paper, biology_row.ok) == ("Biology", 0.67075, 0.19188,
                                                                                          False)
    assert biology_row.difference == 0.47887 and len(others) == 7 and all(r.ok is None for r in others)
    assert (done.compared, done.failed, done.ok, done.average) == (1, ["Biology"], False, None)
    # a leaderboard-only row compares its average only on nDCG@10: another metric is refused before any work
    with pytest.raises(r2med.R2MedError, match="publishes only its average nDCG@10"):
        r2med.reproduce("gar/hyde/o3-mini/bm25", data_dir=biology, output=tmp_path / "none", metric="recall_at_100")
    assert not (tmp_path / "none").exists()
