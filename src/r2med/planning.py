"""``plan(spec) -> Plan``: everything a pipeline will do, resolved and checked before the first unit of work.

A :class:`Plan` holds every stage of a ``PipelineSpec`` in the order it runs (each retriever with its options and
key, its expansion, the fusion, the reranker, an agent and its searcher, a stored first stage), each stage's result
path (``store.results.SystemPath``) and files per dataset, the datasets (located, not loaded), the LLM endpoints and
the API-key variables they read (set or not, never their values), the extras each stage imports (looked up with
``importlib.util.find_spec``, so torch is not imported) and what each stage needs (``r2med.needs``), and, per stage
and dataset, whether a stored result will be reused (its manifest has this stage's declared configuration; the
dataset's hashes are checked when it runs). Every problem found is collected: one is raised as it is, several as
one :class:`~r2med.errors.PlanError` listing them all, with the smallest exit code among them (a usage mistake
first). Nothing is read beyond file names and stored manifests, nothing loaded, nothing contacted.

:func:`r2med.execution.execute` builds the stages the plan names, one at a time, and runs them through the one
runner (``r2med.stages.run_stage``); ``r2med.pipeline.run_pipeline(spec)`` is ``execute(plan(spec))``. A plan
describes itself as JSON (:meth:`Plan.to_json`) and as text (:func:`describe`): what ``--dry-run`` prints.

>>> from importlib import resources
>>> from pathlib import Path
>>> from r2med.config import PipelineSpec
>>> from r2med.retrievers.registry import RetrieverSpec
>>> shipped = Path(str(resources.files("r2med").joinpath("data", "sample")))  # the sample r2med ships
>>> p = plan(PipelineSpec(retrievers=(RetrieverSpec("bm25"),), datasets=("scifact-sample",), data_dir=shipped,
...                       output=Path("results")))
>>> [(s.role, s.where) for s in p.stages], [name for name, _ in p.datasets]
([('retrieve', 'base retriever/bm25')], ['scifact-sample'])
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.config import PipelineSpec, RerankSpec
from r2med.errors import MissingExtraError, MissingResourceError, Problems, R2MedError, UsageError
from r2med.needs import Need, merged
from r2med.options import key_of
from r2med.settings import Settings, get_settings
from r2med.store.results import SystemPath, result_files

if TYPE_CHECKING:
    from r2med.execution import BuildContext

#: which extra a retriever family imports, and the modules of it that it always imports (checked by name only;
#: a zoo model served by an API imports none)
RETRIEVER_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {"dense": ("dense", ("torch", "transformers"))}
#: which extra a reranker kind imports and its modules (a local model: rerank; ReasonRank's prompt tools: llm;
#: a model scored by a server, --via-server: none)
RERANKER_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cross-encoder": ("rerank", ("torch", "sentence_transformers")),
    "rankllama": ("rerank", ("torch", "transformers", "peft")),
    "qwen3-reranker": ("rerank", ("torch", "transformers")),
    "reasonrank": ("llm", ("ftfy", "transformers")),
}

#: what a stored result will be, per dataset (``PlannedStage.stored``)
REUSED, RECOMPUTED, NEW, FORCED = "reused", "recomputed", "new", "recomputed (--force)"


@dataclass(frozen=True)
class Endpoint:
    """An LLM or embeddings server a stage sends requests to: its ``base_url`` (None: not given), ``model``, the
    variable its key is read from and whether that variable is set (its value is never read into the plan)."""

    stage: str
    base_url: str | None
    model: str | None
    key_env: str
    key_set: bool

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "base_url": self.base_url, "model": self.model, "key_env": self.key_env,
                "key_set": self.key_set}


@dataclass(frozen=True)
class PlannedStage:
    """One stage of a plan: its ``role`` (retrieve, fuse, rerank, agent, first stage, expand), its result path
    ``where``, what runs (``component``) with its declared ``options``, what it needs and the extras it imports,
    its ``inputs`` (stored systems or files it reads) and, per dataset, its result file and whether a stored result
    is reused (``stored``)."""

    role: str
    where: str
    component: str
    options: dict[str, Any] = field(default_factory=dict)
    needs: tuple[Need, ...] = ()
    extras: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    stored: dict[str, str] = field(default_factory=dict)
    #: builds the stage at execution (loads its model): ``(runtime context) -> Stage``; not part of the plan's view
    build: Callable[..., Any] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "where": self.where, "component": self.component,
                "options": json.loads(json.dumps(self.options, default=str)),
                "needs": [n.to_json() for n in self.needs], "extras": list(self.extras), "inputs": list(self.inputs),
                "files": dict(self.files), "stored": dict(self.stored)}


@dataclass(frozen=True)
class Plan:
    """A resolved pipeline: its ``spec``, the ``datasets`` (name, directory; None: the hub), the ``stages`` in the
    order they run, the ``endpoints``, the ``output`` directory and the ``command`` line that runs it (argv without
    the program name; empty when the plan was not made from a command line)."""

    spec: PipelineSpec | None
    datasets: tuple[tuple[str, Path | None], ...]
    stages: tuple[PlannedStage, ...]
    endpoints: tuple[Endpoint, ...] = ()
    output: Path | None = None
    command: tuple[str, ...] = ()
    settings: Settings | None = field(default=None, repr=False, compare=False)
    #: what execution shares between stages (the knowledge corpus path, the expansion), not part of the view
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def needs(self) -> tuple[Need, ...]:
        """What the whole plan needs: each stage's, and the hub for datasets not downloaded yet."""
        return merged(*(stage.needs for stage in self.stages), tuple(self.extra.get("data_needs", ())))

    @property
    def extras(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(extra for stage in self.stages for extra in stage.extras))

    def command_line(self) -> str | None:
        """``r2med ...`` as a shell line (each argument quoted where the shell needs it), or None."""
        return shlex.join(["r2med", *self.command]) if self.command else None

    def result_paths(self) -> list[str]:
        """Every result file the plan writes or reuses (``<output>/<system path>/<Dataset>.json``), in stage order."""
        return [path for stage in self.stages for path in stage.files.values()]

    def to_json(self) -> dict[str, Any]:
        return {
            "output": None if self.output is None else str(self.output),
            "datasets": [{"name": name, "directory": None if path is None else str(path), "source": "local" if path
                          else "hub"} for name, path in self.datasets],
            "stages": [stage.to_json() for stage in self.stages],
            "endpoints": [e.to_json() for e in self.endpoints],
            "extras": list(self.extras),
            "needs": [n.to_json() for n in self.needs],
            "command": self.command_line(),
        }


