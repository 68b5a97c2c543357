"""Numbers typed on the command line or inline have the grammar of files (``r2med.numbers``), never Python's.

Left from issue 35 (finding 2 fixed it for files): ``r2med run --retriever bm25:k1=0_9`` ran BM25 with k1 = 9.0
and stored it as ``bm25-k1_9-b_0.4`` (exit 0); ``k1=١`` (an Arabic-Indic one) ran with k1 = 1.0; ``--top-k 1_0``
kept 10 documents. Each is now a usage error (exit 2) that says what is wrong and what to write, before any work.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from r2med.numbers import NumberError, parse_decimal, parse_integer
from r2med.options import Option, read_number

@pytest.fixture
def sample(tmp_path, cli):
    """The packaged sample (``r2med datasets sample``) in ``tmp_path/r2med-sample``."""
    assert cli("datasets", "sample", tmp_path / "r2med-sample").code == 0
    return tmp_path / "r2med-sample"


FLOAT_HINT = "write ASCII digits with an optional sign, '.' and exponent, e.g. 0.9, -12, 1.5e-3"
INT_HINT = "write ASCII digits with an optional sign, e.g. 0, 1, 2"


@pytest.mark.parametrize(("args", "says"), [
    (["run", "--retriever", "bm25:k1=0_9"], f"k1=0_9: expected a number, got '0_9' (it holds '_'; {FLOAT_HINT})"),
    (["run", "--retriever", "bm25:k1=\u0661"],
     f"expected a number, got '\u0661' (it holds the non-ASCII character '\u0661' (U+0661); {FLOAT_HINT})"),
    (["run", "--k1", "\uff10.9"], "(it holds the non-ASCII character '\uff10' (U+FF10);"),
    (["run", "--k1", "nan"], "argument --k1: expected a number, got 'nan' (it is not finite; write a finite number"),
    (["run", "--retriever", "bm25", "--retriever", "bm25-lucene", "--fuse", "rrf:weights=1,0_5"],
     "expected comma-separated numbers, got '1,0_5' ('0_5': it holds '_';"),
    (["run", "--top-k", "1_0"], f"argument --top-k: expected a whole number, got '1_0' (it holds '_'; {INT_HINT})"),
    (["compare", "a", "b", "--seed", "1_0"], "argument --seed: expected a whole number, got '1_0'"),
    (["compare", "a", "b", "--confidence", "0_95"], "argument --confidence: expected a number, got '0_95'"),
    (["reproduce", "bm25", "--tolerance", "1_0"], "argument --tolerance: expected a number, got '1_0'"),
    (["serve", "--port", "\u0668\u0660"], "argument --port: expected a port number, got '\u0668\u0660' (it holds"),
    (["serve", "--body-timeout", "3_0"], "argument --body-timeout: expected a number of seconds, got '3_0'"),
    (["evaluate", "--qrels", "q", "--run", "r", "--cutoffs", "1_0"], "expected comma-separated integers, got '1_0'"),
])
def test_a_number_python_would_misread_is_a_usage_error(args, says, cli, sample, tmp_path):
    given_dir = ["--data-dir", str(sample), "--output", str(tmp_path / "out")] if args[0] == "run" else []
    dry = ["--dry-run"] if args[0] in ("run", "reproduce") else []  # the others fail while parsing, before any work
    done = cli(*args, *given_dir, *dry)
    assert done.code == 2
    assert says in done.err
    assert not (tmp_path / "out").exists()  # nothing ran


def test_numbers_in_the_grammar_still_read_as_before(cli, sample, tmp_path):
    shown = cli("run", "--data-dir", sample, "--output", tmp_path / "out", "--retriever", "bm25:k1=1.2,b=.75",
                "--top-k", " 50", "--dry-run", "--json")
    assert shown.code == 0, shown.err
    (stage,) = shown.json()["stages"]
    assert stage["options"]["options"] == {"b": 0.75, "k1": 1.2, "variant": "r2med"}
    assert stage["where"] == "base retriever/bm25-k1_1.2-b_0.75"


TEXTS = st.one_of(st.text(alphabet="0123456789._eE+-xXpPinfaINFA \t\u0661\u0662\uff11\u00b2", max_size=10),
                  st.text(max_size=8))


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("0_9")
@example("\u0661\u0662")
@example("1e999")
@example("\u00b2")
def test_an_option_reads_a_number_exactly_as_a_file_does(text):
    """Option.parse (every flag and inline option built from a declaration) accepts a float exactly when the file
    grammar reads a finite number, and gives the same value; an integer exactly as a qrels grade is read."""
    try:
        expected = parse_decimal(text)
        expected = expected if expected == expected and abs(expected) != float("inf") else None
    except NumberError:
        expected = None
    try:
        got = Option("k1", float, 0.9, "").parse(text)
    except ValueError:
        got = None
    assert got == expected
    try:
        whole = parse_integer(text)
    except NumberError:
        whole = None
    try:
        got_whole = read_number(text, int)
    except NumberError:
        got_whole = None
    assert got_whole == whole
