"""Row 2 end to end: ``r2med reproduce 'reranker/reasonrank-32b/e5/top_100' --first-stage PATH|URL|authors``.

The stored E5 runs are checksummed (a changed file is refused), evaluated first and shown beside the paper's E5 row,
then reranked; the leaderboard publishes only the row's average (42.85), so the average is compared, to 0.01.
The ReasonRank reranker is built on another branch: a table-driven pointwise stand-in takes its name here (no model).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import math
import shutil
import threading
from pathlib import Path
from types import MappingProxyType

import pytest

from conftest import DATA
from r2med.datasets.catalog import dataset_names
from r2med.reporting.official import published
from r2med.reporting.tables import pct

ROW = "reranker/reasonrank-32b/e5/top_100"
RUN_NAME = "e5-mistral-7b-instruct_top100.txt"
#: the same first stage on every dataset (tests/data/tiny: q1 judges d1, d4 relevant; q2 judges d2 2, d3 0)
RUN = ("q1 Q0 d2 1 4.0 e5-mistral-7b-instruct\nq1 Q0 d1 2 3.0 e5-mistral-7b-instruct\n"
       "q1 Q0 d3 3 2.0 e5-mistral-7b-instruct\nq1 Q0 d4 4 1.0 e5-mistral-7b-instruct\n"
       "q2 Q0 d3 1 2.0 e5-mistral-7b-instruct\nq2 Q0 d2 2 1.0 e5-mistral-7b-instruct\n")
#: the stand-in reranker's score of each (query, document) pair: the relevant ones on top
SCORES = {("what lowers a fever", "aspirin reduces fever and pain"): 3.0,
          ("what lowers a fever", "fever is a sign of infection"): 2.0,
          ("what lowers a fever", "insulin regulates blood glucose"): 1.0,
          ("how is blood sugar controlled", "insulin regulates blood glucose"): 2.0}


def _first_stage_ndcg() -> float:
    # q1: relevant (gain 1) at ranks 2 and 4; ideal: ranks 1 and 2
    q1 = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    # q2: d3 (gain 0) at rank 1, d2 (gain 2) at rank 2; ideal: d2 at rank 1
    q2 = (2 / math.log2(3)) / 2
    return round((q1 + q2) / 2, 5)  # q3 has no judgements: not averaged


class TableScorer:
    def describe(self):
        return {"scorer": "table", "pairs": len(SCORES)}

    def score(self, queries, documents):
        return [SCORES.get((q, d), 0.0) for q, d in zip(queries, documents)]


@pytest.fixture
def reasonrank_standin(monkeypatch):
    # reasonrank-32b needs a served 32B model: the flow is tested with a stand-in kind under its name (a pointwise
    # reranker scoring from SCORES), so no model or server is needed
    from r2med.rerankers import registry
    from r2med.rerankers.options import PointwiseOptions
    from r2med.rerankers.pointwise import PointwiseReranker

    def build(spec, options, runtime):
        return PointwiseReranker(spec.folder, TableScorer(), batch_size=4, cache_dir=None, progress=False)

    kind = registry.RerankerKind("test-table", PointwiseOptions, build)
    monkeypatch.setattr(registry, "KINDS", MappingProxyType({**registry.KINDS, "test-table": kind}))
    specs = [s for s in registry.SPECS if s.name != "reasonrank-32b"]
    monkeypatch.setattr(registry, "SPECS", (*specs, registry.RerankerSpec("reasonrank-32b", "test-table", "reasonrank-32b")))


@pytest.fixture
def eight(tmp_path) -> Path:
    """tests/data/tiny under each R2MED dataset's name."""
    root = tmp_path / "data"
    for name in dataset_names():
        shutil.copytree(DATA / "tiny", root / name)
    return root


@pytest.fixture
def runs(tmp_path) -> Path:
    """ReasonRank's layout: runs/r2med_<Dataset>/e5-mistral-7b-instruct_top100.txt."""
    root = tmp_path / "served" / "runs"
    for name in dataset_names():
        (root / f"r2med_{name}").mkdir(parents=True)
        (root / f"r2med_{name}" / RUN_NAME).write_text(RUN)
    return root


