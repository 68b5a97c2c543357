"""Retrievers by name: ``bm25``, a dense model of the zoo, or a local model directory / hub id.

:data:`FAMILIES` is the table of retriever families, tried in order: each has a matcher on the retriever name and
a builder ``(spec, cache_dir, progress) -> Retriever``. Adding a family is its module and one row there.
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2med.errors import UsageError
from r2med.io.names import check_name
from r2med.retrievers.base import Retriever


@dataclass(frozen=True)
class RetrieverSpec:
    """One retriever of ``r2med run`` or a pipeline's ``[[retriever]]`` table: its name and the options retrievers
    may read. ``identical_ids``: "drop" | "keep" | None (the family's default: dense drop, BM25 keep).
    ``encoder``: a Python model (``r2med.run``'s, wrapped in a ``PythonEncoder``); then ``name`` is its system name."""

    name: str
    bm25_variant: str = "r2med"
    k1: float = 0.9
    b: float = 0.4
    device: str | None = None
    batch_size: int | None = None
    query_instruction: str | None = None
    doc_instruction: str | None = None
    identical_ids: str | None = None
    encoder: Any = None

    def settings(self) -> dict[str, Any]:
        """The options as recorded in manifests (a Python encoder by its cache key)."""
        values = dict(vars(self))
        if self.encoder is not None:
            values["encoder"] = self.encoder.name
        else:
            del values["encoder"]
        return values


#: ``(spec, cache_dir, progress) -> Retriever``; ``cache_dir`` is R2MED_HOME (None: no caching).
Builder = Callable[[RetrieverSpec, Path | None, bool], Retriever]


def _bm25(spec: RetrieverSpec, cache_dir: Path | None, progress: bool) -> Retriever:
    from r2med.retrievers.bm25.retriever import BM25Retriever

    cache = cache_dir / "indexes" / "bm25" if cache_dir is not None else None
    return BM25Retriever(variant=spec.bm25_variant, k1=spec.k1, b=spec.b, cache_dir=cache, progress=progress)


def system_name(name: str | os.PathLike[str], *, flag: str = "--retriever") -> str:
    """A results-folder name for a model name, directory or hub id; UsageError naming ``flag`` when none is usable.

    A zoo name or hub id is itself (``/`` as ``__``); a directory given as a path (absolute, or starting with ``.``
    or ``~``) is its last part and 8 hex digits of its resolved path's sha256, so two models in folders of the same
    name (``.../run1/model``, ``.../run2/model``) never share results (``--name`` chooses another name).

    >>> system_name("nv"), system_name("Qwen/Qwen3-Embedding-0.6B")
    ('nv', 'Qwen__Qwen3-Embedding-0.6B')
    >>> system_name("/models/my-model/"), system_name("/models/my-model"), system_name("/other/my-model")
    ('my-model-6b7440fa', 'my-model-6b7440fa', 'my-model-2c88e827')
    >>> system_name("/")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: --retriever '/': its results folder name '' cannot be used as a folder or file name: it is empty; pass the model's directory or hub id (its last part names the results folder)
    """
    import hashlib

    name = os.fspath(name)
    path = Path(name.rstrip("/") or name).expanduser()
    if path.is_absolute() or name.startswith((".", "~")):  # "." and ".." name the folders they stand for
        where = str(path.resolve())  # links to one model directory are one model
        safe = re.sub(r"[^\w.+-]", "_", Path(where).name)
        if safe:
            safe = f"{safe}-{hashlib.sha256(where.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
    else:
        safe = re.sub(r"[^\w.+-]", "_", name.replace("/", "__"))
    return check_name(safe, what=f"{flag} {name!r}: its results folder name",
                      fix="pass the model's directory or hub id (its last part names the results folder)")


def _api_encoder(spec):
    from r2med.retrievers.dense.api import OpenAIEmbeddings, VoyageEmbeddings

    # as the authors' code sent texts: newlines flattened, JSON-quoted, cut to 6000 / 16000 tokens
    if "voyage" in spec.model:
        return VoyageEmbeddings(spec.model, preprocess="r2med", max_input_tokens=16000)
    return OpenAIEmbeddings(spec.model, preprocess="r2med", max_input_tokens=6000)


def _dense(rspec: RetrieverSpec, cache_dir: Path | None, progress: bool) -> Retriever:
    from r2med.retrievers.dense.cache import EmbeddingCache
    from r2med.retrievers.dense.factory import make_encoder
    from r2med.retrievers.dense.retriever import DenseRetriever
    from r2med.retrievers.dense.zoo import model_names, resolve_model

    name = rspec.name
    try:
        spec = resolve_model(name, query_instruction=rspec.query_instruction, document_instruction=rspec.doc_instruction)
    except UsageError:
        names = [*(fixed for family in FAMILIES for fixed in family.names), *model_names()]
        close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else "."
        raise UsageError(
            f"unknown retriever '{name}'{hint} Valid: {', '.join(names)}, or a local model directory or hub id"
        ) from None
    encoder = _api_encoder(spec) if spec.backend == "api" else make_encoder(spec, device=rspec.device, batch_size=rspec.batch_size)
    root, scratch = _embedding_root(cache_dir)
    retriever = DenseRetriever(
        # a zoo name or hub id names its folder; a local directory its resolved path (run1/model vs run2/model)
        name=system_name(spec.model if Path(spec.model).is_absolute() else (spec.name or name)),
        encoder=encoder,
        instructions=lambda dataset: (spec.instruction("query", dataset), spec.instruction("document", dataset)),
        cache=EmbeddingCache(root),
        batch_size=rspec.batch_size,
        progress=progress,
    )
    return _keep(retriever, scratch)


def _embedding_root(cache_dir: Path | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """Where embeddings are cached: ``<R2MED_HOME>/embeddings``, or with --no-cache a temporary folder that lives
    only as long as the retriever (returned too, to be kept with it by :func:`_keep`)."""
    if cache_dir is not None:
        return cache_dir / "embeddings", None
    scratch = tempfile.TemporaryDirectory(prefix="r2med-embeddings-")
    return Path(scratch.name), scratch


def _keep(retriever: Retriever, scratch: tempfile.TemporaryDirectory | None) -> Retriever:
    if scratch is not None:
        retriever._scratch = scratch  # type: ignore[attr-defined]  # removed with the retriever
    return retriever


def _python(spec: RetrieverSpec, cache_dir: Path | None, progress: bool) -> Retriever:
    """A Python model (``r2med.run(model)``): an ``r2med.Encoder`` or an MTEB-style object, as a dense retriever."""
    from r2med.retrievers.dense.cache import EmbeddingCache
    from r2med.retrievers.dense.retriever import DenseRetriever

    root, scratch = _embedding_root(cache_dir)
    query_instruction, doc_instruction = spec.query_instruction or "", spec.doc_instruction or ""
    return _keep(DenseRetriever(
        name=check_name(spec.name, what="the system name of a Python encoder", fix="pass r2med.run(..., name='my-model')"),
        encoder=spec.encoder, instructions=lambda dataset: (query_instruction, doc_instruction),
        cache=EmbeddingCache(root), batch_size=spec.batch_size, progress=progress,
    ), scratch)


def _remote(spec: RetrieverSpec, cache_dir: Path | None, progress: bool) -> Retriever:
    """``openai:<model id>``: any OpenAI-compatible /v1/embeddings server ($OPENAI_BASE_URL: vLLM, TEI, ...)."""
    from r2med.retrievers.dense.api import OpenAIEmbeddings
    from r2med.retrievers.dense.cache import EmbeddingCache
    from r2med.retrievers.dense.retriever import DenseRetriever

    model = spec.name.strip()[len("openai:"):]
    if not model.strip():
        raise UsageError("--retriever openai:MODEL needs the model id the server knows, e.g. openai:Qwen/Qwen3-Embedding-8B")
    encoder = OpenAIEmbeddings(model.strip(), batch_size=spec.batch_size or 128)
    root, scratch = _embedding_root(cache_dir)
    query_instruction, doc_instruction = spec.query_instruction or "", spec.doc_instruction or ""
    return _keep(DenseRetriever(
        name=system_name(model.strip()), encoder=encoder,
        instructions=lambda dataset: (query_instruction, doc_instruction),
        cache=EmbeddingCache(root), batch_size=spec.batch_size, progress=progress,
    ), scratch)


@dataclass(frozen=True)
class RetrieverFamily:
    """A kind of retriever: ``matches(spec)`` says whether a retriever spec is this family's, ``build`` makes it;
    ``names`` are the fixed names it answers to (listed when a name is unknown)."""

    name: str
    matches: Callable[[RetrieverSpec], bool]
    build: Builder
    names: tuple[str, ...] = ()
    description: str = ""


#: The retriever families, tried in order (the last one, dense, takes every name left: zoo names, model
#: directories and hub ids, and fails with the valid names when none fits).
FAMILIES: tuple[RetrieverFamily, ...] = (
    RetrieverFamily("python", lambda spec: spec.encoder is not None, _python,
                    description="a Python model object (r2med.run): an r2med.Encoder or an MTEB-style encode"),
    RetrieverFamily("bm25", lambda spec: spec.name.strip().lower() == "bm25", _bm25, names=("bm25",),
                    description="BM25 over Lucene's English analysis (r2med or lucene variant)"),
    RetrieverFamily("openai", lambda spec: spec.name.strip().lower().startswith("openai:"), _remote,
                    description="openai:<model id>: any OpenAI-compatible embeddings endpoint ($OPENAI_BASE_URL)"),
    RetrieverFamily("dense", lambda spec: True, _dense,
                    description="a dense model of the zoo (r2med models list), a local model directory or a hub id"),
)


def make_retriever(spec: RetrieverSpec | str, *, cache_dir: Path | None, progress: bool = True) -> Retriever:
    """``bm25``, any zoo model (``r2med models list``), a local model directory, a hub id, or
    ``openai:<model id>`` served by any OpenAI-compatible embeddings endpoint (``$OPENAI_BASE_URL``).

    ``spec``: a :class:`RetrieverSpec` or just a name; ``cache_dir``: R2MED_HOME (None: nothing cached).
    ``spec.identical_ids`` ("drop"/"keep") overrides the family's ``ignore_identical_ids``.
    Unknown names fail with the valid list and a suggestion.
    """
    if isinstance(spec, str):
        spec = RetrieverSpec(name=spec)
    if spec.identical_ids not in (None, "drop", "keep"):
        raise UsageError(f"identical_ids must be 'drop' or 'keep' (or unset: the family's default), got {spec.identical_ids!r}")
    family = next(family for family in FAMILIES if family.matches(spec))
    retriever = family.build(spec, cache_dir, progress)
    if spec.identical_ids is not None:  # default: as the official numbers of the family (dense drop, BM25 keep)
        retriever.ignore_identical_ids = spec.identical_ids == "drop"
    return retriever
