"""The retriever role: a small protocol every first stage implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from r2med.datasets.model import Dataset
from r2med.types import Run


@runtime_checkable
class Retriever(Protocol):
    """Maps a dataset to a run over its judged and unjudged queries.

    ``name`` is the system's directory name under ``base retriever/``; ``ignore_identical_ids``
    says whether the official numbers of this family were scored with BEIR's rule (dense: yes,
    BM25: no).
    """

    name: str
    ignore_identical_ids: bool

    def retrieve(self, dataset: Dataset, *, top_k: int = 100) -> Run: ...
