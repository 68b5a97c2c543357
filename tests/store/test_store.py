"""Run files and result files in the official layout and format."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from r2med.errors import InvalidInputError, UsageError
from r2med.evaluation import evaluate
from r2med.store.results import SystemPath, write_result
from r2med.store.runs import read_run, write_topk_jsonl, write_trec_run
from r2med.types import Run


def test_trec_and_topk_round_trip(tmp_path):
    run = Run({"q1": {"d2": 0.1 + 0.2, "d1": 0.5, "d3": 0.5}, "q2": {"x": -1.0}}, name="sys")
    write_trec_run(run, tmp_path / "a.run")
    lines = (tmp_path / "a.run").read_text().splitlines()
    # equal scores in trec_eval's order (document id descending): d3 before d1
    assert lines[:3] == ["q1 Q0 d3 1 0.5 sys", "q1 Q0 d1 2 0.5 sys", "q1 Q0 d2 3 0.30000000000000004 sys"]
    back = read_run(tmp_path / "a.run")
    assert back == run and back.name == "sys"
    write_topk_jsonl(run, tmp_path / "a.jsonl", k=2)
    first = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])
    assert first == {"id": "q1", "topk_pid": [["d3", 0.5], ["d1", 0.5]]}
    assert read_run(tmp_path / "a.jsonl") == {"q1": {"d1": 0.5, "d3": 0.5}, "q2": {"x": -1.0}}


@pytest.mark.parametrize("content,line,fragment", [
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 abc t\n", 2, "score 'abc' is not a number"),
    ("q1 Q0 d1 1 0.5\n", 1, "expected 6 fields"),
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", 2, "appears twice"),
    ('{"id": "q1", "topk_pid": [["d1", 1.0], ["d2"]]}\n', 1, "is not a [docid, score] pair"),
    ('{"id": "q1", "topk_pid": [["d1", "nan"]]}\n', 1, "NaN"),
])
def test_bad_runs_name_file_and_line(tmp_path, content, line, fragment, cli):
    path = tmp_path / "bad.run"
    path.write_text(content)
    with pytest.raises(InvalidInputError) as err:
        read_run(path)
    assert any(p.startswith(f"{path}:{line}:") and fragment in p for p in err.value.problems)
    result = cli("evaluate", "--qrels", DATA / "tiny", "--run", path)
    assert result.code == 5 and f"{path}:{line}:" in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.run"]


def test_ids_with_spaces_cannot_be_written(tmp_path):
    with pytest.raises(UsageError, match="white space"):
        write_trec_run(Run({"q 1": {"d": 1.0}}), tmp_path / "x.run")


def test_official_layout_and_format(tmp_path):
    run = Run({"q1": {"d4": 3.0, "d2": 2.0, "d1": 1.0}, "q2": {"d2": 5.5}})
    scores = evaluate({"q1": {"d1": 1, "d4": 1}, "q2": {"d2": 2}}, run)
    for where, expected in [
        (SystemPath.base("bm25"), "base retriever/bm25"),
        (SystemPath.gar("hyde", "gpt4", "bm25"), "gar/hyde/gpt4/bm25"),
        (SystemPath.rerank("bge", "nv", 10), "reranker/bge/nv/top_10"),
    ]:
        files = write_result(tmp_path, where, "Biology", scores, run, seconds=90)
        assert files.result == tmp_path / expected / "Biology.json"
        record = json.loads(files.result.read_text())
        assert list(record) == ["dataset_name", "evaluation_time", "model_name", "test"]
        # the official reranker files name the reranker ("mono", "bge"), the others the retriever
        model = where.reranker if where.kind == "reranker" else where.system
        assert record["evaluation_time"] == "1.5 minutes" and record["model_name"] == model
        assert record["test"]["ndcg_at_10"] == round(scores.aggregate["ndcg_at_10"], 5)
        assert list(record["test"]) == sorted(record["test"])
        assert len(record["test"]) == 21
        assert read_run(files.run) == run
        per_query = [json.loads(line) for line in files.per_query.read_text().splitlines()]
        assert [row["qid"] for row in per_query] == ["q1", "q2"]
        assert per_query[0]["recall_at_1"] == 0.5
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_system_path_errors():
    with pytest.raises(UsageError, match="not a system path"):
        SystemPath.parse("gar/hyde/bm25")


@pytest.mark.parametrize("content,line", [
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 inf t\n", 2),
    ("q1 Q0 d1 1 -inf t\n", 1),
    ("q1 Q0 d1 1 1e999 t\n", 1),
    ("q1 Q0 d1 1 -Infinity t\n", 1),
    ('{"id": "q1", "topk_pid": [["d1", 1.0]]}\n{"id": "q2", "topk_pid": [["d1", Infinity]]}\n', 2),
    ('{"id": "q1", "topk_pid": [["d1", -1e999]]}\n', 1),
    ('{"id": "q1", "topk_pid": [["d1", "inf"]]}\n', 1),
])
def test_non_finite_scores_are_rejected_with_file_and_line(tmp_path, content, line, cli):
    path = tmp_path / "inf.run"
    path.write_text(content)
    with pytest.raises(InvalidInputError) as err:
        read_run(path)
    assert [p.split(": ", 1)[0] for p in err.value.problems] == [f"{path}:{line}"]
    assert "is infinite; every score must be a finite number" in err.value.problems[0]
    result = cli("fuse", path, path, "--output", tmp_path / "fused.run")
    assert result.code == 5 and f"{path}:{line}:" in result.err
    assert not (tmp_path / "fused.run").exists()


def _trec_order_by_hand(docs):
    """trec_eval's order, spelled out: score descending, then document id descending."""
    return sorted(docs, key=lambda d: (-docs[d], [-ord(c) for c in d] + [1]))


