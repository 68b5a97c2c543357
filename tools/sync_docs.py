"""Run every command block of README.md and docs/*.md and compare (or, with ``--write``, rewrite) its printed output.

    python tools/sync_docs.py                    # check every page: prints each page's first difference, exit 1 on any
    python tools/sync_docs.py docs/agent.md -w   # run one page and write what the commands print into it
    python tools/sync_docs.py --list             # the blocks found, with how each is checked

What runs. A page's ```` ```bash ```` blocks (setup: each line runs, nothing is compared) and its ```` ```text ````
blocks that hold ``$ `` lines (a transcript: each ``$`` command runs, and what it prints, stdout and stderr together,
is compared with the lines below it up to the next ``$``). Commands run with bash, one after another, in a fresh
temporary directory per page that looks like a checkout (the repository's top-level entries linked into it, and
``../shared`` beside it), offline (``HF_HUB_OFFLINE=1``), with ``HOME`` in the same directory (so ``~/.cache/r2med``
is new for each page) and this checkout's ``src`` first on ``PYTHONPATH``. ``$?`` is the exit code of the command
before. A line ending in ``&`` starts a server: ``python tools/serve_gemma.py`` and ``python tools/agent_demo_server.py``
are started once per session (on the port the page names, waiting for the line they print) and shared by every
page; any other background command is stopped when its page ends (one with ``--port N`` is waited for until the port
accepts; in a transcript, what it printed by then is compared with the page). A setup line ``export NAME=VALUE`` or ``unset NAME`` changes the
environment of the page's later commands, as in the reader's shell. ``pip install``, ``python -m venv``, venv
activation and ``python -m pytest`` lines are not run (the test command would run this test again); a command whose comment says
``from the hub`` is only parsed (see Marks). Absolute ``/tmp/`` paths of the commands are moved into the page's
temporary directory, and shown back as ``/tmp/``.

Transcripts. ``...same...`` in a command stands for the rest of the command before it: ``X ...same... Y`` is the
previous command with its first words replaced by ``X``'s and ``Y`` appended. A page line ``...`` matches any number of
printed lines. A command whose comment says ``left out`` (``# (tables left out)``) runs, and its output is not
compared.

Marks. An HTML comment on the line before a block changes how it is checked: ``<!-- docs: help -->`` (needs the
hub, a GPU, an API key or a long run): each ``r2med`` command of the block is only parsed by r2med's own argument
parser, as ``--help`` would be (every option and choice must exist), nothing runs; ``<!-- docs: skip REASON -->``:
not checked at all (say why); ``<!-- docs: file NAME -->``: the block (any language) is a file the reader saves as
``NAME`` (the page says so): its text is written there, in the page's directory, before the commands after it run. A ``bash`` block written as a synopsis (``[--option ...]``, ``bm25|MODEL``) is not run.

Normalisation (stated, applied to the page and to what was printed before comparing): the machine's folders are
shown as a reader's would be (``<tmp>/home`` -> ``~``, anything else under ``<tmp>`` -> ``/tmp``); paths are
compared as printed, so a command given a relative path must print it relative (an absolute path into the page's
directory shows as ``/tmp/work/...`` and differs); progress-bar lines (``NN%|``, tqdm's rates)
are dropped; trailing blanks are cut; durations (``8.0 s``, ``65.4 s``, ``120 ms``) compare equal whatever their
value. Everything else, numbers included, must be the same.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: where the temporary directory is shown to live on a page
DISPLAY_TMP = "/tmp"
#: setup lines that are not run (installs, the test suite itself)
NOT_RUN = re.compile(r"^(pip3? install|python3? -m venv|\. \.venv/|source \.venv/|(HF_HUB_OFFLINE=1 )?python3? -m pytest)")
#: the servers shared by every page of a session: started once, on the port the page names
SHARED_SERVERS = ("python tools/serve_gemma.py", "python tools/agent_demo_server.py")
MARK = re.compile(r"^<!--\s*docs:\s*(help|skip|file)\b\s*(.*?)\s*-->\s*$")
#: a command whose comment says it reads the hub is only parsed (offline it cannot run)
HUB_ONLY = re.compile(r" #.*\bfrom the hub\b")
#: a usage synopsis, not a command: ``[--option ...]`` or alternatives ``bm25|MODEL``
SYNOPSIS = re.compile(r"\[--|\w\|\w")
#: a setup line that changes the environment of the commands after it (a shell's ``export``/``unset``)
ENVIRONMENT = re.compile(r"^(export|unset) [A-Za-z_][\w=' \"/:.;-]*$")
FENCE = re.compile(r"^```(\w*)\s*$")
PROGRESS = re.compile(r"\d+%\|| \d+(\.\d+)?(it|s|doc|q|pair|query|window|req)/s\]|\?(it|doc|q)/s\]")
DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?: ?)(?:s|ms|min)\b")
COMMAND_TIMEOUT = 300  # a command that blocks (a server started without &) fails the page, it does not hang it


@dataclass
class Step:
    """One command of a block: the page's lines for it (the ``$`` line and its continuations), what it runs, and
    (in a transcript) the page's output lines; ``compare`` is False for a command whose output is left out."""

    lines: list[str]
    command: str
    output: list[str] | None = None
    compare: bool = True


