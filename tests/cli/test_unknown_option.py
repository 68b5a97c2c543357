"""An unknown option is reported by the subcommand that got it: the option and the closest of its options first, then
one line of usage (exit 2); a misspelt subcommand or choice gets argparse's "invalid choice" and the closest valid
one (issue 38, finding 4: not 27 lines of usage before the line that matters)."""

from __future__ import annotations

import pytest

TOP_USAGE = "usage: r2med [-h] [-q] [-v] [--version] COMMAND ... ('r2med --help' for the rest)\n"


def hint(command: str, positionals: str = "") -> str:
    return f"usage: r2med {command} [options]{positionals} ('r2med {command} --help' for the rest)\n"


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
    said = f"r2med {command}: error: unrecognized arguments: {unknown}; did you mean '{closest}'?"
    error, usage = result.err.splitlines()  # the error first, then one line of usage
    assert error == said
    assert usage.startswith(f"usage: r2med {command} [") and usage.endswith(f"('r2med {command} --help' for the rest)")
    assert list(tmp_path.iterdir()) == []  # nothing ran (no ./results)


def test_an_unknown_option_with_nothing_close_names_only_itself(cli):
    result = cli("leaderboard", "--zzzzzz")
    assert result.code == 2
    assert result.err == "r2med leaderboard: error: unrecognized arguments: --zzzzzz\n" + hint("leaderboard", " RESULT_DIR")


def test_a_missing_required_option_is_still_named_when_nothing_is_unknown(cli):
    result = cli("rerank", "--run", "r.trec")
    assert result.code == 2
    assert result.err == "r2med rerank: error: the following arguments are required: --reranker\n" + hint("rerank")


def test_an_unknown_option_before_the_subcommand_is_the_top_level_parsers(cli):
    result = cli("--verbsoe", "datasets", "list")
    assert result.code == 2
    assert result.err == "r2med: error: unrecognized arguments: --verbsoe; did you mean '--verbose'?\n" + TOP_USAGE


def test_a_misspelt_subcommand_is_an_invalid_choice_with_a_suggestion(cli):
    result = cli("rnu", "--data-dir", "x")
    assert result.code == 2
    assert result.err.startswith("r2med: error: argument COMMAND: invalid choice: 'rnu' (choose from 'evaluate', 'run',")
    assert result.err.endswith("; did you mean 'run'?\n" + TOP_USAGE)


def test_a_misspelt_choice_of_an_option_gets_the_closest_choice(cli):
    result = cli("leaderboard", "--with-paper", "--format", "cvs")
    assert result.code == 2
    assert result.err == ("r2med leaderboard: error: argument --format: invalid choice: 'cvs' "
                          "(choose from 'md', 'csv', 'latex', 'html', 'json'); did you mean 'csv'?\n" + hint("leaderboard", " RESULT_DIR"))


def test_a_short_usage_fits_on_one_line_and_follows_the_error(cli):
    result = cli("datasets", "download", "--zz")
    assert result.code == 2
    assert result.err.splitlines() == [
        "r2med datasets download: error: unrecognized arguments: --zz",
        "usage: r2med datasets download [-h] [-q] [-v] [--force] [--json] [names ...] "
        "('r2med datasets download --help' for the rest)",
    ]
