"""Your own model as Python code: the public ``r2med.Encoder`` protocol, and MTEB-style model objects.

Two kinds of objects are accepted as they are and wrapped by :class:`PythonEncoder` into the encoder role the
dense retriever uses (``r2med.retrievers.dense.base.Encoder``):

- an **r2med encoder** (:class:`Encoder`): ``encode(texts, *, kind, instruction)`` with ``kind`` "query" or
  "document" and the model's ``instruction`` for that kind (empty: none), applied by the model itself; and a
  ``cache_key`` string that names the model and changes whenever its vectors would;
- an **MTEB-style model** (``model.encode(sentences, **kwargs)``, e.g. a ``SentenceTransformer``): the
  instruction is prepended to each text (as the official R2MED code gives instructions to most models), and
  ``batch_size`` / ``show_progress_bar`` are passed only where its ``encode`` names them. Its cache key is
  ``r2med.run(..., cache_key=...)``'s, or the object's own ``cache_key``.

Every batch's output is checked: one finite row per text, the same width in every batch; a model that breaks
that fails with the batch's first text, never a silent wrong number. The cache key keys both the embedding cache
and the stored results' configuration: a run is reused only for the same key, instruction and texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from r2med.errors import InvalidInputError, UsageError
from r2med.io.progress import Reporter, progress_bar
from r2med.retrievers.dense.base import keyword_names

#: Bumped whenever a change here changes the vectors of an unchanged model.
PYTHON_ENCODER_VERSION = 1
DEFAULT_BATCH = 32


@runtime_checkable
class Encoder(Protocol):
    """Your model for ``r2med.run``: texts in, one vector per text out.

    ``encode(texts, *, kind, instruction)`` returns a ``(len(texts), dim)`` array (NumPy, a list of lists, a CPU
    tensor); ``kind`` is "query" or "document"; ``instruction`` is the text r2med was told to give the model for
    that kind ("" by default; ``r2med.run(..., query_instruction=...)``). ``cache_key`` names the model and its
    version: embeddings and results are reused only under the same key, so change it when the model changes.
    """

    cache_key: str

    def encode(self, texts: list[str], *, kind: str, instruction: str) -> Any: ...


def encoder_style(model: Any) -> str:
    """"r2med" when ``model.encode`` names ``kind`` and ``instruction``; "mteb-split" when the model also has
    ``encode_query`` and ``encode_document`` (sentence-transformers 5: each kind through its own method); "mteb" for
    any other ``encode`` (``encode(texts, **kwargs)`` included: it is never told the kind).

    >>> class Mine:
    ...     def encode(self, texts, *, kind, instruction): ...
    >>> class Mteb:
    ...     def encode(self, sentences, **kwargs): ...
    >>> class Split(Mteb):
    ...     def encode_query(self, sentences, **kwargs): ...
    ...     def encode_document(self, sentences, **kwargs): ...
    >>> encoder_style(Mine()), encoder_style(Mteb()), encoder_style(Split())
    ('r2med', 'mteb', 'mteb-split')
    """
    encode = getattr(model, "encode", None)
    if not callable(encode):
        raise UsageError(f"{type(model).__name__} has no encode method: r2med.run takes bm25, a model name, path or hub "
                         "id, or an object with encode(texts, *, kind, instruction) (see r2med.Encoder) or an "
                         "MTEB-style encode(sentences, **kwargs)")
    if {"kind", "instruction"} <= keyword_names(encode):
        return "r2med"
    # sentence-transformers 5: encode_query / encode_document apply the model's own query and document prompts
    split = callable(getattr(model, "encode_query", None)) and callable(getattr(model, "encode_document", None))
    return "mteb-split" if split else "mteb"


def model_cache_key(model: Any, given: str | None) -> str:
    """The cache key: ``given`` (``r2med.run(..., cache_key=)``), else the model's ``cache_key`` string."""
    key = given if given is not None else getattr(model, "cache_key", None)
    if not isinstance(key, str) or not key.strip():
        shown = "none" if key is None else repr(key)
        raise UsageError(
            f"{type(model).__name__} needs a cache key (got {shown}): give the object a cache_key string or pass "
            "r2med.run(model, cache_key='my-model-v1'); it keys the embedding cache and the stored results, so "
            "change it whenever the model changes")
    return key.strip()


def _as_rows(output: Any) -> Any:
    """A model's output as a NumPy float32 array (tensors moved to the CPU first)."""
    import numpy as np

    for step in ("detach", "cpu", "float", "numpy"):  # a torch tensor on any device
        if hasattr(output, step) and not isinstance(output, np.ndarray):
            output = getattr(output, step)()
    return np.asarray(output, dtype=np.float32)


