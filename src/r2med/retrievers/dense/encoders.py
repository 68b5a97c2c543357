"""Local dense encoders: the batching loop they share (``BaseEncoder``) and their cache key.

The subclasses live in ``st_encoders.py`` and ``hf_encoders.py``; ``factory.make_encoder`` picks
one for a ``ModelSpec``; the device, dtype and hub rules are in ``r2med.hf``. Every encoder sorts
its texts by length (longest first) so batches carry little padding, and returns rows in input
order. Models load lazily, on first use.

torch, transformers and sentence-transformers are imported only inside functions; a missing one
raises ``MissingExtraError`` naming ``pip install "r2med[dense]"``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from r2med.errors import UsageError
from r2med.hf import check_model_exists, effective_dtype, model_fingerprint, resolve_device
from r2med.io.progress import Reporter, progress_bar
from r2med.retrievers.dense.base import Kind, kind_label, kind_unit
from r2med.retrievers.dense.zoo import KINDS, ModelSpec

logger = logging.getLogger(__name__)

#: Bumped whenever a change here changes the vectors of an unchanged spec.
ENCODER_VERSION = 1


def length_sorted_order(texts: Sequence[str]) -> list[int]:
    """Indices of ``texts``, longest first (stable for equal lengths).

    >>> length_sorted_order(["a", "ccc", "bb", "dd"])
    [1, 2, 3, 0]
    """
    return sorted(range(len(texts)), key=lambda i: -len(texts[i]))


class BaseEncoder(ABC):
    """The batching loop shared by the local encoders; subclasses implement ``_encode_batch``."""

    name: str

    def __init__(
        self,
        spec: ModelSpec,
        *,
        device: str | None = None,
        batch_size: int | None = None,
        dtype: str | None = None,
        trust_remote_code: bool | None = None,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        for kind in KINDS:  # first: a model the hub would have to send fails before torch is imported
            check_model_exists(spec.model_for(kind), spec.revision_for(kind))
        self.spec = spec
        self.name = spec.name
        self.device = resolve_device(device)
        self.dtype = effective_dtype(dtype or spec.dtype, self.device)
        self.autocast = spec.autocast if self.device.startswith("cuda") else None
        self.batch_size = batch_size or spec.batch_size
        self.trust_remote_code = bool(spec.trust_remote_code or trust_remote_code)

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
        on_batch: Reporter | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts`` in batches of ``batch_size`` (longest first); ``progress`` shows this call's own bar,
        ``on_batch(n)`` is called after each batch of ``n`` texts (the embedding cache's bar)."""
        if kind not in KINDS:
            raise UsageError(f"kind must be 'query' or 'document', got {kind!r}")
        texts = list(texts)
        size = self.batch_size if batch_size is None else batch_size
        if size < 1:
            raise UsageError(f"batch size must be >= 1, got {size}")
        if not texts:
            return np.zeros((0, self.dimension(kind)), dtype=np.float32)
        order = length_sorted_order(texts)
        out: np.ndarray | None = None
        with progress_bar(len(texts), desc=f"{self.name} {kind_label(kind)}", unit=kind_unit(kind), enabled=progress) as bar:
            for start in range(0, len(order), size):
                rows = order[start : start + size]
                vectors = np.asarray(self._encode_batch([texts[i] for i in rows], kind, instruction), dtype=np.float32)
                if out is None:
                    out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
                out[rows] = vectors
                bar.update(len(rows))
                if on_batch is not None:
                    on_batch(len(rows))
        assert out is not None
        return out

    def cache_key(self, kind: Kind) -> dict[str, Any]:
        spec = self.spec
        model = spec.model_for(kind)
        return {
            "encoder": f"r2med/{ENCODER_VERSION}",
            "model": model,
            "tower": "document" if (kind == "document" and spec.document_model) else "query",
            "revision": model_fingerprint(model, spec.revision_for(kind)),
            "backend": spec.backend,
            "pooling": spec.pooling,
            "max_length": spec.max_length_for(kind),
            "dtype": self.dtype,
            "autocast": self.autocast,
            "normalize": spec.normalize,
            "eos": spec.eos,
            "padding_side": spec.padding_side,
            "prompt_in_pooling": spec.prompt_in_pooling,
            "bidirectional": spec.bidirectional,
            "text_pair": bool(spec.document_pair and kind == "document"),
        }

    @abstractmethod
    def dimension(self, kind: Kind) -> int:
        """The embedding size of the ``kind`` tower."""

    @abstractmethod
    def _encode_batch(self, texts: list[str], kind: Kind, instruction: str) -> np.ndarray:
        """Vectors of one batch, rows in the order of ``texts``."""
