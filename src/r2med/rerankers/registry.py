"""Rerankers by name: the three of the paper, ``listwise`` over an LLM server, or any cross-encoder by path / hub id.

======================  =========================================================  ==========  ============
name (aliases)          model                                                      max length  results folder
======================  =========================================================  ==========  ============
bge-reranker-v2-m3      BAAI/bge-reranker-v2-m3 (cross-encoder)                    512         bge-reranker
monobert (mono)         castorini/monobert-large-msmarco (cross-encoder, class 1)  512         monobert
rankllama (llama)       castorini/rankllama-v1-7b-lora-passage on Llama-2-7b-hf    1024        rankllama
listwise (rankgpt)      --llm-model on --base-url, RankGPT sliding window          (300 words) listwise-<llm>
======================  =========================================================  ==========  ============

Each kind of reranker (cross-encoder, rankllama, listwise) has a builder in :data:`BUILDERS`; a name resolves to a
:class:`RerankerSpec` (``resolve_reranker``) whose ``kind`` picks the builder.

Max lengths are the ones the R2MED authors ran (``src/eval_reranker.py``: 1024 for RankLLaMA, 512
otherwise; BAAI's card allows 8192 and recommends 1024 for bge-reranker-v2-m3: pass ``max_length``
to change it). The folders are the official ``results/reranker/<folder>/...`` names, so results sit
beside the published ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from r2med.errors import UsageError
from r2med.io.names import check_name
from r2med.registry import Registry
from r2med.rerankers.base import Reranker

if TYPE_CHECKING:
    from r2med.rerankers.pointwise import PairScorer


@dataclass(frozen=True)
class RerankerSpec:
    """A reranker of the registry: what to load and how it was run."""

    name: str
    kind: str
    folder: str
    model: str | None = None
    base_model: str | None = None
    max_length: int | None = None
    score_column: int | None = None
    dtype: str | None = None
    aliases: tuple[str, ...] = ()
    description: str = ""


SPECS: tuple[RerankerSpec, ...] = (
    RerankerSpec("bge-reranker-v2-m3", "cross-encoder", "bge-reranker", model="BAAI/bge-reranker-v2-m3", max_length=512,
                 aliases=("bge-reranker", "bge-reranker-m3"), description="BGE reranker v2 (XLM-R, 568M)"),
    RerankerSpec("monobert", "cross-encoder", "monobert", model="castorini/monobert-large-msmarco", max_length=512,
                 score_column=1, aliases=("mono", "monobert-large-msmarco"),
                 description="monoBERT large on MS MARCO; score = logit of class 1"),
    RerankerSpec("rankllama", "rankllama", "rankllama", model="castorini/rankllama-v1-7b-lora-passage",
                 base_model="meta-llama/Llama-2-7b-hf", max_length=1024, dtype="float16",
                 aliases=("llama", "rankllama-7b"), description="RankLLaMA 7B (LoRA on Llama-2), pointwise"),
    RerankerSpec("listwise", "listwise", "listwise", aliases=("rankgpt",),
                 description="RankGPT sliding window over any OpenAI-compatible chat model (--llm-model)"),
)


def reranker_registry() -> Registry[RerankerSpec]:
    """The named rerankers (canonical names in the table above)."""
    aliases = {alias: spec.name for spec in SPECS for alias in spec.aliases}
    return Registry("reranker", {spec.name: spec for spec in SPECS}, aliases)


def _looks_like_model(name: str) -> bool:
    return "/" in name or Path(name).expanduser().exists() or name.startswith((".", "~"))


def resolve_reranker(name: str) -> RerankerSpec:
    """The spec for a registry name, or a generic cross-encoder spec for a local directory or hub id.

    >>> resolve_reranker("mono").model, resolve_reranker("org/my-ce").folder
    ('castorini/monobert-large-msmarco', 'org__my-ce')
    >>> resolve_reranker("monobrt")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: unknown reranker 'monobrt'; did you mean 'monobert'? Valid: bge-reranker-v2-m3, listwise, monobert, rankllama, or a local cross-encoder directory or hub id
    """
    from r2med.retrievers.registry import system_name

    registry = reranker_registry()
    if name in registry:
        return registry.get(name)
    if _looks_like_model(name):
        return RerankerSpec(name, "cross-encoder", system_name(name, flag="--reranker"), model=name)
    try:
        registry.canonical(name)
    except UsageError as exc:
        raise UsageError(f"{exc}, or a local cross-encoder directory or hub id") from None
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class RerankerOptions:
    """Options of ``r2med rerank`` that rerankers read; ``cache_dir`` is R2MED_HOME (None: no caching).

    Pointwise: ``device``, ``dtype``, ``batch_size``, ``max_length`` (overrides the spec), ``base_model``
    (RankLLaMA). Listwise: the LLM endpoint, the window, the sampling, concurrency and retries.
    """

    cache_dir: Path | None = None
    progress: bool = True
    device: str | None = None
    dtype: str | None = None
    batch_size: int | None = None
    max_length: int | None = None
    base_model: str | None = None
    llm_model: str | None = None
    llm_name: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    window: int = 20
    stride: int = 10
    direction: str = "back_to_front"
    max_words: int | None = 300
    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    concurrency: int = 8
    with_scores: bool = False
    reasoning_style: str = "auto"
    on_error: str = "raise"
    timeout: float = 300.0
    max_retries: int = 5

    def __post_init__(self) -> None:
        if self.llm_name is not None:  # it becomes part of the results folder (listwise-<llm name>)
            check_name(self.llm_name, what="--llm-name", fix="name the LLM with a plain name such as 'o3-mini'")


def _cross_encoder(spec: RerankerSpec, options: RerankerOptions) -> Reranker:
    from r2med.rerankers.cross_encoder import CrossEncoderScorer

    scorer = CrossEncoderScorer(
        str(spec.model), max_length=options.max_length or spec.max_length, device=options.device,
        dtype=options.dtype or spec.dtype, score_column=spec.score_column,
    )
    return _pointwise(spec, options, scorer, default_batch_size=32)


def _rankllama(spec: RerankerSpec, options: RerankerOptions) -> Reranker:
    from r2med.rerankers.rankllama import RankLlamaScorer

    scorer = RankLlamaScorer(
        str(spec.model), options.base_model or spec.base_model, max_length=options.max_length or spec.max_length or 1024,
        device=options.device, dtype=options.dtype or spec.dtype,
    )
    return _pointwise(spec, options, scorer, default_batch_size=8)


def _pointwise(spec: RerankerSpec, options: RerankerOptions, scorer: PairScorer, *, default_batch_size: int) -> Reranker:
    from r2med.rerankers.pointwise import PointwiseReranker

    cache = options.cache_dir / "rerank" / "scores" if options.cache_dir is not None else None
    return PointwiseReranker(spec.folder, scorer, batch_size=options.batch_size or default_batch_size, cache_dir=cache,
                             progress=options.progress)


def _listwise(spec: RerankerSpec, options: RerankerOptions) -> Reranker:
    from r2med.llm.cache import ResponseCache
    from r2med.llm.client import ChatClient, SamplingParams
    from r2med.rerankers.listwise import ListwiseReranker
    from r2med.retrievers.registry import system_name
    from r2med.settings import get_settings

    if not options.llm_model:
        raise UsageError("the listwise reranker needs an LLM: pass --llm-model MODEL (and --base-url URL)")
    base_url = options.base_url or get_settings().openai_base_url or "https://api.openai.com/v1"
    client = ChatClient(options.llm_model, base_url, api_key=options.api_key, timeout=options.timeout,
                        max_retries=options.max_retries)
    model_folder = system_name(options.llm_model, flag="--llm-model")
    llm = options.llm_name or model_folder
    params = SamplingParams(options.temperature, options.top_p, options.max_tokens, options.seed)
    cache = None
    if options.cache_dir is not None:
        cache = ResponseCache(options.cache_dir / "rerank" / "listwise" / f"{model_folder}.jsonl")
    suffix = "+scores" if options.with_scores else ""
    return ListwiseReranker(
        client, name=f"{spec.folder}-{llm}{suffix}", window=options.window, stride=options.stride,
        direction=options.direction, max_words=options.max_words, params=params, cache=cache,
        concurrency=options.concurrency, with_scores=options.with_scores, style=options.reasoning_style,
        on_error=options.on_error, progress=options.progress,
    )


#: ``(spec, options) -> Reranker``
Builder = Callable[[RerankerSpec, RerankerOptions], Reranker]

#: How each kind of reranker is built; adding a kind is its module and one row here.
BUILDERS: Mapping[str, Builder] = MappingProxyType({
    "cross-encoder": _cross_encoder,
    "rankllama": _rankllama,
    "listwise": _listwise,
})
KINDS = tuple(BUILDERS)


def make_reranker(name: str, options: RerankerOptions | None = None) -> Reranker:
    """Build the reranker ``name`` (see ``resolve_reranker``) with ``options``; its ``name`` is the results folder."""
    spec = resolve_reranker(name)
    return BUILDERS[spec.kind](spec, options or RerankerOptions())
