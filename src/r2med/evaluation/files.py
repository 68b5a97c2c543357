"""Evaluation from files: qrels from a dataset directory or a qrels file, runs in TREC or top-k JSONL."""

from __future__ import annotations

from pathlib import Path

from r2med.datasets.local import find_layout, read_qrels
from r2med.errors import InvalidInputError, MissingResourceError
from r2med.io.problems import Problems
from r2med.io.readers import HashingLines
from r2med.types import Qrels


def load_qrels(path: Path) -> Qrels:
    """Qrels from a dataset directory (its qrels file) or a qrels file (R2MED JSONL, BEIR TSV or TREC)."""
    path = Path(path)
    if path.is_dir():
        path = find_layout(path).qrels
    elif not path.exists():
        raise MissingResourceError(f"{path}: no such qrels file or dataset directory")
    problems = Problems()
    qrels = read_qrels(HashingLines(path, problems))
    if problems.errors:
        raise InvalidInputError(f"{path}: the qrels cannot be read ({len(problems.errors)} problems)", problems.errors)
    if not qrels:
        raise InvalidInputError(f"{path}: no judgements")
    return qrels
