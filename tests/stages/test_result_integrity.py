"""A stored result set is all or nothing: its manifest, written last, records every file's sha256 and size,
and nothing is reused (or fused, or reranked) before every file matches it."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import DATA
from r2med.datasets import load_dir
from r2med.errors import InvalidInputError
from r2med.io.digest import digest_file
from r2med.stages import FirstStage, Fuse, run_stage
from r2med.store.results import SystemPath
from r2med.types import Run

BM25 = Path("base retriever") / "bm25"


def _run(cli, out: Path, *extra: object):
    return cli("run", "--data-dir", DATA / "tiny", "--output", out, "--json", "--no-cache", *extra)


def _set(out: Path, dataset: str = "tiny") -> dict[str, bytes]:
    """Every file of the BM25 result set, but for what is wall-clock: the result JSON's ``evaluation_time`` (minutes,
    to two decimals: a run past 0.3 s on a loaded machine writes 0.01) and, in the manifest, its timings, date,
    environment and the result JSON's digest (which covers that time; checked here against the file itself)."""
    folder = out / BM25
    files = {}
    for path in sorted(folder.glob(f"{dataset}.*")):
        data = path.read_bytes()
        if path.name == f"{dataset}.json":
            result = json.loads(data)
            assert result.pop("evaluation_time").endswith(" minutes")
            data = json.dumps(result, sort_keys=True).encode()
        if path.name.endswith(".manifest.json"):
            manifest = json.loads(data)
            for key in ("timings_s", "created", "environment"):
                manifest.pop(key)
            recorded = manifest["files"].pop(f"{dataset}.json")
            assert recorded["sha256"] == digest_file(folder / f"{dataset}.json").sha256
            data = json.dumps(manifest, sort_keys=True).encode()
        files[path.name] = data
    return files


@pytest.fixture
def counted(monkeypatch):
    from r2med.retrievers.bm25.retriever import BM25Retriever

    calls: list[int] = []
    original = BM25Retriever.retrieve

    def counting(self, dataset, *, top_k=100):
        calls.append(top_k)
        return original(self, dataset, top_k=top_k)

    monkeypatch.setattr(BM25Retriever, "retrieve", counting)
    return calls


def test_the_manifest_records_every_file_of_the_set(cli, tmp_path):
    assert _run(cli, tmp_path).code == 0
    folder = tmp_path / BM25
    manifest = json.loads((folder / "tiny.manifest.json").read_text())
    assert set(manifest["files"]) == {"tiny.run", "tiny.per_query.jsonl", "tiny.json"}
    for name, entry in manifest["files"].items():
        digest = digest_file(folder / name)
        assert entry == {"sha256": digest.sha256, "size": digest.size}
    assert not (tmp_path / ".r2med.lock").exists()  # the lock is gone with the run


def test_files_of_another_configuration_beside_a_manifest_are_not_reused(cli, tmp_path, counted, caplog):
    # the case: a top-k 3 run killed after writing its files, before its manifest, beside a top-k 1 manifest
    reference = _run(cli, tmp_path / "ref", "--top-k", "1")
    assert _run(cli, tmp_path / "a", "--top-k", "1").code == 0
    assert _run(cli, tmp_path / "b", "--top-k", "3").code == 0
    for name in ("tiny.run", "tiny.per_query.jsonl", "tiny.json"):
        shutil.copyfile(tmp_path / "b" / BM25 / name, tmp_path / "a" / BM25 / name)
    calls = len(counted)
    again = _run(cli, tmp_path / "a", "--top-k", "1")
    assert again.code == 0, again.err
    assert again.json() == reference.json()  # not the top-k 3 numbers
    assert len(counted) == calls + 1 and str(tmp_path / "a" / BM25 / "tiny.") in again.err
    assert "does not match" in again.err and "recomputing" in again.err
    assert _set(tmp_path / "a") == _set(tmp_path / "ref")


@pytest.mark.parametrize("damage", ["truncate", "edit", "empty", "delete", "garbage"])
@pytest.mark.parametrize("name", ["tiny.run", "tiny.per_query.jsonl", "tiny.json"])
def test_a_damaged_member_is_recomputed_with_a_warning(cli, tmp_path, counted, name, damage):
    reference = _run(cli, tmp_path / "ref", "--top-k", "2")
    assert _run(cli, tmp_path / "out", "--top-k", "2").code == 0
    path = tmp_path / "out" / BM25 / name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "edit":  # same size, one digit changed: still a valid file
        at = max(i for i, c in enumerate(data) if chr(c).isdigit() and chr(c) != "0")
        path.write_bytes(data[:at] + b"0" + data[at + 1:])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "delete":
        path.unlink()
    else:
        path.write_bytes(b"\x00\xff{not json" * 3)
    calls = len(counted)
    again = _run(cli, tmp_path / "out", "--top-k", "2")
    assert again.code == 0, again.err
    assert "Traceback" not in again.err and name in again.err and "recomput" in again.err
    assert len(counted) == calls + 1
    assert again.json() == reference.json()
    assert _set(tmp_path / "out") == _set(tmp_path / "ref")


