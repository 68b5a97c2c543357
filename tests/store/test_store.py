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
    assert lines[:3] == ["q1 Q0 d1 1 0.5 sys", "q1 Q0 d3 2 0.5 sys", "q1 Q0 d2 3 0.30000000000000004 sys"]
    back = read_run(tmp_path / "a.run")
    assert back == run and back.name == "sys"
    write_topk_jsonl(run, tmp_path / "a.jsonl", k=2)
    first = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])
    assert first == {"id": "q1", "topk_pid": [["d1", 0.5], ["d3", 0.5]]}
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
