"""Streaming readers for the file formats users bring: JSONL rows, BEIR qrels TSV, TREC qrels.

Every reader reports problems through a ``Problems`` collector with the file name and line, keeps
reading after a bad line (so one pass finds every problem), and hashes the bytes it reads (sha256).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from r2med.errors import MissingResourceError
from r2med.io.ids import check_id
from r2med.io.jsonsafe import JSONLimitError, loads
from r2med.numbers import NumberError, parse_integer
from r2med.io.problems import Problems


def coerce_id(value: Any, *, field: str, path: str, line: int, problems: Problems) -> str | None:
    """An id as a string: strings pass the id rule (:func:`r2med.io.ids.check_id`), integers are converted
    and counted, anything else is an error.

    >>> p = Problems()
    >>> coerce_id(12, field="id", path="c.jsonl", line=1, problems=p), p.warnings
    ('12', ['c.jsonl: 1 non-string ids converted to strings (first at line 1)'])
    >>> coerce_id(1.5, field="id", path="c.jsonl", line=2, problems=p), p.errors
    (None, ["c.jsonl:2: field 'id' must be a string or an integer, got float 1.5"])
    """
    if isinstance(value, str):
        if not value.strip():
            problems.error(path, line, f"field '{field}' is an empty string; every row needs an id")
            return None
        return check_id(value, field=field, path=path, line=line, problems=problems)
    if isinstance(value, int) and not isinstance(value, bool):
        problems.count("non-string-id", path, line, "non-string ids converted to strings")
        return str(value)
    problems.error(
        path, line, f"field '{field}' must be a string or an integer, got {type(value).__name__} {value!r}"
    )
    return None


#: pytrec_eval reads relevance grades as C ints; a grade past 32 bits wraps (2**32 becomes 0) or crashes it
RELEVANCE_LIMIT = 2**31


def coerce_relevance(value: Any, *, path: str, line: int, problems: Problems) -> int | None:
    """A relevance grade as an int, within 32 bits; text in trec_eval's grammar (it reads a grade with C ``atol``:
    :func:`r2med.numbers.parse_integer`, ASCII digits only, so ``1_0`` or ``١``, which ``int()`` reads, are refused).

    >>> p = Problems()
    >>> coerce_relevance("2", path="q", line=1, problems=p), coerce_relevance(1.0, path="q", line=2, problems=p)
    (2, 1)
    >>> coerce_relevance(0.5, path="q", line=3, problems=p), p.errors
    (None, ['q:3: relevance must be an integer, got 0.5'])
    >>> coerce_relevance("1_0", path="q", line=4, problems=p), p.errors[-1]
    (None, "q:4: relevance must be an integer, got '1_0' (it holds '_'; write ASCII digits with an optional sign, e.g. 0, 1, 2)")
    """
    grade: int | None = None
    if isinstance(value, bool):
        grade = int(value)
    elif isinstance(value, int):
        grade = value
    elif isinstance(value, float) and value.is_integer():
        grade = int(value)
    elif isinstance(value, str):
        digits = value.strip(" \t\n\v\f\r").lstrip("+-").lstrip("0")
        if len(digits) > 12 and digits.isascii() and digits.isdigit():  # far past 32 bits (and maybe int()'s limit)
            return _too_big(f"{digits[:10]}...{digits[-10:]} ({len(digits)} digits)", path, line, problems)
        try:
            grade = parse_integer(value)
        except NumberError as exc:
            problems.error(path, line, f"relevance must be an integer, got {value!r:.60} ({exc.hint})")
            return None
    if grade is None:
        problems.error(path, line, f"relevance must be an integer, got {value!r:.60}")
        return None
    if abs(grade) >= RELEVANCE_LIMIT:
        return _too_big(str(grade), path, line, problems)
    return grade


def _too_big(shown: str, path: str, line: int, problems: Problems) -> None:
    problems.error(path, line, f"relevance {shown} does not fit in 32 bits (pytrec_eval reads grades as C ints: "
                               f"-{RELEVANCE_LIMIT - 1} to {RELEVANCE_LIMIT - 1}); use small grades such as 0, 1, 2")


class HashingLines:
    """Iterate ``(line_number, text)`` over a UTF-8 file while computing its sha256."""

    def __init__(self, path: Path, problems: Problems) -> None:
        self.path = path
        self.problems = problems
        self.sha256 = ""

    def __iter__(self) -> Iterator[tuple[int, str]]:
        if not self.path.is_file():
            raise MissingResourceError(f"{self.path}: file not found")
        digest = hashlib.sha256()
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                digest.update(raw)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self.problems.error(
                        str(self.path), number, f"not valid UTF-8 ({exc.reason} at byte {exc.start}); re-save the file as UTF-8"
                    )
                    continue
                if number == 1 and text.startswith("\ufeff"):
                    text = text[1:]
                yield number, text
        self.sha256 = digest.hexdigest()


def iter_jsonl(lines: HashingLines) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, object)`` for each JSON object line; bad lines become problems, blank lines are counted.

    ``lines.sha256`` holds the file's hash once the iteration is complete.
    """
    problems = lines.problems
    name = str(lines.path)
    for number, text in lines:
        if not text.strip():
            problems.count("blank", name, number, "blank lines skipped")
            continue
        try:
            row = loads(text)
        except JSONLimitError as exc:
            problems.error(name, number, f"{exc}; fix or remove the line")
            continue
        except json.JSONDecodeError as exc:
            snippet = text.strip()
            snippet = snippet if len(snippet) <= 60 else snippet[:57] + "..."
            problems.error(name, number, f"malformed JSON ({exc.msg} at character {exc.pos + 1}): {snippet!r}; fix or remove the line")
            continue
        if not isinstance(row, dict):
            problems.error(name, number, f"expected a JSON object, got {type(row).__name__}")
            continue
        yield number, row