@dataclass
class Block:
    page: Path
    number: int  # 1-based among the page's checked blocks
    line: int  # 1-based line of the opening fence
    kind: str  # "bash" (setup) or "text" (transcript)
    mode: str  # "run", "help" or "skip"
    reason: str
    start: int  # index of the first line inside the fence
    end: int  # index of the closing fence
    steps: list[Step] = field(default_factory=list)
    text: str = ""  # a ``file`` block's content

    def where(self) -> str:
        return f"{self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page} block {self.number} (line {self.line})"


def pages() -> list[Path]:
    """README.md and every page of docs/ (docs/options.md is generated from the code, and has no commands)."""
    return [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "options.md")]


def _logical(lines: list[str], i: int) -> tuple[list[str], int]:
    """The lines of one command starting at ``i`` (a trailing ``\\`` continues it) and the index after them."""
    taken = [lines[i]]
    while taken[-1].rstrip().endswith("\\") and i + 1 < len(lines):
        i += 1
        taken.append(lines[i])
    return taken, i + 1


def _joined(lines: list[str], prefix: str = "") -> str:
    text = "\n".join(line[len(prefix):] if k == 0 and prefix else line for k, line in enumerate(lines))
    return re.sub(r"\\\n\s*", " ", text).strip()


def _left_out(command: str) -> bool:
    comment = command.split(" #", 1)[1] if " #" in command else ""
    return "left out" in comment


def parse(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        kind = fence.group(1)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        body = lines[i + 1:end]
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before.strip())
        transcript = kind == "text" and any(line.startswith("$ ") for line in body)
        if mark and mark.group(1) == "file":  # the page shows a file the reader saves: it is written, then used
            blocks.append(Block(page, len(blocks) + 1, i + 1, kind or "text", "file", mark.group(2), i + 1, end,
                                text="".join(f"{line}\n" for line in body)))
        elif kind == "bash" or transcript:
            mode, reason = (mark.group(1), mark.group(2)) if mark else ("run", "")
            if kind == "bash" and not mark and any(SYNOPSIS.search(line) for line in body):
                mode, reason = "skip", "a synopsis"
            block = Block(page, len(blocks) + 1, i + 1, "bash" if kind == "bash" else "text", mode, reason, i + 1, end)
            block.steps = _bash_steps(body) if kind == "bash" else _transcript_steps(body)
            blocks.append(block)
        i = end + 1
    return blocks


def _bash_steps(body: list[str]) -> list[Step]:
    steps, k = [], 0
    while k < len(body):
        taken, k = _logical(body, k)
        command = _joined(taken)
        if command and not command.startswith("#"):
            steps.append(Step(taken, command))
    return steps


def _transcript_steps(body: list[str]) -> list[Step]:
    steps: list[Step] = []
    k = 0
    while k < len(body) and not body[k].startswith("$ "):
        k += 1  # lines before the first command: prose inside the block, kept as they are
    while k < len(body):
        taken, k = _logical(body, k)
        output = []
        while k < len(body) and not body[k].startswith("$ "):
            output.append(body[k])
            k += 1
        command = _joined(taken, "$ ")
        steps.append(Step(taken, command, output, compare=not _left_out(command)))
    return steps


