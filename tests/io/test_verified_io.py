"""The verified reader, the atomic writer's leftovers and the results-directory lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from json_decoders import json_decoder  # noqa: F401 (autouse: every test with msgspec and with json alone)
from r2med.errors import DamagedFileError, InvalidInputError, ResultsBusyError
from r2med.io.atomic import clean_temp_files, recorded_writes, write_atomic, write_text_atomic
from r2med.io.digest import Digest, digest_file
from r2med.io.lock import DirectoryLock
from r2med.io.verified import (
    LogSeal,
    read_log,
    read_verified,
    read_verified_json,
    sidecar,
    write_verified,
    write_verified_json,
)


def _text(path):
    return path.read_text(encoding="utf-8")


def test_write_verified_then_read_verified(tmp_path):
    path = tmp_path / "a" / "x.txt"
    digest = write_verified(path, lambda h: h.write("hello\n"))
    assert digest == Digest.of(b"hello\n") == digest_file(path)
    assert json.loads(sidecar(path).read_text()) == {"sha256": digest.sha256, "size": 6}
    assert read_verified(path, _text) == "hello\n"
    assert read_verified(path, _text, expected=digest) == "hello\n"


@pytest.mark.parametrize("damage, reason", [
    (lambda p: p.write_text("hellO\n"), "does not match the checksum r2med recorded: sha256"),
    (lambda p: p.write_text("hel"), "does not match the checksum r2med recorded: 3 bytes where it wrote 6"),
    (lambda p: p.unlink(), "is missing"),
    (lambda p: sidecar(p).unlink(), "has no checksum (x.txt.sha256 is missing"),
    (lambda p: sidecar(p).write_text("{}"), "is not a checksum record"),
])
def test_every_damage_is_a_damaged_file_error_naming_the_file(tmp_path, damage, reason):
    path = tmp_path / "x.txt"
    write_verified(path, lambda h: h.write("hello\n"))
    damage(path)
    with pytest.raises(DamagedFileError) as info:
        read_verified(path, _text)
    assert reason in str(info.value) and str(tmp_path) in str(info.value)
    assert isinstance(info.value, InvalidInputError) and info.value.exit_code == 5


def test_a_file_that_cannot_be_parsed_or_changes_while_read_is_damaged(tmp_path):
    path = tmp_path / "x.json"
    digest = write_verified(path, lambda h: h.write("{not json"))
    with pytest.raises(DamagedFileError, match=r"cannot be read back \(JSONDecodeError"):
        read_verified(path, lambda p: json.loads(p.read_text()))

    def meddling(p):
        os.utime(p, ns=(1, 1))
        return "x"

    with pytest.raises(DamagedFileError, match="changed while it was being read"):
        read_verified(path, meddling, expected=digest)


def test_self_verified_json(tmp_path):
    path = tmp_path / "m.json"
    write_verified_json(path, {"b": [1, 2.5], "a": "é"})
    assert read_verified_json(path) == {"b": [1, 2.5], "a": "é"}
    path.write_text(path.read_text().replace("2.5", "3.5"))
    with pytest.raises(DamagedFileError, match="does not match the checksum r2med recorded in it"):
        read_verified_json(path)
    path.write_text('{"a": 1}')
    with pytest.raises(DamagedFileError, match="has no checksum"):
        read_verified_json(path)
    path.write_text("[1]")
    with pytest.raises(DamagedFileError, match="not a JSON object"):
        read_verified_json(path)


def test_an_append_only_log_checks_the_part_its_seal_covers(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"a\nb\n")
    LogSeal(b"a\nb\n").write(path)
    path.write_bytes(b"a\nb\nc\nd")  # appended after the seal: not checked, read as lines and a tail
    log = read_log(path)
    assert [raw for _, _, raw in log.lines] == [b"a", b"b", b"c"] and log.tail == b"d" and log.sealed == 4
    path.write_bytes(b"a\nX\nc\n")
    with pytest.raises(DamagedFileError, match="first 4 bytes"):
        read_log(path)
    assert read_log(path, sealed=False).sealed == 0


def test_writes_record_the_digest_of_what_they_wrote(tmp_path):
    with recorded_writes() as written:
        write_text_atomic(tmp_path / "a.txt", "one")
        write_atomic(tmp_path / "b.bin", lambda h: h.write(b"\x00\x01"), binary=True)
    assert written == {tmp_path / "a.txt": Digest.of(b"one"), tmp_path / "b.bin": Digest.of(b"\x00\x01")}
    write_text_atomic(tmp_path / "c.txt", "outside")
    assert len(written) == 2


def test_temporary_files_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    dead = tmp_path / ".x.run.4194305-abcd1234.tmp"  # no process has this pid
    mine = tmp_path / f".x.run.{os.getpid()}-abcd1234.tmp"  # a live writer's: left alone
    old_fresh = tmp_path / ".x.run.abcd1234.tmp"  # an older r2med's, without a pid: kept for a day
    old_stale = tmp_path / ".y.run.efgh5678.tmp"
    user = tmp_path / "notes.tmp"  # not an r2med temporary file
    for path in (dead, mine, old_fresh, old_stale, user):
        path.write_text("half")
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(old_stale, (day_ago, day_ago))
    write_text_atomic(tmp_path / "x.run", "whole\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [mine.name, old_fresh.name, user.name, "x.run"])
    assert clean_temp_files(tmp_path / "nothing-here") == []


def test_the_lock_refuses_a_second_holder_and_dies_with_its_process(tmp_path):
    code = (
        "import sys, time\n"
        "from r2med.io.lock import DirectoryLock\n"
        f"DirectoryLock({str(tmp_path)!r}).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ResultsBusyError) as info:
            DirectoryLock(tmp_path).acquire()
        assert info.value.exit_code == 6
        assert f"another r2med process (pid {holder.pid}) is using {tmp_path}" in str(info.value)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with DirectoryLock(tmp_path) as lock:
        lock.acquire()
        assert (tmp_path / ".r2med.lock").read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / ".r2med.lock").exists()