#: files up to this size may be read whole by :func:`jsonl_rows`' fast path (which holds the bytes, the text, its
#: lines and the rows at once: about four times the file); a larger file is read line by line
FAST_JSONL_MAX_BYTES = 256 << 20
_FLAT_ROW: Any = None  # msgspec decoder of one flat JSON object (made on first use)


def _flat_row_decoder() -> Any:
    global _FLAT_ROW
    if _FLAT_ROW is None:
        import msgspec

        _FLAT_ROW = msgspec.json.Decoder(dict[str, str | int | float | bool | None])
    return _FLAT_ROW


def _flat_rows(body: bytes) -> list[dict[str, Any]]:
    """The flat JSON object on each line of ``body`` (split on ``\\n``, no final empty line); raises what msgspec
    raises for a line it refuses. msgspec reads each line's bytes and refuses what is not UTF-8 (strictly, as
    ``bytes.decode``: overlong forms, surrogates, cut sequences), so decoding the whole file first would only copy it.

    The common file (every line one object, ``{`` first and ``}`` last, no blank line, no white space between lines)
    is decoded in one call, msgspec's ``decode_lines``, ~3x faster than a call a line; ``decode_lines`` is more
    lenient than a line at a time (it skips blank lines, takes two values on a line or one across lines), so it is
    used only where that cannot show: every line break of the file lies between a ``}`` and a ``{`` (outside every
    value then: a JSON string holds no raw line break, and no object or array goes on after a ``}`` with a ``{``
    without a comma), so the lines are the values, and it yields one row a line (not two on one).
    Anything else is decoded line by line.

    >>> _flat_rows(b'{"a": 1}\\n{"b": "x"}\\n'), _flat_rows(b'{"a": 1}\\r\\n {"b": null}')
    ([{'a': 1}, {'b': 'x'}], [{'a': 1}, {'b': None}])
    """
    decoder = _flat_row_decoder()
    breaks, between = _line_breaks(body)
    n_lines = breaks + (0 if body.endswith(b"\n") or not body else 1)
    if body[:1] == b"{" and body.endswith((b"}", b"}\n")) and between == n_lines - 1:
        rows = decoder.decode_lines(body)
        if len(rows) == n_lines:
            return rows
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # after the final line break
    return list(map(decoder.decode, lines))


