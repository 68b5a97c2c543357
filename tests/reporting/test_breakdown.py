"""The paper's breakdowns: nDCG@10 by R2MED task and by body system, in the leaderboard and the HTML report.

The stand-in: four tiny datasets under R2MED's names (Biology, Bioinformatics: Q&A reference; MedQA-Diag: clinical
evidence; PMC-Clinical: clinical case) whose query files carry ``body_system``, and two systems' results written
in r2med's layout with chosen per-query nDCG@10 values:

    query:            Biology q1 q2 q3 | Bioinformatics q1 q2 | MedQA-Diag m1 m2   | PMC-Clinical p1 p2
    body system:      N   C   ''       | N   (none)           | C   [C, Respiratory] | R   N
    bm25 (A):         .5  .2  .8       | .3  .1               | .6  .4             | .9  .7
    mine (B):         .1  .3  .5       | .7  .2               | (no result)        | .2  .4

(N = Nervous, C = Cardiovascular, R = Respiratory.) Dataset means: A .5, .2, .5, .8 (Avg over the 4 shown .5);
B .3, .45, -, .3 (3 of 4: no average).
By task: A  Q&A (Biology, Bioinformatics) .35, clinical evidence .5, clinical case .8;
         B  Q&A .375, clinical evidence -, clinical case .3.
By body system (pooled over the datasets): A  Nervous (.5 + .3 + .7) / 3 = .5, Cardiovascular (.2 + .6 + .4) / 3
= .4, Respiratory (.4 + .9) / 2 = .65; B  Nervous (.1 + .7 + .4) / 3 = .4, Cardiovascular and Respiratory need
MedQA-Diag: -.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal

import pytest
from reporting_helpers import package_results, run, write_official_tree

from r2med.datasets.catalog import dataset_names, get_spec
from r2med.datasets.hub import MANIFEST, cache_dir
from r2med.reporting.breakdown import by_task, read_query_groups, task_members
from r2med.reporting.leaderboard import SystemResults, build_rows
from r2med.settings import get_settings
from r2med.store.results import SystemPath, write_result
from r2med.types import Run, Scores

QUERIES = {
    "Biology": {"q1": "Nervous", "q2": "Cardiovascular", "q3": ""},
    "Bioinformatics": {"q1": "Nervous", "q2": None},
    "MedQA-Diag": {"m1": "Cardiovascular", "m2": ["Cardiovascular", "Respiratory"]},
    "PMC-Clinical": {"p1": "Respiratory", "p2": "Nervous"},
}
VALUES = {
    "bm25": {"Biology": {"q1": 0.5, "q2": 0.2, "q3": 0.8}, "Bioinformatics": {"q1": 0.3, "q2": 0.1},
             "MedQA-Diag": {"m1": 0.6, "m2": 0.4}, "PMC-Clinical": {"p1": 0.9, "p2": 0.7}},
    "mine": {"Biology": {"q1": 0.1, "q2": 0.3, "q3": 0.5}, "Bioinformatics": {"q1": 0.7, "q2": 0.2},
             "PMC-Clinical": {"p1": 0.2, "p2": 0.4}},
}
QA, EVIDENCE, CASE = "Q&A reference retrieval", "Clinical evidence retrieval", "Clinical case retrieval"


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def make_standin(root):
    """The stand-in's datasets under ``root/data`` and its results under ``root/results``."""
    data, out = root / "data", root / "results"
    for dataset, queries in QUERIES.items():
        folder = data / dataset
        folder.mkdir(parents=True)
        _write_jsonl(folder / "corpus.jsonl", [{"id": "d1", "text": "a document"}, {"id": "d2", "text": "another"}])
        rows = []
        for qid, body in queries.items():
            row = {"id": qid, "text": f"question {qid} of {dataset}"}
            if body is not None:
                row["body_system"] = body
            rows.append(row)
        _write_jsonl(folder / "query.jsonl", rows)
        _write_jsonl(folder / "qrels.jsonl", [{"q_id": qid, "p_id": "d1", "score": 1} for qid in queries])
    for system, by_dataset in VALUES.items():
        for dataset, values in by_dataset.items():
            scores = Scores({"ndcg_at_10": sum(values.values()) / len(values)},
                            {q: {"ndcg_at_10": v} for q, v in values.items()})
            write_result(out, SystemPath.base(system), dataset, scores, Run({q: {"d1": 1.0, "d2": 0.5} for q in values}),
                         seconds=1.0)
    return data, out


@pytest.fixture()
def standin(tmp_path):
    return make_standin(tmp_path)


def _cells(md, path, paper=False):
    """The value cells (groups, average, coverage) of the row of ``path`` (ours, or the paper's)."""
    rows = [[c.strip() for c in line.split("|")] for line in md.splitlines() if line.startswith("| ")]
    return next(r for r in rows if r[3] == path and (r[4] == "paper") == paper)[5:-1]


