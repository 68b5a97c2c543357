"""The runner's file stages (``run_file_stage``): a product that is files, not a run, stored atomically with its
manifest last, kept when made by the same configuration, made again otherwise; an edited file is exit 5."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA
from r2med.datasets import load_dir
from r2med.errors import DamagedFileError, IncompleteResultError, ProviderError, ResultsBusyError
from r2med.io.lock import DirectoryLock
from r2med.stages import FileStage, Product, run_file_stage

ROWS = [{"id": "q1", "hy_doc": "a"}, {"id": "q2", "hy_doc": "b"}]
NOTE = '{"made": true}'


class Notes:
    """A file stage that writes ``notes.jsonl`` and ``notes.txt`` per dataset into ``<root>/<Dataset>``."""

    name = "notes/test"
    anchor = "notes"

    def __init__(self, root: Path, flavour: str = "a", *, problem: dict[str, str] | None = None,
                 halt: dict[str, Exception] | None = None) -> None:
        self.root = root
        self.flavour = flavour
        self.problem = problem or {}
        self.halt = halt or {}
        self.made: list[str] = []

    def folder(self, dataset) -> Path:
        return self.root / dataset.name

    def config(self, dataset) -> dict[str, Any]:
        return {"flavour": self.flavour}

    def produce(self, dataset) -> Product:
        self.made.append(dataset.name)
        return Product({"notes.jsonl": ROWS, "notes.txt": NOTE}, details={"rows": len(ROWS)},
                       outcome=f"made {dataset.name}", problem=self.problem.get(dataset.name),
                       halt=self.halt.get(dataset.name))

    def reused(self, dataset, details) -> str:
        return f"kept {dataset.name} ({details['rows']} rows)"


@pytest.fixture
def tiny():
    return load_dir(DATA / "tiny", "tiny")


def test_the_files_and_their_manifest(tmp_path, tiny):
    stage = Notes(tmp_path)
    assert isinstance(stage, FileStage)
    [result] = run_file_stage(stage, [tiny])
    assert (result.dataset, result.folder, result.outcome, result.reused) == ("tiny", tmp_path / "tiny", "made tiny",
                                                                              False)
    folder = tmp_path / "tiny"
    assert sorted(p.name for p in folder.iterdir()) == ["notes.jsonl", "notes.manifest.json", "notes.txt"]
    assert (folder / "notes.jsonl").read_text() == '{"id": "q1", "hy_doc": "a"}\n{"id": "q2", "hy_doc": "b"}\n'
    assert (folder / "notes.txt").read_text() == NOTE
    manifest = json.loads((folder / "notes.manifest.json").read_text())
    assert manifest["system"] == "notes/test" and manifest["details"] == {"rows": 2}
    assert manifest["config"] == {"system": "notes/test", "flavour": "a",
                                  "dataset": {"name": "tiny", "revision": tiny.revision, "sha256": dict(tiny.sha256)}}
    assert manifest["files"] == {
        name: {"sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest(), "size": (folder / name).stat().st_size}
        for name in ("notes.jsonl", "notes.txt")}


def test_kept_when_made_by_the_same_configuration_made_again_otherwise(tmp_path, tiny, caplog):
    stage = Notes(tmp_path)
    run_file_stage(stage, [tiny])
    [kept] = run_file_stage(stage, [tiny])
    assert (kept.reused, kept.outcome, stage.made) == (True, "kept tiny (2 rows)", ["tiny"])
    other = Notes(tmp_path, "b")
    with caplog.at_level(logging.INFO, logger="r2med.stages.products"):
        assert run_file_stage(other, [tiny])[0].reused is False
    assert other.made == ["tiny"] and "made by another configuration; making it again" in caplog.text
    assert json.loads((tmp_path / "tiny" / "notes.manifest.json").read_text())["config"]["flavour"] == "b"
    changed = replace(tiny, sha256={**tiny.sha256, "query.jsonl": "0" * 64})  # other data: made again
    assert run_file_stage(other, [changed])[0].reused is False and other.made == ["tiny", "tiny"]
    assert run_file_stage(other, [tiny], resume=False)[0].reused is False and len(other.made) == 3


def test_an_edited_file_is_exit_5_naming_it_and_kept(tmp_path, tiny):
    run_file_stage(Notes(tmp_path), [tiny])
    edited = tmp_path / "tiny" / "notes.jsonl"
    edited.write_text('{"id": "q1", "hy_doc": "my own answer"}\n')
    stage = Notes(tmp_path)
    with pytest.raises(DamagedFileError) as info:
        run_file_stage(stage, [tiny])
    assert info.value.exit_code == 5 and info.value.path == str(edited)
    assert "does not match the checksum r2med recorded" in str(info.value)
    assert f"to have it made again, delete notes.jsonl and notes.manifest.json in {tmp_path / 'tiny'}" in str(info.value)
    assert stage.made == [] and edited.read_text() == '{"id": "q1", "hy_doc": "my own answer"}\n'


@pytest.mark.parametrize("damage", ["remove a file", "edit the manifest", "no manifest (an older r2med)"])
def test_a_removed_file_or_an_unusable_or_missing_manifest_is_made_again(tmp_path, tiny, damage, caplog):
    run_file_stage(Notes(tmp_path), [tiny])
    folder = tmp_path / "tiny"
    if damage == "remove a file":
        (folder / "notes.txt").unlink()
    elif damage == "edit the manifest":
        manifest = json.loads((folder / "notes.manifest.json").read_text())
        manifest["config"]["flavour"] = "forged"
        (folder / "notes.manifest.json").write_text(json.dumps(manifest))
    else:
        (folder / "notes.manifest.json").unlink()
    stage = Notes(tmp_path)
    with caplog.at_level(logging.INFO, logger="r2med.stages.products"):
        [result] = run_file_stage(stage, [tiny])
    assert result.reused is False and stage.made == ["tiny"] and (folder / "notes.txt").read_text() == NOTE
    if damage == "remove a file":
        assert "notes.txt of the set of" in caplog.text and "is missing; making it again" in caplog.text
    if damage == "edit the manifest":
        assert "config_sha256 is not the hash of its config" in caplog.text
    if damage == "no manifest (an older r2med)":
        assert f"notes.jsonl, notes.txt in {folder} has no manifest (written by an older r2med" in caplog.text
    assert run_file_stage(Notes(tmp_path), [tiny])[0].reused is True


def test_an_incomplete_product_is_written_without_a_manifest_and_the_others_still_run(tmp_path, tiny):
    other = replace(tiny, name="other")
    run_file_stage(Notes(tmp_path, "b"), [tiny])  # an earlier complete set, of another configuration
    seen = []
    stage = Notes(tmp_path, problem={"tiny": "1 of 2 queries failed"})
    with pytest.raises(IncompleteResultError) as info:
        run_file_stage(stage, [tiny, other], on_result=lambda r: seen.append(r.outcome))
    assert str(info.value) == ("notes/test: 1 dataset(s) incomplete, their results not stored (rerun to finish them): "
                               "tiny: 1 of 2 queries failed")
    assert seen == ["made tiny", "made other"] and stage.made == ["tiny", "other"]
    assert (tmp_path / "tiny" / "notes.jsonl").is_file() and not (tmp_path / "tiny" / "notes.manifest.json").exists()
    assert (tmp_path / "other" / "notes.manifest.json").is_file()
    again = Notes(tmp_path)
    assert [r.reused for r in run_file_stage(again, [tiny, other])] == [False, True] and again.made == ["tiny"]


def test_a_halt_is_raised_once_its_files_are_written_and_no_later_dataset_runs(tmp_path, tiny):
    stage = Notes(tmp_path, problem={"tiny": "budget spent"}, halt={"tiny": ProviderError("budget spent")})
    with pytest.raises(ProviderError, match="budget spent"):
        run_file_stage(stage, [tiny, replace(tiny, name="other")])
    assert stage.made == ["tiny"] and (tmp_path / "tiny" / "notes.jsonl").is_file()
    assert not (tmp_path / "tiny" / "notes.manifest.json").exists() and not (tmp_path / "other").exists()


def test_an_old_file_the_new_set_does_not_write_is_removed(tmp_path, tiny):
    run_file_stage(Notes(tmp_path), [tiny])

    class Fewer(Notes):
        def produce(self, dataset) -> Product:
            return Product({"notes.txt": NOTE})

    run_file_stage(Fewer(tmp_path, "c"), [tiny])
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == ["notes.manifest.json", "notes.txt"]


def test_a_second_process_on_the_folder_is_refused(tmp_path, tiny):
    stage = Notes(tmp_path)
    with DirectoryLock(tmp_path / "tiny") as held:
        held.acquire()
        with pytest.raises(ResultsBusyError, match="another r2med process"):
            run_file_stage(stage, [tiny])
    assert stage.made == []
    run_file_stage(stage, [tiny])
    assert not (tmp_path / "tiny" / ".r2med.lock").exists()


def test_a_kill_at_any_write_leaves_a_set_that_the_rerun_completes(tmp_path, tiny, kill_at_write):
    run_file_stage(Notes(tmp_path, "old"), [tiny])
    for n in (1, 2, 3):  # before the rename of notes.jsonl, of notes.txt, of the manifest
        steps = kill_at_write(n)
        with pytest.raises(KeyboardInterrupt):
            run_file_stage(Notes(tmp_path, f"new{n}"), [tiny])
        assert not (tmp_path / "tiny" / "notes.manifest.json").exists()  # the old one retired first, no new one yet
        kill_at_write.disarm()
        assert len(steps) == n
        stage = Notes(tmp_path, f"new{n}")
        assert run_file_stage(stage, [tiny])[0].reused is False and stage.made == ["tiny"]
        assert run_file_stage(Notes(tmp_path, f"new{n}"), [tiny])[0].reused is True
