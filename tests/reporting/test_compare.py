"""r2med compare: per-dataset paired tests from per-query files, Holm, pooled, dropped queries, paper rows."""

from __future__ import annotations

import numpy as np
import pytest
from reporting_helpers import run
from scipy import stats

from r2med.reporting.stats import holm
from r2med.store.results import SystemPath, write_result
from r2med.types import Run, Scores

N_RESAMPLES = 2000


def _write(out, system, dataset, values):
    """One (system, dataset) result in r2med's layout: per-query nDCG@10 values and a matching run."""
    per_query = {qid: {"ndcg_at_10": float(v)} for qid, v in values.items()}
    scores = Scores({"ndcg_at_10": float(np.mean(list(values.values())))}, per_query)
    write_result(out, SystemPath.base(system), dataset, scores, Run({q: {"d1": 1.0} for q in values}), seconds=1.0)


@pytest.fixture()
def results(tmp_path):
    rng = np.random.default_rng(11)
    truth = {}
    for dataset, n, effect in (("Biology", 103, 0.08), ("Bioinformatics", 77, 0.0), ("MedQA-Diag", 118, 0.03)):
        b = rng.uniform(0, 0.6, n)
        a = np.clip(b + effect + rng.normal(0, 0.1, n), 0, 1)
        qa = {f"q{i}": a[i] for i in range(n)}
        qb = {f"q{i}": b[i] for i in range(n)}
        if dataset == "MedQA-Diag":  # B lacks 3 queries, A lacks 1: paired on the 114 they share
            for i in range(3):
                del qb[f"q{i}"]
            del qa["q117"]
        _write(tmp_path, "sys_a", dataset, qa)
        _write(tmp_path, "sys_b", dataset, qb)
        common = [q for q in qa if q in qb]
        truth[dataset] = (np.array([qa[q] for q in common]), np.array([qb[q] for q in common]))
    return tmp_path, truth


def _scipy(a, b):
    def stat(x, y, axis):
        return np.mean(x - y, axis=axis)

    perm = stats.permutation_test((a, b), stat, permutation_type="samples", vectorized=True,
                                  n_resamples=N_RESAMPLES, rng=np.random.default_rng(5))
    boot = stats.bootstrap((a, b), stat, paired=True, vectorized=True, n_resamples=N_RESAMPLES,
                           rng=np.random.default_rng(5))
    return perm.pvalue, stats.ttest_rel(a, b).pvalue, boot.confidence_interval


def test_per_dataset_tests_holm_and_pooled_are_scipys(results):
    out, truth = results
    result = run("compare", "sys_a", "sys_b", "--results", out / "base retriever", "--n-resamples", N_RESAMPLES,
                 "--seed", 5, "--format", "json")
    assert result.code == 0, result.err
    report = result.json()
    rows = {r["dataset"]: r for r in report["datasets"]}
    assert list(rows) == ["Biology", "Bioinformatics", "MedQA-Diag"]
    for dataset, (a, b) in truth.items():
        perm_p, t_p, ci = _scipy(a, b)
        test = rows[dataset]["test"]
        assert test["n"] == len(a) and test["permutation_p"] == perm_p and test["t_p"] == t_p
        assert (test["ci_low"], test["ci_high"]) == (ci.low, ci.high)
        assert rows[dataset]["difference"] == pytest.approx(np.mean(a - b))
    assert (rows["MedQA-Diag"]["only_a"], rows["MedQA-Diag"]["only_b"], rows["MedQA-Diag"]["test"]["n"]) == (3, 1, 114)
    perms = [rows[d]["test"]["permutation_p"] for d in rows]
    assert [rows[d]["permutation_p_holm"] for d in rows] == holm(perms)
    assert rows["Biology"]["test"]["permutation_p"] < 0.01 and rows["Bioinformatics"]["permutation_p_holm"] > 0.05
    pooled_a = np.concatenate([truth[d][0] for d in rows])
    pooled_b = np.concatenate([truth[d][1] for d in rows])
    perm_p, t_p, ci = _scipy(pooled_a, pooled_b)
    pooled = report["pooled"]
    assert pooled["n"] == 103 + 77 + 114 and pooled["permutation_p"] == perm_p and pooled["t_p"] == t_p
    assert (pooled["ci_low"], pooled["ci_high"]) == (ci.low, ci.high)


