"""``Dataset``: one loaded collection (corpus, queries, qrels) plus where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from r2med.types import Qrels


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset.

    The corpus is kept as two parallel lists in file order, duplicates of an id included, because
    the official pipelines index every row (a duplicated id counts twice in BM25's statistics and
    ends with the score of its last row). ``corpus`` is the dict view: the last row of an id wins,
    as in BEIR's loader and the official code's result dicts.
    """

    name: str
    doc_ids: list[str]
    doc_texts: list[str]
    queries: dict[str, str]
    qrels: Qrels
    query_fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""
    layout: str = "r2med"
    revision: str | None = None
    sha256: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: facts about the data that change nothing the benchmark's conventions do not (logged at INFO, shown with -v)
    infos: tuple[str, ...] = ()

    @cached_property
    def corpus(self) -> dict[str, str]:
        return dict(zip(self.doc_ids, self.doc_texts))

    @property
    def judged_query_ids(self) -> list[str]:
        """Queries with at least one judgement: the ones that are scored."""
        return [qid for qid in self.queries if qid in self.qrels]

    @property
    def n_duplicate_doc_rows(self) -> int:
        return len(self.doc_ids) - len(self.corpus)