def installed(module: str) -> bool:
    """Whether ``module`` (a top-level package) is installed; finds it without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_extra(extra: str, modules: Sequence[str], purpose: str) -> None:
    """MissingExtraError (exit 3) naming ``pip install "r2med[extra]"`` when one of ``modules`` is missing."""
    for module in modules:
        if not installed(module):
            raise MissingExtraError(module, extra, purpose)


def _reranker_options(rerank: RerankSpec) -> Any:
    from r2med.rerankers.registry import options_for

    options = rerank.options
    return options_for(rerank.name, options) if options is None or isinstance(options, dict) else options


def reranker_key(rerank: RerankSpec) -> dict[str, Any]:
    """What keys a reranked result besides the reranker's own description: its kind, canonical name and declared
    options (``mono`` and ``monobert`` are one reranker, and one stored result)."""
    from r2med.rerankers.registry import resolve_reranker

    found = resolve_reranker(rerank.name)
    return {"kind": found.kind, "name": found.name, "options": key_of(_reranker_options(rerank))}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _stored(output: Path, where: SystemPath, names: Sequence[str], declared: dict[str, Any], *,
            resume: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Per dataset: the result file, and whether a stored result will be reused, from its manifest alone (its
    system, configuration format and the stage's declared configuration ``declared``: key -> value in the manifest's
    ``config``; the dataset's hashes and every file's digest are checked when the stage runs)."""
    from r2med.manifest import load_manifest
    from r2med.stages.runner import CONFIG_FORMAT

    files: dict[str, str] = {}
    stored: dict[str, str] = {}
    for name in names:
        found = result_files(output, where, name)
        files[name] = str(found.result)
        if not found.result.is_file():
            stored[name] = NEW
            continue
        if not resume:
            stored[name] = FORCED
            continue
        try:
            manifest = load_manifest(found.result) or {}
        except R2MedError:
            manifest = {}
        config = manifest.get("config") or {}
        same = (config.get("config_format") == CONFIG_FORMAT and config.get("system") == str(where)
                and all(_jsonable(config.get(key)) == _jsonable(value) for key, value in declared.items()))
        stored[name] = REUSED if same else RECOMPUTED
    return files, stored


