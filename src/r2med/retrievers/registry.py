"""Retrievers by name: ``bm25``, a dense model of the zoo, or a local model directory / hub id."""

from __future__ import annotations

import difflib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from r2med.errors import UsageError
from r2med.retrievers.base import Retriever


@dataclass(frozen=True)
class RetrieverOptions:
    """Options of ``r2med run`` that retrievers may read; ``cache_dir`` is R2MED_HOME (None: no caching)."""

    cache_dir: Path | None
    progress: bool = True
    bm25_variant: str = "r2med"
    k1: float = 0.9
    b: float = 0.4
    device: str | None = None
    batch_size: int | None = None
    query_instruction: str | None = None
    doc_instruction: str | None = None


@dataclass(frozen=True)
class RetrieverSpec:  # TEMPORARY on main until the tables branch lands
    name: str
    bm25_variant: str = "r2med"
    k1: float = 0.9
    b: float = 0.4
    device: str | None = None
    batch_size: int | None = None
    query_instruction: str | None = None
    doc_instruction: str | None = None
    identical_ids: str | None = None


def _bm25(options: RetrieverOptions) -> Retriever:
    from r2med.retrievers.bm25.retriever import BM25Retriever

    cache = options.cache_dir / "indexes" / "bm25" if options.cache_dir is not None else None
    return BM25Retriever(variant=options.bm25_variant, k1=options.k1, b=options.b, cache_dir=cache, progress=options.progress)


def system_name(name: str) -> str:
    """A results-folder name for a model name, directory or hub id.

    >>> system_name("nv"), system_name("/models/my-model/"), system_name("Qwen/Qwen3-Embedding-0.6B")
    ('nv', 'my-model', 'Qwen__Qwen3-Embedding-0.6B')
    """
    path = Path(name.rstrip("/"))
    if path.is_absolute() or name.startswith((".", "~")):
        return re.sub(r"[^\w.+-]", "_", path.name)
    return re.sub(r"[^\w.+-]", "_", name.replace("/", "__"))


def _api_encoder(spec):
    from r2med.retrievers.dense.api import OpenAIEmbeddings, VoyageEmbeddings

    # as the authors' code sent texts: newlines flattened, JSON-quoted, cut to 6000 / 16000 tokens
    if "voyage" in spec.model:
        return VoyageEmbeddings(spec.model, preprocess="r2med", max_input_tokens=16000)
    return OpenAIEmbeddings(spec.model, preprocess="r2med", max_input_tokens=6000)


def _dense(name: str, options: RetrieverOptions) -> Retriever:
    from r2med.retrievers.dense.cache import EmbeddingCache
    from r2med.retrievers.dense.factory import make_encoder
    from r2med.retrievers.dense.retriever import DenseRetriever
    from r2med.retrievers.dense.zoo import model_names, resolve_model

    try:
        spec = resolve_model(name, query_instruction=options.query_instruction, document_instruction=options.doc_instruction)
    except UsageError:
        names = ["bm25", *model_names()]
        close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else "."
        raise UsageError(
            f"unknown retriever '{name}'{hint} Valid: {', '.join(names)}, or a local model directory or hub id"
        ) from None
    encoder = _api_encoder(spec) if spec.backend == "api" else make_encoder(spec, device=options.device, batch_size=options.batch_size)
    if options.cache_dir is not None:
        root = options.cache_dir / "embeddings"
    else:  # --no-cache: embeddings live only as long as this retriever
        scratch = tempfile.TemporaryDirectory(prefix="r2med-embeddings-")
        root = Path(scratch.name)
    retriever = DenseRetriever(
        name=system_name(spec.name if spec.name else name),
        encoder=encoder,
        instructions=lambda dataset: (spec.instruction("query", dataset), spec.instruction("document", dataset)),
        cache=EmbeddingCache(root),
        batch_size=options.batch_size,
        progress=options.progress,
    )
    if options.cache_dir is None:
        retriever._scratch = scratch  # type: ignore[attr-defined]  # removed with the retriever
    return retriever


def _remote(model: str, options: RetrieverOptions) -> Retriever:
    """``openai:<model id>``: any OpenAI-compatible /v1/embeddings server ($OPENAI_BASE_URL: vLLM, TEI, ...)."""
    from r2med.retrievers.dense.api import OpenAIEmbeddings
    from r2med.retrievers.dense.cache import EmbeddingCache
    from r2med.retrievers.dense.retriever import DenseRetriever

    if not model.strip():
        raise UsageError("--retriever openai:MODEL needs the model id the server knows, e.g. openai:Qwen/Qwen3-Embedding-8B")
    encoder = OpenAIEmbeddings(model.strip(), batch_size=options.batch_size or 128)
    root = options.cache_dir / "embeddings" if options.cache_dir is not None else Path(tempfile.mkdtemp(prefix="r2med-embeddings-"))
    query_instruction, doc_instruction = options.query_instruction or "", options.doc_instruction or ""
    return DenseRetriever(
        name=system_name(model.strip()), encoder=encoder,
        instructions=lambda dataset: (query_instruction, doc_instruction),
        cache=EmbeddingCache(root), batch_size=options.batch_size, progress=options.progress,
    )


def make_retriever(spec, *, cache_dir, progress=True) -> Retriever:
    if isinstance(spec, str):
        spec = RetrieverSpec(spec)
    from dataclasses import fields
    options = RetrieverOptions(cache_dir=cache_dir, progress=progress, **{f.name: getattr(spec, f.name) for f in fields(RetrieverOptions) if f.name not in ("cache_dir", "progress")})
    r = _make_retriever(spec.name, options)
    if spec.identical_ids is not None:
        r.ignore_identical_ids = spec.identical_ids == "drop"
    return r


def _make_retriever(name: str, options: RetrieverOptions) -> Retriever:
    """``bm25``, any zoo model (``r2med models list``), a local model directory, a hub id, or
    ``openai:<model id>`` served by any OpenAI-compatible embeddings endpoint (``$OPENAI_BASE_URL``).

    Unknown names fail with the valid list and a suggestion.
    """
    if name.strip().lower() == "bm25":
        return _bm25(options)
    if name.strip().lower().startswith("openai:"):
        return _remote(name.strip()[len("openai:"):], options)
    return _dense(name, options)