def expand_same(command: str, previous: str | None) -> str:
    """``X ...same... Y``: the previous command with its first words replaced by ``X``'s, ``Y`` appended.

    >>> expand_same("r2med agent --style search-o1 ...same... -q", "r2med agent --style search-r1 --data-dir d")
    'r2med agent --style search-o1 --data-dir d -q'
    >>> expand_same("r2med expand ...same...  # kept", "r2med expand --method hyde")
    'r2med expand --method hyde'
    """
    if "...same..." not in command or previous is None:
        return command
    code = command.split(" #", 1)[0]
    head, tail = (part.strip() for part in code.split("...same...", 1))
    before = shlex.split(previous.split(" #", 1)[0])
    new = shlex.split(head)
    return shlex.join(new + before[len(new):]) + (f" {tail}" if tail else "")


# ---------------------------------------------------------------------------------------------------- running
class Servers:
    """The servers shared by the pages of one session (by command line), stopped by ``stop_all``."""

    running: typing.ClassVar[dict[str, subprocess.Popen]] = {}

    @classmethod
    def start(cls, command: str, cwd: Path, env: dict[str, str], log: Path) -> str:
        key = command.split(" #", 1)[0].rstrip(" &")
        process = cls.running.get(key)
        if process is not None and process.poll() is None:
            return ""
        process = subprocess.Popen(["bash", "-c", f"exec {key}"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=log.open("ab"), text=True, start_new_session=True)
        first = process.stdout.readline() if process.stdout else ""  # the line each prints once it listens
        if process.poll() is not None or not first:
            raise RuntimeError(f"{key} did not start (exit {process.poll()}); see {log}")
        cls.running[key] = process
        return first

    @classmethod
    def stop_all(cls) -> None:
        for process in cls.running.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        cls.running.clear()


@contextlib.contextmanager
def sandbox() -> Iterator[tuple[Path, dict[str, str]]]:
    """A temporary directory that looks like a checkout (``<tmp>/work``, ``../shared`` beside it) and the environment
    the commands run with."""
    tmp = Path(tempfile.mkdtemp(prefix="r2med-docs-"))
    work, home = tmp / "work", tmp / "home"
    for folder in (work, home, tmp / "tmp"):
        folder.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git", ".venv", "results") and not entry.name.startswith(".pytest"):
            (work / entry.name).symlink_to(entry)
    shared = (REPO.parent / "shared").resolve()
    if shared.is_dir():
        (tmp / "shared").symlink_to(shared)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("R2MED_", "PYTEST_")) and not k.lower().endswith("_proxy")}  # (a page sets its own)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(REPO / "src"),
        HF_HUB_OFFLINE="1", HOME=str(home), HF_HOME=os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface")),
        COLUMNS="120", TERM="dumb", PYTHONUNBUFFERED="1", PYTHONHASHSEED="0",
    )
    try:
        yield tmp, env
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sandboxed(command: str, tmp: Path) -> str:
    """``command`` with each absolute ``/tmp/...`` path moved into the page's temporary directory (``<tmp>/tmp/...``),
    so a page's ``--output /tmp/res2`` neither writes outside it nor finds what an earlier run left there.

    >>> sandboxed("r2med run --output /tmp/res2 && ls /tmp/res2", Path("/x"))
    'r2med run --output /x/tmp/res2 && ls /x/tmp/res2'
    """
    return re.sub(r"(?<![\w./-])/tmp/", f"{tmp}/tmp/", command)