def _located(spec: PipelineSpec, settings: Settings, problems: Problems) -> list[tuple[str, Path | None]]:
    from r2med.datasets.loading import locate

    return problems.check(lambda: locate(list(spec.datasets) if spec.datasets else None, data_dir=spec.data_dir,
                                         settings=settings), default=[])


def _hub_datasets(datasets: list, settings: Settings, problems: Problems) -> tuple[Need, ...]:
    """The hub datasets not in the cache: a need (downloaded once, at the pinned revision), or, with
    ``HF_HUB_OFFLINE`` set, a problem saying how to get them."""
    from r2med.datasets.catalog import catalog
    from r2med.datasets.hub import is_cached, offline_error

    needs = []
    for name, path in datasets:
        if path is not None or is_cached(catalog().get(name), settings):
            continue
        if settings.hf_offline:
            problems.add(offline_error(catalog().get(name), settings))
        else:
            needs.append(Need("hub", f"dataset {name} (downloaded once, at its pinned revision)"))
    return tuple(needs)


def _endpoint(stage: str, base_url: str | None, model: str | None, key_env: str | None,
              default_env: str = "OPENAI_API_KEY") -> Endpoint:
    from r2med.settings import get_secret

    env = key_env or default_env
    return Endpoint(stage, base_url, model, env, get_secret(env) is not None)


#: how a stage's missing key can be supplied: the LLM stages name another variable with --api-key-env; a server on
#: this machine or a private network needs no key (``is_local_url``)
LLM_KEY_HINT = " (or name another variable with --api-key-env); a server on this machine or a private network needs none"
EMBEDDINGS_KEY_HINT = "; a server on this machine or a private network ($OPENAI_BASE_URL) needs none"


def _check_key(endpoint: Endpoint, problems: Problems, *, hint: str) -> None:
    """The key a stage's server needs, found missing before any work: the stage's component resolves it when it is
    built (``r2med.http.resolve_key``: no key, and the server is not on this machine or a private network) and would
    stop there, after the stages before it ran. A variable named with ``--api-key-env`` and not set is reported by
    the stage's options already. ``hint``: how else to supply it."""
    from r2med.http import is_local_url, safe_url

    if endpoint.key_set or endpoint.base_url is None or is_local_url(endpoint.base_url):
        return
    problems.add(MissingResourceError(f"{endpoint.stage}: no API key for {safe_url(endpoint.base_url)}: set the "
                                      f"environment variable {endpoint.key_env}{hint}"))


def plan(spec: PipelineSpec, *, settings: Settings | None = None, resume: bool = True, client: Any = None,
         command: Sequence[str] = ()) -> Plan:
    """Resolve and check every stage of ``spec`` (see the module docstring); raises every problem found at once.

    ``resume``: whether stored results are reused (False: ``--force``, every one recomputed); ``client``: a chat
    client the agent will be handed (then its endpoint's key is not checked); ``command``: the argv (without the
    program name) that runs this plan, shown by ``--dry-run``.
    """
    from r2med.io.dirs import check_output_dir

    settings = settings or get_settings()
    problems = Problems()
    problems.check(lambda: check_output_dir(spec.output))
    datasets = _located(spec, settings, problems)
    names = [name for name, _ in datasets]
    extra: dict[str, Any] = {"data_needs": _hub_datasets(datasets, settings, problems)}
    stages: list[PlannedStage] = []
    endpoints: list[Endpoint] = []
    first: Any = None  # the reranker's first stage: a FirstStage or the last stage's system path

    if spec.first_stage is not None:
        first = _plan_stored_first(spec, datasets, problems, stages)
    elif spec.agent is not None:
        first = _plan_agent(spec, settings, names, problems, stages, endpoints, extra, resume=resume, client=client)
    else:
        first = _plan_retrievers(spec, settings, datasets, problems, stages, endpoints, extra, resume=resume)
    if spec.reranker is not None:
        _plan_reranker(spec, settings, names, first, problems, stages, endpoints, resume=resume)
    problems.raise_any()
    return Plan(spec, tuple(datasets), tuple(stages), tuple(endpoints), spec.output, tuple(command), settings, extra)


