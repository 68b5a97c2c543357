"""Pipeline specs: datasets -> (expansion) -> retrievers -> (fusion) -> (reranking), from TOML or CLI flags.

Every command that runs stages (``r2med run``, ``r2med rerank``, ``r2med reproduce``) builds a
:class:`PipelineSpec` and calls ``r2med.pipeline.run_pipeline(spec)``.

A spec file (``r2med run --config pipeline.toml``; docs/pipelines.md shows one) has a ``[pipeline]`` table (name,
datasets, data_dir, output, top_k), an optional ``[expansion]``, one ``[[retriever]]`` table per retriever (``name``,
its family's options and ``system``, the name of its results), a ``[fusion]`` with two or more (``method`` and its options), an optional ``[reranker]``
(``name``, ``top_k``, ``truncate``, ``identical_ids`` and its kind's options), or an ``[agent]`` table instead of the
retrievers (``AgentConfig``'s options, ``search_with``, ``knowledge_dir``). Every table's keys are the options its
component declares (``r2med.options``; docs/options.md): unknown keys, types, choices and ranges are errors naming the
file, the table and the key (a typo must not silently fall back to a default).

>>> spec = parse_spec({"retriever": [{"name": "bm25"}]}, base=Path("."))
>>> spec.retrievers[0].name, spec.fusion, spec.top_k
('bm25', None, 100)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.errors import InvalidInputError, MissingResourceError, Problems, UsageError
from r2med.expansion.methods import check_composition
from r2med.expansion.options import ExpansionOptions
from r2med.io.names import check_name
from r2med.options import check_keys, from_table, option, options_of, values_from_table
from r2med.retrievers.registry import RetrieverOptions, RetrieverSpec, check_distinct, check_known, family_of
from r2med.stages.rerank import RerankStageOptions

if TYPE_CHECKING:
    from r2med.agent.config import AgentConfig


@dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    """``[pipeline]``: what the whole pipeline shares (``datasets``, ``data_dir`` and ``output`` are read apart)."""

    name: str | None = option(None, "the system's name: a single retriever's results go under base retriever/<name>/ "
                              "(default: the retriever's name), a fusion's under fusion/<name>/")
    top_k: int = option(100, "documents kept per query", minimum=1)


@dataclass(frozen=True)
class FusionSpec:
    """A fusion ``method`` and the options given for it (``r2med.fusion.METHODS``: each method's options class)."""

    method: str = "rrf"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RerankSpec:
    """The reranking stage: reranker ``name`` over the previous stage's top ``top_k``.

    ``truncate`` keeps only the reranked ``top_k`` (as the official reranker runs); ``identical_ids``
    "drop" scores with BEIR's rule (default: keep, as the official reranker numbers); ``options`` are
    the reranker's own (its kind's options class, or a dict of option values; ``r2med.rerankers.options``).
    """

    name: str
    top_k: int = 100
    truncate: bool = False
    identical_ids: str | None = None
    options: Any = None


@dataclass(frozen=True)
class AgentSpec:
    """The agent stage: ``config`` (style, LLM, limits), the retriever it searches with, and an optional
    ``knowledge_dir`` (a corpus it searches instead of each dataset's own)."""

    config: AgentConfig
    search_with: RetrieverSpec | str = field(default_factory=lambda: RetrieverSpec("bm25"))  # str: a server's URL
    knowledge_dir: Path | None = None


@dataclass(frozen=True)
class PipelineSpec:
    """Everything a pipeline does: datasets -> first stage -> (fusion) -> (reranking).

    The first stage is either ``retrievers`` (each plain or with the ``expansion`` ``METHOD/LLM``, its
    ``answer_policy`` and a BM25 ``bm25_composition``), fused when there are several, or ``first_stage``:
    stored runs (a run file, a directory, a system path or name under ``output``) named ``first_stage_system``
    in the results path (``r2med rerank``). ``cache`` False keeps indexes, embeddings and reranker caches
    out of R2MED_HOME (results are still stored and resumed). Two fused retrievers that would get the same
    system name are an error naming both.
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
        if self.bm25_composition:
            check_composition(self.bm25_composition, self.expansion)
        if self.name is not None:  # the fused system's folder: fusion/<name>/
            check_name(self.name, what="--name")
        if self.first_stage_system is not None:  # a folder: reranker/<reranker>/<system>/
            check_name(self.first_stage_system, what="--system")
        check_distinct(self.retrievers)
        named = self.retrievers[0].named if len(self.retrievers) == 1 and self.fusion is None else None
        if self.name is not None and named is not None and named != self.name:
            raise UsageError(f"--name {self.name} and {self.retrievers[0].name}'s name={named} both name the "
                             "retriever's results; keep one")
        weights = self.fusion.options.get("weights") if self.fusion is not None else None
        if weights is not None and len(weights) != len(self.retrievers):
            raise UsageError(f"{len(weights)} fusion weights for {len(self.retrievers)} retrievers; give one weight per "
                             "retriever, in their order ([fusion] weights = [1, 2], or --fuse rrf:weights=1,2)")


def _table(raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: [{key}] must be a table, got {type(value).__name__}")
    return value


def _path(value: Any, base: Path, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{where} must be a path string, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _name(value: str, where: str, key: str) -> str:
    """A name that becomes a results folder: a usable path component (``r2med.io.names``)."""
    return check_name(value, what=f"{where} {key}", error=InvalidInputError,
                      fix="it names one folder under the output directory; use a plain name such as 'bm25+minilm'")


def _llm_name(table: dict[str, Any], where: str) -> None:
    """``llm_name`` names folders: checked as a name of the file's key before the LLM options are made."""
    if isinstance(table.get("llm_name"), str):
        _name(table["llm_name"], where, "llm_name")


def _named(entry: Any, where: str, example: str) -> str:
    if not isinstance(entry, dict) or "name" not in entry:
        raise InvalidInputError(f"{where}: needs name = {example}")
    if not isinstance(entry["name"], str):
        raise InvalidInputError(f"{where}: name must be a string, got {entry['name']!r} (write it in quotes)")
    return entry["name"]


def _retriever(entry: Any, where: str) -> RetrieverSpec:
    """One ``[[retriever]]`` table: ``name``, ``identical_ids`` and its family's options, each checked as declared."""
    name = _named(entry, where, '"bm25" or a dense model name/path')
    try:
        family = family_of(name)
        check_known(RetrieverSpec(name))
    except UsageError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    # ``name`` is the retriever; ``system`` names its results (the inline NAME:name=... of the command line)
    own = ("identical_ids", "system")
    common = values_from_table(RetrieverOptions, {k: v for k, v in entry.items() if k in own}, where)
    from_table(family.options, entry, where, ignore=("name", *own))  # the options' own rules too
    options = values_from_table(family.options, entry, where, ignore=("name", *own))
    if common.get("system") is not None:
        _name(common["system"], where, "system")
    return RetrieverSpec(name, options, common.get("identical_ids"), named=common.get("system"))


def _fusion(table: dict[str, Any], where: str) -> FusionSpec:
    """``[fusion]``: ``method`` and the options that method declares (only those given are recorded)."""
    from r2med.fusion import METHODS

    method = table.get("method", "rrf")
    if not isinstance(method, str) or method not in METHODS:
        raise InvalidInputError(f"{where}: method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    own = [opt.name for opt in options_of(METHODS[method].options)]
    others = {opt.name for found in METHODS.values() for opt in options_of(found.options)} - set(own)
    for key in table:
        if key in others:
            raise InvalidInputError(f"{where}: {key} is not an option of method {method!r} (its options: "
                                    f"{', '.join(own)})")
    return FusionSpec(method, values_from_table(METHODS[method].options, table, where, ignore=("method",)))


def _rerank_spec(table: dict[str, Any], where: str) -> RerankSpec:
    """``[reranker]``: ``name``, the stage's keys and the options of the reranker's kind, each checked as declared."""
    from r2med.rerankers.registry import reranker_kind

    name = _named(table, where, '"bge-reranker", "listwise" or a model path')
    try:
        kind = reranker_kind(name)
    except UsageError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    stage_keys = {opt.name for opt in options_of(RerankStageOptions)}
    check_keys(table, {"name", *stage_keys, *(opt.name for opt in options_of(kind.options) if opt.in_file)}, where)
    stage = from_table(RerankStageOptions, {k: v for k, v in table.items() if k in stage_keys}, where)
    _llm_name(table, where)
    options = from_table(kind.options, {k: v for k, v in table.items() if k not in stage_keys}, where, ignore=("name",))
    return RerankSpec(name, top_k=stage.top_k, truncate=stage.truncate, identical_ids=stage.identical_ids,
                      options=options)


def _agent(table: dict[str, Any], where: str, base: Path) -> AgentSpec:
    """``[agent]``: ``AgentConfig``'s options, ``search_with`` (a retriever name) and ``knowledge_dir``."""
    from r2med.agent.config import AgentConfig

    _llm_name(table, where)
    config = from_table(AgentConfig, table, where, ignore=("search_with", "knowledge_dir"))
    search_with = table.get("search_with", "bm25")
    if not isinstance(search_with, str):
        raise InvalidInputError(f"{where}: search_with must be a string, got {search_with!r} (write it in quotes)")
    knowledge = _path(table["knowledge_dir"], base, f"{where}: knowledge_dir") if "knowledge_dir" in table else None
    from r2med.agent.remote import is_server_url

    if is_server_url(search_with):  # a Search-R1-compatible retrieval server
        return AgentSpec(config, search_with, knowledge)
    try:
        search = RetrieverSpec.parse(search_with, where=f"{where} search_with {search_with!r}")
    except UsageError as exc:
        raise InvalidInputError(str(exc)) from None
    try:
        check_known(search)
    except UsageError as exc:
        raise InvalidInputError(f"{where}: search_with {search_with!r}: {exc} (or a retrieval server's http(s) URL)") from None
    return AgentSpec(config, search, knowledge)


def parse_spec(raw: dict[str, Any], *, base: Path, source: str = "pipeline spec") -> PipelineSpec:
    """A :class:`PipelineSpec` from the parsed TOML; ``base`` resolves relative paths.

    Every value is checked against its declared type (InvalidInputError naming ``source``, the table and the key).
    Each table is checked even when another one is wrong: several mistakes are reported together, as one
    ``PlanError`` listing them all (a file's layout, unknown tables or no retriever at all, is reported at once).
    """
    check_keys(raw, {"pipeline", "expansion", "retriever", "fusion", "reranker", "agent"}, source)
    where = f"{source} [pipeline]"
    head = _table(raw, "pipeline", source)
    has_agent = "agent" in raw
    retrievers_raw = raw.get("retriever", [] if not has_agent else None)
    if has_agent and retrievers_raw is not None:
        raise InvalidInputError(f"{source}: an [agent] table is the first stage; remove the [[retriever]] tables")
    if has_agent:
        retrievers_raw = []
    elif not isinstance(retrievers_raw, list) or not retrievers_raw:
        raise InvalidInputError(f"{source}: needs at least one [[retriever]] table with a name (e.g. name = \"bm25\")")
    problems = Problems()
    pipeline = problems.check(lambda: from_table(PipelineOptions, head, where, ignore=("datasets", "data_dir", "output")))
    name = (problems.check(lambda: _name(pipeline.name, where, "name"))
            if getattr(pipeline, "name", None) is not None else None)
    agent = problems.check(lambda: _agent(_table(raw, "agent", source), f"{source} [agent]", base)) if has_agent else None
    retrievers = [problems.check(lambda entry=entry, i=i: _retriever(entry, f"{source} [[retriever]] #{i}"))
                  for i, entry in enumerate(retrievers_raw, start=1)]
    fusion = problems.check(lambda: _fusion(_table(raw, "fusion", source), f"{source} [fusion]")) if "fusion" in raw else None
    if len(retrievers) > 1 and "fusion" not in raw:
        problems.add(InvalidInputError(f"{source}: {len(retrievers)} retrievers need a [fusion] table "
                                       f"(e.g. method = \"rrf\")"))
    expansion = problems.check(lambda: _expansion(raw, source))
    reranker = (problems.check(lambda: _rerank_spec(_table(raw, "reranker", source), f"{source} [reranker]"))
                if "reranker" in raw else None)
    datasets = head.get("datasets")
    if isinstance(datasets, str):
        datasets = [datasets]
    if datasets is not None and not (isinstance(datasets, list) and all(isinstance(d, str) for d in datasets)):
        problems.add(InvalidInputError(f"{where}: datasets must be a list of names, got {datasets!r}"))
    places = {key: problems.check(lambda key=key: _path(head[key], base, f"{where}: {key}"))
              for key in ("data_dir", "output") if key in head}
    problems.raise_any()
    try:
        return PipelineSpec(
            retrievers=tuple(retrievers),
            name=name,
            datasets=tuple(datasets) if datasets else None,
            data_dir=places.get("data_dir"),
            output=places.get("output", Path("results")),
            top_k=pipeline.top_k,
            expansion=expansion.spec,
            answer_policy=expansion.answer_policy,
            bm25_composition=expansion.bm25_composition,
            fusion=fusion,
            reranker=reranker,
            agent=agent,
        )
    except UsageError as exc:  # a rule across tables (e.g. bm25_composition without an expansion spec)
        raise InvalidInputError(f"{source}: {exc}") from None


def _expansion(raw: dict[str, Any], source: str) -> ExpansionOptions:
    """``[expansion]``: its options, and ``spec`` a method/LLM pair r2med knows."""
    expansion = from_table(ExpansionOptions, _table(raw, "expansion", source), f"{source} [expansion]")
    if expansion.spec is not None:
        from r2med.expansion.published import parse_expansion_spec

        try:
            parse_expansion_spec(expansion.spec)
        except UsageError as exc:
            raise InvalidInputError(f"{source} [expansion]: spec {expansion.spec!r}: "
                                    f"{str(exc).split(': ', 1)[-1]}") from None
    return expansion


def load_spec(path: Path) -> PipelineSpec:
    """Read a TOML pipeline spec; errors name the file (and line, for TOML syntax errors), several as one PlanError."""
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
    return parse_spec(raw, base=path.parent, source=str(path))  # (not resolved: a relative path prints relative)