def test_identical_systems(results):
    out, _ = results
    folder = out / "base retriever" / "sys_a"
    report = run("compare", folder, folder, "--n-resamples", 100, "--format", "json").json()
    for row in report["datasets"] + [{"test": report["pooled"]}]:
        t = row["test"]
        assert (t["mean_diff"], t["permutation_p"], t["t_p"], t["ci_low"], t["ci_high"], t["wins"], t["losses"]) == (
            0.0, 1.0, 1.0, 0.0, 0.0, 0, 0)


def test_markdown_table_and_task_selection(results):
    out, truth = results
    result = run("compare", out / "base retriever" / "sys_a", out / "base retriever" / "sys_b", "--tasks", "stack-biology",
                 "--n-resamples", 500)
    assert result.code == 0, result.err
    assert "| Biology " in result.out and "Bioinformatics" not in result.out and "perm p" in result.out
    a, b = truth["Biology"]
    wins, losses = int(np.sum(a - b > 0)), int(np.sum(a - b < 0))
    assert f"{wins}/{len(a) - wins - losses}/{losses}" in result.out


def test_against_the_paper_no_test_is_invented(results):
    out, _ = results
    result = run("compare", out / "base retriever" / "sys_a", "paper:base retriever/bm25", "--format", "json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["pooled"] is None and "no test is possible" in report["pooled_reason"]
    biology = next(r for r in report["datasets"] if r["dataset"] == "Biology")
    assert biology["test"] is None and "a paired test is not possible" in biology["reason"]
    assert biology["mean_b"] == 0.19188  # BM25's published Biology nDCG@10
    assert biology["difference"] == pytest.approx(biology["mean_a"] - 0.19188)
    missing = next(r for r in report["datasets"] if r["dataset"] == "PMC-Treatment")
    assert missing["mean_a"] is None and "no result for" in missing["reason"]
    md = run("compare", "paper:gar/hyde/gpt4/nv", "paper:base retriever/nv")
    assert md.code == 0 and "only aggregate numbers" in md.out and "+6.45" in md.out  # Biology 0.33606 - 0.27152


def test_errors(results, tmp_path):
    out, _ = results
    missing = run("compare", tmp_path / "nope", "paper:base retriever/bm25")
    assert missing.code == 4 and "not found" in missing.err
    unknown = run("compare", "paper:base retriever/bm52", "paper:base retriever/bm25")
    assert unknown.code == 2 and "did you mean" in unknown.err
    bad = out / "base retriever" / "sys_b" / "Biology.per_query.jsonl"
    bad.write_text('{"qid": "q0", "ndcg_at_10": 0.5}\n{"qid": "q1"}\n')
    result = run("compare", "sys_a", "sys_b", "--results", out / "base retriever")
    assert result.code == 5 and f"{bad}:2: expected" in result.err
    assert run("compare", "sys_a", "sys_b", "--results", out / "base retriever", "--n-resamples", 0).code == 2


def test_one_display_rule_compare_shows_what_run_and_leaderboard_show(tmp_path):
    # 0.67075 is 67.08 everywhere (half up on the 5-decimal value); x100 in binary floats would give 67.07
    assert f"{100 * 0.67075:.2f}" == "67.07"
    _write(tmp_path, "sys", "Biology", {"q1": 0.6707, "q2": 0.6708})
    compared = run("compare", tmp_path / "base retriever" / "sys", "paper:base retriever/bm25", "--tasks", "Biology")
    assert compared.code == 0, compared.err
    row = next(line for line in compared.out.splitlines() if line.startswith("| Biology"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:5] == ["67.08", "19.19", "+47.89"]  # A, the paper's BM25 (0.19188), A - B = 0.47887
    board = run("leaderboard", tmp_path)
    assert board.code == 0, board.err
    assert "67.08" in board.out and "67.07" not in board.out
    from r2med.cli.args import pct  # the rule of 'r2med run' and 'reproduce' tables

    assert pct(0.67075) == "67.08"
