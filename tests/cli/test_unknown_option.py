"""An unknown option is reported by the subcommand that got it: its usage line, the option, the closest of its
options (exit 2); a misspelt subcommand or choice gets argparse's "invalid choice" and the closest valid one."""

from __future__ import annotations

import pytest

TOP_USAGE = "usage: r2med [-h] [-q] [-v] [--version] COMMAND ..."


@pytest.mark.parametrize(("argv", "command", "unknown", "closest"), [
    (["run", "--data-dri", "x"], "run", "--data-dri x", "--data-dir"),
    (["run", "--retriever", "bm25", "--data-dri=x"], "run", "--data-dri=x", "--data-dir"),
    (["rerank", "--run", "r.trec", "--reranker", "monobert", "--topk", "3"], "rerank", "--topk 3", "--top-k"),
    # a misspelt required option is named as unknown, not as missing
    (["rerank", "--run", "r.trec", "--rerankr", "monobert"], "rerank", "--rerankr monobert", "--reranker"),
    (["expand", "--method", "hyde", "--llm-modl", "m"], "expand", "--llm-modl m", "--llm-model"),
    (["agent", "--style", "search-o1", "--llm-model", "m", "--base-url", "http://127.0.0.1:9", "--max-turnz", "3"],
     "agent", "--max-turnz 3", "--max-turns"),
    (["datasets", "list", "--jsn"], "datasets list", "--jsn", "--json"),
])
def test_unknown_option_names_the_subcommand_and_its_closest_option(cli, tmp_path, monkeypatch, argv, command, unknown,
                                                                   closest):
    monkeypatch.chdir(tmp_path)
    result = cli(*argv)
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"usage: r2med {command} [-h]")
    assert TOP_USAGE not in result.err
    said = f"r2med {command}: error: unrecognized arguments: {unknown}; did you mean '{closest}'?\n"
    assert result.err.endswith(said)
    assert list(tmp_path.iterdir()) == []  # nothing ran (no ./results)


def test_an_unknown_option_with_nothing_close_names_only_itself(cli):
    result = cli("leaderboard", "--zzzzzz")
    assert result.code == 2
    assert result.err.startswith("usage: r2med leaderboard [-h]")
    assert result.err.endswith("r2med leaderboard: error: unrecognized arguments: --zzzzzz\n")


def test_a_missing_required_option_is_still_named_when_nothing_is_unknown(cli):
    result = cli("rerank", "--run", "r.trec")
    assert result.code == 2
    assert result.err.startswith("usage: r2med rerank [-h]")
    assert result.err.endswith("r2med rerank: error: the following arguments are required: --reranker\n")


def test_an_unknown_option_before_the_subcommand_is_the_top_level_parsers(cli):
    result = cli("--verbsoe", "datasets", "list")
    assert result.code == 2
    assert result.err.startswith(TOP_USAGE)
    assert result.err.endswith("r2med: error: unrecognized arguments: --verbsoe; did you mean '--verbose'?\n")


def test_a_misspelt_subcommand_is_an_invalid_choice_with_a_suggestion(cli):
    result = cli("rnu", "--data-dir", "x")
    assert result.code == 2
    assert result.err.startswith(TOP_USAGE)
    assert "r2med: error: argument COMMAND: invalid choice: 'rnu' (choose from 'evaluate', 'run'," in result.err
    assert result.err.endswith("; did you mean 'run'?\n")


def test_a_misspelt_choice_of_an_option_gets_the_closest_choice(cli):
    result = cli("leaderboard", "--with-paper", "--format", "cvs")
    assert result.code == 2
    assert result.err.startswith("usage: r2med leaderboard [-h]")
    assert result.err.endswith("r2med leaderboard: error: argument --format: invalid choice: 'cvs' "
                               "(choose from 'md', 'csv', 'latex', 'html', 'json'); did you mean 'csv'?\n")