@pytest.fixture
def server(tmp_path, runs):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(runs.parent))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/runs/r2med_{{dataset}}/{RUN_NAME}"
    httpd.shutdown()
    httpd.server_close()


def _reproduce(cli, eight, out, first, *extra):
    return cli("reproduce", ROW, "--data-dir", eight, "--output", out, "--first-stage", first, "-q", *extra)


def test_the_authors_layout_is_evaluated_beside_the_papers_e5_then_reranked_and_its_average_compared(
        cli, tmp_path, eight, runs, reasonrank_standin):
    result = _reproduce(cli, eight, tmp_path / "out", runs)
    assert result.code == 1, result.err  # 100.00 is not the leaderboard's 42.85
    lines = result.out.splitlines()
    first = _first_stage_ndcg()
    e5 = published("base retriever/e5").values("ndcg_at_10")
    assert lines[0] == f"first stage: {runs}, evaluated before reranking, beside the paper's base retriever/e5 (x100)"
    biology = next(line for line in lines if line.startswith("| Biology "))
    cells = [c.strip() for c in biology.split("|")][1:-1]
    assert cells[:3] == ["Biology", pct(first), pct(e5["Biology"])]
    # the paper's E5 average (24.92) beside the first stage's (the same value on every dataset here)
    average = next(line for line in lines if line.startswith("| average "))
    assert [c.strip() for c in average.split("|")][1:4] == ["average", pct(first), "24.92"]
    # reranked: q1 d1, d4, d2, d3 and q2 d2, d3: every judged query perfect, nDCG@10 1.0 on each dataset
    assert "| Biology          | 100.00 |     - |    - | not compared |" in lines
    assert lines[-2] == ("The leaderboard publishes only this row's average (E5-mistral-7b-instruct + ReasonRank(32B): "
                         "42.85, over the 8 datasets); no per-dataset numbers, so the average is compared, to 0.01: "
                         "ours 100.00, leaderboard 42.85, diff +57.15: DIFFERENT")
    assert lines[-1] == "1 of 1 compared (datasets and the average) differ by more than the tolerance: average"
    assert (tmp_path / "out" / "reranker" / "reasonrank-32b" / "e5" / "top_100" / "Biology.json").is_file()
    # --json: the same numbers; a looser tolerance accepts the average
    data = _reproduce(cli, eight, tmp_path / "out", runs, "--json", "--tolerance", "0.6").json()
    assert data["ok"] is True and data["compared"] == 1
    assert data["average"] == {"ours": 1.0, "ours_x100": "100.00", "leaderboard": 42.85, "difference_x100": 57.15,
                               "ok": True, "missing": [],
                               "note": "the leaderboard publishes only this row's average over the 8 datasets"}
    assert data["first_stage"]["datasets"]["Biology"]["first_stage"] == first
    digest = hashlib.sha256(RUN.encode()).hexdigest()
    assert [(f["dataset"], f["sha256"], f["size"]) for f in data["first_stage"]["files"]] == [
        (name, digest, len(RUN)) for name in dataset_names()]


def test_a_changed_first_stage_file_is_refused(cli, tmp_path, eight, runs, reasonrank_standin):
    assert _reproduce(cli, eight, tmp_path / "out", runs).code == 1
    changed = runs / "r2med_Biology" / RUN_NAME
    changed.write_text(RUN.replace("q1 Q0 d2 1 4.0", "q1 Q0 d2 1 5.0"))
    refused = _reproduce(cli, eight, tmp_path / "out", runs)
    assert refused.code == 5 and "changed since r2med first used it" in refused.err
    assert f"first stage {changed} changed" in refused.err and "pass --force to use the new one" in refused.err
    assert _reproduce(cli, eight, tmp_path / "out", runs, "--force").code == 1  # accepted, recorded anew
    assert _reproduce(cli, eight, tmp_path / "out", runs).code == 1