def displayed(text: str, tmp: Path) -> list[str]:
    """What was printed, as a page shows it (see the module docstring)."""
    # only the machine's folders are renamed: HOME (~) and the temporary directory (/tmp). A path the command was
    # given relative (results, ../shared/data/scifact) must be printed relative: an absolute one shows here as
    # /tmp/work/... or as the checkout's real path, and differs from the page (issue 38: paths are compared too)
    for real, shown in ((f"{tmp}/home", "~"), (f"{tmp}/tmp", DISPLAY_TMP), (str(tmp), DISPLAY_TMP)):
        text = text.replace(real, shown)
    out: list[str] = []
    after_bar = False
    for line in text.split("\n"):
        parts = [p for p in line.split("\r") if p.strip()]
        kept = [p for p in parts if not PROGRESS.search(p)]
        if not kept and (parts or "\r" in line or line.strip() != line):
            if out and not out[-1]:
                out.pop()  # the blank line a bar was drawn after
            after_bar = True
            continue  # a line of progress bars only (or a bar cleared with blanks)
        if after_bar and not kept:
            continue
        after_bar = False
        out.append((kept[-1] if kept else "").rstrip())
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:  # (a progress bar cleared with a newline)
        out.pop(0)
    return out


def comparable(line: str) -> str:
    return DURATION.sub("<time>", line.rstrip())


def first_difference(page: list[str], got: list[str]) -> tuple[int, str, str] | None:
    """``None`` when ``got`` matches the page's lines (``...`` matching any lines, after ``comparable``), else the
    1-based line of the output, the page's line and the printed one where they first differ."""
    want = [line for line in page if not PROGRESS.search(line)]
    while want and not want[-1].strip():
        want.pop()

    def match(i: int, j: int) -> int:  # -1: match; else the furthest output line reached
        if i == len(want):
            return -1 if j == len(got) else j
        if want[i].strip() == "...":
            best = j
            for k in range(j, len(got) + 1):
                reached = match(i + 1, k)
                if reached == -1:
                    return -1
                best = max(best, reached)
            return best
        if j < len(got) and comparable(want[i]) == comparable(got[j]):
            return match(i + 1, j + 1)
        return j

    reached = match(0, 0)
    if reached == -1:
        return None
    page_line = next((w for w in want if w.strip() != "..."), "") if reached == 0 else None
    # the page line at the point of difference: the first that was not matched in order
    i = j = 0
    while i < len(want) and j < len(got) and want[i].strip() != "..." and comparable(want[i]) == comparable(got[j]):
        i, j = i + 1, j + 1
    page_line = want[i] if i < len(want) else "(end of the page's output)"
    return reached + 1, page_line, got[reached] if reached < len(got) else "(end of the printed output)"


@dataclass
class Outcome:
    block: Block
    step: Step | None = None
    problem: str = ""
    printed: list[str] | None = None


def _substituted(command: str) -> str:
    """``command`` with each ``$(...)`` (nested parentheses and quotes included) replaced by one word, ``SUBST``, as
    the shell gives one word for it.

    >>> _substituted('r2med run --retriever $(python -c "print(f(1))") -q')
    'r2med run --retriever SUBST -q'
    """
    out, i = [], 0
    while i < len(command):
        if command.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(command) and depth:
                depth += {"(": 1, ")": -1}.get(command[j], 0)
                j += 1
            out.append("SUBST")
            i = j
        else:
            out.append(command[i])
            i += 1
    return "".join(out)


def parse_only(command: str) -> str:
    """``""`` when every ``r2med`` command of the line parses with r2med's own parser (``--help``'s check), else why."""
    from r2med.cli import build_parser

    problems = []
    for part in re.split(r"&&|\|\||;|\|", _substituted(command.split(" #", 1)[0])):
        words = shlex.split(part)
        while words and re.match(r"^\w+=", words[0]):
            words = words[1:]
        if not words or words[0] != "r2med":
            continue
        parser = build_parser()
        with contextlib.redirect_stderr(sys.stdout), contextlib.redirect_stdout(open(os.devnull, "w")):
            try:
                parser.parse_args(words[1:])
            except SystemExit as exc:
                if exc.code:
                    problems.append(f"`{shlex.join(words)}` does not parse (exit {exc.code})")
    return "; ".join(problems)


def _wait_for_port(command: str, limit: float = 60.0) -> None:
    """A background command with ``--port N`` (a server): wait until 127.0.0.1:N accepts (at most ``limit`` s);
    any other: a second."""
    port = re.search(r"--port[ =](\d+)", command)
    if not port:
        time.sleep(1)
        return
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(port.group(1))), timeout=1):
            return
        time.sleep(0.2)


