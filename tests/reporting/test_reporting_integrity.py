"""Reports read a stored result only when it matches its manifest; official files (no manifest) as they are."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import DATA
from r2med.errors import DamagedFileError
from r2med.reporting.compare import read_per_query


@pytest.fixture
def results(cli, tmp_path):
    shutil.copytree(DATA / "tiny", tmp_path / "data" / "Biology")
    out = tmp_path / "out"
    assert cli("run", "--data-dir", tmp_path / "data" / "Biology", "--output", out, "--no-cache", "-q").code == 0
    return out / "base retriever" / "bm25"


def test_a_leaderboard_refuses_a_result_json_its_manifest_does_not_describe(cli, results):
    assert cli("leaderboard", results.parent.parent).code == 0
    record = json.loads((results / "Biology.json").read_text())
    record["test"]["ndcg_at_10"] = 0.4321  # another run's numbers beside this manifest
    (results / "Biology.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    refused = cli("leaderboard", results.parent.parent)
    assert refused.code == 5 and "Biology.json: does not match" in refused.err and "43.21" not in refused.out
    (results / "Biology.manifest.json").unlink()  # no manifest: a plain (official-style) file, read as it is
    assert "43.21" in cli("leaderboard", results.parent.parent).out


def test_per_query_values_of_a_set_are_verified(results):
    path = results / "Biology.per_query.jsonl"
    assert set(read_per_query(path, "ndcg_at_10")) == {"q1", "q2"}
    path.write_text(path.read_text().replace('"q2"', '"q9"'))
    with pytest.raises(DamagedFileError, match=r"Biology\.per_query\.jsonl: does not match"):
        read_per_query(path, "ndcg_at_10")


@pytest.fixture
def two_systems(cli, tmp_path):
    """bm25 and bm25-lucene on the tiny Biology set (both nDCG@10 1.0), as 'r2med run' stores them."""
    shutil.copytree(DATA / "tiny", tmp_path / "data" / "Biology")
    out = tmp_path / "out"
    for retriever in ("bm25", "bm25-lucene"):
        assert cli("run", "--data-dir", tmp_path / "data" / "Biology", "--retriever", retriever, "--output", out,
                   "--no-cache", "-q").code == 0
    return out


def test_one_edited_run_leaves_the_other_systems_on_the_board(cli, two_systems, tmp_path):
    """Issue 38, finding 2: a .run edited by hand refused the whole table (exit 5, nothing printed). Now the verified
    systems are printed, the refused one is named with the reason and the fix, and the exit is 5 after the table."""
    run_file = two_systems / "base retriever" / "bm25" / "Biology.run"
    run_file.write_text(run_file.read_text() + "q1 Q0 d9 99 9.0 hand\n")
    board = cli("leaderboard", two_systems)
    assert board.code == 5
    rows = [line for line in board.out.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert rows == [f"| 1 | bm25-lucene | base retriever/bm25-lucene | {two_systems} |  100.00 |          100.00 |      1/1 |"]
    assert "Note, left out, base retriever/bm25: its results cannot be used: " in board.out
    assert board.err.startswith("r2med: error: 1 system left out of the table above: its results cannot be used "
                                "(1 shown)\n  - base retriever/bm25 (in ")
    assert f"{run_file}: does not match the checksum r2med recorded" in board.err
    assert "run the command that made it again" in board.err and "--force" in board.err
    as_json = cli("leaderboard", two_systems, "--json")
    payload = json.loads(as_json.out)
    assert as_json.code == 5 and [r["system"] for r in payload["rows"]] == ["base retriever/bm25-lucene"]
    assert [r["system"] for r in payload["refused"]] == ["base retriever/bm25"]
    written = cli("leaderboard", two_systems, "--format", "csv", "-o", tmp_path / "board.csv")
    assert written.code == 5 and f"left out of {tmp_path / 'board.csv'}" in written.err
    assert "base retriever/bm25,refused," in (tmp_path / "board.csv").read_text()
    # the fix the message gives works: the same run again recomputes the damaged set
    assert cli("run", "--data-dir", tmp_path / "data" / "Biology", "--retriever", "bm25", "--output", two_systems,
               "--no-cache", "-q").code == 0
    again = cli("leaderboard", two_systems)
    assert again.code == 0 and again.err == "" and "| base retriever/bm25 " in again.out


def test_a_report_shows_the_verified_systems_and_names_the_refused_one(cli, two_systems, tmp_path):
    pytest.importorskip("matplotlib")
    per_query = two_systems / "base retriever" / "bm25-lucene" / "Biology.per_query.jsonl"
    per_query.write_text(per_query.read_text().replace('"q2"', '"q9"'))
    page = tmp_path / "report.html"
    written = cli("report", two_systems, "-o", page, "-q")
    assert written.code == 5 and written.out == f"{page}\n"
    assert written.err.startswith(f"r2med: error: 1 system left out of {page}: its results cannot be used (1 shown)")
    html = page.read_text()
    assert "left out, base retriever/bm25-lucene" in html and "Biology.per_query.jsonl: does not match" in html
    assert "<td>base retriever/bm25</td>" in html and "<td>base retriever/bm25-lucene</td>" not in html
    summary = cli("report", two_systems, "-o", page, "--json")
    assert summary.code == 5 and json.loads(summary.out)["systems"] == ["base retriever/bm25"]
    assert json.loads(summary.out)["refused"][0]["system"] == "base retriever/bm25-lucene"


def test_the_library_gives_the_refused_systems_beside_the_others(two_systems):
    from r2med.reporting.leaderboard import RefusedResultsError, discover, survey

    per_query = two_systems / "base retriever" / "bm25" / "Biology.per_query.jsonl"
    per_query.write_text(per_query.read_text().replace('"q1"', '"q7"'))
    found, refused = survey(two_systems)
    assert [s.system for s in found] == ["base retriever/bm25-lucene"]
    assert [(r.system, r.root, len(r.problems)) for r in refused] == [("base retriever/bm25", two_systems, 1)]
    assert refused[0].problems[0].startswith(f"{per_query}: does not match the checksum r2med recorded")
    with pytest.raises(RefusedResultsError, match=r"^the results of 1 system cannot be used") as strict:
        discover(two_systems)  # strict: all or nothing, as before
    assert strict.value.refused == refused and strict.value.exit_code == 5


def test_compare_names_the_fix_for_a_changed_run(cli, two_systems):
    run_file = two_systems / "base retriever" / "bm25" / "Biology.run"
    run_file.write_text(run_file.read_text() + "q1 Q0 d9 99 9.0 hand\n")
    refused = cli("compare", "bm25", "bm25-lucene", "--results", two_systems)
    assert refused.code == 5 and refused.out == ""
    assert refused.err.startswith(f"r2med: error: {run_file}: does not match the checksum r2med recorded")
    assert refused.err.rstrip().endswith("; run the command that made it again (it recomputes a result whose files do "
                                         "not match its manifest; --force recomputes every dataset of it), or remove "
                                         "its files")
