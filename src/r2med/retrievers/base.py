"""The retriever role: a small protocol every first stage implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from r2med.datasets.model import Dataset
from r2med.types import Run

if TYPE_CHECKING:
    from r2med.expansion.apply import PreparedQueries


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

    def retrieve_expanded(
        self, dataset: Dataset, prepared: PreparedQueries, *, top_k: int = 100, composition: str | None = None
    ) -> Run:
        """Search ``dataset`` with its expanded queries (generation-augmented retrieval), composed as this family's
        official numbers were (``r2med.expansion.methods``); ``composition`` names a BM25 composition
        (None: the method's official one)."""
        ...