#: above this many bytes, :func:`_line_breaks` finds the line breaks with NumPy (a third of ``bytes.count``'s time
#: for the pattern ``b"}\n{"``: 0.02 against 0.06 s on a 68 MB corpus)
_NUMPY_LINE_BREAKS_FROM = 1 << 20


def _line_breaks(body: bytes) -> tuple[int, int]:
    """The number of line breaks (``b"\\n"``) in ``body``, and of those between a ``}`` and a ``{``.

    >>> _line_breaks(b'{"a": 1}\\n{"b": 2}\\n\\n{}'), _line_breaks(b"")
    ((3, 1), (0, 0))
    """
    if len(body) < _NUMPY_LINE_BREAKS_FROM:
        return body.count(b"\n"), body.count(b"}\n{")  # "}\n{" cannot overlap itself: every one is counted
    import numpy as np

    raw = np.frombuffer(body, dtype=np.uint8)
    at = np.flatnonzero(raw == 0x0A)
    inner = at[(at > 0) & (at < len(raw) - 1)]
    return len(at), int(np.count_nonzero((raw[inner - 1] == 0x7D) & (raw[inner + 1] == 0x7B)))


def _fast_jsonl_rows(lines: HashingLines) -> list[dict[str, Any]] | None:
    """Every row of a JSONL file, read whole and decoded by msgspec, or None where that might differ from ``iter_jsonl``.

    Taken only when msgspec reads every line (its bytes, split on ``\\n`` as the line reader splits; msgspec
    refuses bytes that are not UTF-8, as ``bytes.decode`` does) as one flat JSON object (string, number, true, false or null values). msgspec reads such a
    line as ``json.loads`` does (the last of duplicate keys, big integers exact, correctly rounded floats, JSON
    white space around it); whatever it refuses (a blank line, NaN, a lone surrogate, an out-of-range number, a
    nested value, a malformed line, a line that is not an object) sends the whole file to the line-by-line
    reader, whose verdicts and errors (file and line) are json's.
    """
    path = lines.path
    try:
        if not path.is_file() or path.stat().st_size > FAST_JSONL_MAX_BYTES:
            return None
        raw = path.read_bytes()
    except OSError:
        return None  # the line reader reports it
    digest = hashlib.sha256()
    hashing = threading.Thread(target=digest.update, args=(raw,), name="r2med-sha256")  # hashlib lets go of the GIL
    hashing.start()
    try:
        rows = _flat_rows(raw.removeprefix(b"\xef\xbb\xbf"))
    except Exception:  # noqa: BLE001 - any refusal (invalid UTF-8 too): the line reader decides, and words the errors
        return None
    finally:
        hashing.join()
    lines.sha256 = digest.hexdigest()
    return rows


def jsonl_rows(lines: HashingLines) -> Iterator[tuple[int, dict[str, Any]]]:
    """``iter_jsonl(lines)``: the same ``(line, object)`` pairs, read whole by msgspec where that is certain to give
    the same rows (:func:`_fast_jsonl_rows`), else line by line."""
    rows = _fast_jsonl_rows(lines)
    if rows is None:
        yield from iter_jsonl(lines)
    else:
        yield from enumerate(rows, start=1)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_HEADER_NAMES = frozenset({"query-id", "query_id", "qid", "q_id"})


def _is_header(line: str) -> bool:
    return line.strip().split()[0].lower() in _HEADER_NAMES if line.strip() else False