def test_a_damaged_manifest_is_recomputed_with_a_warning(cli, tmp_path, counted):
    assert _run(cli, tmp_path / "ref").code == 0
    assert _run(cli, tmp_path / "out").code == 0
    manifest = tmp_path / "out" / BM25 / "tiny.manifest.json"
    text = manifest.read_text()
    for broken in (text[: len(text) // 2], text.replace('"sha256": "', '"sha256": "0', 1), "[]"):
        manifest.write_text(broken)
        calls = len(counted)
        again = _run(cli, tmp_path / "out")
        assert again.code == 0 and len(counted) == calls + 1, again.err
        assert "tiny.manifest.json" in again.err and "Traceback" not in again.err
        assert _set(tmp_path / "out") == _set(tmp_path / "ref")


def test_an_old_manifest_without_checksums_is_not_trusted(cli, tmp_path, counted):
    assert _run(cli, tmp_path).code == 0
    manifest = tmp_path / BM25 / "tiny.manifest.json"
    data = json.loads(manifest.read_text())
    del data["files"]  # as an r2med before checksums wrote it
    manifest.write_text(json.dumps(data))
    calls = len(counted)
    again = _run(cli, tmp_path)
    assert again.code == 0 and len(counted) == calls + 1 and "no checksums" in again.err
    assert "files" in json.loads(manifest.read_text())


class Noted:
    """A stage with an artifact, whose configuration says whether it writes it."""

    def __init__(self, notes: bool, where: str = "toy") -> None:
        self.where = SystemPath.base(where)
        self.ignore_identical_ids = False
        self.notes = notes
        self.calls = 0

    def config(self, dataset) -> dict[str, Any]:
        return {"notes": self.notes}

    def run(self, dataset) -> Run:
        self.calls += 1
        return Run({"q1": {"d1": 2.0, "d4": 1.0}, "q2": {"d3": 2.0, "d2": 1.0}})

    def details(self, dataset) -> dict[str, Any]:
        return {}

    def artifacts(self, dataset) -> dict[str, list[dict[str, Any]]]:
        return {"notes": [{"qid": "q1", "note": "x"}]} if self.notes else {}


def test_artifacts_are_members_and_stale_ones_go(tmp_path):
    tiny = load_dir(DATA / "tiny", "tiny")
    folder = tmp_path / "base retriever" / "toy"
    run_stage(Noted(True), [tiny], output=tmp_path)
    manifest = json.loads((folder / "tiny.manifest.json").read_text())
    assert "tiny.notes.jsonl" in manifest["files"]
    (folder / "tiny.notes.jsonl").write_text('{"qid": "q1", "note": "edited"}\n')
    stage = Noted(True)
    [again] = run_stage(stage, [tiny], output=tmp_path)
    assert not again.reused and stage.calls == 1
    assert (folder / "tiny.notes.jsonl").read_text() == '{"qid": "q1", "note": "x"}\n'
    # another configuration without the artifact: the old set's artifact does not stay beside the new set
    run_stage(Noted(False), [tiny], output=tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["tiny.json", "tiny.manifest.json", "tiny.per_query.jsonl", "tiny.run"]


def _two_inputs(tmp_path):
    tiny = load_dir(DATA / "tiny", "tiny")
    run_stage(Noted(False, "a"), [tiny], output=tmp_path)
    run_stage(Noted(False, "b"), [tiny], output=tmp_path)
    return tiny, [(SystemPath.base("a"), False), (SystemPath.base("b"), False)]


def test_fusion_refuses_a_damaged_input_and_says_what_to_rerun(tmp_path):
    tiny, inputs = _two_inputs(tmp_path)
    [fused] = run_stage(Fuse("ab", inputs, output=tmp_path), [tiny], output=tmp_path)
    run = tmp_path / "base retriever" / "b" / "tiny.run"
    run.write_text(run.read_text().replace("2.0", "9.0"))  # an edited input run: fusing it would give other numbers
    with pytest.raises(InvalidInputError, match=r"tiny\.run.*does not match.*run the stage that made .*base retriever/b.* again"):
        run_stage(Fuse("ab", inputs, output=tmp_path), [tiny], output=tmp_path)
    (tmp_path / "base retriever" / "a" / "tiny.manifest.json").unlink()  # an interrupted input
    with pytest.raises(InvalidInputError, match="base retriever/a"):
        run_stage(Fuse("ab", inputs, output=tmp_path), [tiny], output=tmp_path)
    assert fused.scores.n_queries == 2  # q3 has no judgements


def test_a_first_stage_from_a_result_set_is_verified_and_a_plain_file_is_not(tmp_path, caplog):
    _two_inputs(tmp_path)
    first = FirstStage.resolve("a", output=tmp_path)
    assert first.load("tiny") == {"q1": {"d1": 2.0, "d4": 1.0}, "q2": {"d3": 2.0, "d2": 1.0}}
    run = tmp_path / "base retriever" / "a" / "tiny.run"
    run.write_text(run.read_text().splitlines()[0] + "\n")  # truncated
    with pytest.raises(InvalidInputError, match=r"tiny\.run.*does not match"):
        first.load("tiny")
    plain = tmp_path / "mine" / "tiny.run"  # a user's run file: no manifest, read as it is
    plain.parent.mkdir()
    plain.write_text("q1 Q0 d2 1 1.5 x\n")
    assert FirstStage.resolve(plain, output=tmp_path).load("tiny") == {"q1": {"d2": 1.5}}


def test_a_second_writer_on_one_output_is_refused_with_exit_6(cli, tmp_path):
    out = tmp_path / "out"
    gate = tmp_path / "gate"
    code = (
        "import pathlib, sys, time\n"
        "from r2med.retrievers.bm25.retriever import BM25Retriever\n"
        "original = BM25Retriever.retrieve\n"
        "def waiting(self, dataset, *, top_k=100):\n"
        f"    pathlib.Path({str(tmp_path / 'started')!r}).write_text('x')\n"
        f"    while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.02)\n"
        "    return original(self, dataset, top_k=top_k)\n"
        "BM25Retriever.retrieve = waiting\n"
        "from r2med.cli import main\n"
        f"sys.exit(main(['-q', 'run', '--data-dir', {str(DATA / 'tiny')!r}, '--output', {str(out)!r}, '--no-cache']))\n"
    )
    first = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.stderr else ""
            time.sleep(0.02)
        second = _run(cli, out)
        assert second.code == 6, second.err
        assert f"another r2med process (pid {first.pid}) is using {out}" in second.err
        assert not (out / BM25 / "tiny.manifest.json").exists()
    finally:
        gate.write_text("go")
        _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    third = _run(cli, out)  # the lock went with the first process
    assert third.code == 0 and "stored result reused" not in third.err


def test_a_killed_holder_leaves_no_stale_lock(cli, tmp_path):
    out = tmp_path / "out"
    code = (
        "import sys, time\n"
        "from r2med.io.lock import DirectoryLock\n"
        f"lock = DirectoryLock({str(out)!r})\n"
        "lock.acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert _run(cli, out).code == 6
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert (out / ".r2med.lock").exists()  # left by the killed process ...
    assert _run(cli, out).code == 0  # ... but its lock died with it


def test_run_stage_and_the_pipeline_hold_the_lock_while_they_work(tmp_path):
    from r2med.io.lock import DirectoryLock

    tiny = load_dir(DATA / "tiny", "tiny")
    seen = []

    class Peeking(Noted):
        def run(self, dataset) -> Run:
            seen.append((tmp_path / ".r2med.lock").exists())
            with pytest.raises(Exception, match="another r2med process") as info:
                DirectoryLock(tmp_path).acquire()
            seen.append(info.value.exit_code)
            return super().run(dataset)

    run_stage(Peeking(False), [tiny], output=tmp_path)
    assert seen == [True, 6] and not (tmp_path / ".r2med.lock").exists()


def test_a_damaged_stored_result_never_ends_in_a_traceback(tmp_path, caplog):
    tiny = load_dir(DATA / "tiny", "tiny")
    run_stage(Noted(False), [tiny], output=tmp_path)
    folder = tmp_path / "base retriever" / "toy"
    for name in ("tiny.json", "tiny.per_query.jsonl"):
        (folder / name).write_bytes(b"\xff\xfe")
    stage = Noted(False)
    with caplog.at_level(logging.WARNING, logger="r2med"):
        [result] = run_stage(stage, [tiny], output=tmp_path)
    assert stage.calls == 1 and not result.reused and "tiny.json" in caplog.text
