"""The expansion folders under ``$R2MED_HOME/expansions`` (written by ``r2med expand`` and ``r2med agent``): checked
writable before the first request, one writer at a time (the refused one sends nothing and changes nothing), a lock
that dies with a writer killed by SIGKILL, and an agent's stored result reused only while its folder is intact."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_server import HostileServer

from conftest import DATA

SRC = Path(__file__).resolve().parents[2] / "src"
#: command -> (its arguments, its expansion folder under $R2MED_HOME/expansions/Biology)
COMMANDS = {
    "expand": (lambda url, out: ["expand", "--method", "hyde", "--max-tokens", "16", "--base-url", url], "hyde/m"),
    "agent": (lambda url, out: ["agent", "--style", "search-r1", "--chat-template", "chatml", "--max-turns", "2",
                                "--base-url", url, "--output", out], "search-r1/m"),
}


@pytest.fixture
def data(tmp_path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(DATA / "tiny", folder / "Biology")
    return folder


@pytest.fixture(scope="module")
def server():
    with HostileServer() as running:
        yield running


def _argv(command: str, url: str, data: Path, out: Path) -> list[str]:
    return [*COMMANDS[command][0](url, str(out)), "--llm-model", "m", "--data-dir", str(data), "--timeout", "5",
            "--max-retries", "0"]


#: GETs of what a server is (its models, its context), not of work: the agent's result key needs them
DESCRIPTION_PATHS = ("/v1/models", "/props")


def _sent(server: HostileServer, behaviour: str) -> int:
    """The requests of work (not the server's description: ``DESCRIPTION_PATHS``) sent to ``behaviour``."""
    return sum(1 for seen, path in server.log if seen == behaviour and path not in DESCRIPTION_PATHS)


def _completions(server: HostileServer) -> int:
    """The paid requests the server got (``/tokenize``, the agent's tokenizer, is not one)."""
    return sum(1 for _, path in server.log if path.endswith("completions"))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _unwritable_folder(parent: Path) -> Path:
    """A folder in which nothing can be created: read-only (0555), or as root (who may write there anyway) a link to
    a sysfs folder, which refuses every new file."""
    folder = parent / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder, Path("/sys/fs")):
        try:
            fd, probe = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(fd)
        os.unlink(probe)
    pytest.skip("no folder here refuses new files")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unwritable_expansion_folder_is_found_before_the_first_request(cli, server, data, tmp_path, isolated_home,
                                                                          command):
    (isolated_home / "expansions").symlink_to(_unwritable_folder(tmp_path))
    before = len(server.log)
    result = cli(*_argv(command, server.url("ok"), data, tmp_path / "out"))
    assert "Traceback" not in result.err, result.err
    # the agent reads the server's description (its context length keys the result) before its folder is checked;
    # nothing that generates or counts tokens is sent
    sent = [path for _, path in server.log[before:] if path not in DESCRIPTION_PATHS]
    assert sent == [], "requests were sent to a run that could not keep their answers"
    assert result.code == 2, result.err
    folder = isolated_home / "expansions" / "Biology" / COMMANDS[command][1]
    assert f"r2med: error: the {'agent' if command == 'agent' else 'folder of expand/hyde'}" in result.err
    assert f"{folder}: cannot create files in " in result.err, result.err
    assert "set R2MED_HOME" in result.err


def _hold(folder: Path) -> subprocess.Popen:
    """Another process that holds ``folder``'s lock (as a running writer does) until it is killed."""
    code = ("import sys; from r2med.io.lock import DirectoryLock; lock = DirectoryLock(sys.argv[1]); lock.acquire(); "
            "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(SRC)}, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("command", COMMANDS)
def test_a_second_writer_is_refused_before_it_touches_a_file(cli, server, data, tmp_path, isolated_home, command):
    first = _argv(command, server.url("ok"), data, tmp_path / "out-1")
    assert cli(*first).code == 0
    folder = isolated_home / "expansions" / "Biology" / COMMANDS[command][1]
    holder = _hold(folder)  # the first writer, still at work
    try:
        stored = _files(folder)
        assert "query_with_hydoc.jsonl" in stored
        # a second run of the same LLM name and R2MED_HOME, another --output, whose server fails every request
        second = cli(*_argv(command, server.url("500"), data, tmp_path / "out-2"))
        assert "Traceback" not in second.err, second.err
        assert second.code == 6, second.err
        assert f"another r2med process (pid {holder.pid}) is using {folder}" in second.err
        assert "this run changed nothing" in second.err
        assert _sent(server, "500") == 0
        assert _files(folder) == stored  # byte for byte: nothing cut, removed, replaced or added
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert holder.returncode == -signal.SIGKILL
    assert (folder / ".r2med.lock").exists()  # the killed writer's lock file stays: only a name, no lock
    before = _completions(server)
    again = cli(*first)
    assert again.code == 0, again.err
    assert _completions(server) == before  # every answer was kept
    assert {k: v for k, v in _files(folder).items() if k != ".r2med.lock"} == \
           {k: v for k, v in stored.items() if k != ".r2med.lock"}


def test_a_rerun_of_the_agent_checks_its_expansion_folder(cli, server, data, tmp_path, isolated_home):
    argv = _argv("agent", server.url("ok"), data, tmp_path / "out")
    assert cli(*argv).code == 0
    folder = isolated_home / "expansions" / "Biology" / "search-r1" / "m"
    expansion, trajectories = folder / "query_with_hydoc.jsonl", folder / "trajectories.jsonl"
    written = {path: path.read_bytes() for path in (expansion, trajectories)}
    assert len(written[expansion].splitlines()) == 3
    sent = _completions(server)
    for damage in (lambda: expansion.write_bytes(written[expansion].splitlines(keepends=True)[0]),
                   lambda: trajectories.write_text('{"error": "replaced"}\n'),
                   lambda: expansion.unlink()):
        damage()
        rerun = cli(*argv)
        assert rerun.code == 0, rerun.err
        assert "the stored result" in rerun.err and "is not reused" in rerun.err, rerun.err
        assert {path: path.read_bytes() for path in written} == written  # made again, from the response cache
        assert _completions(server) == sent
    untouched = cli(*argv)  # intact: reused, without a word
    assert untouched.code == 0 and "not reused" not in untouched.err
