"""The whole-file JSONL read (msgspec) gives exactly what the line-by-line read (json) gives, or steps aside."""

from __future__ import annotations

import pytest

from r2med.datasets.local import read_corpus
from r2med.io import readers
from r2med.io.problems import Problems
from r2med.io.readers import HashingLines, file_sha256

ROWS = (
    '{"id": "d1", "text": "plain"}\n'
    '{"id": 12345678901234567890123, "title": "T", "text": "big integer id, a title"}\r\n'
    '{"id": "d3", "text": "first", "text": "duplicate key: the last wins"}\n'
    '{"id":"d4","text":"\\u00e9\\ud83d\\ude00 escapes","score":1e-5,"n":null,"b":true}\n'
    ' {"id": "d1", "text": "a repeated id, white space around"} \t\n'
)
FALLBACKS = {  # each refused by msgspec (or not one flat object per line): the line reader reads the file
    "blank line": "\n",
    "NaN": '{"id": "n", "text": "x", "v": NaN}\n',
    "lone surrogate": '{"id": "s", "text": "\\ud800"}\n',
    "out of float range": '{"id": "f", "text": "x", "v": 1e400}\n',
    "nested": '{"id": "e", "text": "x", "v": [1, {"a": 2}]}\n',
    "not an object": '["id", "text"]\n',
    "two objects": '{"id": "a", "text": "x"} {"id": "b", "text": "y"}\n',
    "malformed": '{"id": "m", "text": "x",}\n',
    "no final line break": '{"id": "z", "text": "last"}',
}


def read_both(path, monkeypatch):
    fast = HashingLines(path, Problems())
    fast_result = read_corpus(fast)
    with monkeypatch.context() as patch:
        patch.setattr(readers, "_fast_jsonl_rows", lambda lines: None)
        slow = HashingLines(path, Problems())
        slow_result = read_corpus(slow)
    return (fast_result, fast.sha256, fast.problems.errors, fast.problems.warnings), \
        (slow_result, slow.sha256, slow.problems.errors, slow.problems.warnings)


def test_the_whole_file_read_gives_the_line_readers_rows(tmp_path, monkeypatch):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + ROWS.encode())  # with a BOM
    assert readers._fast_jsonl_rows(HashingLines(path, Problems())) is not None  # the fast path is taken
    fast, slow = read_both(path, monkeypatch)
    assert fast == slow
    ids, texts = fast[0]
    assert ids == ["d1", "12345678901234567890123", "d3", "d4", "d1"]
    assert texts[1] == "T big integer id, a title" and texts[2] == "duplicate key: the last wins"
    assert texts[3] == "\u00e9\U0001F600 escapes"
    assert fast[1] == file_sha256(path)


@pytest.mark.parametrize("extra", list(FALLBACKS.values()), ids=list(FALLBACKS))
def test_what_msgspec_refuses_is_read_line_by_line(tmp_path, monkeypatch, extra):
    path = tmp_path / "corpus.jsonl"
    path.write_text(ROWS + extra, encoding="utf-8")
    taken = readers._fast_jsonl_rows(HashingLines(path, Problems())) is not None
    assert taken == (extra == FALLBACKS["no final line break"])
    fast, slow = read_both(path, monkeypatch)
    assert fast == slow


INVALID_UTF8 = {  # msgspec reads the bytes of each line: every form bytes.decode("utf-8") refuses must step aside
    "stray byte": b'{"id": "u", "text": "\xff"}\n',
    "overlong NUL": b'{"id": "u", "text": "a\xc0\x80b"}\n',
    "overlong slash": b'{"id": "u", "text": "a\xe0\x80\xafb"}\n',
    "encoded surrogate": b'{"id": "u", "text": "a\xed\xa0\x80b"}\n',
    "past U+10FFFF": b'{"id": "u", "text": "a\xf4\x90\x80\x80b"}\n',
    "cut sequence": b'{"id": "u", "text": "a\xe2\x82"}\n',
    "lone continuation byte": b'{"id": "u", "text": "\x80"}\n',
    "in a key": b'{"id": "u", "te\xffxt": "x", "text": "y"}\n',
    "outside a string": b'{"id": "u", "text": "x"}\xa0\n',
}


