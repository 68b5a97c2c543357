"""Evaluation parity with pytrec_eval called directly, on SciFact's official BM25 run and random runs."""

from __future__ import annotations

import json
import random

import pytest
import pytrec_eval

from conftest import DATA, shared_path
from r2med.errors import UsageError
from r2med.evaluation import evaluate, parse_metrics

TREC = {"ndcg_cut.1,10,25,50,100", "map_cut.1,10,25,50,100", "recall.1,10,25,50,100", "P.1,10,25,50,100", "recip_rank"}
KEY = {"ndcg_cut": "ndcg_at", "map_cut": "map_at", "recall": "recall_at", "P": "precision_at"}


def direct(qrels, run):
    """pytrec_eval as the official script calls it, per query, with official keys."""
    raw = pytrec_eval.RelevanceEvaluator(qrels, TREC).evaluate(run)
    out = {}
    for qid, values in raw.items():
        row = {}
        for measure, value in values.items():
            if measure == "recip_rank":
                row["mrr"] = value
            else:
                family, _, k = measure.rpartition("_")
                row[f"{KEY[family]}_{k}"] = value
        out[qid] = row
    return out


def assert_same(per_query, expected):
    assert set(per_query) == set(expected)
    for qid, values in expected.items():
        assert set(per_query[qid]) == set(values)
        for key, value in values.items():
            assert per_query[qid][key] == pytest.approx(value, abs=1e-9), (qid, key)


def read_jsonl_qrels(path):
    qrels = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        qrels.setdefault(row["q_id"], {})[row["p_id"]] = int(row["score"])
    return qrels


def read_trec(path):
    run = {}
    for line in path.read_text().splitlines():
        qid, _, did, _, score, _ = line.split()
        run.setdefault(qid, {})[did] = float(score)
    return run


def test_cli_matches_pytrec_eval_on_scifact_official_bm25(cli):
    folder = shared_path("data", "scifact")
    result = cli("evaluate", "--qrels", folder, "--run", folder / "official_bm25.run", "--json", "--per-query")
    assert result.code == 0, result.err
    out = result.json()
    expected = direct(read_jsonl_qrels(folder / "qrels.jsonl"), read_trec(folder / "official_bm25.run"))
    assert_same(out["per_query"], expected)
    n = len(expected)
    for key in expected[next(iter(expected))]:
        assert out[key] == pytest.approx(sum(v[key] for v in expected.values()) / n, abs=1e-9)
    # the published figures of this run (shared/data/scifact/README.md)
    assert round(out["ndcg_at_10"], 5) == 0.67075
    assert round(out["recall_at_100"], 5) == 0.93


