"""The one result-set module: which files make a set, how a stored set is verified, and how each use reads it
(reuse recomputes, an input is refused with the fix, a report checks the file and the numbers)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA
from r2med.datasets import load_dir
from r2med.errors import DamagedFileError, MissingResourceError
from r2med.stages import run_stage
from r2med.store.result_set import (
    ResultFiles,
    read_result_file,
    read_stored_run,
    recorded_files,
    reusable_scores,
    set_of,
    stored_input,
    verified_set,
)
from r2med.store.results import SystemPath, result_files
from r2med.store.runs import read_run
from r2med.types import Run

RUN = {"q1": {"d1": 2.0, "d4": 1.0}, "q2": {"d3": 2.0, "d2": 1.0}}


class Noted:
    """A stage with a fixed run (nDCG@10 0.81546 on tiny) and an artifact ``<Dataset>.notes.jsonl``."""

    def __init__(self) -> None:
        self.where = SystemPath.base("toy")
        self.ignore_identical_ids = False

    def config(self, dataset) -> dict[str, Any]:
        return {"toy": 1}

    def run(self, dataset) -> Run:
        return Run(RUN)

    def details(self, dataset) -> dict[str, Any]:
        return {}

    def artifacts(self, dataset) -> dict[str, list[dict[str, Any]]]:
        return {"notes": [{"qid": "q1", "note": "x"}]}


@pytest.fixture
def stored(tmp_path) -> tuple[ResultFiles, dict[str, Any]]:
    """The toy stage's set on tiny, and the configuration that keys it."""
    [result] = run_stage(Noted(), [load_dir(DATA / "tiny", "tiny")], output=tmp_path)
    manifest = json.loads(result.files.manifest.read_text())
    return result.files, manifest["config"]


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _edit_manifest(files: ResultFiles, edit) -> None:
    manifest = json.loads(files.manifest.read_text())
    edit(manifest["files"])
    files.manifest.write_text(json.dumps(manifest))


def test_the_files_of_a_set(tmp_path, stored):
    files, _ = stored
    folder = tmp_path / "base retriever" / "toy"
    assert files == result_files(tmp_path, SystemPath.base("toy"), "tiny") == ResultFiles.of(folder, "tiny")
    assert files.dataset == "tiny" and ResultFiles.of_result(folder / "tiny.json") == files
    assert [p.name for p in files.scored] == ["tiny.json", "tiny.run", "tiny.per_query.jsonl"]
    assert files.manifest == folder / "tiny.manifest.json" and files.artifact("notes") == folder / "tiny.notes.jsonl"
    assert set(recorded_files(files, _json(files.manifest))) == {*files.scored, files.artifact("notes")}
    for member in (*files.scored, files.artifact("notes")):
        assert set_of(member) == files
    assert set_of(folder / "other.run") is None


def test_reuse_reads_the_scores_of_an_intact_set_of_the_same_configuration(stored):
    files, config = stored
    scores = reusable_scores(files, config, dataset="tiny")
    assert scores is not None and scores.aggregate["ndcg_at_10"] == 0.81546
    assert scores.per_query["q1"]["ndcg_at_10"] == 1.0
    assert scores.per_query["q2"]["ndcg_at_10"] == pytest.approx(0.63093, abs=1e-5)


def test_reuse_recomputes_another_configuration_a_damaged_artifact_and_an_unfinished_set(stored, caplog):
    files, config = stored
    with caplog.at_level(logging.INFO, logger="r2med"):
        assert reusable_scores(files, {**config, "toy": 2}, dataset="tiny") is None
    assert "made by another configuration" in caplog.text
    files.artifact("notes").write_text('{"qid": "q1", "note": "edited"}\n')
    with caplog.at_level(logging.WARNING, logger="r2med"):
        assert reusable_scores(files, config, dataset="tiny") is None
    assert "tiny.notes.jsonl: does not match the checksum r2med recorded" in caplog.text
    files.manifest.unlink()
    with caplog.at_level(logging.INFO, logger="r2med"):
        assert reusable_scores(files, config, dataset="tiny") is None
    assert "tiny.manifest.json is missing (an interrupted run)" in caplog.text


def test_a_manifest_that_does_not_record_a_scored_member_verifies_nothing(stored, caplog):
    files, config = stored
    _edit_manifest(files, lambda recorded: recorded.pop("tiny.per_query.jsonl"))
    manifest = _json(files.manifest)
    with pytest.raises(DamagedFileError) as err:
        verified_set(files, manifest)
    assert str(err.value) == f"{files.manifest}: does not record tiny.per_query.jsonl"
    with caplog.at_level(logging.WARNING, logger="r2med"):
        assert reusable_scores(files, config, dataset="tiny") is None
    assert "does not record tiny.per_query.jsonl" in caplog.text
    with pytest.raises(DamagedFileError, match="does not record tiny.per_query.jsonl; run the stage that made toy"):
        stored_input(files, system="toy")
    with pytest.raises(DamagedFileError, match="does not record tiny.per_query.jsonl"):
        read_result_file(files.result, _json)


