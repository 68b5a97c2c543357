"""Local dense encoders: the batching loop they share (``BaseEncoder``) and their cache key.

The subclasses live in ``st_encoders.py`` and ``hf_encoders.py``; ``factory.make_encoder`` picks
one for a ``ModelSpec``; the device, dtype and hub rules are in ``r2med.hf``. Every encoder tokenizes
its texts once, sorts them by token count (longest first) and cuts batches to a budget of padded
tokens (``r2med.batching``), so batches carry little padding and fill the device; it returns rows in
input order. Models load lazily, on first use.

torch, transformers and sentence-transformers are imported only inside functions; a missing one
raises ``MissingExtraError`` naming ``pip install "r2med[dense]"``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from r2med.batching import CPU_BATCH_TOKENS, Launched, TokenBudget, device_budget, finished, run_batches
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


__all__ = ["CPU_BATCH_TOKENS", "DEFAULT_BATCH_TOKENS", "BaseEncoder", "Prepared", "length_sorted_order"]

#: Padded tokens per batch where neither the recipe nor the caller sets a budget (models outside the zoo).
DEFAULT_BATCH_TOKENS = 32768


class Prepared:
    """The inputs of one ``encode`` call, tokenized once: ``lengths[i]`` is text ``i``'s token count as the model
    sees it (instruction, special tokens and EOS included, truncation applied); ``state`` is the encoder's own."""

    def __init__(self, texts: list[str], lengths: list[int] | None, state: Any = None) -> None:
        self.texts, self.lengths, self.state = texts, lengths, state


class BaseEncoder(ABC):
    """The batching loop shared by the local encoders; subclasses implement ``_prepare`` and ``_encode_rows``.

    An encoder whose ``_prepare`` counts tokens is batched by tokens: texts sorted by token count (longest first),
    each batch as many texts as fit in ``batch_tokens`` padded tokens and at most ``batch_size`` texts
    (``r2med.batching``); one that does not (NV-Embed's own ``encode``) by ``batch_size`` texts sorted by length
    in characters. Batching never changes a text's vector beyond float noise (each batch is padded to its own
    longest input and masked), so it is not part of the cache key.
    """

    name: str

    def __init__(
        self,
        spec: ModelSpec,
        *,
        device: str | None = None,
        batch_size: int | None = None,
        batch_tokens: int | None = None,
        dtype: str | None = None,
        trust_remote_code: bool | None = None,
        compile: bool = False,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        if batch_tokens is not None and batch_tokens < 1:
            raise UsageError(f"batch tokens must be >= 1, got {batch_tokens}")
        for kind in KINDS:  # first: a model the hub would have to send fails before torch is imported
            check_model_exists(spec.model_for(kind), spec.revision_for(kind))
        self.spec = spec
        self.name = spec.name
        self.device = resolve_device(device)
        self.dtype = effective_dtype(dtype or spec.dtype, self.device)
        self.autocast = spec.autocast if self.device.startswith("cuda") else None
        #: texts per batch where tokens are not counted; where they are, only a given ``batch_size`` caps them
        self.batch_size = batch_size or spec.batch_size
        tokens = device_budget(spec.batch_tokens or DEFAULT_BATCH_TOKENS, self.device, batch_tokens)
        self.budget = TokenBudget(tokens=tokens, texts=batch_size)
        self.count_budget = TokenBudget(tokens=None, texts=self.batch_size)
        self.trust_remote_code = bool(spec.trust_remote_code or trust_remote_code)
        if compile and not self.compiles:
            raise UsageError(f"--compile applies to models on the transformers backend; '{spec.name}' runs on "
                             f"{spec.backend}: run it without --compile")
        #: the forward pass under torch.compile, checked against eager on the first batch (``compiled.py``)
        self.compile = bool(compile)

    #: whether this encoder can run its model under ``--compile``
    compiles = False

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
        on_batch: Reporter | None = None,
        on_vectors: Callable[[list[int], np.ndarray], None] | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts``, rows in input order, encoded in token-budget batches (longest first).

        ``batch_size`` caps the texts of one batch for this call. ``progress`` shows this call's own bar;
        ``on_batch(n)`` is called after each batch of ``n`` texts (the embedding cache's bar) and
        ``on_vectors(rows, vectors)`` with each batch's rows (positions in ``texts``) and their vectors, as soon as
        they are made (the embedding cache keeps them, so that an interrupted encode loses little).
        """
        if kind not in KINDS:
            raise UsageError(f"kind must be 'query' or 'document', got {kind!r}")
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension(kind)), dtype=np.float32)
        prepared = self._prepare(texts, kind, instruction)
        out: np.ndarray | None = None
        with progress_bar(len(texts), desc=f"{self.name} {kind_label(kind)}", unit=kind_unit(kind), enabled=progress) as bar:
            for rows, vectors in self._batches(prepared, kind, instruction, batch_size):
                vectors = np.asarray(vectors, dtype=np.float32)
                if out is None:
                    out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
                out[rows] = vectors
                bar.update(len(rows))
                if on_vectors is not None:
                    on_vectors(rows, vectors)
                if on_batch is not None:
                    on_batch(len(rows))
        assert out is not None
        return out

    def _batches(self, prepared: Prepared, kind: Kind, instruction: str, batch_size: int | None):
        """``(rows, vectors)`` per batch: by tokens when ``prepared`` counted them, else by texts (``batch_size``
        for this call, else the encoder's); a budget halved after running out of memory stays halved."""
        def run(batch: tuple[list[int], Any]) -> Any:
            return self._encode_rows(prepared, batch[0], kind, instruction, batch[1])

        def inputs(rows: list[int]) -> tuple[list[int], Any]:
            return rows, self._inputs(prepared, rows, kind)

        def plain(rows: list[int]) -> Any:
            return self._encode_rows(prepared, rows, kind, instruction)

        ahead = type(self)._inputs is not BaseEncoder._inputs  # host work of the next batch on a thread

        counted = prepared.lengths is not None
        budget = self.budget if counted else self.count_budget
        lengths = prepared.lengths if counted else [len(t) for t in prepared.texts]  # characters: the order only
        saved = budget.texts
        if batch_size is not None:
            budget.texts = batch_size
        cap = budget.texts
        try:
            # a batch's vectors are taken to the host (``finished``) once the next batch is launched
            if ahead:
                yield from run_batches(lengths, run, budget, name=self.name, device=self.device, prepare=inputs,
                                       finish=finished)
            else:
                yield from run_batches(lengths, plain, budget, name=self.name, device=self.device, finish=finished)
        finally:
            if cap is not None and budget.texts is not None and budget.texts < cap:  # halved by texts in this call
                saved = budget.texts if saved is None else min(saved, budget.texts)
            budget.texts = saved

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

    def _prepare(self, texts: list[str], kind: Kind, instruction: str) -> Prepared:
        """Tokenize ``texts`` once (with ``instruction``); by default nothing is counted (batches by texts)."""
        return Prepared(texts, None)

    def _inputs(self, prepared: Prepared, rows: list[int], kind: Kind) -> Any:
        """The host-side inputs of a batch (padded, pinned), made on a background thread while the batch before it
        runs; None by default (``_encode_rows`` then makes its own)."""
        return None

    @abstractmethod
    def _encode_rows(self, prepared: Prepared, rows: list[int], kind: Kind, instruction: str,
                     inputs: Any = None) -> np.ndarray | Launched:
        """Vectors of the texts at ``rows`` of ``prepared``, in that order (``inputs``: ``_inputs``' for them): an
        array, or ``Launched`` vectors still on the device (taken to the host once the next batch runs)."""