def _set_environment(command: str, env: dict[str, str]) -> None:
    """Apply a setup line ``export A=1 B=2`` or ``unset A B`` (``;``-separated, each a word list) to ``env``.

    >>> env = {"HF_HUB_OFFLINE": "1"}; _set_environment("unset HF_HUB_OFFLINE; export X=a Y='b c'", env); env
    {'X': 'a', 'Y': 'b c'}
    """
    for part in command.split(";"):
        words = shlex.split(part)
        if not words:
            continue
        for word in words[1:]:
            if words[0] == "unset":
                env.pop(word, None)
            else:
                name, _, value = word.partition("=")
                env[name] = value


def run_page(page: Path, *, log: Path | None = None) -> list[Outcome]:
    """Run the page's blocks in order; one Outcome per compared step (``problem`` empty when it matches) and per
    failure."""
    blocks = parse(page)
    outcomes: list[Outcome] = []
    if not any(b.mode != "skip" for b in blocks):
        return outcomes
    with sandbox() as (tmp, env):
        work = tmp / "work"
        log = log or tmp / "servers.log"
        background: list[subprocess.Popen] = []
        last_rc, previous = 0, None
        try:
            for block in blocks:
                if block.mode == "skip":
                    continue
                if block.mode == "file":
                    target = work / block.reason
                    if target.is_symlink():  # a file of the checkout linked in: the page's copy replaces it here only
                        target.unlink()
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(block.text, encoding="utf-8")
                    continue
                for step in block.steps:
                    command = expand_same(step.command, previous)
                    previous = command
                    if block.mode == "help":
                        problem = parse_only(command)
                        outcomes.append(Outcome(block, step, problem))
                        continue
                    if NOT_RUN.match(command):
                        continue
                    if block.kind == "bash" and ENVIRONMENT.match(command.split(" #", 1)[0].rstrip()):  # the reader's shell keeps it: so do we
                        _set_environment(command.split(" #", 1)[0], env)
                        continue
                    code = sandboxed(command.split(" #", 1)[0].rstrip(), tmp)
                    if HUB_ONLY.search(command):  # needs the hub: only parsed, as --help would
                        outcomes.append(Outcome(block, step, parse_only(command)))
                        continue
                    if code.endswith("&"):
                        if code.startswith(SHARED_SERVERS):
                            try:
                                Servers.start(code, work, env, log)
                            except RuntimeError as exc:
                                outcomes.append(Outcome(block, step, str(exc)))
                                return outcomes
                        else:
                            said = tmp / f"background-{len(background)}.log"
                            with said.open("wb") as sink:
                                background.append(subprocess.Popen(["bash", "-c", code[:-1]], cwd=work, env=env,
                                                                   stdout=sink, stderr=subprocess.STDOUT,
                                                                   start_new_session=True))
                            _wait_for_port(code)
                            if step.output is not None and step.compare:  # a transcript: what it said once listening
                                deadline = time.monotonic() + 10
                                while "\n" not in said.read_text(errors="replace") and time.monotonic() < deadline:
                                    time.sleep(0.1)
                                lines = displayed(said.read_text(errors="replace"), tmp)
                                diff = first_difference(step.output, lines)
                                outcomes.append(Outcome(block, step, "" if diff is None else (
                                    f"output line {diff[0]} differs:\n  page: {diff[1]!r}\n  got:  {diff[2]!r}"), lines))
                        continue
                    try:
                        done = subprocess.run(["bash", "-c", f"(exit {last_rc}); {code}"], cwd=work, env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                              timeout=COMMAND_TIMEOUT, check=False)
                        printed, last_rc = done.stdout, done.returncode
                    except subprocess.TimeoutExpired as exc:
                        printed, last_rc = f"{exc.stdout or ''}\n(timed out after {COMMAND_TIMEOUT} s)", 124
                    lines = displayed(printed, tmp)
                    if step.output is None:  # setup: it must work
                        if last_rc != 0 and not code.startswith("echo"):
                            outcomes.append(Outcome(block, step, f"setup command exited {last_rc}: "
                                                                 f"{lines[-1] if lines else '(nothing printed)'}", lines))
                            return outcomes
                        continue
                    if not step.compare:
                        outcomes.append(Outcome(block, step, "", None))
                        continue
                    diff = first_difference(step.output, lines)
                    problem = "" if diff is None else (f"output line {diff[0]} differs:\n  page: {diff[1]!r}\n"
                                                       f"  got:  {diff[2]!r}")
                    outcomes.append(Outcome(block, step, problem, lines))
        finally:
            for process in background:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
    return outcomes