@pytest.mark.parametrize("entry,reason", [
    ({"../tiny.run": {"sha256": "0" * 64, "size": 1}}, "'files' names '../tiny.run', not a file of this directory"),
    ({}, "'files' is not a non-empty object of checksums"),
    ({"tiny.run": {"sha256": "x"}}, "does not match: the checksum of tiny.run is malformed"),
])
def test_a_manifest_with_bad_checksums_is_refused_naming_it(stored, entry, reason):
    files, _ = stored
    _edit_manifest(files, lambda recorded: (recorded.clear(), recorded.update(entry)))
    with pytest.raises(DamagedFileError) as err:
        recorded_files(files, _json(files.manifest))
    assert str(err.value).startswith(f"{files.manifest}: {reason}")


def test_an_input_is_read_whole_or_refused_with_the_stage_to_rerun(tmp_path, stored):
    files, _ = stored
    assert stored_input(files, system="toy").read_run() == RUN
    assert read_stored_run(files.run, system="toy") == RUN
    fix = (f"run the stage that made toy again (it writes {files.run.parent}), or delete "
           f"{files.run.parent / 'tiny'}.* and run it")
    files.artifact("notes").write_text("{}\n")  # an input is taken only whole: a damaged artifact refuses it
    with pytest.raises(DamagedFileError) as err:
        read_stored_run(files.run, system="toy")
    assert str(err.value).startswith(f"{files.artifact('notes')}: does not match the checksum r2med recorded")
    assert str(err.value).endswith(f"(tiny.manifest.json); {fix}") and err.value.exit_code == 5
    files.manifest.unlink()  # an interrupted run: its files, no manifest
    with pytest.raises(DamagedFileError) as err:
        stored_input(files, system="toy")
    assert str(err.value) == (f"{files.manifest}: is missing: the result of toy on tiny is unfinished (an interrupted "
                              f"run); {fix}")
    assert read_stored_run(files.run, system="toy") == RUN  # no manifest beside it: a user's plain run file
    with pytest.raises(MissingResourceError) as err:
        stored_input(ResultFiles.of(files.run.parent, "Biology"), system="toy")
    assert str(err.value) == f"no stored result of toy for Biology in {files.run.parent}; run that stage first"


def test_a_file_the_set_does_not_record_is_not_read_as_one_of_its_files(stored):
    files, _ = stored
    stray = files.run.with_name("tiny.trajectories.jsonl")
    stray.write_text('{"id": "q1"}\n')
    expected = (f"{stray}: is not a file of the result set tiny.manifest.json beside it; use the files that set "
                "records (tiny.json, tiny.notes.jsonl, tiny.per_query.jsonl, tiny.run), or move "
                "tiny.trajectories.jsonl elsewhere")
    with pytest.raises(DamagedFileError) as err:
        read_result_file(stray, lambda p: p.read_text())
    assert str(err.value) == expected
    with pytest.raises(DamagedFileError) as err:
        stored_input(files, system="toy").read(stray, lambda p: p.read_text())
    assert str(err.value) == expected


def test_a_report_reads_the_numbers_beside_a_damaged_artifact_but_not_the_artifact(stored):
    files, _ = stored
    files.artifact("notes").write_text('{"qid": "q1", "note": "edited"}\n')
    assert read_result_file(files.result, _json)["test"]["ndcg_at_10"] == 0.81546
    assert read_result_file(files.run, read_run) == RUN
    with pytest.raises(DamagedFileError, match=r"tiny\.notes\.jsonl: does not match .*\(tiny\.manifest\.json\)"):
        read_result_file(files.artifact("notes"), lambda p: p.read_text())
    files.per_query.write_text("")  # a damaged scored member hides every file of the set
    with pytest.raises(DamagedFileError, match=r"tiny\.per_query\.jsonl: does not match"):
        read_result_file(files.result, _json)


def test_a_file_without_a_manifest_is_read_as_it_is_and_a_read_error_is_a_damaged_file(tmp_path, stored):
    files, _ = stored
    plain = tmp_path / "official" / "Biology.json"
    plain.parent.mkdir()
    plain.write_text('{"test": {"ndcg_at_10": 0.5}}')
    assert read_result_file(plain, _json) == {"test": {"ndcg_at_10": 0.5}}

    def refuse(path: Path) -> None:
        raise ValueError("not a run")

    with pytest.raises(DamagedFileError) as err:
        stored_input(files, system="toy").read(files.run, refuse)
    assert str(err.value).startswith(f"{files.run}: cannot be read back (ValueError: not a run); run the stage that")


def test_r2med_fuse_and_evaluate_read_a_stored_run_only_when_its_set_matches(cli, tmp_path, stored):
    files, _ = stored
    fused = tmp_path / "fused.run"
    assert cli("fuse", files.run, files.run, "--output", fused, "-q").code == 0
    assert read_run(fused) == {"q1": {"d1": 2 / 61, "d4": 2 / 62}, "q2": {"d3": 2 / 61, "d2": 2 / 62}}
    evaluated = cli("evaluate", "--qrels", DATA / "tiny", "--run", files.run, "--json")
    assert evaluated.code == 0 and evaluated.json()["ndcg_at_10"] == pytest.approx(0.81546, abs=1e-5)
    files.run.write_text(files.run.read_text().replace("2.0", "9.0"))  # an edited stored run: other numbers
    refused = cli("fuse", files.run, files.run, "--output", fused, "-q")
    assert refused.code == 5 and f"{files.run}: does not match the checksum r2med recorded" in refused.err
    assert "run the stage that made toy again" in refused.err
    refused = cli("evaluate", "--qrels", DATA / "tiny", "--run", files.run, "--json")
    assert refused.code == 5 and f"{files.run}: does not match the checksum r2med recorded" in refused.err