class PythonEncoder:
    """A user's object (:class:`Encoder` or MTEB-style) as the dense retriever's encoder, batch by batch."""

    def __init__(self, model: Any, *, cache_key: str | None = None, batch_size: int | None = None) -> None:
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        self.model = model
        self.style = encoder_style(model)
        self.key = model_cache_key(model, cache_key)
        self.batch_size = batch_size or DEFAULT_BATCH
        self.name = f"python:{self.key}"
        self._width: int | None = None
        # an MTEB-style model's method per kind and the keywords it names, looked up once
        split = self.style == "mteb-split"
        self._methods = {kind: (method, keyword_names(method)) for kind, method in (
            ("query", model.encode_query if split else model.encode),
            ("document", model.encode_document if split else model.encode))}

    def cache_key(self, kind: str) -> dict[str, Any]:
        return {"encoder": f"r2med-python/{PYTHON_ENCODER_VERSION}", "cache_key": self.key, "style": self.style}

    def _call(self, texts: list[str], kind: str, instruction: str) -> Any:
        if self.style == "r2med":
            return self.model.encode(texts, kind=kind, instruction=instruction)
        encode, names = self._methods[kind]
        extra = {key: value for key, value in (("batch_size", len(texts)), ("show_progress_bar", False)) if key in names}
        return encode([instruction + text for text in texts], **extra)

    def encode(self, texts: Sequence[str], *, kind: str, instruction: str = "", batch_size: int | None = None,
               progress: bool = False, on_batch: Reporter | None = None) -> Any:
        """The model's vectors, batch by batch; ``progress`` shows this call's own bar, ``on_batch(n)`` is called
        after each batch of ``n`` texts (the embedding cache's bar)."""
        import numpy as np

        from r2med.retrievers.dense.base import kind_label, kind_unit

        if kind not in ("query", "document"):
            raise UsageError(f"kind must be 'query' or 'document', got {kind!r}")
        texts = list(texts)
        size = batch_size or self.batch_size
        parts = []
        with progress_bar(len(texts), desc=f"{self.key} {kind_label(kind)}", unit=kind_unit(kind), enabled=progress) as bar:
            for start in range(0, len(texts), size):
                batch = texts[start:start + size]
                rows = self._check(self._rows(self._call(batch, kind, instruction), batch), batch)
                parts.append(rows)
                bar.update(len(batch))
                if on_batch is not None:
                    on_batch(len(batch))
        return np.concatenate(parts) if parts else np.zeros((0, self._width or 0), dtype=np.float32)

    def _rows(self, output: Any, batch: list[str]) -> Any:
        try:
            return _as_rows(output)
        except (TypeError, ValueError) as exc:  # ragged rows, a dict of outputs, strings, a list of tensors
            raise InvalidInputError(
                f"{type(self.model).__name__}.encode (cache key {self.key!r}) returned a {type(output).__name__} that "
                f"is not an (n, dim) array of numbers ({exc}) for the batch starting {batch[0][:60]!r}; return a "
                "NumPy array, a list of equal-length lists of floats or a tensor") from None

    def _check(self, rows: Any, batch: list[str]) -> Any:
        import numpy as np

        where = f"{type(self.model).__name__}.encode (cache key {self.key!r})"
        first = batch[0][:60] if batch else ""
        if rows.ndim != 2 or rows.shape[0] != len(batch):
            raise InvalidInputError(f"{where} returned an array of shape {rows.shape} for {len(batch)} texts "
                                    f"(first: {first!r}); it must return one vector per text, shape (n, dim)")
        if self._width is not None and rows.shape[1] != self._width:
            raise InvalidInputError(f"{where} returned vectors of width {rows.shape[1]} after {self._width} "
                                    f"(batch starting {first!r}); every vector must have the same width")
        bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
        if bad.size:
            raise InvalidInputError(f"{where} returned a vector with NaN or infinity for the text "
                                    f"{batch[int(bad[0])][:60]!r}; fix the model (or its inputs) and run again")
        self._width = rows.shape[1]
        return rows


def system_folder(key: str) -> str:
    """The default results-folder name of a Python model: its cache key, ``/`` as ``__``.

    >>> system_folder("acme/encoder v2")
    'acme__encoder_v2'
    """
    import re

    from r2med.io.names import check_name

    return check_name(re.sub(r"[^\w.+-]", "_", key.replace("/", "__")), what=f"cache_key {key!r} as a results folder name",
                      fix="pass r2med.run(..., name='my-model')")
