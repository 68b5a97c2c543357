"""Run files: TREC (``qid Q0 docid rank score tag``) and the official top-k JSONL
(``{"id": qid, "topk_pid": [[docid, score], ...]}``), read with file:line validation, written atomically.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import IO

from r2med.errors import InvalidInputError, MissingResourceError, UsageError
from r2med.io.atomic import write_atomic
from r2med.io.ids import check_id, id_problem
from r2med.numbers import NumberError, check_finite, parse_score
from r2med.io.problems import Problems
from r2med.io.readers import HashingLines, coerce_id, iter_jsonl
from r2med.types import Run


def _score(value: object, *, path: str, line: int, problems: Problems) -> float | None:
    """A finite score: a JSON number, or text in trec_eval's grammar (:func:`r2med.numbers.parse_score`)."""
    try:
        if isinstance(value, str):
            return parse_score(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "a JSON boolean" if isinstance(value, bool) else f"a {type(value).__name__}"
            problems.error(path, line, f"score {value!r:.60} is not a number ({kind}); write the score as a JSON number")
            return None
        return check_finite(float(value), value)
    except OverflowError:  # an integer past a double
        problems.error(path, line, f"score {str(value)[:20]}... does not fit in a double; every score must be a finite number")
    except NumberError as exc:
        problems.error(path, line, f"score {exc}")
    return None


def _add(run: Run, qid: str, did: str, score: float, *, path: str, line: int, problems: Problems) -> None:
    docs = run.setdefault(qid, {})
    if did in docs:
        problems.error(path, line, f"document {did!r} appears twice for query {qid!r}; a run ranks each document once")
        return
    docs[did] = score


def _read_trec(lines: HashingLines, run: Run) -> None:
    name, problems = str(lines.path), lines.problems
    for number, text in lines:
        fields = text.split()
        if not fields:
            continue
        if len(fields) != 6:
            problems.error(name, number, f"expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}")
            continue
        qid, _, did, _, raw_score, tag = fields
        ok_q = check_id(qid, field="qid", path=name, line=number, problems=problems)
        ok_d = check_id(did, field="docid", path=name, line=number, problems=problems)
        score = _score(raw_score, path=name, line=number, problems=problems)
        if score is not None and ok_q is not None and ok_d is not None:
            run.name = tag
            _add(run, qid, did, score, path=name, line=number, problems=problems)


#: a TREC run line of the plain form (what r2med and most tools write): six fields of printable ASCII (so every id
#: passes the id rule) apart by spaces or tabs, the fifth a decimal number (a form :func:`r2med.numbers.parse_decimal`
#: reads as ``float`` does)
_PLAIN_LINE = (r"[!-~]+[ \t]+[!-~]+[ \t]+[!-~]+[ \t]+[!-~]+[ \t]+[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
               r"[ \t]+[!-~]+[ \t\r]*")
#: every plain line, whole (one pass in C: a file is plain when removing them leaves only line breaks; a pattern of
#: the whole file would keep a backtracking record per line, 1 GB for a million lines)
_PLAIN_LINES = re.compile(rf"^{_PLAIN_LINE}$", re.ASCII | re.MULTILINE)


def _read_plain_trec(path: Path) -> Run | None:
    """The run of a TREC file whose every line has the plain form (``_PLAIN_LINE``), every score finite and every
    document once per query, read in one pass; ``None`` for any other file, which the line-by-line reader then
    reads (and names each problem of): the same run either way (tests/store/test_runs_fast.py)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    if not text or _PLAIN_LINES.sub("", text).strip("\n"):
        return None
    run = Run(name=path.stem)
    added = 0
    for line in text.split("\n"):
        fields = line.split()
        if fields:
            qid, _, did, _, score, run.name = fields  # the tag of the last line, as the line-by-line reader keeps
            docs = run.get(qid)
            if docs is None:
                docs = run[qid] = {}
            docs[did] = float(score)
            added += 1
    if added == 0 or added != sum(map(len, run.values())):  # a document twice for a query: said line by line
        return None
    if not all(map(math.isfinite, itertools.chain.from_iterable(docs.values() for docs in run.values()))):
        return None  # 1e999: said line by line
    return run


def _read_topk(lines: HashingLines, run: Run) -> None:
    name, problems = str(lines.path), lines.problems
    for number, row in iter_jsonl(lines):
        if "id" not in row or "topk_pid" not in row:
            problems.error(name, number, "expected {\"id\": ..., \"topk_pid\": [[docid, score], ...]}")
            continue
        qid = coerce_id(row["id"], field="id", path=name, line=number, problems=problems)
        pairs = row["topk_pid"]
        if qid is None or not isinstance(pairs, list):
            if qid is not None:
                problems.error(name, number, "'topk_pid' must be a list of [docid, score] pairs")
            continue
        run.setdefault(qid, {})
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2):
                problems.error(name, number, f"'topk_pid' entry {pair!r} is not a [docid, score] pair")
                continue
            did = coerce_id(pair[0], field="topk_pid docid", path=name, line=number, problems=problems)
            score = _score(pair[1], path=name, line=number, problems=problems)
            if did is not None and score is not None:
                _add(run, qid, did, score, path=name, line=number, problems=problems)


def sniff_is_jsonl(path: Path) -> bool:
    """True when the first non-blank line of ``path`` starts a JSON object."""
    with Path(path).open("rb") as handle:
        for raw in handle:
            stripped = raw.strip().lstrip(b"\xef\xbb\xbf")
            if stripped:
                return stripped.startswith(b"{")
    return Path(path).suffix == ".jsonl"


def read_run(path: Path) -> Run:
    """Read a TREC run or a top-k JSONL (detected from the content); InvalidInputError lists every bad line.

    Every id passes the id rule (:mod:`r2med.io.ids`) and every score must be a finite number (NaN and
    infinity are rejected with file:line) written as trec_eval reads it (:mod:`r2med.numbers`: C ``strtod``'s
    grammar, ASCII only, so ``0_9`` or Arabic-Indic digits, which Python's ``float()`` reads, are refused). The rank column of a TREC run is not used: the ranking is the
    scores' (:meth:`Run.ranked`), as trec_eval reads it.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingResourceError(f"{path}: run file not found")
    jsonl = sniff_is_jsonl(path)
    if not jsonl:
        plain = _read_plain_trec(path)
        if plain is not None:
            return plain
    problems = Problems()
    run = Run(name=path.stem)
    lines = HashingLines(path, problems)
    (_read_topk if jsonl else _read_trec)(lines, run)
    if problems.errors:
        raise InvalidInputError(f"{path}: the run cannot be read ({len(problems.errors)} problems)", problems.errors)
    if not run:
        raise InvalidInputError(f"{path}: the run is empty")
    return run


def _check_writable(run: Run) -> None:
    """Ids a TREC line holds (the id rule of :mod:`r2med.io.ids`) and finite scores, or an error naming them."""
    for qid, docs in run.items():
        for value in (qid, *docs):
            problem = id_problem(value)
            if problem is not None:
                raise UsageError(f"id {value!r} {problem}; it cannot be written to a TREC run")
        for did, score in docs.items():
            if not math.isfinite(score):
                raise InvalidInputError(f"query {qid!r}, document {did!r}: score {score!r} is not finite; "
                                        "a run holds finite scores only")


def write_trec_run(run: Run, path: Path, *, tag: str | None = None) -> Path:
    """Write ``run`` in TREC format; scores with full float precision (``repr``, read back exactly).

    The written ranking is the evaluated ranking: each query's documents are written in trec_eval's
    order (:meth:`Run.ranked`: score descending, equal scores by document id descending, the order
    pytrec_eval and ``r2med evaluate`` score), with ranks 1..n, so the rank column, the line order and
    the scores all tell the same ranking. Ids must pass the id rule (UsageError otherwise) and scores
    must be finite (InvalidInputError otherwise).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.run"
    >>> print(write_trec_run(Run({"q": {"a": 1.0, "c": 2.0, "b": 1.0}}), path, tag="t").read_text(), end="")
    q Q0 c 1 2.0 t
    q Q0 b 2 1.0 t
    q Q0 a 3 1.0 t
    """
    _check_writable(run)
    label = (tag or run.name or "r2med").replace(" ", "_")

    def body(handle: IO[str]) -> None:
        for qid in run:
            for rank, (did, score) in enumerate(run.ranked(qid), start=1):
                handle.write(f"{qid} Q0 {did} {rank} {score!r} {label}\n")

    return write_atomic(path, body)


def write_topk_jsonl(run: Run, path: Path, *, k: int | None = None) -> Path:
    """Write ``run`` as the official top-k JSONL (first ``k`` documents of each query when given).

    Pairs are in trec_eval's order, as :func:`write_trec_run` writes them (:meth:`Run.ranked`: score
    descending, ties by document id descending); the cut at ``k`` keeps the documents trec_eval ranks first.
    """
    _check_writable(run)

    def body(handle: IO[str]) -> None:
        for qid in run:
            pairs = [[did, score] for did, score in run.ranked(qid)[:k]]
            handle.write(json.dumps({"id": qid, "topk_pid": pairs}, ensure_ascii=False) + "\n")

    return write_atomic(path, body)
