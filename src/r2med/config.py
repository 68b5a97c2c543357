"""Pipeline specs: datasets -> (expansion) -> retrievers -> (fusion) -> (reranking), from TOML or CLI flags.

Every command that runs stages (``r2med run``, ``r2med rerank``, ``r2med reproduce``) builds a
:class:`PipelineSpec` and calls ``r2med.pipeline.run_pipeline(spec)``.

A spec file (``r2med run --config pipeline.toml``)::

    [pipeline]
    name = "bm25+minilm"          # the fused system's name (results under fusion/<name>/)
    datasets = ["all"]            # or names; with data_dir: the datasets found there
    data_dir = "../data"          # optional; relative paths are relative to this file
    output = "results"            # default ./results (relative to this file)
    top_k = 100

    [expansion]                   # optional: generation-augmented retrieval
    spec = "hyde/o3-mini"         # METHOD/LLM, published or generated
    answer_policy = "fallback"
    bm25_composition = "query2doc-spaced"   # optional: the corrected BM25 query2doc text

    [[retriever]]
    name = "bm25"                 # anything `r2med run --retriever` takes
    bm25_variant = "r2med"

    [[retriever]]
    name = "/models/all-MiniLM-L6-v2"
    batch_size = 64

    [fusion]                      # needed with two or more retrievers
    method = "rrf"                # rrf | combsum | combmnz | interpolate
    k = 60

    [reranker]                    # optional: rerank the last stage's top k
    name = "bge-reranker"         # anything `r2med rerank --reranker` takes
    top_k = 100
    truncate = false              # true: keep only the reranked top k (the official reranker runs)

Instead of ``[[retriever]]`` tables, an ``[agent]`` table makes an agentic search loop the first stage
(``r2med agent``; its keys are ``AgentConfig``'s fields plus ``search_with`` and ``knowledge_dir``)::

    [agent]
    style = "search-r1"           # or "search-o1"
    llm_model = "PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-em-ppo"
    base_url = "http://localhost:8000/v1"
    search_with = "bm25"          # anything `r2med run --retriever` takes
    search_top_k = 3

Unknown keys are errors (a typo must not silently fall back to a default).

>>> spec = parse_spec({"retriever": [{"name": "bm25"}]}, base=Path("."))
>>> spec.retrievers[0].name, spec.fusion, spec.top_k
('bm25', None, 100)
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from r2med.agent.config import AgentConfig
from r2med.errors import InvalidInputError, MissingResourceError, UsageError
from r2med.io.names import check_name
from r2med.rerankers.registry import RerankerOptions
from r2med.retrievers.registry import RetrieverSpec

_RETRIEVER_KEYS = {f.name for f in fields(RetrieverSpec) if f.name != "encoder"}  # encoder: Python only
_FUSION_KEYS = {"method", "k", "weights", "norm", "alpha"}


@dataclass(frozen=True)
class FusionSpec:
    method: str = "rrf"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RerankSpec:
    """The reranking stage: reranker ``name`` over the previous stage's top ``top_k``.

    ``truncate`` keeps only the reranked ``top_k`` (as the official reranker runs); ``identical_ids``
    "drop" scores with BEIR's rule (default: keep, as the official reranker numbers); ``options`` are
    the reranker's own (model, LLM endpoint, window, sampling); the pipeline sets their cache and progress.
    """

    name: str
    top_k: int = 100
    truncate: bool = False
    identical_ids: str | None = None
    options: RerankerOptions = field(default_factory=RerankerOptions)


@dataclass(frozen=True)
class AgentSpec:
    """The agent stage: ``config`` (style, LLM, limits), the retriever it searches with, and an optional
    ``knowledge_dir`` (a corpus it searches instead of each dataset's own)."""

    config: AgentConfig
    search_with: RetrieverSpec = field(default_factory=lambda: RetrieverSpec("bm25"))
    knowledge_dir: Path | None = None


@dataclass(frozen=True)
class PipelineSpec:
    """Everything a pipeline does: datasets -> first stage -> (fusion) -> (reranking).

    The first stage is either ``retrievers`` (each plain or with the ``expansion`` ``METHOD/LLM``, its
    ``answer_policy`` and a BM25 ``bm25_composition``), fused when there are several, or ``first_stage``:
    stored runs (a run file, a directory, a system path or name under ``output``) named ``first_stage_system``
    in the results path (``r2med rerank``). ``cache`` False keeps indexes, embeddings and reranker caches
    out of R2MED_HOME (results are still stored and resumed).
    """

    retrievers: tuple[RetrieverSpec, ...] = ()
    name: str | None = None
    datasets: tuple[str, ...] | None = None
    data_dir: Path | None = None
    output: Path = Path("results")
    top_k: int = 100
    expansion: str | None = None
    answer_policy: str = "fallback"
    bm25_composition: str | None = None
    fusion: FusionSpec | None = None
    first_stage: str | Path | None = None
    first_stage_system: str | None = None
    reranker: RerankSpec | None = None
    cache: bool = True
    agent: AgentSpec | None = None

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise UsageError(f"--top-k must be at least 1, got {self.top_k}")
        if bool(self.retrievers) + (self.first_stage is not None) + (self.agent is not None) != 1:
            raise UsageError("a pipeline needs exactly one first stage: retrievers, a stored first stage or an agent")
        if self.agent is not None and (self.expansion or self.fusion):
            raise UsageError("an agent stage takes no --expansion or fusion (it searches with its own queries)")
        if self.first_stage is not None and self.reranker is None:
            raise UsageError("a stored first stage is only read to be reranked: name a reranker")
        if self.bm25_composition and not self.expansion:
            raise UsageError("--bm25-composition needs --expansion METHOD/LLM")
        if self.name is not None:  # the fused system's folder: fusion/<name>/
            check_name(self.name, what="--name")
        if self.first_stage_system is not None:  # a folder: reranker/<reranker>/<system>/
            check_name(self.first_stage_system, what="--system")

    def as_dict(self) -> dict[str, Any]:
        """The resolved spec (recorded in manifests)."""
        return {
            "name": self.name, "datasets": list(self.datasets or []), "data_dir": str(self.data_dir or ""),
            "top_k": self.top_k, "expansion": self.expansion, "answer_policy": self.answer_policy,
            "retrievers": [r.settings() for r in self.retrievers],
            "fusion": {"method": self.fusion.method, **self.fusion.options} if self.fusion else None,
            "agent": ({**self.agent.config.key(), "search_with": self.agent.search_with.settings(),
                       "knowledge_dir": str(self.agent.knowledge_dir or "")} if self.agent else None),
        }


def _table(raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: [{key}] must be a table, got {type(value).__name__}")
    return value


def _check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InvalidInputError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")


def _path(value: Any, base: Path, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{where} must be a path string, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


_DESCRIBE = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _typed(value: Any, kind: Any, where: str, key: str) -> Any:
    """``value`` if it has the declared type ``kind`` (a type, ``X | None``, ``list[float]``), an int widened to
    float where a float is declared; else InvalidInputError naming the file, the table and the key.

    TOML has no null, so ``X | None`` means X here. Nothing is coerced: ``"8"`` is not an integer and ``true``
    is neither an integer nor a number.

    >>> _typed(1, float, "p.toml [fusion]", "k"), _typed(True, bool, "p.toml [reranker]", "truncate")
    (1.0, True)
    >>> _typed("8", int | None, "p.toml [[retriever]] #1", "batch_size")
    Traceback (most recent call last):
    ...
    r2med.errors.InvalidInputError: p.toml [[retriever]] #1: batch_size must be an integer, got '8' (write it without quotes)
    """
    if get_origin(kind) is list:
        (item,) = get_args(kind)
        if isinstance(value, list) and all(_fits(v, item) for v in value):
            return [_typed(v, item, where, key) for v in value]
        raise InvalidInputError(f"{where}: {key} must be a list of {_DESCRIBE[item].split(' ', 1)[1]}s, got {value!r}")
    kinds = [k for k in (get_args(kind) or (kind,)) if k is not type(None)]
    for k in kinds:
        if _fits(value, k):
            if k is float:
                if not math.isfinite(value):
                    raise InvalidInputError(f"{where}: {key} must be a finite number, got {value!r}")
                return float(value)
            return value
    wanted = " or ".join(_DESCRIBE.get(k, getattr(k, "__name__", str(k))) for k in kinds)
    hint = ""
    if isinstance(value, str) and any(k in (int, float) for k in kinds):
        hint = " (write it without quotes)"
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and str in kinds:
        hint = " (write it in quotes)"
    raise InvalidInputError(f"{where}: {key} must be {wanted}, got {value!r}{hint}")


def _fits(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _choice(value: Any, choices: tuple[str, ...], where: str, key: str) -> Any:
    if value is not None and value not in choices:
        raise InvalidInputError(f"{where}: {key} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _at_least_one(value: Any, where: str, key: str) -> Any:
    if value is not None and value < 1:
        raise InvalidInputError(f"{where}: {key} must be at least 1, got {value!r}")
    return value


def _positive_int(value: Any, where: str, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInputError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _name(value: Any, where: str, key: str) -> str:
    """A name that becomes a results folder: a string and a usable path component (``r2med.io.names``)."""
    _typed(value, str, where, key)
    return check_name(value, what=f"{where} {key}", error=InvalidInputError,
                      fix="it names one folder under the output directory; use a plain name such as 'bm25+minilm'")


_IDENTICAL_IDS = ("drop", "keep")
_RETRIEVER_TYPES = get_type_hints(RetrieverSpec)
#: the options of each fusion method and their types (``r2med.fusion``)
_FUSION_TYPES: dict[str, Any] = {"k": float, "weights": list[float], "norm": str, "alpha": float}
_FUSION_OPTIONS = {"rrf": ("k", "weights"), "combsum": ("norm", "weights"), "combmnz": ("norm", "weights"),
                   "interpolate": ("alpha", "norm")}


def _retriever(entry: Any, where: str) -> RetrieverSpec:
    """One ``[[retriever]]`` table, every field checked against ``RetrieverSpec``'s declared type."""
    if not isinstance(entry, dict) or "name" not in entry:
        raise InvalidInputError(f"{where}: needs name = \"bm25\" or a dense model name/path")
    _check_keys(entry, _RETRIEVER_KEYS, where)
    values = {key: _typed(value, _RETRIEVER_TYPES[key], where, key) for key, value in entry.items()}
    _choice(values.get("identical_ids"), _IDENTICAL_IDS, where, "identical_ids")
    _at_least_one(values.get("batch_size"), where, "batch_size")
    return RetrieverSpec(**values)


def _fusion(table: dict[str, Any], where: str) -> FusionSpec:
    """``[fusion]``: ``method`` and the options that method takes, each of its declared type."""
    from r2med.fusion import METHODS, NORMALISATIONS

    _check_keys(table, _FUSION_KEYS, where)
    method = _choice(_typed(table.get("method", "rrf"), str, where, "method"), METHODS, where, "method")
    options = {}
    for key, value in table.items():
        if key == "method":
            continue
        if key not in _FUSION_OPTIONS[method]:
            raise InvalidInputError(f"{where}: {key} is not an option of method {method!r} "
                                    f"(its options: {', '.join(_FUSION_OPTIONS[method])})")
        options[key] = _typed(value, _FUSION_TYPES[key], where, key)
    _choice(options.get("norm"), NORMALISATIONS, where, "norm")
    return FusionSpec(method, options)


def _expansion(table: dict[str, Any], where: str) -> dict[str, Any]:
    """``[expansion]``: ``spec`` (METHOD/LLM, both usable folder names), ``answer_policy``, ``bm25_composition``."""
    from r2med.expansion.methods import bm25_compositions
    from r2med.expansion.published import parse_expansion_spec
    from r2med.llm.reasoning import POLICIES

    _check_keys(table, {"spec", "answer_policy", "bm25_composition"}, where)
    values = {key: _typed(value, str, where, key) for key, value in table.items()}
    if "spec" in values:
        try:
            parse_expansion_spec(values["spec"])
        except UsageError as exc:
            raise InvalidInputError(f"{where}: spec {values['spec']!r}: {str(exc).split(': ', 1)[-1]}") from None
    _choice(values.get("answer_policy"), POLICIES, where, "answer_policy")
    _choice(values.get("bm25_composition"), tuple(bm25_compositions()), where, "bm25_composition")
    return values


def parse_spec(raw: dict[str, Any], *, base: Path, source: str = "pipeline spec") -> PipelineSpec:
    """A :class:`PipelineSpec` from the parsed TOML; ``base`` resolves relative paths.

    Every value is checked against its declared type (InvalidInputError naming ``source``, the table and the key).
    """
    _check_keys(raw, {"pipeline", "expansion", "retriever", "fusion", "reranker", "agent"}, source)
    where = f"{source} [pipeline]"
    head = _table(raw, "pipeline", source)
    _check_keys(head, {"name", "datasets", "data_dir", "output", "top_k"}, where)
    name = _name(head["name"], where, "name") if "name" in head else None
    agent = _agent(_table(raw, "agent", source), f"{source} [agent]", base) if "agent" in raw else None
    retrievers_raw = raw.get("retriever", [] if agent is None else None)
    if agent is not None and retrievers_raw is not None:
        raise InvalidInputError(f"{source}: an [agent] table is the first stage; remove the [[retriever]] tables")
    if agent is not None:
        retrievers_raw = []
    elif not isinstance(retrievers_raw, list) or not retrievers_raw:
        raise InvalidInputError(f"{source}: needs at least one [[retriever]] table with a name (e.g. name = \"bm25\")")
    retrievers = [_retriever(entry, f"{source} [[retriever]] #{i}") for i, entry in enumerate(retrievers_raw, start=1)]
    fusion = _fusion(_table(raw, "fusion", source), f"{source} [fusion]") if "fusion" in raw else None
    if len(retrievers) > 1 and fusion is None:
        raise InvalidInputError(f"{source}: {len(retrievers)} retrievers need a [fusion] table (e.g. method = \"rrf\")")
    expansion = _expansion(_table(raw, "expansion", source), f"{source} [expansion]")
    datasets = head.get("datasets")
    if isinstance(datasets, str):
        datasets = [datasets]
    if datasets is not None and not (isinstance(datasets, list) and all(isinstance(d, str) for d in datasets)):
        raise InvalidInputError(f"{where}: datasets must be a list of names, got {datasets!r}")
    top_k = _positive_int(head.get("top_k", 100), where, "top_k")
    try:
        return PipelineSpec(
            retrievers=tuple(retrievers),
            name=name,
            datasets=tuple(datasets) if datasets else None,
            data_dir=_path(head["data_dir"], base, f"{where}: data_dir") if "data_dir" in head else None,
            output=_path(head["output"], base, f"{where}: output") if "output" in head else Path("results"),
            top_k=top_k,
            expansion=expansion.get("spec"),
            answer_policy=expansion.get("answer_policy", "fallback"),
            bm25_composition=expansion.get("bm25_composition"),
            fusion=fusion,
            reranker=_rerank_spec(_table(raw, "reranker", source), f"{source} [reranker]") if "reranker" in raw else None,
            agent=agent,
        )
    except UsageError as exc:  # a rule across tables (e.g. bm25_composition without an expansion spec)
        raise InvalidInputError(f"{source}: {exc}") from None


_AGENT_TYPES = get_type_hints(AgentConfig)


def _agent(table: dict[str, Any], where: str, base: Path) -> AgentSpec:
    """``[agent]``: ``AgentConfig``'s fields, ``search_with`` (a retriever name) and ``knowledge_dir``."""
    from r2med.agent.styles import STYLES
    from r2med.agent.templates import TEMPLATES

    _check_keys(table, set(_AGENT_TYPES) | {"search_with", "knowledge_dir"}, where)
    for key in ("style", "llm_model", "base_url"):
        if key not in table:
            raise InvalidInputError(f"{where}: needs {key} (e.g. style = \"search-r1\", llm_model = \"MODEL\", "
                                    "base_url = \"http://localhost:8000/v1\")")
    values = {key: _typed(value, _AGENT_TYPES[key], where, key) for key, value in table.items() if key in _AGENT_TYPES}
    _choice(values.get("style"), tuple(STYLES), where, "style")
    _choice(values.get("chat_template"), tuple(TEMPLATES), where, "chat_template")
    for key in ("search_top_k", "max_turns", "max_tokens", "concurrency", "max_requests"):
        _at_least_one(values.get(key), where, key)
    if "llm_name" in values:
        _name(values["llm_name"], where, "llm_name")
    search_with = _typed(table.get("search_with", "bm25"), str, where, "search_with")
    knowledge = _path(table["knowledge_dir"], base, f"{where}: knowledge_dir") if "knowledge_dir" in table else None
    try:
        config = AgentConfig(**values)
    except UsageError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    return AgentSpec(config, RetrieverSpec(search_with), knowledge)


_RERANK_STAGE_KEYS = {"name", "top_k", "truncate", "identical_ids"}
#: reranker options a spec file may set (the cache, progress and the API key come from the environment)
_RERANK_OPTION_KEYS = {f.name for f in fields(RerankerOptions)} - {"cache_dir", "progress", "api_key"}
_RERANK_TYPES = get_type_hints(RerankerOptions)


def _rerank_choices() -> dict[str, tuple[str, ...]]:
    from r2med.hf import DTYPES
    from r2med.llm.reasoning import STYLES
    from r2med.rerankers.listwise import ON_ERROR
    from r2med.rerankers.windows import DIRECTIONS

    return {"dtype": DTYPES, "direction": DIRECTIONS, "on_error": ON_ERROR, "reasoning_style": ("auto", *STYLES)}


def _rerank_spec(table: dict[str, Any], where: str) -> RerankSpec:
    """``[reranker]``: ``name``, ``top_k``, ``truncate``, ``identical_ids`` and any reranker option (``window``, ...),
    each checked against its declared type."""
    _check_keys(table, _RERANK_STAGE_KEYS | _RERANK_OPTION_KEYS, where)
    if "name" not in table:
        raise InvalidInputError(f"{where}: needs name = \"bge-reranker\", \"listwise\" or a model path")
    name = _typed(table["name"], str, where, "name")
    top_k = _positive_int(table.get("top_k", 100), where, "top_k")
    truncate = _typed(table.get("truncate", False), bool, where, "truncate")
    identical_ids = None
    if "identical_ids" in table:
        identical_ids = _choice(_typed(table["identical_ids"], str, where, "identical_ids"), _IDENTICAL_IDS, where,
                                "identical_ids")
    options = {key: _typed(value, _RERANK_TYPES[key], where, key) for key, value in table.items()
               if key in _RERANK_OPTION_KEYS}
    for key, choices in _rerank_choices().items():
        _choice(options.get(key), choices, where, key)
    for key in ("batch_size", "max_length", "window", "stride", "max_words", "max_tokens", "concurrency"):
        _at_least_one(options.get(key), where, key)
    if "llm_name" in options:
        _name(options["llm_name"], where, "llm_name")
    return RerankSpec(name, top_k=top_k, truncate=truncate, identical_ids=identical_ids,
                      options=RerankerOptions(**options))


def load_spec(path: Path) -> PipelineSpec:
    """Read a TOML pipeline spec; errors name the file (and line, for TOML syntax errors)."""
    path = Path(path)
    if not path.is_file():
        raise MissingResourceError(f"--config {path}: file not found")
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: not valid TOML ({exc}); fix the file") from None
    try:
        return parse_spec(raw, base=path.resolve().parent, source=str(path))
    except TypeError as exc:  # a value of the wrong type for a dataclass field
        raise InvalidInputError(f"{path}: {exc}") from None
