"""Load a dataset from a local directory, in R2MED's layout or BEIR's, with validation.

R2MED layout: ``corpus.jsonl`` ``{"id","text"}``, ``query.jsonl`` ``{"id","text",...}``,
``qrels.jsonl`` ``{"q_id","p_id","score"}``.
BEIR layout: ``corpus.jsonl`` ``{"_id","title","text"}``, ``queries.jsonl``, ``qrels/test.tsv``
(text = title + " " + text when there is a title). A TREC qrels file (``qrels.txt``/``qrels.trec``)
may stand in for ``qrels.jsonl``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from r2med.datasets.model import Dataset
from r2med.errors import InvalidInputError, MissingResourceError
from r2med.io.names import name_problem
from r2med.io.problems import Problems
from r2med.io.readers import HashingLines, coerce_id, iter_qrels_lines, jsonl_rows
from r2med.types import Qrels

logger = logging.getLogger(__name__)

_QUERY_FILES = ("query.jsonl", "queries.jsonl")
_QRELS_FILES = ("qrels.jsonl", "qrels/test.tsv", "qrels.tsv", "qrels.txt", "qrels.trec", "qrels/dev.tsv")


@dataclass(frozen=True)
class Layout:
    """Where the three files of one dataset directory are."""

    corpus: Path
    queries: Path
    qrels: Path
    kind: str


def is_dataset_dir(path: Path) -> bool:
    """True when ``path`` holds a corpus file (the mark of one dataset, not a directory of them)."""
    return (Path(path) / "corpus.jsonl").is_file()


def has_dataset_files(path: Path) -> bool:
    """True when ``path`` holds any file of a dataset (corpus, queries or qrels): a dataset, maybe incomplete."""
    path = Path(path)
    return any((path / n).is_file() for n in ("corpus.jsonl", *_QUERY_FILES, *_QRELS_FILES))


def missing_files(path: Path) -> str:
    """What :func:`find_layout` says about an incomplete dataset directory (``''`` when it is complete)."""
    try:
        find_layout(path)
    except MissingResourceError as exc:
        return str(exc)
    return ""


def find_layout(path: Path) -> Layout:
    """Locate the corpus, query and qrels files of one dataset directory; exit-4 error naming what is missing."""
    path = Path(path)
    if not path.is_dir():
        raise MissingResourceError(f"{path}: no such directory")
    corpus = path / "corpus.jsonl"
    queries = next((path / n for n in _QUERY_FILES if (path / n).is_file()), None)
    qrels = next((path / n for n in _QRELS_FILES if (path / n).is_file()), None)
    missing = []
    if not corpus.is_file():
        missing.append("corpus.jsonl")
    if queries is None:
        missing.append("query.jsonl (or BEIR's queries.jsonl)")
    if qrels is None:
        missing.append("qrels.jsonl (or BEIR's qrels/test.tsv, or a TREC qrels.txt)")
    if queries is None or qrels is None or missing:
        raise MissingResourceError(
            f"{path}: not a dataset directory, missing {', '.join(missing)}. Expected R2MED's layout "
            "(corpus.jsonl, query.jsonl, qrels.jsonl) or BEIR's (corpus.jsonl, queries.jsonl, qrels/test.tsv)"
        )
    kind = "beir" if queries.name == "queries.jsonl" else "r2med"
    return Layout(corpus, queries, qrels, kind)


def _text(row: dict, *, path: str, line: int, problems: Problems, what: str) -> str | None:
    text = row.get("text")
    if text is None:
        problems.error(path, line, f"missing field 'text'; every {what} needs one")
        return None
    if not isinstance(text, str):
        problems.error(path, line, f"field 'text' must be a string, got {type(text).__name__}")
        return None
    title = row.get("title")
    if isinstance(title, str) and title.strip():
        text = f"{title} {text}"
    if not text.strip():
        problems.count("empty-text", path, line, f"{what}s with empty text (kept)")
    return text


def _row_id(row: dict, *, path: str, line: int, problems: Problems) -> str | None:
    key = "id" if "id" in row else "_id" if "_id" in row else None
    if key is None:
        problems.error(path, line, "missing field 'id' (or BEIR's '_id')")
        return None
    return coerce_id(row[key], field=key, path=path, line=line, problems=problems)


_SHOW = 3


def _shown(items: list[str], total: int) -> str:
    more = f" and {total - len(items)} more" if total > len(items) else ""
    return ", ".join(items) + more


def _duplicates(first_line: dict[str, int], repeats: dict[str, list[int]]) -> str:
    """``'a' at lines 1, 3; 'b' at lines 2, 4`` for the first few repeated ids (their first line included)."""
    shown = [f"{key!r} at lines {', '.join(map(str, [first_line[key], *lines]))}" for key, lines in list(repeats.items())[:_SHOW]]
    more = f"; and {len(repeats) - _SHOW} more ids" if len(repeats) > _SHOW else ""
    return "; ".join(shown) + more


def read_corpus(lines: HashingLines) -> tuple[list[str], list[str]]:
    """Document ids and texts in file order; duplicates are kept and reported (the ids and their lines)."""
    ids: list[str] = []
    texts: list[str] = []
    first_line: dict[str, int] = {}
    repeats: dict[str, list[int]] = {}
    name, problems = str(lines.path), lines.problems
    for number, row in jsonl_rows(lines):
        did, text, title = row.get("id"), row.get("text"), row.get("title")
        # the common row, checked inline (a string id that passes the id rule, a string text that is not blank, no
        # title or a string one); any other row goes through the checks that word the problems
        if (type(did) is str and type(text) is str and did and did.isprintable() and " " not in did
                and (title is None or type(title) is str) and text and not text.isspace()):  # strip() would copy it
            if title is not None and title.strip():
                text = f"{title} {text}"
        else:
            did = _row_id(row, path=name, line=number, problems=problems)
            text = _text(row, path=name, line=number, problems=problems, what="document")
            if did is None or text is None:
                continue
        if did in first_line:
            repeats.setdefault(did, []).append(number)
        else:
            first_line[did] = number
        ids.append(did)
        texts.append(text)
    if repeats:
        message = (f"rows repeat an earlier document id (duplicate ids: {_duplicates(first_line, repeats)}; all rows "
                   "are indexed, as the official code does; a repeated id keeps the score of its last row)")
        for number in sorted(n for numbers in repeats.values() for n in numbers):
            problems.count("duplicate-doc", name, number, message)
    return ids, texts


def read_queries(lines: HashingLines) -> tuple[dict[str, str], dict[str, dict]]:
    """Query texts and their extra fields (``doc_id``, ``answer``, ...); a repeated id keeps its last row (reported)."""
    queries: dict[str, str] = {}
    extra: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    repeats: dict[str, list[int]] = {}
    name, problems = str(lines.path), lines.problems
    for number, row in jsonl_rows(lines):
        qid = _row_id(row, path=name, line=number, problems=problems)
        text = _text(row, path=name, line=number, problems=problems, what="query")
        if qid is None or text is None:
            continue
        if qid in queries:
            repeats.setdefault(qid, []).append(number)
        else:
            first_line[qid] = number
        queries[qid] = text
        fields = {k: v for k, v in row.items() if k not in ("id", "_id", "text", "title")}
        if fields:
            extra[qid] = fields
    if repeats:
        message = f"rows repeat an earlier query id (duplicate ids: {_duplicates(first_line, repeats)}; the last row is used)"
        for number in sorted(n for numbers in repeats.values() for n in numbers):
            problems.count("duplicate-query", name, number, message)
    return queries, extra


def read_qrels(lines: HashingLines, where: dict[tuple[str, str], int] | None = None) -> Qrels:
    """Judgements ``{qid: {docid: grade}}``; a repeated pair keeps its last grade (counted).

    ``where``, when given, receives the line of each ``(qid, docid)`` pair (for messages that name it).
    """
    qrels = Qrels()
    name, problems = str(lines.path), lines.problems
    for number, qid, did, rel in iter_qrels_lines(lines):
        judged = qrels.setdefault(qid, {})
        if did in judged:
            problems.count("duplicate-qrel", name, number, "judgements repeat a (query, document) pair (the last grade is used)")
        judged[did] = rel
        if where is not None:
            where[(qid, did)] = number
    return qrels


def cross_check(doc_ids: list[str], queries: dict[str, str], qrels: Qrels, problems: Problems, *, qrels_name: str,
                queries_name: str = "the queries", where: dict[tuple[str, str], int] | None = None) -> None:
    """Findings that need all three files: dangling judgements, unjudged queries, id collisions.

    No judged query at all is an error (nothing to score is not a score); the rest are notes. ``where``
    (from :func:`read_qrels`) lets the notes name the lines of the judgements they talk about.
    """
    where = where or {}

    def at(qid: str, did: str) -> str:
        return f" (line {where[(qid, did)]})" if (qid, did) in where else ""

    known_docs = set(doc_ids)
    unknown_q = [qid for qid in qrels if qid not in queries]
    unknown_d = [(qid, did) for qid, judged in qrels.items() for did in judged if did not in known_docs]
    if unknown_q:
        shown = [f"{qid!r}{at(qid, next(iter(qrels[qid])))}" for qid in unknown_q[:_SHOW]]
        problems.note(f"{qrels_name}: {len(unknown_q)} judged query ids are not in the queries: "
                      f"{_shown(shown, len(unknown_q))}; they are not scored")
    if unknown_d:
        shown = [f"{did!r}{at(qid, did)}" for qid, did in unknown_d[:_SHOW]]
        problems.note(f"{qrels_name}: {len(unknown_d)} judgements point at document ids not in the corpus: "
                      f"{_shown(shown, len(unknown_d))}; they still count as relevant")
    unjudged = [qid for qid in queries if qid not in qrels]
    if queries and qrels and len(unjudged) == len(queries):
        problems.error(qrels_name, None, f"nothing to score: no query of {queries_name} has a judgement "
                                         f"(queries: {_shown([repr(q) for q in unjudged[:_SHOW]], len(unjudged))}; "
                                         f"judged: {_shown([repr(q) for q in list(qrels)[:_SHOW]], len(qrels))}); "
                                         "the qrels and the queries must use the same query ids")
    elif unjudged:
        # as pytrec_eval and the official scripts do: not a warning (the Python API would print it with progress off)
        problems.info(f"{len(unjudged)} queries have no judgements (e.g. {unjudged[0]!r}); they are excluded from scoring")
    no_positive = [qid for qid in queries if qid in qrels and not any(r > 0 for r in qrels[qid].values())]
    if no_positive:
        problems.note(f"{len(no_positive)} queries have judgements but none positive (e.g. {no_positive[0]!r}); they score 0")
    collide = sum(1 for qid in queries if qid in known_docs)
    if collide:
        problems.note(
            f"{collide} query ids are also document ids; with --ignore-identical-ids (BEIR's rule, used by the "
            "official dense numbers) those documents are dropped from the query's ranking"
        )


def scan_dir(path: Path, name: str | None = None) -> tuple[Dataset | None, Problems]:
    """Read and check every file of one dataset directory; never raises on bad content.

    Returns the dataset (``None`` when any error was found) and every problem found.
    """
    path = Path(path)
    layout = find_layout(path)
    problems = Problems()
    name = name or path.name or Path(os.path.abspath(path)).name
    problem = name_problem(name, dataset=True)
    if problem is not None:  # the name is the stem of every result file (r2med.io.names)
        problems.error(str(path), None, f"the dataset name {name!r} cannot be used as a file name: {problem}; "
                                        "rename the directory")
    if layout.qrels.relative_to(path).as_posix() == "qrels/dev.tsv":  # BEIR's test split is what is reported
        problems.note(f"{layout.qrels}: scored on BEIR's dev split (the folder has no qrels/test.tsv); its numbers are "
                      "not test numbers")
    corpus_lines = HashingLines(layout.corpus, problems)
    query_lines = HashingLines(layout.queries, problems)
    qrels_lines = HashingLines(layout.qrels, problems)
    doc_ids, doc_texts = read_corpus(corpus_lines)
    queries, extra = read_queries(query_lines)
    where: dict[tuple[str, str], int] = {}
    qrels = read_qrels(qrels_lines, where)
    if not doc_ids and not problems.errors:
        problems.error(str(layout.corpus), None, "no documents")
    if not queries and not problems.errors:
        problems.error(str(layout.queries), None, "no queries")
    if not qrels and not problems.errors:
        problems.error(str(layout.qrels), None, "no judgements")
    cross_check(doc_ids, queries, qrels, problems, qrels_name=str(layout.qrels), queries_name=str(layout.queries),
                where=where)
    if problems.errors:
        return None, problems
    dataset = Dataset(
        name=name,
        doc_ids=doc_ids,
        doc_texts=doc_texts,
        queries=queries,
        qrels=qrels,
        query_fields=extra,
        source=str(path),
        layout=layout.kind,
        sha256={
            layout.corpus.relative_to(path).as_posix(): corpus_lines.sha256,
            layout.queries.relative_to(path).as_posix(): query_lines.sha256,
            layout.qrels.relative_to(path).as_posix(): qrels_lines.sha256,
        },
        warnings=tuple(problems.warnings),
        infos=tuple(problems.infos),
    )
    return dataset, problems


def load_dir(path: Path, name: str | None = None) -> Dataset:
    """Load one dataset directory; InvalidInputError (exit 5) listing every problem if any is fatal."""
    dataset, problems = scan_dir(path, name)
    if dataset is None:
        raise InvalidInputError(f"{path}: the dataset cannot be used ({len(problems.errors)} problems)", problems.errors)
    for warning in dataset.warnings:
        logger.warning("%s: %s", dataset.name, warning)
    for info in dataset.infos:
        logger.info("%s: %s", dataset.name, info)
    return dataset


def load_corpus(path: Path, name: str | None = None) -> Dataset:
    """A corpus alone (no queries, no qrels): ``path`` is a directory with ``corpus.jsonl`` (R2MED or BEIR rows)
    or that file itself. Used as the knowledge source an agent searches (``r2med agent --knowledge-dir``).
    MissingResourceError (exit 4) when there is no such file; InvalidInputError (exit 5) listing every bad row.
    """
    path = Path(path)
    corpus = path if path.is_file() else path / "corpus.jsonl"
    if not corpus.is_file():
        raise MissingResourceError(f"{path}: no corpus.jsonl there; a knowledge corpus is a directory holding corpus.jsonl "
                                   "(rows {\"id\" or \"_id\", \"text\", optional \"title\"}) or that file itself")
    folder = corpus.parent
    name = name or folder.name or Path(os.path.abspath(folder)).name
    problems = Problems()
    lines = HashingLines(corpus, problems)
    doc_ids, doc_texts = read_corpus(lines)
    if not doc_ids and not problems.errors:
        problems.error(str(corpus), None, "no documents")
    if problems.errors:
        raise InvalidInputError(f"{corpus}: the corpus cannot be used ({len(problems.errors)} problems)", problems.errors)
    for warning in problems.warnings:
        logger.warning("%s: %s", name, warning)
    return Dataset(name=name, doc_ids=doc_ids, doc_texts=doc_texts, queries={}, qrels={}, source=str(folder),
                   layout="corpus", sha256={"corpus.jsonl": lines.sha256}, warnings=tuple(problems.warnings))