def elided(page: list[str], printed: list[str]) -> list[str]:
    """``printed`` as the page shows it: where the page has one ``...`` line, as many printed lines before and after
    it as the page had, and the ``...`` between them (more than one ``...``: all of ``printed``).

    >>> elided(["{", "  a", "...", "}"], ["{", "  b", "  c", "  d", "}"])
    ['{', '  b', '...', '}']
    """
    marks = [i for i, line in enumerate(page) if line.strip() == "..."]
    if len(marks) != 1:
        return list(printed)
    head, tail = marks[0], len([line for line in page[marks[0] + 1:] if line.strip()])
    if head + tail >= len(printed):
        return list(printed)
    return [*printed[:head], page[marks[0]], *printed[len(printed) - tail:]]


def rewrite(page: Path, outcomes: list[Outcome]) -> int:
    """Write what the commands printed into the page's transcripts (a ``...`` line of the page is kept where it
    still matches); returns how many outputs changed."""
    lines = page.read_text(encoding="utf-8").splitlines()
    changed = 0
    by_block: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.step is not None and outcome.printed is not None and outcome.block.kind == "text":
            by_block.setdefault(outcome.block.start, []).append(outcome)
    for start in sorted(by_block, reverse=True):
        block = by_block[start][0].block
        new_body: list[str] = []
        done = {id(o.step): o for o in by_block[start]}
        body = lines[block.start:block.end]
        head = []
        for line in body:
            if line.startswith("$ "):
                break
            head.append(line)
        new_body.extend(head)
        for step in block.steps:
            new_body.extend(step.lines)
            outcome = done.get(id(step))
            if outcome is None or outcome.problem == "" or outcome.printed is None:
                new_body.extend(step.output or [])
                continue
            changed += 1
            new_body.extend(elided(step.output or [], outcome.printed))
            if step.output and not step.output[-1].strip():  # keep the blank line between commands
                new_body.append("")
        lines[block.start:block.end] = new_body
    if changed:
        page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def report(outcomes: list[Outcome]) -> list[str]:
    return [f"{o.block.where()}, `{o.step.command if o.step else ''}`: {o.problem}" for o in outcomes if o.problem]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path, help="pages to run (default: README.md and docs/*.md)")
    parser.add_argument("-w", "--write", action="store_true", help="write what the commands print into the pages")
    parser.add_argument("--list", action="store_true", help="list the blocks and how each is checked; run nothing")
    args = parser.parse_args(argv)
    chosen = [p.resolve() for p in args.pages] or pages()
    if args.list:
        for page in chosen:
            for block in parse(page):
                print(f"{block.where()}: {block.kind}, {block.mode}{f' ({block.reason})' if block.reason else ''}, "
                      f"{len(block.steps)} commands")
        return 0
    failed = 0
    try:
        for page in chosen:
            started = time.monotonic()
            outcomes = run_page(page)
            problems = report(outcomes)
            if args.write:
                changed = rewrite(page, outcomes)
                print(f"{page.relative_to(REPO)}: {changed} outputs rewritten ({time.monotonic() - started:.0f} s)")
                problems = [p for p in problems if "differs" not in p]
            else:
                print(f"{page.relative_to(REPO)}: {'ok' if not problems else f'{len(problems)} differences'} "
                      f"({time.monotonic() - started:.0f} s)")
            for problem in problems:
                print(f"  {problem}")
            failed += bool(problems)
    finally:
        Servers.stop_all()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
