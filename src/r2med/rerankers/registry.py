"""Rerankers by name: the three of the paper, listwise, ReasonRank, Rank1 and Qwen3-Reranker over an LLM, or any cross-encoder.

======================  =========================================================  ==========  ============
name (aliases)          model                                                      max length  results folder
======================  =========================================================  ==========  ============
bge-reranker-v2-m3      BAAI/bge-reranker-v2-m3 (cross-encoder)                    512         bge-reranker
monobert (mono)         castorini/monobert-large-msmarco (cross-encoder, class 1)  512         monobert
rankllama (llama)       castorini/rankllama-v1-7b-lora-passage on Llama-2-7b-hf    1024        rankllama
listwise (rankgpt)      --llm-model on --base-url, RankGPT sliding window          (300 words) listwise-<llm>
reasonrank-7b           liuwenhan/reasonrank-7B on --base-url (rank_GPT_reasoning)  512         reasonrank-7b
reasonrank-32b          liuwenhan/reasonrank-32B on --base-url (rank_GPT_reasoning) 512         reasonrank-32b
reasonrank-8b           liuwenhan/reasonrank-8B on --base-url (rank_GPT_qwen3)      512         reasonrank-8b
rank1-7b (and 0.5b,     jhu-clsp/rank1-7b on --base-url (/v1/completions, logprobs) (16000)    rank1-7b
1.5b, 3b, 14b, 32b, mistral-2501-24b, llama3-8b)
qwen3-reranker-0.6b     Qwen/Qwen3-Reranker-0.6B here, or --via-server              8192        qwen3-reranker-0.6b
(and -4b, -8b)
======================  =========================================================  ==========  ============

Each kind of reranker (cross-encoder, rankllama, listwise, reasonrank, rank1, qwen3-reranker) is a row of :data:`KINDS`: its options class
(``r2med.rerankers.options``) and its builder ``(spec, options, runtime)``; a name resolves to a
:class:`RerankerSpec` (``resolve_reranker``) whose ``kind`` picks the row.

ReasonRank's max length is tokens per passage (the ReasonRank authors' DOC_MAXLEN for R2MED; see
``r2med.rerankers.reasonrank``). Max lengths of the others are the ones the R2MED authors ran (``src/eval_reranker.py``: 1024 for RankLLaMA, 512
otherwise; BAAI's card allows 8192 and recommends 1024 for bge-reranker-v2-m3: pass ``max_length``
to change it). The folders are the official ``results/reranker/<folder>/...`` names, so results sit
beside the published ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from r2med.errors import UsageError
from r2med.needs import Need
from r2med.options import Runtime
from r2med.registry import Registry
from r2med.rerankers.base import Reranker
from r2med.rerankers.options import (
    ListwiseOptions,
    PointwiseOptions,
    Qwen3RerankerOptions,
    Rank1Options,
    RankLlamaOptions,
    ReasonRankOptions,
)

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
    prompt_mode: str | None = None  # ReasonRank: the authors' --prompt_mode for this model


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
    RerankerSpec("reasonrank-7b", "reasonrank", "reasonrank-7b", model="liuwenhan/reasonrank-7B",
                 prompt_mode="rank_GPT_reasoning", description="ReasonRank 7B (Qwen2.5-7B), listwise with reasoning"),
    RerankerSpec("reasonrank-32b", "reasonrank", "reasonrank-32b", model="liuwenhan/reasonrank-32B",
                 prompt_mode="rank_GPT_reasoning", description="ReasonRank 32B (Qwen2.5-32B), listwise with reasoning"),
    RerankerSpec("reasonrank-8b", "reasonrank", "reasonrank-8b", model="liuwenhan/reasonrank-8B",
                 prompt_mode="rank_GPT_qwen3", description="ReasonRank 8B (Qwen3-8B), listwise with reasoning"),
    # reasoning / LLM pointwise rerankers (r2med.rerankers.rank1, r2med.rerankers.qwen3)
    *(RerankerSpec(f"rank1-{size}", "rank1", f"rank1-{size}", model=f"jhu-clsp/rank1-{size}",
                   aliases=(f"jhu-clsp/rank1-{size}",),
                   description=f"Rank1 {size}: reasons, then answers true/false; P(true) from a server's logprobs")
      for size in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "mistral-2501-24b", "llama3-8b")),
    *(RerankerSpec(f"qwen3-reranker-{size.lower()}", "qwen3-reranker", f"qwen3-reranker-{size.lower()}",
                   model=f"Qwen/Qwen3-Reranker-{size}", max_length=8192, aliases=(f"Qwen/Qwen3-Reranker-{size}",),
                   description=f"Qwen3-Reranker {size}: P(yes) vs no at the last position (local, or --via-server)")
      for size in ("0.6B", "4B", "8B")),
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
    r2med.errors.UsageError: unknown reranker 'monobrt'; did you mean 'monobert'? Valid: bge-reranker-v2-m3, listwise, monobert, qwen3-reranker-0.6b, qwen3-reranker-4b, qwen3-reranker-8b, rank1-0.5b, rank1-1.5b, rank1-14b, rank1-32b, rank1-3b, rank1-7b, rank1-llama3-8b, rank1-mistral-2501-24b, rankllama, reasonrank-32b, reasonrank-7b, reasonrank-8b, or a local cross-encoder directory or hub id
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


def _cross_encoder(spec: RerankerSpec, options: PointwiseOptions, runtime: Runtime) -> Reranker:
    from r2med.rerankers.cross_encoder import CrossEncoderScorer
    from r2med.rerankers.devices import scorer_on_devices

    scorer = scorer_on_devices(
        CrossEncoderScorer, str(spec.model), max_length=options.max_length or spec.max_length, device=options.device,
        dtype=options.dtype or spec.dtype, score_column=spec.score_column, batch_tokens=options.batch_tokens,
    )
    return _pointwise(spec, options, runtime, scorer, default_batch_size=32)


def _rankllama(spec: RerankerSpec, options: RankLlamaOptions, runtime: Runtime) -> Reranker:
    from r2med.rerankers.devices import scorer_on_devices
    from r2med.rerankers.rankllama import RankLlamaScorer

    scorer = scorer_on_devices(
        RankLlamaScorer, str(spec.model), options.base_model or spec.base_model,
        max_length=options.max_length or spec.max_length or 1024, device=options.device,
        dtype=options.dtype or spec.dtype, batch_tokens=options.batch_tokens,
    )
    return _pointwise(spec, options, runtime, scorer, default_batch_size=8)


def _pointwise(spec: RerankerSpec, options: PointwiseOptions, runtime: Runtime, scorer: PairScorer, *,
               default_batch_size: int) -> Reranker:
    from r2med.rerankers.pointwise import PointwiseReranker

    cache = runtime.cache_dir / "rerank" / "scores" if runtime.cache_dir is not None else None
    return PointwiseReranker(spec.folder, scorer, batch_size=options.batch_size or default_batch_size, cache_dir=cache,
                             progress=runtime.progress)


def listwise_name(spec: RerankerSpec, options: ListwiseOptions) -> str:
    """The results folder: ``listwise-<LLM name>`` (``+scores`` with InsertRank's scores in the prompt)."""
    from r2med.retrievers.registry import system_name

    if not options.llm_model:
        raise UsageError("the listwise reranker needs an LLM: pass --llm-model MODEL (and --base-url URL)")
    llm = options.llm_name or system_name(options.llm_model, flag="--llm-model")
    return f"{spec.folder}-{llm}{'+scores' if options.with_scores else ''}"


def _listwise(spec: RerankerSpec, options: ListwiseOptions, runtime: Runtime) -> Reranker:
    from r2med.llm.cache import ResponseCache
    from r2med.rerankers.listwise import ListwiseReranker
    from r2med.retrievers.registry import system_name
    from r2med.settings import get_settings

    name = listwise_name(spec, options)
    base_url = options.base_url or get_settings().openai_base_url or "https://api.openai.com/v1"
    client = options.client(base_url)
    cache = None
    if runtime.cache_dir is not None:
        model_folder = system_name(str(options.llm_model), flag="--llm-model")
        cache = ResponseCache(runtime.cache_dir / "rerank" / "listwise" / f"{model_folder}.jsonl")
    return ListwiseReranker(
        client, name=name, window=options.window, stride=options.stride, direction=options.direction,
        max_words=options.max_words, params=options.sampling(), cache=cache, concurrency=options.concurrency,
        with_scores=options.with_scores, style=options.reasoning_style, on_error=options.on_error,
        progress=runtime.progress,
    )


def _reasonrank(spec: RerankerSpec, options: ReasonRankOptions, runtime: Runtime) -> Reranker:
    from dataclasses import replace

    from r2med.llm.cache import ResponseCache
    from r2med.rerankers.listwise import ListwiseReranker
    from r2med.rerankers.reasonrank import ReasonRankPrompt, sampling_defaults
    from r2med.retrievers.registry import system_name
    from r2med.settings import get_settings

    mode = options.prompt_mode or spec.prompt_mode or "rank_GPT_reasoning"
    model = options.llm_model or str(spec.model)
    base_url = options.base_url or get_settings().openai_base_url
    if not base_url:
        raise UsageError(f"{spec.name} runs on an OpenAI-compatible server serving {model}: pass --base-url, e.g. "
                         f"http://localhost:8000/v1 after 'vllm serve {spec.model}'")
    client = replace(options, llm_model=model).client(base_url)
    sampling, extra = sampling_defaults(mode, options.reasoning_maxlen)
    prompt = ReasonRankPrompt(options.tokenizer or str(spec.model), mode=mode, request_as=options.request_as,
                              doc_maxlen=options.doc_maxlen, extra=extra)
    cache = None
    if runtime.cache_dir is not None:
        cache = ResponseCache(runtime.cache_dir / "rerank" / "reasonrank" / f"{system_name(model, flag='--llm-model')}.jsonl")
    return ListwiseReranker(
        client, name=spec.folder, window=options.window, stride=options.stride, params=options.sampling(sampling),
        cache=cache, concurrency=options.concurrency, on_error=options.on_error, progress=runtime.progress,
        prompt=prompt,
    )
def _completions(spec: RerankerSpec, options: Any, runtime: Runtime, task: str) -> Any:
    """The ``CompletionRequests`` of a pointwise LLM reranker: ``--llm-model`` (default: the spec's hub id) on the
    server at ``--base-url`` (or ``$OPENAI_BASE_URL``), responses cached under R2MED_HOME."""
    import dataclasses

    from r2med.llm.cache import ResponseCache
    from r2med.rerankers.completions import CompletionRequests
    from r2med.retrievers.registry import system_name
    from r2med.settings import get_settings

    if not options.llm_model:
        options = dataclasses.replace(options, llm_model=spec.model)
    base_url = options.base_url or get_settings().openai_base_url
    if not base_url:
        raise UsageError(f"{spec.name} is scored by a server: pass --base-url URL of an OpenAI-compatible server with "
                         f"/v1/completions and logprobs (e.g. vllm serve {spec.model})")
    cache = None
    if runtime.cache_dir is not None:
        folder = system_name(str(options.llm_model), flag="--llm-model")
        cache = ResponseCache(runtime.cache_dir / "rerank" / "completions" / f"{folder}.jsonl")
    return CompletionRequests(options.client(base_url), task=task, cache=cache, concurrency=options.concurrency)


def _rank1(spec: RerankerSpec, options: Rank1Options, runtime: Runtime) -> Reranker:
    from r2med.rerankers import rank1

    scorer = rank1.Rank1Scorer(_completions(spec, options, runtime, rank1.TASK), params=options.sampling(),
                               logprobs=options.top_logprobs, answer_token_ids=options.answer_token_ids,
                               dataset_prompt=options.dataset_prompt)
    # a batch is what the score cache stores at once; every response is cached as it arrives
    return _pointwise(spec, PointwiseOptions(), runtime, scorer, default_batch_size=max(32, 4 * options.concurrency))


def _cached_tokenizer(model: str) -> str | None:
    """``model`` when its files are in the local Hugging Face cache (its tokenizer loads without a download)."""
    from r2med.hf import in_hf_cache

    return model if in_hf_cache(model) else None


def _qwen3_reranker(spec: RerankerSpec, options: Qwen3RerankerOptions, runtime: Runtime) -> Reranker:
    from r2med.rerankers import qwen3

    if options.via_server:
        scorer: PairScorer = qwen3.Qwen3ServerScorer(
            _completions(spec, options, runtime, qwen3.TASK), instruction=options.instruction,
            logprobs=options.top_logprobs, answer_token_ids=options.answer_token_ids, params=options.sampling(),
            tokenizer=options.tokenizer or _cached_tokenizer(str(spec.model)),
            max_length=options.max_length or spec.max_length or 8192)
        return _pointwise(spec, options, runtime, scorer, default_batch_size=max(32, 4 * options.concurrency))
    from r2med.rerankers.devices import scorer_on_devices

    scorer = scorer_on_devices(qwen3.Qwen3RerankerScorer, str(spec.model),
                               max_length=options.max_length or spec.max_length or 8192,
                               instruction=options.instruction, device=options.device,
                               dtype=options.dtype or spec.dtype, batch_tokens=options.batch_tokens)
    return _pointwise(spec, options, runtime, scorer, default_batch_size=8)


#: ``(spec, options, runtime) -> Reranker``
Builder = Callable[[RerankerSpec, Any, Runtime], Reranker]


def _model_needs(spec: RerankerSpec) -> tuple[Need, ...]:
    """A reranker model run here: GPU-sized, its weights from the hub (not for a local directory)."""
    models = [m for m in (spec.model, spec.base_model) if m]
    shown = " + ".join(models) or spec.name
    hub = [m for m in models if not Path(m).expanduser().exists()]
    return (Need("gpu", f"{spec.name}: {shown}"),
            *((Need("hub", f"model weights: {' + '.join(hub)}"),) if hub else ()))


def _server_needs(spec: RerankerSpec) -> tuple[Need, ...]:
    """A reranker that sends its prompts to an LLM server (a local one, or a hosted API with its key)."""
    return (Need("llm-server", f"{spec.name}: --llm-model on --base-url"),
            Need("api-key", "for a hosted API: $OPENAI_API_KEY or --api-key-env; none for a local server"))


def _served_model_needs(spec: RerankerSpec) -> tuple[Need, ...]:
    """A reranker model served by an OpenAI-compatible server (vLLM): a GPU-sized server; ReasonRank also reads the
    model's tokenizer here (the local Hugging Face cache or --tokenizer DIR)."""
    tokenizer = (Need("hub", f"{spec.model}'s tokenizer (or --tokenizer DIR)"),) if spec.kind == "reasonrank" else ()
    return (Need("llm-server", f"{spec.name}: a server serving {spec.model} on --base-url (GPU-sized)"), *tokenizer)


def _no_needs(spec: RerankerSpec) -> tuple[Need, ...]:
    return ()


@dataclass(frozen=True)
class RerankerKind:
    """A kind of reranker: the class of its options, how it is built and what running it needs (``needs(spec)``,
    ``r2med.needs``: known without loading anything)."""

    name: str
    options: type
    build: Builder
    needs: Callable[[RerankerSpec], tuple[Need, ...]] = _no_needs


#: How each kind of reranker is built; adding a kind is its module and one row here.
KINDS: Mapping[str, RerankerKind] = MappingProxyType({kind.name: kind for kind in (
    RerankerKind("cross-encoder", PointwiseOptions, _cross_encoder, needs=_model_needs),
    RerankerKind("rankllama", RankLlamaOptions, _rankllama, needs=_model_needs),
    RerankerKind("listwise", ListwiseOptions, _listwise, needs=_server_needs),
    RerankerKind("reasonrank", ReasonRankOptions, _reasonrank, needs=_served_model_needs),
    RerankerKind("rank1", Rank1Options, _rank1, needs=_served_model_needs),
    RerankerKind("qwen3-reranker", Qwen3RerankerOptions, _qwen3_reranker, needs=_model_needs),
)})


def reranker_kind(name: str) -> RerankerKind:
    """The kind of the reranker ``name`` (see ``resolve_reranker``)."""
    return KINDS[resolve_reranker(name).kind]


def reranker_needs(name: str) -> tuple[Need, ...]:
    """What running the reranker ``name`` needs, from its kind's row (UsageError for an unknown name); loads nothing.

    >>> [n.text for n in reranker_needs("mono")]
    ['a GPU-sized model (monobert: castorini/monobert-large-msmarco)', 'Hugging Face hub access (model weights: castorini/monobert-large-msmarco)']
    >>> [n.kind for n in reranker_needs("listwise")]
    ['llm-server', 'api-key']
    """
    spec = resolve_reranker(name)
    return KINDS[spec.kind].needs(spec)


def reranker_system(name: str, options: Any = None) -> str:
    """The results folder of the reranker ``name`` with ``options`` (what the built reranker's ``name`` is), known
    without building it: ``listwise-<LLM name>`` for the listwise reranker, else the registry's folder.

    >>> reranker_system("mono"), reranker_system("listwise", {"llm_model": "Qwen/Qwen3-8B"})
    ('monobert', 'listwise-Qwen__Qwen3-8B')
    """
    spec = resolve_reranker(name)
    if spec.kind != "listwise":
        return spec.folder
    if options is None or isinstance(options, Mapping):
        options = options_for(name, options)
    return listwise_name(spec, options)


def option_classes() -> tuple[type, ...]:
    """Every reranker options class (each once): what ``r2med rerank`` offers as flags."""
    return tuple(dict.fromkeys(kind.options for kind in KINDS.values()))


def options_for(name: str, values: Mapping[str, Any] | None = None) -> Any:
    """The options of the reranker ``name`` from ``values`` (by option name; the ones of other kinds are left out)."""
    from r2med.options import options_of

    cls = reranker_kind(name).options
    own = {opt.name for opt in options_of(cls)}
    return cls(**{key: value for key, value in (values or {}).items() if key in own})


def make_reranker(name: str, options: Any = None, runtime: Runtime | None = None) -> Reranker:
    """Build the reranker ``name`` (see ``resolve_reranker``) with ``options`` (its kind's options class, or a dict
    of option values; default: the kind's defaults); its ``name`` is the results folder."""
    spec = resolve_reranker(name)
    kind = KINDS[spec.kind]
    if options is None or isinstance(options, Mapping):
        options = options_for(name, options)
    elif not isinstance(options, kind.options):
        raise UsageError(f"reranker {name!r} ({spec.kind}) takes {kind.options.__name__}, not {type(options).__name__}")
    return kind.build(spec, options, runtime or Runtime())