def _plan_stored_first(spec: PipelineSpec, datasets: list, problems: Problems, stages: list) -> Any:
    from r2med.stages.rerank import FirstStage

    first = problems.check(lambda: FirstStage.resolve(spec.first_stage, output=spec.output,
                                                      system=spec.first_stage_system, data_dir=spec.data_dir))
    if first is None:
        return None
    if first.file is not None and len(datasets) > 1:
        problems.add(UsageError(f"--run {spec.first_stage} is one run file; name its dataset with --tasks "
                                f"(got {len(datasets)} datasets)"))
    inputs = {}
    for name, _ in datasets:  # a missing first-stage run is found now, by its file name
        path = problems.check(lambda name=name: first.path_for(name))
        if path is not None:
            inputs[name] = str(path)
    stages.append(PlannedStage("first stage", first.system, "stored runs", inputs=tuple(dict.fromkeys(inputs.values())),
                               files=inputs, stored={name: "read" for name in inputs}))
    return first


def _retriever_extras(rspec: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``((extra, modules),)`` a retriever imports, or ``()``."""
    found = RETRIEVER_EXTRAS.get(rspec.family().name)
    if found is None:
        return ()
    from r2med.retrievers.dense.zoo import model_registry

    name = rspec.name.strip()
    if name in model_registry() and model_registry().get(name).backend == "api":
        return ()
    return (found,)


def _embeddings_hint(endpoint: Endpoint) -> str:
    """Every embeddings server but Voyage's follows ``$OPENAI_BASE_URL``, which may name a local one."""
    from r2med.retrievers.dense.api_base import VOYAGE_BASE_URL

    return "" if endpoint.base_url == VOYAGE_BASE_URL else EMBEDDINGS_KEY_HINT


def _retriever_endpoint(rspec: Any, settings: Settings, stage: str) -> Endpoint | None:
    from r2med.retrievers.registry import api_base_url

    family = rspec.family().name
    if family == "openai":
        model_id = rspec.name.strip()[len("openai:"):].strip()
        return _endpoint(stage, api_base_url(model_id, settings, zoo=False), model_id, None)
    if family == "dense":
        from r2med.retrievers.dense.zoo import model_registry

        name = rspec.name.strip()
        if name in model_registry():
            model = model_registry().get(name)
            if model.backend == "api":
                return _endpoint(stage, api_base_url(model.model, settings), model.model, model.api_key_env)
    return None


def _plan_retriever(rspec: Any, problems: Problems, what: str) -> str | None:
    """A retriever's results-folder name, once its name is known (UsageError with the valid names otherwise) and the
    extra it imports is installed."""
    from r2med.retrievers.registry import check_known

    known = problems.check(lambda: (check_known(rspec), True)[1], default=False)
    if not known:
        return None
    for extra, modules in _retriever_extras(rspec):
        problems.check(lambda extra=extra, modules=modules: check_extra(extra, modules, f"{what} {rspec.name}"))
    return problems.check(rspec.system)


def _plan_retrievers(spec: PipelineSpec, settings: Settings, datasets: list, problems: Problems, stages: list,
                     endpoints: list, extra: dict, *, resume: bool) -> SystemPath | None:
    names = [name for name, _ in datasets]
    expansion = None
    if spec.expansion:
        from r2med.stages.retrieve import Expansion

        expansion = problems.check(lambda: Expansion.parse(spec.expansion, policy=spec.answer_policy,
                                                           composition=spec.bm25_composition))
    extra["expansion"] = expansion
    single = spec.name if len(spec.retrievers) == 1 and spec.fusion is None else None
    inputs: list[SystemPath] = []
    for i, rspec in enumerate(spec.retrievers, start=1):
        system = _plan_retriever(rspec, problems, "--retriever")
        if system is None:
            continue
        name = single or system
        if expansion is None:
            where = SystemPath.base(name)
        else:
            where = SystemPath.gar(expansion.composition or expansion.method, expansion.llm, name)
        key = rspec.key()
        found = _retriever_endpoint(rspec, settings, str(where))
        files, stored = _stored(spec.output, where, names, {"top_k": spec.top_k}, resume=resume)
        stored = _refine_retriever(spec.output, where, names, key, stored)
        if found is not None:
            endpoints.append(found)
            _check_key(found, problems, hint=_embeddings_hint(found))
        expansions = _expansion_files(expansion, datasets, settings, problems) if expansion is not None else ()
        stages.append(PlannedStage("retrieve", str(where), rspec.name, options=_jsonable(key), needs=rspec.needs(),
                                   extras=tuple(e for e, _ in _retriever_extras(rspec)), inputs=expansions,
                                   files=files, stored=stored,
                                   build=_retriever_builder(rspec, where)))
        inputs.append(where)
    if not inputs:
        return None
    last = inputs[-1]
    if spec.fusion is not None and len(inputs) == len(spec.retrievers):
        name = spec.name or "+".join(where.system for where in inputs)
        where = SystemPath.fusion(name)
        declared = {"fusion": {"method": spec.fusion.method, **spec.fusion.options}, "top_k": spec.top_k}
        files, stored = _stored(spec.output, where, names, declared, resume=resume)
        stored = _after(stored, [stage.stored for stage in stages[-len(inputs):]])
        stages.append(PlannedStage("fuse", str(where), spec.fusion.method, options=_jsonable(spec.fusion.options),
                                   inputs=tuple(map(str, inputs)), files=files, stored=stored))
        last = where
    return last


def _after(stored: dict[str, str], inputs: list[dict[str, str]]) -> dict[str, str]:
    """A stored result made from stored inputs is reused only when they are: one recomputed or new input makes it
    recomputed (its key holds its inputs' configuration hashes, or their run's digest)."""
    return {name: RECOMPUTED if state == REUSED and any(other.get(name) != REUSED for other in inputs) else state
            for name, state in stored.items()}


def _refine_retriever(output: Path, where: SystemPath, names: list, key: dict, stored: dict) -> dict:
    """A stored retriever result is reused only when its manifest has this retriever's declared key."""
    from r2med.manifest import load_manifest

    out = dict(stored)
    for name in names:
        if out.get(name) != REUSED:
            continue
        try:
            config = (load_manifest(result_files(output, where, name).result) or {}).get("config") or {}
        except R2MedError:
            config = {}
        if _jsonable((config.get("retriever") or {}).get("options")) != _jsonable(key):
            out[name] = RECOMPUTED
    return out


def _expansion_files(expansion: Any, datasets: list, settings: Settings, problems: Problems) -> tuple[str, ...]:
    """Where each dataset's expansion file is (the first place that has it, as ``find_expansions`` looks); an R2MED
    dataset's may be the hub's copy, fetched when the stage runs; any other dataset's must be here now."""
    from r2med.datasets.catalog import catalog
    from r2med.expansion.published import expansion_places, missing_expansions

    found = []
    for name, path in datasets:
        places = expansion_places(name, path, expansion.method, expansion.llm, settings)
        here = next((p for p in places if p.is_file()), None)
        if here is not None:
            found.append(str(here))
        elif name in catalog():
            found.append(f"{expansion.method}/{expansion.llm} for {name}: the hub's copy (fetched when it runs)")
        else:
            problems.add(missing_expansions(name, places, expansion.method, expansion.llm))
    return tuple(found)


def _retriever_builder(rspec: Any, where: SystemPath) -> Callable[..., Any]:
    def build(ctx: BuildContext) -> Any:
        from r2med.retrievers.registry import make_retriever
        from r2med.stages.retrieve import Retrieve

        retriever = make_retriever(rspec, cache_dir=ctx.cache_dir, progress=ctx.progress)
        return Retrieve(retriever, top_k=ctx.spec.top_k, expansion=ctx.plan.extra.get("expansion"),
                        settings=ctx.settings, system=where.system if ctx.single else None, key=rspec.key())
    return build


def _plan_agent(spec: PipelineSpec, settings: Settings, names: list, problems: Problems, stages: list,
                endpoints: list, extra: dict, *, resume: bool, client: Any) -> Any:
    from r2med.agent.remote import is_server_url, server_name
    from r2med.store.expansions import llm_dir_name

    agent = spec.agent
    assert agent is not None
    config = agent.config
    if client is None:
        problems.check(config.ready)
    endpoint = _endpoint("agent", str(config.base_url), str(config.llm_model), config.api_key_env)
    endpoints.append(endpoint)
    if client is None and not config.api_key_env:
        _check_key(endpoint, problems, hint=LLM_KEY_HINT)
    configs = problems.check(config.seeded, default=[config])
    if len(configs) > 1 and spec.reranker is not None:
        problems.add(UsageError("--seeds/--runs stores one agent run per seed; rerank each stored run separately"))
    knowledge_name = None
    if agent.knowledge_dir is not None:
        path = Path(agent.knowledge_dir)
        corpus = path if path.is_file() else path / "corpus.jsonl"
        if not corpus.is_file():
            problems.add(MissingResourceError(
                f"{path}: no corpus.jsonl there; a knowledge corpus is a directory holding corpus.jsonl (rows "
                "{\"id\" or \"_id\", \"text\", optional \"title\"}) or that file itself"))
        folder = corpus.parent
        knowledge_name = folder.name or Path(os.path.abspath(folder)).name
    search = agent.search_with
    if isinstance(search, str):
        if agent.knowledge_dir is not None:
            problems.add(UsageError(f"--search-with {search} searches the server's corpus; drop --knowledge-dir"))
        searcher = problems.check(lambda: server_name(search)) if is_server_url(search) else None
        needs: tuple[Need, ...] = (Need("llm-server", f"a retrieval server at {search}"),)
        search_extras: tuple[str, ...] = ()
    else:
        searcher = _plan_retriever(search, problems, "--search-with")
        needs = search.needs()
        search_extras = tuple(e for e, _ in _retriever_extras(search))
        found = _retriever_endpoint(search, settings, "agent search")
        if found is not None:
            endpoints.append(found)
            _check_key(found, problems, hint=_embeddings_hint(found))
    needs = merged((Need("llm-server", f"{config.llm_model} on {config.base_url}"),), needs)
    last = None
    extra["knowledge"] = agent.knowledge_dir
    for seeded in configs:
        named = seeded.name
        if knowledge_name is not None and seeded.llm_name is None:
            named = f"{named}-{knowledge_name}"
        if searcher is None:
            continue
        where = SystemPath.agent(str(seeded.style), llm_dir_name(named), searcher)
        files, stored = _stored(spec.output, where, names, {"top_k": spec.top_k}, resume=resume)
        stages.append(PlannedStage("agent", str(where), f"{seeded.style} with {seeded.llm_model}",
                                   options=_jsonable({"seed": seeded.seed,
                                                      "search_with": str(getattr(search, "name", search))}),
                                   needs=needs, extras=search_extras, files=files, stored=stored,
                                   build=_agent_builder(seeded)))
        last = where
    return last


def _agent_builder(config: Any) -> Callable[..., Any]:
    def build(ctx: BuildContext) -> Any:
        from r2med.stages.agent import Agent

        return Agent(config, ctx.searcher(), knowledge=ctx.knowledge(), settings=ctx.settings, top_k=ctx.spec.top_k,
                     client=ctx.client, progress=ctx.progress, search_key=ctx.search_key)
    return build


def _reranker_endpoint(rerank: RerankSpec, options: Any, settings: Settings) -> Endpoint | None:
    from r2med.llm.endpoint import LLMOptions
    from r2med.rerankers.registry import resolve_reranker

    if not isinstance(options, LLMOptions) or getattr(options, "via_server", True) is False:
        return None
    found = resolve_reranker(rerank.name)
    base_url = options.base_url or settings.openai_base_url
    if found.kind == "listwise":
        base_url = base_url or "https://api.openai.com/v1"
    return _endpoint("reranker", base_url, options.llm_model or found.model, options.api_key_env)


def _plan_reranker(spec: PipelineSpec, settings: Settings, names: list, first: Any, problems: Problems,
                   stages: list, endpoints: list, *, resume: bool) -> None:
    from r2med.llm.endpoint import LLMOptions
    from r2med.rerankers.registry import reranker_needs, reranker_system, resolve_reranker
    from r2med.stages.rerank import FirstStage

    rerank = spec.reranker
    assert rerank is not None
    found = problems.check(lambda: resolve_reranker(rerank.name))
    options = problems.check(lambda: _reranker_options(rerank)) if found is not None else None
    if found is None or options is None:
        return
    if isinstance(options, LLMOptions):
        if not problems.check(lambda: (options.ready(), True)[1], default=False) and found.kind == "listwise":
            return  # no LLM: the listwise reranker's folder (listwise-<LLM>) has no name yet
        endpoint = _reranker_endpoint(rerank, options, settings)
        if endpoint is not None:
            endpoints.append(endpoint)
            if not options.api_key_env:
                _check_key(endpoint, problems, hint=LLM_KEY_HINT)
            if endpoint.base_url is None:
                problems.add(UsageError(f"{found.name} runs on an OpenAI-compatible server serving {endpoint.model}: "
                                        f"pass --base-url (or set $OPENAI_BASE_URL), e.g. http://localhost:8000/v1 "
                                        f"after 'vllm serve {endpoint.model}'"))
    imports = None if getattr(options, "via_server", False) else RERANKER_EXTRAS.get(found.kind)
    extra = None if imports is None else imports[0]
    if imports is not None:
        problems.check(lambda: check_extra(imports[0], imports[1], f"the reranker {found.name}"))
    name = problems.check(lambda: reranker_system(rerank.name, options))
    if first is None or name is None:
        return
    system = first.system if isinstance(first, FirstStage) else (
        FirstStage.resolve(str(first), output=spec.output).system)
    where = SystemPath.rerank(name, system, rerank.top_k)
    key = problems.check(lambda: reranker_key(rerank), default={})
    files, stored = _stored(spec.output, where, names, {"top_k": rerank.top_k, "truncate": rerank.truncate},
                            resume=resume)
    for dataset in names:  # the reranker's own key, from its manifest
        if stored.get(dataset) == REUSED:
            stored[dataset] = _reranker_stored(spec.output, where, dataset, key)
    if stages and stages[-1].role != "first stage":  # a first stage made in this pipeline
        stored = _after(stored, [stages[-1].stored])
    stages.append(PlannedStage("rerank", str(where), found.name, options=_jsonable(key),
                               needs=reranker_needs(rerank.name),
                               extras=(extra,) if extra else (), inputs=(_first_input(first),),
                               files=files, stored=stored))


def _first_input(first: Any) -> str:
    from r2med.stages.rerank import FirstStage

    if isinstance(first, FirstStage):
        return str(first.file if first.file is not None else first.directory)
    return str(first)


def _reranker_stored(output: Path, where: SystemPath, dataset: str, key: dict) -> str:
    from r2med.manifest import load_manifest

    try:
        config = (load_manifest(result_files(output, where, dataset).result) or {}).get("config") or {}
    except R2MedError:
        return RECOMPUTED
    return REUSED if _jsonable((config.get("reranker") or {}).get("options")) == _jsonable(key) else RECOMPUTED


def plan_expand(config: Any, *, base_url: str, api_key_env: str | None, tasks: Sequence[str] | None = None,
                data_dir: Path | None = None, first_stage: Path | None = None, out: Path | None = None,
                check: Callable[[list[str]], None] | None = None, resume: bool = True,
                settings: Settings | None = None, command: Sequence[str] = ()) -> Plan:
    """The plan of ``r2med expand``: ``config`` (an ``ExpansionConfig``) over the datasets of ``tasks`` / ``data_dir``,
    each dataset's expansion file (``out``, else ``$R2MED_HOME/expansions/<Dataset>/<method>/<llm>/``) and whether a
    stored one is kept (its manifest has this method, model, sampling, style and policy; the requests' hashes are
    checked when it runs), LameR's first-stage run per dataset, the endpoint and its key. ``check(names)``: the
    command's own check of the datasets (their prompts). Every problem at once, as :func:`plan`."""
    from r2med.datasets.loading import locate
    from r2med.expansion.methods import gar_method
    from r2med.manifest import load_manifest
    from r2med.store.expansions import EXPANSION_FILE, expansion_dir, llm_dir_name

    settings = settings or get_settings()
    problems = Problems()
    datasets = problems.check(lambda: locate(list(tasks) if tasks else None, data_dir=data_dir, settings=settings),
                              default=[])
    names = [name for name, _ in datasets]
    if check is not None and names:
        problems.check(lambda: check(names))
    method, llm = config.method.strip().lower(), llm_dir_name(config.name)
    inputs = []
    if first_stage is not None and gar_method(method).first_stage:
        for name in names:
            path = Path(first_stage)
            run = path if path.is_file() else path / f"{name}.run"
            if not run.is_file():
                problems.add(MissingResourceError(
                    f"--first-stage {path}: no run for {name} (looked for {run}); make one with 'r2med run --retriever "
                    f"bm25 --tasks {name}' (writes 'results/base retriever/bm25/{name}.run')"))
            inputs.append(str(run))
    files: dict[str, str] = {}
    stored: dict[str, str] = {}
    for name in names:
        folder = (expansion_dir(settings, name, method, llm) if out is None
                  else Path(out) / name if len(names) > 1 else Path(out))
        target = folder / EXPANSION_FILE
        files[name] = str(target)
        try:
            manifest = load_manifest(target) if target.is_file() else None
        except R2MedError:
            manifest = None
        if not target.is_file() or manifest is None:
            stored[name] = NEW
            continue
        had = ((manifest.get("config") or {}).get("expansion")) or {}
        same = all(had.get(key) == value for key, value in (
            ("method", method), ("model", config.llm_model), ("llm", config.name), ("style", config.style),
            ("policy", config.policy), ("sampling", json.dumps(asdict(config.sampling), sort_keys=True))))
        stored[name] = (REUSED if same else RECOMPUTED) if resume else FORCED
    endpoint = _endpoint("expand", base_url, config.llm_model, api_key_env)
    if not api_key_env:
        _check_key(endpoint, problems, hint=LLM_KEY_HINT)
    stage = PlannedStage("expand", f"expand/{method}/{llm}", f"{method} with {config.llm_model}",
                         options=_jsonable({"method": method, "llm": config.name, "style": config.style,
                                            "policy": config.policy, "sampling": asdict(config.sampling)}),
                         needs=(Need("llm-server", f"{config.llm_model} on {base_url}"),),
                         inputs=tuple(inputs), files=files, stored=stored)
    problems.raise_any()
    return Plan(None, tuple(datasets), (stage,), (endpoint,), out, tuple(command), settings)


# -- the one printer: a plan as text (``--dry-run``) or JSON (``--dry-run --json``) --------------------------------

def options_text(options: dict[str, Any]) -> str:
    """A stage's declared options as ``key=value`` pairs: a component's key (``{"options": {...}, ...}``) by its own
    options, then the keys beside them that are set (``identical_ids``); the family and name are shown already.

    >>> options_text({"family": "bm25", "name": "bm25", "identical_ids": None, "options": {"k1": 0.9, "b": 0.4}})
    'b=0.4, k1=0.9'
    >>> options_text({"k": 60})
    'k=60'
    """
    own = dict(options.get("options") or {}) if isinstance(options.get("options"), dict) else {}
    rest = {k: v for k, v in options.items() if k not in ("options", "family", "name", "kind") and v is not None}
    pairs = {**dict(sorted(own.items())), **dict(sorted(rest.items()))}
    return ", ".join(f"{k}={json.dumps(v, default=str) if not isinstance(v, str) else v}" for k, v in pairs.items()
                     if v is not None)


def describe(plan: Plan, *, title: str | None = None) -> str:
    """The plan as ``--dry-run`` prints it: the datasets, each stage (its result path, what runs, its options,
    what it reads, needs and imports, and per dataset whether a stored result is reused), the endpoints and keys,
    what the whole plan needs, and the command line that runs it."""
    lines = [title or "plan (nothing was loaded, read or contacted)"]
    shown = ", ".join(f"{name} ({path if path is not None else 'hub'})" for name, path in plan.datasets)
    lines.append(f"  datasets: {shown or '-'}")
    if plan.output is not None:
        lines.append(f"  output: {plan.output}")
    for i, stage in enumerate(plan.stages, start=1):
        lines.append(f"  {i}. {stage.role}: {stage.where}")
        lines.append(f"     runs: {stage.component}")
        shown = options_text(stage.options)
        if shown:
            lines.append(f"     options: {shown}")
        for item in stage.inputs:
            lines.append(f"     reads: {item}")
        if stage.extras:
            lines.append(f"     imports: {', '.join(f'r2med[{e}]' for e in stage.extras)} (installed)")
        for need in stage.needs:
            lines.append(f"     needs: {need.text}")
        for name, state in stage.stored.items():
            lines.append(f"     {name}: {state} -> {stage.files[name]}")
    for e in plan.endpoints:
        key = f"${e.key_env} {'set' if e.key_set else 'not set'}"
        lines.append(f"  endpoint ({e.stage}): {e.model or '-'} at {e.base_url or '-'}; key {key}")
    lines.append(f"  needs: {'; '.join(n.text for n in plan.needs) or 'nothing beyond r2med'}")
    line = plan.command_line()
    if line is not None:
        lines.append(f"  command: {line}")
    return "\n".join(lines)