def random_case(seed: int):
    """Qrels with graded relevance and zero grades; a run with ties, unjudged documents, missing and extra queries."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(60)]
    qrels, run = {}, {}
    for q in range(40):
        qid = str(q)
        judged = rng.sample(docs, rng.randint(1, 8))
        qrels[qid] = {d: rng.choice([0, 1, 1, 2, 3]) for d in judged}
        if rng.random() < 0.15:
            continue  # query missing from the run
        ranked = rng.sample(docs, rng.randint(0, 40))
        run[qid] = {d: float(rng.choice([1, 2, 3, 3.5, 7]) if rng.random() < 0.5 else round(rng.random(), 3)) for d in ranked}
    run["extra"] = {"d1": 1.0}  # a query without judgements
    return qrels, run


@pytest.mark.parametrize("seed", range(12))
def test_random_runs_match_pytrec_eval(seed, tmp_path, cli):
    qrels, run = random_case(seed)
    expected = direct(qrels, run)
    scores = evaluate(qrels, run)
    assert_same(scores.per_query, expected)
    # the same through files and the CLI: qrels in TREC format, run as official top-k JSONL
    (tmp_path / "qrels.txt").write_text("".join(f"{q} 0 {d} {r}\n" for q, docs in qrels.items() for d, r in docs.items()))
    with (tmp_path / "run.jsonl").open("w") as handle:
        for qid, docs in run.items():
            handle.write(json.dumps({"id": qid, "topk_pid": [[d, s] for d, s in docs.items()]}) + "\n")
    result = cli("evaluate", "--qrels", tmp_path / "qrels.txt", "--run", tmp_path / "run.jsonl", "--json", "--per-query")
    assert result.code == 0, result.err
    assert_same(result.json()["per_query"], expected)


def test_inputs_are_not_mutated_and_identical_ids_dropped():
    qrels = {"1": {"2": 1}}
    run = {"1": {"1": 9.0, "2": 5.0}}
    plain = evaluate(qrels, run, metrics=["precision_at_1"])
    dropped = evaluate(qrels, run, metrics=["precision_at_1"], ignore_identical_ids=True)
    assert plain.aggregate == {"precision_at_1": 0.0}
    assert dropped.aggregate == {"precision_at_1": 1.0}
    assert run == {"1": {"1": 9.0, "2": 5.0}}


def test_judged_all_counts_missing_queries_as_zero():
    qrels = {"a": {"x": 1}, "b": {"y": 1}}
    run = {"a": {"x": 1.0}}
    assert evaluate(qrels, run, metrics=["mrr"]).aggregate == {"mrr": 1.0}
    full = evaluate(qrels, run, metrics=["mrr"], judged_all=True)
    assert full.aggregate == {"mrr": 0.5}
    assert full.per_query["b"] == {"mrr": 0.0}


def test_worked_ndcg_with_grades_and_ties():
    # run ranks d2 (grade 2) second; trec_eval breaks the score tie d1/d3 by docid descending: d3 before d1.
    qrels = {"q": {"d1": 1, "d2": 2}}
    run = {"q": {"d1": 1.0, "d3": 1.0, "d2": 0.5}}
    got = evaluate(qrels, run, metrics=["ndcg_at_3", "mrr"]).aggregate
    import math

    dcg = 0 + 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 2 + 1 / math.log2(3)
    assert got["ndcg_at_3"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert got["mrr"] == pytest.approx(0.5)


def test_other_cutoffs_and_metric_names(cli):
    assert parse_metrics(["ndcg", "mrr"], cutoffs=[5]) == ["ndcg_at_5", "mrr"]
    with pytest.raises(UsageError, match="unknown metric 'ndgc_at_10'"):
        parse_metrics(["ndgc_at_10"])
    result = cli("evaluate", "--qrels", DATA / "tiny", "--run", DATA / "tiny_run.trec", "--metrics", "ndcg,recall", "--cutoffs", "2", "--json")
    assert result.code == 0, result.err
    assert set(result.json()) == {"ndcg_at_2", "recall_at_2"}
    bad = cli("evaluate", "--qrels", DATA / "tiny", "--run", DATA / "tiny_run.trec", "--metrics", "bleu")
    assert bad.code == 2 and "unknown metric 'bleu'" in bad.err


def test_tiny_run_worked_values(cli):
    # q1: d4 (rel) at 1, d2 at 2, d1 (rel) at 3 -> P@1 = 1, recall@2 = 0.5; q2: d2 (grade 2) at 1 -> P@1 = 1
    result = cli("evaluate", "--qrels", DATA / "tiny", "--run", DATA / "tiny_run.trec", "--metrics", "precision_at_1,recall_at_2,mrr", "--json")
    assert result.json() == {"precision_at_1": 1.0, "recall_at_2": 0.75, "mrr": 1.0}


def test_nothing_to_score_is_an_error_not_a_zero(tmp_path, cli):
    from r2med.errors import InvalidInputError

    qrels = {"1": {"d1": 1}, "2": {"d2": 1}, "3": {"d1": 1}, "4": {"d1": 1}}
    run = {"q1": {"d1": 1.0}, "q2": {"d2": 1.0}}
    for judged_all in (False, True):
        with pytest.raises(InvalidInputError) as err:
            evaluate(qrels, run, judged_all=judged_all)
        assert str(err.value) == (
            "nothing to score: no query of the qrels is in the run (qrels: '1', '2', '3' and 1 more; run: 'q1', 'q2'); "
            "check that both belong to the same dataset and use the same query ids")
    with pytest.raises(InvalidInputError, match="the qrels hold no judgements"):
        evaluate({}, run)
    # one query in common is enough: it is the only one averaged
    assert evaluate({**qrels, "q2": {"d2": 1}}, run, metrics=["mrr"]).aggregate == {"mrr": 1.0}
    # the command: the tiny qrels (q1, q2) against a run of other query ids
    path = tmp_path / "other.run"
    path.write_text("x1 Q0 d1 1 1.0 t\nx2 Q0 d2 1 1.0 t\n")
    result = cli("evaluate", "--qrels", DATA / "tiny", "--run", path, "--json")
    assert result.code == 5 and result.out == ""
    assert "nothing to score" in result.err and "qrels: 'q1', 'q2'" in result.err and "run: 'x1', 'x2'" in result.err


def test_the_table_is_x100_as_run_and_leaderboard_print_it_and_json_keeps_fractions(cli):
    """One scale for people (issue 38, finding 11). q1 ranks d4 (relevant) then d2 (not) with d1 and d4 relevant:
    nDCG@2 = 1 / (1 + 1/log2(3)) = 0.61315; q2 ranks its one relevant document first: 1; the mean 0.80657."""
    argv = ("evaluate", "--qrels", DATA / "tiny", "--run", DATA / "tiny_run.trec", "--metrics", "ndcg_at_2,mrr")
    shown = cli(*argv, "--per-query")
    assert shown.code == 0, shown.err
    assert shown.out.splitlines() == [
        "2 queries evaluated; values x100 (--json: fractions)",
        "| metric    | value x100 |",
        "|-----------|-----------:|",
        "| ndcg_at_2 |      80.66 |",
        "| mrr       |     100.00 |",
        "",
        "| qid | ndcg_at_2 |    mrr |",
        "|-----|----------:|-------:|",
        "| q1  |     61.31 | 100.00 |",
        "| q2  |    100.00 | 100.00 |",
    ]
    fractions = cli(*argv, "--json").json()
    assert fractions == {"ndcg_at_2": pytest.approx(0.8065736, abs=1e-7), "mrr": 1.0}
