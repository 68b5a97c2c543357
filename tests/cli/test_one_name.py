"""One name for one thing across commands (issue 38): the output folder is --output and the datasets --tasks in every
command; the earlier spellings (expand's --out, leaderboard/report/compare's --datasets) still work, unlisted."""

from __future__ import annotations

import argparse
import re

import pytest

from r2med.cli import build_parser


def _commands(parser: argparse.ArgumentParser, name: str = "r2med") -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                found[f"{name} {sub}"] = subparser
                found.update(_commands(subparser, f"{name} {sub}"))
    return found


COMMANDS = _commands(build_parser())


def _listed(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}


def test_no_command_lists_an_earlier_spelling():
    listed = {name: _listed(parser) for name, parser in COMMANDS.items()}
    assert {name for name, options in listed.items() if "--out" in options or "--datasets" in options} == set()
    assert {name for name, options in listed.items() if "--output" in options} >= {
        "r2med run", "r2med expand", "r2med rerank", "r2med agent", "r2med reproduce", "r2med fuse", "r2med leaderboard",
        "r2med compare", "r2med report"}
    assert {name for name, options in listed.items() if "--tasks" in options} == {
        "r2med run", "r2med expand", "r2med rerank", "r2med agent", "r2med reproduce", "r2med leaderboard",
        "r2med compare", "r2med report"}
    assert re.findall(r"--out\b", COMMANDS["r2med expand"].format_help()) == []
    assert "--datasets" not in COMMANDS["r2med leaderboard"].format_help()


@pytest.mark.parametrize(("argv", "dest", "value"), [
    (["expand", "--method", "hyde", "--llm-model", "m", "--output", "o"], "out", "o"),
    (["expand", "--method", "hyde", "--llm-model", "m", "--out", "o"], "out", "o"),
    (["leaderboard", "--tasks", "a,b"], "datasets", ["a", "b"]),
    (["leaderboard", "--datasets", "a,b"], "datasets", ["a", "b"]),
    (["report", "--datasets", "a"], "datasets", ["a"]),
    (["compare", "x", "y", "--datasets", "a"], "tasks", ["a"]),
    (["evaluate", "--qrels", "q", "--run", "r", "--identical-ids", "drop"], "identical_ids", "drop"),
    (["evaluate", "--qrels", "q", "--run", "r", "--ignore-identical-ids"], "identical_ids", "drop"),
    (["evaluate", "--qrels", "q", "--run", "r"], "identical_ids", "keep"),
])
def test_the_earlier_spelling_still_works(argv, dest, value):
    args = build_parser().parse_args(argv)
    found = getattr(args, dest)
    assert (str(found) if dest == "out" else found) == value


def test_dropping_identical_ids_has_one_name_in_every_command():
    """evaluate said --ignore-identical-ids (a switch) where run and rerank say --identical-ids drop|keep."""
    listed = {name: _listed(parser) for name, parser in COMMANDS.items()}
    assert {name for name, options in listed.items() if "--ignore-identical-ids" in options} == set()
    assert {name for name, options in listed.items() if "--identical-ids" in options} >= {
        "r2med run", "r2med rerank", "r2med evaluate"}