def _paper_mean(path, datasets):
    values = [Decimal(repr(next(v for k, v in package_results()[path][ds].items() if k.lower() in ("ndcg_at_10", "ndcg@10"))))
              for ds in datasets]
    return str((sum(values) / len(values) * 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def test_leaderboard_by_task(standin):
    _, out = standin
    result = run("leaderboard", out, "--by", "task")
    assert result.code == 0, result.err
    header = [c.strip() for c in result.out.splitlines()[0].split("|")][5:-1]
    assert header == [f"{QA} (2 of 3)", f"{EVIDENCE} (1 of 3)", f"{CASE} (1 of 2)", "Avg (4 datasets)", "coverage"]
    assert _cells(result.out, "base retriever/bm25") == ["35.00", "50.00", "80.00", "50.00", "4/4"]
    assert _cells(result.out, "base retriever/mine") == ["37.50", "-", "30.00", "-", "3/4"]
    assert (f"Task columns: mean over each task's datasets shown ({QA} (2 of 3): Biology, Bioinformatics; "
            f"{EVIDENCE} (1 of 3): MedQA-Diag; {CASE} (1 of 2): PMC-Clinical)") in result.out


def test_paper_task_averages_beside_ours(standin):
    _, out = standin
    result = run("leaderboard", out, "--by", "task", "--with-paper")
    assert result.code == 0, result.err
    # the paper's BM25, cut to the same four datasets: its task means of the published per-dataset numbers
    assert _cells(result.out, "base retriever/bm25", paper=True) == [
        _paper_mean("base retriever/bm25", ["Biology", "Bioinformatics"]),
        _paper_mean("base retriever/bm25", ["MedQA-Diag"]), _paper_mean("base retriever/bm25", ["PMC-Clinical"]),
        _paper_mean("base retriever/bm25", ["Biology", "Bioinformatics", "MedQA-Diag", "PMC-Clinical"]), "4/4"]
    data = run("leaderboard", out, "--by", "task", "--with-paper", "--format", "json").json()
    assert data["by"] == "task" and data["members"][f"{QA} (2 of 3)"] == ["Biology", "Bioinformatics"]
    ours = next(r for r in data["rows"] if r["system"] == "base retriever/bm25" and not r["published"])
    assert ours["groups"] == {f"{QA} (2 of 3)": 0.35, f"{EVIDENCE} (1 of 3)": 0.5, f"{CASE} (1 of 2)": 0.8}


def test_task_averages_of_the_published_tables(tmp_path):
    # all 8 datasets: the three tasks whole; every published system's task means from its per-dataset numbers
    tasks = {QA: ["Biology", "Bioinformatics", "Medical-Sciences"],
             EVIDENCE: ["MedXpertQA-Exam", "MedQA-Diag", "PMC-Treatment"], CASE: ["PMC-Clinical", "IIYi-Clinical"]}
    assert task_members(dataset_names()) == tasks
    for source in (["--with-paper"], [write_official_tree(tmp_path / "results")]):
        result = run("leaderboard", *source, "--by", "task")
        assert result.code == 0, result.err
        header = [c.strip() for c in result.out.splitlines()[0].split("|")][5:-1]
        # with the paper, the public leaderboard's average (over the eight) stands beside the computed one
        listed = ["leaderboard"] if source == ["--with-paper"] else []
        assert header == [QA, EVIDENCE, CASE, "Avg", *listed, "coverage"]
        for path in ("base retriever/bm25", "base retriever/nv", "gar/hyde/gpt4/nv", "reranker/monobert/nv/top_10"):
            assert _cells(result.out, path, paper=source == ["--with-paper"])[:4] == [*(_paper_mean(path, names) for names in tasks.values()),
                                                          _paper_mean(path, dataset_names())], path
    # BM25 by hand: Q&A (0.19188 + 0.21548 + 0.19683) / 3 = 0.201396... -> 20.14
    bm25 = package_results()["base retriever/bm25"]
    assert [bm25[d]["ndcg_at_10"] for d in tasks[QA]] == [0.19188, 0.21548, 0.19683]
    assert _paper_mean("base retriever/bm25", tasks[QA]) == "20.14"


def test_by_task_names_what_is_not_in_a_task():
    rows = build_rows([SystemResults("s", "d", {"Biology": {"ndcg_at_10": 0.4}, "scifact": {"ndcg_at_10": 0.6}})])
    breakdown = by_task(rows)
    assert breakdown.columns == (f"{QA} (1 of 3)",) and breakdown.values[("s", "d")] == {f"{QA} (1 of 3)": 0.4}
    assert breakdown.legend.endswith("Not in a task (not R2MED datasets): scifact.")


def test_leaderboard_by_body_system(standin):
    data, out = standin
    assert read_query_groups(data / "MedQA-Diag") == {"m1": ("Cardiovascular",), "m2": ("Cardiovascular", "Respiratory")}
    assert read_query_groups(data / "Biology") == {"q1": ("Nervous",), "q2": ("Cardiovascular",)}  # '' is no group
    result = run("leaderboard", out, "--by", "body-system", "--data-dir", data)
    assert result.code == 0, result.err
    header = [c.strip() for c in result.out.splitlines()[0].split("|")][5:-1]
    assert header == ["Cardiovascular (n=3)", "Nervous (n=3)", "Respiratory (n=2)", "Avg (4 datasets)", "coverage"]
    assert _cells(result.out, "base retriever/bm25") == ["40.00", "50.00", "65.00", "50.00", "4/4"]
    assert _cells(result.out, "base retriever/mine") == ["-", "40.00", "-", "-", "3/4"]
    assert "pooled over those datasets" in result.out and "(the paper publishes none)" in result.out
    with_paper = run("leaderboard", out, "--by", "body-system", "--data-dir", data, "--with-paper")
    assert with_paper.code == 0 and _cells(with_paper.out, "base retriever/bm25", paper=True)[:3] == ["-", "-", "-"]


def test_body_systems_from_the_hub_cache(standin):
    # no --data-dir: R2MED's datasets are read from the hub cache (here Biology alone, put there by hand)
    data, out = standin
    folder = cache_dir(get_spec("Biology"), get_settings())
    folder.mkdir(parents=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (folder / name).write_bytes((data / "Biology" / name).read_bytes())
    (folder / MANIFEST).write_text("{}", encoding="utf-8")
    result = run("leaderboard", out, "--by", "body-system", "--datasets", "Biology")
    assert result.code == 0, result.err
    assert _cells(result.out, "base retriever/bm25") == ["20.00", "50.00", "50.00", "1/1"]  # q2 .2; q1 .5
    assert _cells(result.out, "base retriever/mine") == ["30.00", "10.00", "30.00", "1/1"]


def test_by_body_system_errors(standin, tmp_path):
    data, out = standin
    nocache = run("leaderboard", out, "--by", "body-system")  # R2MED names, an empty hub cache, no --data-dir
    assert nocache.code == 4 and "run 'r2med datasets download Biology'" in nocache.err
    bare = tmp_path / "bare"
    for dataset, queries in QUERIES.items():  # the same datasets, no body_system in their query files
        (bare / dataset).mkdir(parents=True)
        for name in ("corpus.jsonl", "qrels.jsonl"):
            (bare / dataset / name).write_bytes((data / dataset / name).read_bytes())
        _write_jsonl(bare / dataset / "query.jsonl", [{"id": q, "text": "x"} for q in queries])
    none = run("leaderboard", out, "--by", "body-system", "--data-dir", bare)
    assert none.code == 4 and f"Biology: no query in {bare / 'Biology'} has a 'body_system'" in none.err
    # one dataset without body systems: the others still give theirs, and the legend names it
    _write_jsonl(data / "Bioinformatics" / "query.jsonl", [{"id": q, "text": "x"} for q in QUERIES["Bioinformatics"]])
    partial = run("leaderboard", out, "--by", "body-system", "--data-dir", data)
    assert partial.code == 0 and f"Without body systems: Bioinformatics: no query in {data / 'Bioinformatics'}" in partial.out
    assert "Nervous (n=2)" in partial.out and _cells(partial.out, "base retriever/bm25")[1] == "60.00"  # (.5 + .7) / 2
    (data / "Biology" / "query.jsonl").write_text('{"id": "q1", "text": "x"}\n{"id": "q2"\n', encoding="utf-8")
    broken = run("leaderboard", out, "--by", "body-system", "--data-dir", data)
    assert broken.code == 5 and f"{data / 'Biology' / 'query.jsonl'}:2" in broken.err


def test_report_shows_both_breakdowns(standin, tmp_path):
    pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
    pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')
    data, out = standin
    page = tmp_path / "report.html"
    result = run("report", out, "-o", page, "--data-dir", data, "--with-paper", "--n-resamples", 100)
    assert result.code == 0, result.err
    html = page.read_text(encoding="utf-8")
    task = html[html.index('id="by-task"'):html.index('id="by-body-system-section"')]
    assert "<th>Q&amp;A reference retrieval (2 of 3)</th>" in task and "<th>Avg (4 datasets)</th>" in task
    assert '<td class="num best">80.00</td>' in task  # ours on clinical case, above the paper's BM25
    assert f'<td class="num">{_paper_mean("base retriever/bm25", ["PMC-Clinical"])}</td>' in task
    body = html[html.index('id="by-body-system"'):html.index('id="comparison-section"')]
    assert "<th>Respiratory (n=2)</th>" in body and '<td class="num best">65.00</td>' in body
    assert "Body-system columns: mean per-query ndcg_at_10" in body
    plain = tmp_path / "plain.html"
    assert run("report", out, "-o", plain, "--n-resamples", 100).code == 0  # no --data-dir: no body systems, a note
    text = plain.read_text(encoding="utf-8")
    assert 'id="by-task"' in text and "by body system: not shown: no query" in text
