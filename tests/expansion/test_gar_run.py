"""``r2med run --expansion``: composition per method, reasoning outputs, answer policies, result layout."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import DATA, shared_path
from r2med.datasets import load_dir
from r2med.expansion.published import EXPANSION_FILE
from r2med.retrievers.bm25.retriever import BM25Retriever
from r2med.store.runs import read_run


def _expansions(folder: Path, method: str, llm: str, rows: dict[str, str], texts: dict[str, str] | None = None) -> Path:
    path = folder / method / llm / EXPANSION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": q, "text": (texts or {}).get(q, ""), "hy_doc": h}) for q, h in rows.items()]
    if texts is None:
        lines = [json.dumps({"id": q, "hy_doc": h}) for q, h in rows.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def tiny(tmp_path) -> Path:
    folder = tmp_path / "data" / "tiny"
    shutil.copytree(DATA / "tiny", folder)
    return folder


def _bm25_run_of(folder: Path, queries: dict[str, str]):
    dataset = load_dir(folder, "tiny")
    return BM25Retriever(cache_dir=None, progress=False).retrieve(replace(dataset, queries=queries), top_k=100)


def _stored(out: Path, *parts: str):
    return read_run(out.joinpath("gar", *parts, "tiny.run"))


def _ranking(run) -> dict[str, list[str]]:
    """Each query's documents in the order trec_eval evaluates them (``Run.ranked``: ties by id descending),
    the order a stored run is written in; queries without documents left out."""
    return {q: [d for d, _ in run.ranked(q)] for q, docs in run.items() if docs}


QUERIES = {"q1": "what lowers a fever", "q2": "how is blood sugar controlled", "q3": "an unjudged query"}
HY = {"q1": "aspirin helps", "q2": "insulin and glucose", "q3": "nothing"}


@pytest.mark.parametrize(
    ("method", "composition", "expected"),
    [
        ("hyde", None, lambda q, h: h),
        ("lamer", None, lambda q, h: q + " " + h),
        ("query2doc", None, lambda q, h: q + q + " " + h),  # the official glued copies
        ("query2doc", "query2doc-spaced", lambda q, h: q + " " + q + " " + h),
    ],
)
def test_bm25_searches_with_the_composed_text(cli, tiny, tmp_path, method, composition, expected):
    _expansions(tiny, method, "gpt4", HY)
    args = ["run", "--data-dir", tiny, "--output", tmp_path / "out", "--expansion", f"{method}/gpt4", "--json"]
    if composition:
        args += ["--bm25-composition", composition]
    result = cli(*args)
    assert result.code == 0, result.err
    want = _bm25_run_of(tiny, {q: expected(t, HY[q]) for q, t in QUERIES.items()})
    got = _stored(tmp_path / "out", composition or method, "gpt4", "bm25")
    assert _ranking(got) == _ranking(want)
    record = json.loads((tmp_path / "out" / "gar" / (composition or method) / "gpt4" / "bm25" / "tiny.json").read_text())
    assert record["test"]["ndcg_at_10"] == result.json()["tiny"]["ndcg_at_10"]


def test_the_query_text_comes_from_the_expansion_file_as_in_the_official_code(cli, tiny, tmp_path):
    _expansions(tiny, "lamer", "m", HY, texts={"q1": "fever", "q2": "sugar", "q3": "x"})
    assert cli("run", "--data-dir", tiny, "--output", tmp_path, "--expansion", "lamer/m", "-q").code == 0
    want = _bm25_run_of(tiny, {"q1": "fever aspirin helps", "q2": "sugar insulin and glucose", "q3": "x nothing"})
    assert _ranking(_stored(tmp_path, "lamer", "m", "bm25")) == _ranking(want)


def test_reasoning_outputs_use_the_answer_and_a_cut_trace_falls_back(cli, tiny, tmp_path):
    rows = {"q1": "<think>fever... maybe aspirin</think>\n aspirin", "q2": "<think>sugar is controlled by", "q3": "</think>x"}
    _expansions(tiny, "lamer", "r1-qwen-32b", rows)
    result = cli("run", "--data-dir", tiny, "--output", tmp_path / "a", "--expansion", "lamer/r1-qwen-32b")
    assert result.code == 0, result.err
    assert "1 of 3 expansions unusable -> plain query (1 traces cut off, answer policy fallback)" in result.err
    # reasoning models: the answer alone, whatever the method (official r1_mode); q2 falls back to its query
    want = _bm25_run_of(tiny, {"q1": "aspirin", "q2": QUERIES["q2"], "q3": "x"})
    got = _stored(tmp_path / "a", "lamer", "r1-qwen-32b", "bm25")
    assert _ranking(got) == _ranking(want)
    # the authors' behaviour: the whole cut-off trace is the query
    assert cli("run", "--data-dir", tiny, "--output", tmp_path / "b", "--expansion", "lamer/r1-qwen-32b",
               "--answer-policy", "authors", "-q").code == 0
    want = _bm25_run_of(tiny, {"q1": "aspirin", "q2": rows["q2"], "q3": "x"})
    got = _stored(tmp_path / "b", "lamer", "r1-qwen-32b", "bm25")
    assert _ranking(got) == _ranking(want)
    # policy error: exit 6 naming the query
    failed = cli("run", "--data-dir", tiny, "--output", tmp_path / "c", "--expansion", "lamer/r1-qwen-32b",
                 "--answer-policy", "error")
    assert failed.code == 6 and "'q2'" in failed.err and "cut off" in failed.err


def test_empty_expansion_is_never_an_empty_query(cli, tiny, tmp_path):
    _expansions(tiny, "hyde", "m", {"q1": "aspirin", "q2": "  ", "q3": "x"})
    result = cli("run", "--data-dir", tiny, "--output", tmp_path / "a", "--expansion", "hyde/m")
    assert result.code == 0 and "1 of 3 expansions unusable" in result.err
    want = _bm25_run_of(tiny, {"q1": "aspirin", "q2": QUERIES["q2"], "q3": "x"})
    got = _stored(tmp_path / "a", "hyde", "m", "bm25")
    assert _ranking(got) == _ranking(want)
    authors = cli("run", "--data-dir", tiny, "--output", tmp_path / "b", "--expansion", "hyde/m", "--answer-policy", "authors")
    assert authors.code == 5 and "'q2' has an empty expansion" in authors.err


def test_missing_queries_and_missing_files_are_clear_errors(cli, tiny, tmp_path):
    path = _expansions(tiny, "hyde", "m", {"q1": "aspirin"})
    result = cli("run", "--data-dir", tiny, "--output", tmp_path, "--expansion", "hyde/m")
    assert result.code == 5 and f"{path}: 2 of 3 queries of tiny have no expansion (e.g. 'q2', 'q3')" in result.err
    missing = cli("run", "--data-dir", tiny, "--output", tmp_path, "--expansion", "hyde/other")
    assert missing.code == 4 and "Available here: hyde/m" in missing.err and "r2med expand" in missing.err
    bad = cli("run", "--data-dir", tiny, "--output", tmp_path, "--expansion", "hyde")
    assert bad.code == 2 and "expected METHOD/LLM" in bad.err
    wrong = cli("run", "--data-dir", tiny, "--output", tmp_path, "--bm25-composition", "query2doc-spaced")
    assert wrong.code == 2 and "needs --expansion" in wrong.err


def test_hyde_with_the_query_as_expansion_reproduces_the_official_bm25_run_on_scifact(cli, tmp_path):
    # hyde searches with the expansion alone: an expansion equal to the query must give exactly the
    # official BM25 run (the same 100 documents, order and scores within 1e-4); the order compared is the one
    # trec_eval evaluates both files in (ties by document id descending), the order r2med writes
    folder = tmp_path / "scifact"
    folder.mkdir()
    source = shared_path("data", "scifact")
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (folder / name).symlink_to(source / name)
    queries = load_dir(folder).queries
    _expansions(folder, "hyde", "echo", dict(queries), texts={q: "ignored for hyde" for q in queries})
    result = cli("run", "--data-dir", folder, "--output", tmp_path / "out", "--expansion", "hyde/echo", "--json")
    assert result.code == 0, result.err
    assert result.json()["scifact"]["ndcg_at_10"] == 0.67075
    ours = [line.split() for line in (tmp_path / "out" / "gar" / "hyde" / "echo" / "bm25" / "scifact.run").read_text().splitlines()]
    ref = read_run(source / "official_bm25.run")
    assert [(r[0], r[2]) for r in ours] == [(q, d) for q in ref for d, _ in ref.ranked(q)]
    assert max(abs(float(a[4]) - ref[a[0]][a[2]]) for a in ours) < 1e-4


def test_rows_r2med_expand_wrote_are_answers_already(cli, tiny, tmp_path):
    # r2med expand writes the chosen answer (trace removed) with its answer policy: no second cut, so a
    # reasoning model's answer without "</think>" is not taken for a cut-off trace
    path = tiny / "hyde" / "r1-qwen-32b" / EXPANSION_FILE
    path.parent.mkdir(parents=True)
    rows = [{"id": "q1", "text": QUERIES["q1"], "hy_doc": "aspirin", "answer_policy": "fallback", "style": "think"},
            {"id": "q2", "text": QUERIES["q2"], "hy_doc": "insulin", "answer_policy": "fallback", "style": "think"},
            {"id": "q3", "text": QUERIES["q3"], "hy_doc": "x", "answer_policy": "fallback", "style": "think"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cli("run", "--data-dir", tiny, "--output", tmp_path, "--expansion", "hyde/r1-qwen-32b")
    assert result.code == 0 and "unusable" not in result.err
    want = _bm25_run_of(tiny, {"q1": "aspirin", "q2": "insulin", "q3": "x"})
    got = _stored(tmp_path, "hyde", "r1-qwen-32b", "bm25")
    assert _ranking(got) == _ranking(want)