def test_one_run_file_for_one_dataset_and_nothing_compared_without_all_eight(cli, tmp_path, eight, runs,
                                                                               reasonrank_standin):
    result = _reproduce(cli, eight, tmp_path / "out", runs / "r2med_Biology" / RUN_NAME, "--tasks", "Biology")
    assert result.code == 4, result.err
    assert "not compared, 1 of 8 datasets were run" in result.out
    assert "nothing was compared: the leaderboard publishes only this row's average over the 8 R2MED datasets" in result.err
    two = _reproduce(cli, eight, tmp_path / "out", runs / "r2med_Biology" / RUN_NAME)
    assert two.code == 2 and "is one run file; name its dataset with --tasks" in two.err


def test_a_url_is_downloaded_once_checksummed_and_a_changed_download_refused(cli, tmp_path, eight, runs, server,
                                                                              reasonrank_standin, isolated_home):
    assert _reproduce(cli, eight, tmp_path / "out", server).code == 1
    cached = sorted((isolated_home / "first-stage" / "downloads").glob("*/Biology.txt"))
    assert len(cached) == 1 and cached[0].read_text() == RUN
    assert cached[0].with_name("Biology.txt.sha256").is_file()
    # the server's copy changes: the cached download (still matching its checksum) is what is reranked
    (runs / "r2med_Biology" / RUN_NAME).write_text(RUN.replace("4.0", "9.0"))
    again = _reproduce(cli, eight, tmp_path / "out", server, "--json")
    assert again.code == 1 and again.json()["first_stage"]["files"][0]["recorded_now"] is False
    # the cached file is altered: refused
    cached[0].write_text(RUN.replace("q1 Q0 d2", "q1 Q0 d3"))
    refused = _reproduce(cli, eight, tmp_path / "out", server)
    assert refused.code == 5 and "changed since r2med fetched it" in refused.err
    assert "pass --force to download it again" in refused.err
    assert _reproduce(cli, eight, tmp_path / "out", server, "--force").code == 1
    assert cached[0].read_text() == RUN.replace("4.0", "9.0")


def test_the_authors_runs_are_checked_against_the_digests_r2med_knows(cli, tmp_path, eight, runs, server,
                                                                     reasonrank_standin, monkeypatch):
    from r2med import first_stages

    record = {"description": "the test's E5 top-100 runs", "system": "e5", "paper_row": "base retriever/e5",
              "url": server, "files": {name: {"sha256": hashlib.sha256(RUN.encode()).hexdigest(), "size": len(RUN)}
                                       for name in dataset_names()}}
    monkeypatch.setattr(first_stages, "_first_stages", lambda: {"runs": {"authors-e5": record}})
    result = _reproduce(cli, eight, tmp_path / "out", "authors")
    assert result.code == 1, result.err
    assert result.out.splitlines()[0] == ("first stage: the test's E5 top-100 runs, evaluated before reranking, beside "
                                          "the paper's base retriever/e5 (x100)")
    (runs / "r2med_Biology" / RUN_NAME).write_text(RUN + "q2 Q0 d1 3 0.5 e5-mistral-7b-instruct\n")
    refused = _reproduce(cli, eight, tmp_path / "out", "authors", "--force")
    assert refused.code == 5 and "is not the file r2med knows" in refused.err and "r2med_Biology" in refused.err


def test_the_packaged_authors_runs():
    from r2med.first_stages import published_first_stage

    known = published_first_stage("authors")
    assert set(known["files"]) == set(dataset_names()) and known["system"] == "e5"
    assert known["url"].startswith("https://raw.githubusercontent.com/8421BCD/ReasonRank/06721fd6ef3766c0e00d59a87d2")
    # one TREC line per retrieved document: 100 per query, as many queries as each dataset has
    from r2med.datasets.catalog import get_spec

    for name, record in known["files"].items():
        assert record["queries"] == get_spec(name).queries, name
