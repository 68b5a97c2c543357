"""Files and directories that cannot be used give ``r2med: error: ...`` with an exit code, never a traceback."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

import pytest

from conftest import DATA


@pytest.fixture
def unwritable_dir(tmp_path) -> Path:
    """A directory in which nothing can be created (a read-only directory; as root, /sys where it refuses)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder, Path("/sys")):
        try:
            fd, probe = tempfile.mkstemp(dir=candidate)
        except OSError:
            yield candidate
            break
        os.close(fd)
        os.unlink(probe)
    else:
        pytest.skip("no unwritable directory here (root without a read-only /sys)")
    folder.chmod(0o755)


def _no_traceback(result):
    assert "Traceback" not in result.err, result.err


def test_output_that_is_a_file_or_under_a_file_is_a_usage_error(cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = cli("run", "--data-dir", DATA / "tiny", "--output", afile, "--no-cache")
    _no_traceback(result)
    assert result.code == 2
    assert (f"r2med: error: --output {afile}: {afile} is a file, not a directory; pass a directory "
            "(it is created if missing)") in result.err
    result = cli("run", "--data-dir", DATA / "tiny", "--output", afile / "sub", "--no-cache")
    _no_traceback(result)
    assert result.code == 2
    assert (f"r2med: error: --output {afile / 'sub'}: {afile} is a file, so no directory can be made under it; "
            "pass a directory (it is created if missing)") in result.err
    rerank = cli("rerank", "--run", "bm25", "--reranker", "bge-reranker", "--data-dir", DATA / "tiny", "--output", afile)
    assert rerank.code == 2 and f"--output {afile}: {afile} is a file" in rerank.err
    assert afile.read_text() == "x"


def test_unwritable_output_is_a_usage_error(cli, unwritable_dir):
    out = unwritable_dir / "out"
    result = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--no-cache")
    _no_traceback(result)
    assert result.code == 2
    assert f"r2med: error: --output {out}: cannot create files in {unwritable_dir} (" in result.err
    assert "pass a directory (it is created if missing)" in result.err


def test_a_home_that_is_a_file_or_unwritable_runs_without_the_cache(cli, tmp_path, monkeypatch, unwritable_dir):
    afile = tmp_path / "home-file"
    afile.write_text("x")
    for home, problem in ((afile, f"{afile} is a file, not a directory"),
                          (unwritable_dir / "home", f"cannot create files in {unwritable_dir} (")):
        monkeypatch.setenv("R2MED_HOME", str(home))
        out = tmp_path / f"out-{home.name}"
        result = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--json")
        _no_traceback(result)
        assert result.code == 0, result.err
        assert f"r2med: WARNING: R2MED_HOME {home}: {problem}" in result.err
        assert ("; running without the cache (indexes, embeddings, reranker scores and LLM responses are neither "
                "reused nor saved); set R2MED_HOME to a writable directory") in result.err
        assert (out / "base retriever" / "bm25" / "tiny.json").is_file()
    assert afile.read_text() == "x"


def test_fuse_output_that_is_a_directory_is_a_usage_error(cli, tmp_path):
    run = DATA / "tiny_run.trec"
    result = cli("fuse", run, run, "-o", tmp_path)
    _no_traceback(result)
    assert result.code == 2
    assert (f"r2med: error: --output {tmp_path} is a directory; name the fused run file, "
            f"e.g. --output {tmp_path / 'fused.run'}") in result.err
    afile = tmp_path / "afile"
    afile.write_text("x")
    under = cli("fuse", run, run, "-o", afile / "fused.run")
    assert under.code == 2 and f"--output {afile / 'fused.run'}: {afile} is a file, not a directory" in under.err
    assert cli("fuse", run, run, "-o", tmp_path / "new" / "fused.run").code == 0


@pytest.mark.parametrize("exc,code,message", [
    (PermissionError(errno.EACCES, "Permission denied", "/data/x.json"), 6, "Permission denied: /data/x.json"),
    (OSError(errno.ENOSPC, "No space left on device", "/out/a.run"), 6, "No space left on device: /out/a.run"),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/tmp"), 6, "Is a directory: /tmp"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/gone"), 4, "No such file or directory: /gone"),
    (OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"), 6, "Invalid cross-device link: /a -> /b"),
])
def test_an_unexpected_os_error_is_a_clean_error(cli, monkeypatch, exc, code, message):
    import r2med.cli.datasets as module

    def fail(args):
        raise exc

    monkeypatch.setattr(module, "cmd_datasets_list", fail)
    result = cli("datasets", "list")
    assert result.code == code
    assert result.err == f"r2med: error: {message} (run with -v for the traceback)\n"
    verbose = cli("-v", "datasets", "list")
    assert verbose.code == code
    assert "Traceback (most recent call last)" in verbose.err and f"r2med: error: {message}\n" in verbose.err


def test_a_real_bug_still_raises(cli, monkeypatch):
    import r2med.cli.datasets as module

    def bug(args):
        raise KeyError("oops")

    monkeypatch.setattr(module, "cmd_datasets_list", bug)
    with pytest.raises(KeyError):
        cli("datasets", "list")


@pytest.fixture
def full_disk(monkeypatch):
    """Every file r2med writes atomically lands on a full disk: its temporary file is made as usual, but its writes go
    to /dev/full, where the kernel answers every write with ENOSPC (an OSError that names no file)."""
    import types

    from r2med.io import atomic

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")

    def mkstemp(**kwargs):
        fd, name = tempfile.mkstemp(**kwargs)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)
        return fd, name

    monkeypatch.setattr(atomic, "tempfile", types.SimpleNamespace(mkstemp=mkstemp))


def test_a_full_disk_names_the_file(cli, tmp_path, full_disk):
    out = tmp_path / "out"
    result = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--no-cache")
    _no_traceback(result)
    assert result.code == 6
    match = re.fullmatch(r"r2med: error: No space left on device: (.+) \(run with -v for the traceback\)\n",
                         result.err.splitlines(keepends=True)[-1])
    assert match, result.err
    named = Path(match.group(1))
    assert named.parent.is_relative_to(out) and named.suffix in (".json", ".jsonl", ".run")
    assert not named.exists()  # never half written
    assert not [p for p in out.rglob("*.tmp")]  # and its temporary file removed


def test_a_full_disk_under_the_response_cache_names_it(tmp_path):
    from r2med.llm.cache import ResponseCache

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    cache = ResponseCache(tmp_path / "generations.jsonl")
    cache._handle = open("/dev/full", "wb")  # noqa: SIM115 - the cache closes it
    with pytest.raises(OSError) as raised:
        cache.append("k", {"text": "a paid answer"})
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "generations.jsonl")
    assert "k" not in cache
    cache.append("k", {"text": "a paid answer"})  # space again: the file is reopened and the answer kept
    cache.close()
    assert ResponseCache(tmp_path / "generations.jsonl").get("k") == {"text": "a paid answer"}
