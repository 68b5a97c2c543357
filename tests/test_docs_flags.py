"""The docs cannot name a flag a command does not have: every ``r2med COMMAND ... --flag`` written in README.md and
docs/*.md (commands in code blocks and in inline code) is checked against that command's parser, and the option
list of every command (docs/options.md) is generated from the declarations (tests/test_options.py)."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from r2med.cli import build_parser

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_COMMAND = re.compile(r"\br2med(?:\s+-[qv])*\s+([a-z]+)(?=\s|$)([^`#]*)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _commands(text: str):
    """``(command, flags)`` of every r2med command line of a page (continuation lines joined); a line whose comment
    says ``on purpose`` (a transcript of a misspelt flag, with r2med's answer below it) is not checked."""
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        if re.search(r"#[^`]*\bon purpose\b", line):
            continue
        for part in re.split(r"&&|;|\|", line):  # one command of a shell line at a time
            for match in _COMMAND.finditer(part):
                yield match.group(1), _FLAG.findall(match.group(2))


def _parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return parser, sub.choices


def _options(parser) -> set[str]:
    found = {s for action in parser._actions for s in action.option_strings}
    for action in parser._actions:  # nested subcommands (r2med datasets download, r2med models list)
        if action.__class__.__name__ == "_SubParsersAction":
            for child in action.choices.values():
                found |= _options(child)
    return found


def test_the_pattern_finds_commands_and_flags():
    text = ("run `r2med run --retriever bm25 --k1 1.2` then\n```\n$ r2med -q rerank --run bm25 \\\n  --top-k 10 # --x\n"
            "$ r2med datasets sample s && r2med run --config p.toml | head --lines 3\n```")
    assert list(_commands(text)) == [("run", ["--retriever", "--k1"]), ("rerank", ["--run", "--top-k"]),
                                     ("datasets", []), ("run", ["--config"])]


def _missing(text: str) -> list[str]:
    top, commands = _parsers()
    common = {s for action in top._actions for s in action.option_strings}  # -q, -v, --version
    missing = []
    for command, flags in _commands(text):
        if command not in commands:
            continue  # prose such as "r2med is ..."
        valid = _options(commands[command]) | common
        missing += [f"r2med {command} {flag}" for flag in flags if flag not in valid]
    return sorted(set(missing))


def test_a_flag_a_command_does_not_have_is_found():
    text = "`r2med run --data-dri x --k1 1` and `r2med rerank --window 5 --k1 2` and `r2med datasets download --revision x`"
    assert _missing(text + "\n$ r2med run --tasx 1  # (misspelt on purpose)\n") == _missing(text)
    assert _missing(text) == ["r2med datasets --revision", "r2med rerank --k1", "r2med run --data-dri"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_documented_flag_exists(page):
    missing = _missing(page.read_text(encoding="utf-8"))
    assert not missing, f"{page.name} names flags the commands do not have: {missing}"