def qrels_format(path: Path, first_line: str | None) -> str:
    """``"jsonl"``, ``"tsv"`` (BEIR) or ``"trec"``, from the file's extension and header, never its column count.

    ``.jsonl``/``.json`` is R2MED's JSONL; ``.tsv``, or a tab-separated header line (BEIR's
    ``query-id<TAB>corpus-id<TAB>score``), is BEIR TSV; anything else is TREC.

    >>> qrels_format(Path("qrels/test.tsv"), "q1\\td1\\t1"), qrels_format(Path("q.txt"), "query-id\\tcorpus-id\\tscore")
    ('tsv', 'tsv')
    >>> qrels_format(Path("qrels.txt"), "q1\\td1\\t1"), qrels_format(Path("qrels.jsonl"), None)
    ('trec', 'jsonl')
    """
    if path.suffix in (".jsonl", ".json"):
        return "jsonl"
    if path.suffix == ".tsv":
        return "tsv"
    return "tsv" if first_line is not None and _is_header(first_line) and "\t" in first_line else "trec"


def _split_tsv(text: str) -> list[str] | None:
    """The tab-separated fields of a BEIR TSV line (split on tabs only: spaces belong to the field); None if blank."""
    body = text.rstrip("\r\n")
    if not body.strip():
        return None
    return body.split("\t")


def iter_qrels_lines(lines: HashingLines) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, qid, docid, relevance)`` from a qrels file in any supported format.

    The format comes from the name and the header (:func:`qrels_format`): JSONL ``{"q_id","p_id","score"}``
    (R2MED), BEIR TSV ``query-id<TAB>corpus-id<TAB>score`` (header optional; split on tabs only, so a
    document id ``doc A`` is read whole and then rejected by the id rule instead of becoming ``A``),
    TREC ``qid iter docid rel`` (split on white space, exactly 4 fields). Every id passes the id rule
    (:func:`r2med.io.ids.check_id`).
    """
    path, problems = lines.path, lines.problems
    name = str(path)
    if qrels_format(path, None) == "jsonl":
        for number, row in iter_jsonl(lines):
            missing = [key for key in ("q_id", "p_id", "score") if key not in row]
            if missing:
                problems.error(name, number, f"missing field(s) {', '.join(map(repr, missing))}; qrels rows need q_id, p_id, score")
                continue
            qid = coerce_id(row["q_id"], field="q_id", path=name, line=number, problems=problems)
            did = coerce_id(row["p_id"], field="p_id", path=name, line=number, problems=problems)
            rel = coerce_relevance(row["score"], path=name, line=number, problems=problems)
            if qid is not None and did is not None and rel is not None:
                yield number, qid, did, rel
        return
    fmt: str | None = None
    for number, text in lines:
        if fmt is None:
            if not text.strip():
                continue
            fmt = qrels_format(path, text)
            if _is_header(text):
                continue  # a header line (BEIR's)
        if fmt == "tsv":
            fields = _split_tsv(text)
            if fields is None:
                continue
            if len(fields) != 3:
                problems.error(name, number, f"expected 3 tab-separated fields 'query-id<TAB>corpus-id<TAB>score' (BEIR TSV), "
                                             f"got {len(fields)}: {text.rstrip()!r}; separate the fields with one tab each")
                continue
            qid, did, grade = fields
        else:
            split = text.split()
            if not split:
                continue
            if len(split) != 4:
                hint = ("; a 3-column file is BEIR TSV: name it .tsv (tab-separated) or start it with the header "
                        "'query-id<TAB>corpus-id<TAB>score'") if len(split) == 3 else ""
                problems.error(name, number, f"expected 4 fields 'qid 0 docid relevance' (TREC qrels), got {len(split)}{hint}")
                continue
            qid, _, did, grade = split
        qid_ok = check_id(qid, field="query id", path=name, line=number, problems=problems)
        did_ok = check_id(did, field="document id", path=name, line=number, problems=problems)
        rel = coerce_relevance(grade, path=name, line=number, problems=problems)
        if qid_ok is not None and did_ok is not None and rel is not None:
            yield number, qid, did, rel