@pytest.mark.parametrize("line", list(INVALID_UTF8.values()), ids=list(INVALID_UTF8))
def test_invalid_utf8_is_read_line_by_line(tmp_path, monkeypatch, line):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(ROWS.encode() + line)
    assert readers._fast_jsonl_rows(HashingLines(path, Problems())) is None
    fast, slow = read_both(path, monkeypatch)
    assert fast == slow and any(":6: not valid UTF-8" in e for e in fast[2])


def test_a_bom_past_the_first_line_is_read_line_by_line(tmp_path, monkeypatch):
    """Only the file's first bytes may be a BOM (json refuses U+FEFF before a later line's object)."""
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(ROWS.encode() + b'\xef\xbb\xbf{"id": "u", "text": "x"}\n')
    assert readers._fast_jsonl_rows(HashingLines(path, Problems())) is None
    fast, slow = read_both(path, monkeypatch)
    assert fast == slow and any(":6:" in e for e in fast[2])


ONE_CALL = {  # files msgspec's decode_lines reads in one call: one flat object a line, nothing between lines
    "final line break": (b'{"id": "a", "text": "x"}\n{"id": "b", "text": "}{ braces"}\n', True),
    "no final line break": (b'{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}', True),
    "one line": (b'{"id": "a", "text": "x"}', True),
    # decode_lines would take these, but not as one row a line: decoded a line at a time
    "two objects on a line": (b'{"id": "a", "text": "x"} {"id": "b", "text": "y"}\n', False),
    "two on a line, then a blank line": (b'{"id": "a", "text": "x"}{"id": "b", "text": "y"}\n\n', False),
    "an object across lines": (b'{"id": "a",\n"text": "x"}\n{"id": "b", "text": "y"}\n', False),
    "across lines, then two on a line": (b'{"id": "a",\n"text": "x"}\n{"id": "b", "text": "y"}{"id": "c"}\n', False),
    "blank line last": (b'{"id": "a", "text": "x"}\n\n', False),
    "CRLF": (b'{"id": "a", "text": "x"}\r\n{"id": "b", "text": "y"}\r\n', False),
    "white space after a line": (b'{"id": "a", "text": "x"} \n{"id": "b", "text": "y"}\n', False),
}


@pytest.mark.parametrize("numpy_from", [0, 1 << 20], ids=["numpy", "bytes.count"])
@pytest.mark.parametrize(("raw", "one_call"), list(ONE_CALL.values()), ids=list(ONE_CALL))
def test_one_call_only_where_every_line_is_one_object(tmp_path, monkeypatch, raw, one_call, numpy_from):
    monkeypatch.setattr(readers, "_NUMPY_LINE_BREAKS_FROM", numpy_from)  # large files count line breaks with NumPy
    decoder = readers._flat_row_decoder()
    per_line = []  # lines decoded one at a time
    monkeypatch.setattr(readers, "_FLAT_ROW", type("Spy", (), {
        "decode": staticmethod(lambda line: per_line.append(line) or decoder.decode(line)),
        "decode_lines": staticmethod(decoder.decode_lines)})())
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(raw)
    fast, slow = read_both(path, monkeypatch)
    assert fast == slow  # the same rows, errors and warnings as the line reader
    assert (not per_line) == one_call
    if one_call:
        n = raw.count(b"{")
        assert fast[0] == (["a", "b"][:n], ["x", "}{ braces" if b"braces" in raw else "y"][:n])


def test_line_breaks_are_counted_alike_by_numpy_and_bytes_count(monkeypatch):
    import random

    rng = random.Random(3)
    pieces = [b"{", b"}", b"\n", b"a", b'"', b"\r", b" ", b"}\n{"]
    for _ in range(3000):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        monkeypatch.setattr(readers, "_NUMPY_LINE_BREAKS_FROM", 0)
        assert readers._line_breaks(body) == (body.count(b"\n"), body.count(b"}\n{")), body