def test_written_rank_order_is_the_evaluated_order(tmp_path):
    # ties everywhere: trec_eval ranks equal scores by document id descending (d9 before d10 before d1 as strings)
    run = Run({"q1": {"d1": 0.5, "d10": 0.5, "d9": 0.5, "d2": 0.7, "a": 0.2, "b": 0.2},
               "q2": {"x": 1.0, "y": 1.0, "é": 1.0, "z": 0.0}}, name="ties")
    qrels = {"q1": {"d1": 1, "a": 2, "d9": 0}, "q2": {"x": 1, "é": 1}}
    path = write_trec_run(run, tmp_path / "ties.run")
    rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("q1", "d2", "1"), ("q1", "d9", "2"), ("q1", "d10", "3"), ("q1", "d1", "4"), ("q1", "b", "5"), ("q1", "a", "6"),
        ("q2", "é", "1"), ("q2", "y", "2"), ("q2", "x", "3"), ("q2", "z", "4"),
    ]
    for qid in run:
        assert [r[2] for r in rows if r[0] == qid] == _trec_order_by_hand(run[qid])
    back = read_run(path)
    assert back == run and [d for d, _ in back.ranked("q1")] == [r[2] for r in rows if r[0] == "q1"]
    # the file's own rank column, scored as a ranking (score = -rank: no ties left), gives evaluate's number
    by_rank = {q: {r[2]: -float(r[3]) for r in rows if r[0] == q} for q in run}
    keys = ["ndcg_at_10", "map_at_10", "mrr", "precision_at_1"]
    assert evaluate(qrels, by_rank, metrics=keys).aggregate == evaluate(qrels, run, metrics=keys).aggregate
    # worked: q1 ranks d2 d9 d10 d1 b a -> rr = 1/4; q2 ranks é first -> rr = 1; P@1 = (0 + 1) / 2
    assert evaluate(qrels, run, metrics=["mrr", "precision_at_1"]).aggregate == {"mrr": 0.625, "precision_at_1": 0.5}
    # the top-k JSONL lists the same order and its cut keeps what trec_eval ranks first
    write_topk_jsonl(run, tmp_path / "ties.jsonl", k=3)
    first = json.loads((tmp_path / "ties.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first == {"id": "q1", "topk_pid": [["d2", 0.7], ["d9", 0.5], ["d10", 0.5]]}


def test_top_k_keeps_the_documents_trec_eval_ranks_first_when_ties_straddle_the_cut():
    run = Run({"q": {"a": 1.0, "c": 1.0, "b": 1.0, "z": 0.5}})
    assert run.top_k(2) == {"q": {"c": 1.0, "b": 1.0}} and list(run.top_k(2)["q"]) == ["c", "b"]
    qrels = {"q": {"a": 1, "b": 1, "c": 1}}
    # P@2 of the cut run equals P@2 of the full run (both: c, b)
    assert evaluate(qrels, run.top_k(2), metrics=["precision_at_2"]).aggregate == \
        evaluate(qrels, run, metrics=["precision_at_2"]).aggregate == {"precision_at_2": 1.0}
    # recall@3 of the cut: c and b of the 3 relevant
    assert evaluate(qrels, run.top_k(2), metrics=["recall_at_3"]).aggregate == {"recall_at_3": pytest.approx(2 / 3)}
