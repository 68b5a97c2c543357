"""Retrievers by name: ``bm25``, a dense model of the zoo, or a local model directory / hub id.

:data:`FAMILIES` is the table of retriever families, tried in order: each has a matcher on the retriever name, the
class of its options (``r2med.options``: flags, pipeline-file keys and inline ``NAME:key=value`` from one
declaration), the name of its results folder and a builder ``(spec, options, runtime) -> Retriever``. Adding a family
is its module and one row there.

>>> spec = RetrieverSpec.parse("bm25:variant=lucene,k1=1.2")
>>> spec.family().name, spec.system(), spec.key()["options"]
('bm25', 'bm25-lucene-k1_1.2-b_0.4', {'variant': 'lucene', 'k1': 1.2, 'b': 0.4})
>>> RetrieverSpec.parse("bm25-lucene").system(), RetrieverSpec.parse("bm25").system()
('bm25-lucene', 'bm25')
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from r2med.errors import UsageError
from r2med.io.names import check_name
from r2med.needs import Need
from r2med.options import Runtime, key_of, option, split_inline, values_from_text
from r2med.retrievers.base import Retriever
from r2med.retrievers.bm25.options import BM25Options
from r2med.retrievers.dense.options import DenseOptions

IDENTICAL_IDS = ("drop", "keep")


@dataclass(frozen=True, kw_only=True)
class RetrieverOptions:
    """What every retriever takes, whatever its family."""

    identical_ids: str | None = option(None, "drop documents whose id equals the query id before scoring (BEIR's "
                                       "ignore_identical_ids); default as the official numbers: drop for dense, keep "
                                       "for BM25", choices=IDENTICAL_IDS)
    # inline NAME:name=minilm (or system=minilm); in a pipeline file's [[retriever]] table ``system = "minilm"``, as
    # ``name`` there is the retriever itself. Not a command-wide flag (it names one retriever; --name names a run's).
    system: str | None = option(None, "the name of this retriever's results: base retriever/<system>/, and its part of a "
                                "fusion's name (default: its model's: a zoo name, a hub id, or a local directory's "
                                "name and 8 hex digits of its path)", aliases=("name",))


@dataclass(frozen=True)
class RetrieverSpec:
    """One retriever of ``r2med run`` or a pipeline's ``[[retriever]]`` table: its ``name``, its family's ``options``
    (a dict of the values given, or the family's options object; the rest take their defaults), ``identical_ids``
    ("drop" | "keep" | None: the family's default, dense drop and BM25 keep), for ``r2med.run(model)`` the Python
    ``encoder`` (wrapped in a ``PythonEncoder``; then ``name`` is its system name), and ``named``: the name of its
    results when the user gives one (``PATH:name=minilm``), instead of its model's.

    >>> RetrieverSpec.parse("/models/all-MiniLM-L6-v2:name=minilm").system()
    'minilm'
    """

    name: str
    options: Any = field(default_factory=dict)
    identical_ids: str | None = None
    encoder: Any = None
    named: str | None = None

    def __post_init__(self) -> None:
        if self.identical_ids not in (None, *IDENTICAL_IDS):
            raise UsageError(f"identical_ids must be 'drop' or 'keep' (or unset: the family's default), "
                             f"got {self.identical_ids!r}")
        if self.named is not None:  # a results folder: base retriever/<named>/
            check_name(self.named, what=f"retriever {self.name!r}: name {self.named!r}",
                       fix="it names one results folder; use a plain name such as 'minilm'")

    @classmethod
    def parse(cls, text: str, *, given: Mapping[str, Any] | None = None, identical_ids: str | None = None,
              where: str | None = None) -> RetrieverSpec:
        """``NAME`` or ``NAME:key=value,...`` (``--retriever``); ``given``: the values of the command's flags (every
        family's, by option name: each family takes its own), overridden by the inline ones."""
        where = where or f"--retriever {text}"
        name, pairs = split_inline(text, where)
        family = family_of(name)
        if not pairs and family.name == "dense" and ":" in name:
            _check_not_inline(name, where)
        inline = values_from_text([family.options, RetrieverOptions], pairs, where)
        identical = inline.pop("identical_ids", identical_ids)
        named = inline.pop("system", None)
        own = {key: value for key, value in (given or {}).items() if key in family.option_names()}
        return cls(name, {**own, **inline}, identical, named=named)

    def family(self) -> RetrieverFamily:
        return next(family for family in FAMILIES if family.matches(self))

    def resolved(self) -> Any:
        """The family's options object: its preset (``bm25-lucene``), then the given values."""
        family = self.family()
        if isinstance(self.options, family.options):
            return self.options
        return family.options(**{**family.presets.get(self.name.strip().lower(), {}), **dict(self.options)})

    def system(self) -> str:
        """The results-folder name this retriever gets (known before it is built: pipelines check it): the name given
        to it, else its family's for its model."""
        return self.named or self.family().system(self, self.resolved())

    def needs(self) -> tuple[Need, ...]:
        """What running this retriever needs (its family's declaration: ``r2med.needs``); loads nothing.

        >>> RetrieverSpec("bm25").needs(), [n.kind for n in RetrieverSpec("openai").needs()]
        ((), ['api-key'])
        """
        return self.family().needs(self)

    def key(self) -> dict[str, Any]:
        """What keys a stored result of this retriever, from its declared options (no component can forget it); named
        by its results folder, so one retriever spelled two ways (``bm25-lucene``, ``bm25:variant=lucene``; a zoo
        name and its model's) is one stored result.

        >>> RetrieverSpec.parse("bm25-lucene").key() == RetrieverSpec.parse("bm25:variant=lucene").key()
        True
        """
        out = {"family": self.family().name, "name": self.system(), "options": key_of(self.resolved()),
               "identical_ids": self.identical_ids}
        if self.encoder is not None:
            out["encoder"] = self.encoder.name
        return out


def check_distinct(specs: Sequence[RetrieverSpec]) -> None:
    """Two retrievers of one pipeline that would be stored in one results folder: a UsageError naming both."""
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs, start=1):
        system = spec.system()
        if system in seen:
            first = specs[seen[system] - 1]
            if first.named is not None or spec.named is not None:
                fix = "give each its own name (NAME:name=..., or system = ... in a pipeline file)"
            elif first.key() == spec.key():
                fix = "the same retriever twice; drop one, or name each variant (--retriever bm25 --retriever bm25:variant=lucene)"
            else:  # options that do not name the folder (a dense model's instructions, batch size)
                fix = ("their options differ, but a retriever's results folder is named by its model or BM25 variant "
                       "only: run the variants one at a time (each its own --output), then r2med fuse their runs")
            raise UsageError(f"retrievers #{seen[system]} ({first.name}) and #{i} ({spec.name}) would both be stored "
                             f"as '{system}': {fix}")
        seen[system] = i


def _check_not_inline(name: str, where: str) -> None:
    """``bm25:lucene``, ``nv:batch_size 8``: a known retriever followed by ``:`` and no ``key=value`` is a mistake,
    not a model id (UsageError naming the options it takes)."""
    from r2med.options import options_of
    from r2med.retrievers.dense.zoo import model_registry

    head, _, tail = name.partition(":")
    known = {fixed: family for family in FAMILIES for fixed in family.names}
    family = known.get(head.strip().lower()) or (FAMILIES[-1] if head.strip() in model_registry() else None)
    if family is not None:
        names = sorted(opt.name for cls in (family.options, RetrieverOptions) for opt in options_of(cls))
        raise UsageError(f"{where}: the options after '{head}:' must be key=value pairs separated by commas, got "
                         f"{tail!r}; valid keys: {', '.join(names)}")


#: ``(spec, options, runtime) -> Retriever``
Builder = Callable[[RetrieverSpec, Any, Runtime], Retriever]


def _bm25(spec: RetrieverSpec, options: BM25Options, runtime: Runtime) -> Retriever:
    from r2med.retrievers.bm25.retriever import BM25Retriever

    cache = runtime.cache_dir / "indexes" / "bm25" if runtime.cache_dir is not None else None
    return BM25Retriever(variant=options.variant, k1=options.k1, b=options.b, cache_dir=cache,
                         progress=runtime.progress)


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


def api_base_url(model_id: str, settings: Any = None, *, zoo: bool = True) -> str:
    """The base URL an embeddings model is sent to: for a zoo API model (``zoo``) Voyage's when its id names Voyage
    (``_api_encoder`` builds ``VoyageEmbeddings`` then); otherwise ``$OPENAI_BASE_URL`` or OpenAI's, the default of
    ``OpenAIEmbeddings`` (an ``openai:<model id>`` retriever always is one, whatever its id).

    >>> from dataclasses import replace
    >>> from r2med.settings import get_settings
    >>> local = replace(get_settings(), openai_base_url="http://gpu-1:8000/v1")
    >>> api_base_url("voyage-3"), api_base_url("m", local), api_base_url("voyage-x", local, zoo=False)
    ('https://api.voyageai.com/v1', 'http://gpu-1:8000/v1', 'http://gpu-1:8000/v1')
    """
    from r2med.retrievers.dense.api_base import OPENAI_BASE_URL, VOYAGE_BASE_URL
    from r2med.settings import get_settings

    if zoo and _is_voyage(model_id):
        return VOYAGE_BASE_URL
    return (settings or get_settings()).openai_base_url or OPENAI_BASE_URL


def _is_voyage(model_id: str) -> bool:
    """Whether a zoo API model is Voyage's (sent to Voyage's API with ``VoyageEmbeddings``), by its id.

    >>> _is_voyage("voyage-3"), _is_voyage("text-embedding-3-large")
    (True, False)
    """
    return "voyage" in model_id


def _api_encoder(spec, options: DenseOptions):
    from r2med.retrievers.dense.api import OpenAIEmbeddings, VoyageEmbeddings

    # as the authors' code sent texts: newlines flattened, JSON-quoted, cut to 6000 / 16000 tokens
    env = {"api_key_env": spec.api_key_env} if spec.api_key_env else {}  # the zoo names the key's variable
    http = {"timeout": options.timeout, "max_retries": options.max_retries, "max_concurrency": options.concurrency}
    if _is_voyage(spec.model):
        return VoyageEmbeddings(spec.model, preprocess="r2med", max_input_tokens=16000, **env, **http)
    return OpenAIEmbeddings(spec.model, preprocess="r2med", max_input_tokens=6000, **env, **http)


def _resolve_zoo(name: str, options: DenseOptions):
    from r2med.retrievers.dense.zoo import model_names, resolve_model

    try:
        return resolve_model(name, query_instruction=options.query_instruction,
                             document_instruction=options.doc_instruction)
    except UsageError:
        names = [*(fixed for family in FAMILIES for fixed in family.names), *model_names()]
        close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else "."
        raise UsageError(
            f"unknown retriever '{name}'{hint} Valid: {', '.join(names)}, or a local model directory or hub id"
        ) from None


def _dense_system(spec: RetrieverSpec, options: DenseOptions) -> str:
    """A zoo name or hub id names its folder; a local directory its resolved path (run1/model vs run2/model).
    Known without loading or looking anything up (pipelines check the names before any work)."""
    from r2med.retrievers.dense.zoo import model_registry

    name, zoo = spec.name.strip(), model_registry()
    if name in zoo:
        return system_name(zoo.get(name).name or name)
    path = Path(name).expanduser()
    return system_name(str(path.resolve()) if path.is_dir() else name)


def _dense(rspec: RetrieverSpec, options: DenseOptions, runtime: Runtime) -> Retriever:
    from r2med.retrievers.dense.factory import make_encoder

    spec = _resolve_zoo(rspec.name, options)
    encoder = (_api_encoder(spec, options) if spec.backend == "api"
               else make_encoder(spec, device=options.device, batch_size=options.batch_size,
                                batch_tokens=options.batch_tokens, compile=options.compile))
    return _searcher(_dense_system(rspec, options), encoder, options, runtime,
                     lambda dataset: (spec.instruction("query", dataset), spec.instruction("document", dataset)))


def _searcher(name: str, encoder: Any, options: DenseOptions, runtime: Runtime,
              instructions: Callable[[str], tuple[str, str]] | None = None) -> Retriever:
    """A dense retriever over ``encoder``; its embeddings under ``<R2MED_HOME>/embeddings``, or without a cache in a
    temporary folder that lives only as long as the retriever. ``instructions``: per dataset (default: the options')."""
    from r2med.retrievers.dense.cache import EmbeddingCache
    from r2med.retrievers.dense.retriever import DenseRetriever

    if instructions is None:
        fixed = (options.query_instruction or "", options.doc_instruction or "")

        def instructions(dataset: str) -> tuple[str, str]:
            return fixed
    scratch = None
    if runtime.cache_dir is not None:
        root = runtime.cache_dir / "embeddings"
    else:
        scratch = tempfile.TemporaryDirectory(prefix="r2med-embeddings-")
        root = Path(scratch.name)
    retriever = DenseRetriever(name=name, encoder=encoder, instructions=instructions, cache=EmbeddingCache(root),
                               batch_size=options.batch_size, progress=runtime.progress)
    if scratch is not None:
        retriever._scratch = scratch  # type: ignore[attr-defined]  # removed with the retriever
    return retriever


def _python_system(spec: RetrieverSpec, options: DenseOptions) -> str:
    return check_name(spec.name, what="the system name of a Python encoder", fix="pass r2med.run(..., name='my-model')")


def _python(spec: RetrieverSpec, options: DenseOptions, runtime: Runtime) -> Retriever:
    """A Python model (``r2med.run(model)``): an ``r2med.Encoder`` or an MTEB-style object, as a dense retriever."""
    return _searcher(_python_system(spec, options), spec.encoder, options, runtime)


def _remote_model(spec: RetrieverSpec) -> str:
    model = spec.name.strip()[len("openai:"):].strip()
    if not model:
        raise UsageError("--retriever openai:MODEL needs the model id the server knows, e.g. openai:Qwen/Qwen3-Embedding-8B")
    return model


def _remote(spec: RetrieverSpec, options: DenseOptions, runtime: Runtime) -> Retriever:
    """``openai:<model id>``: any OpenAI-compatible /v1/embeddings server ($OPENAI_BASE_URL: vLLM, TEI, ...)."""
    from r2med.retrievers.dense.api import OpenAIEmbeddings

    model = _remote_model(spec)
    encoder = OpenAIEmbeddings(model, batch_size=options.batch_size or 128, timeout=options.timeout,
                               max_retries=options.max_retries, max_concurrency=options.concurrency)
    return _searcher(system_name(model), encoder, options, runtime)


def _dense_needs(spec: RetrieverSpec) -> tuple[Need, ...]:
    """A zoo model's own needs (its size, an API key); a model outside the zoo: GPU-sized unless known otherwise, and
    the hub unless it is a local directory."""
    from r2med.retrievers.dense.zoo import model_registry

    name, zoo = spec.name.strip(), model_registry()
    if name in zoo:
        return zoo.get(name).needs
    unknown = Need("gpu", f"{name}: size not known to r2med")
    return (unknown,) if Path(name).expanduser().is_dir() else (unknown, Need("hub", f"model weights: {name}"))


def _no_needs(spec: RetrieverSpec) -> tuple[Need, ...]:
    return ()


def _bm25_system(spec: RetrieverSpec, options: BM25Options) -> str:
    from r2med.retrievers.bm25.options import system_name as bm25_name

    return bm25_name(options)


@dataclass(frozen=True)
class RetrieverFamily:
    """A kind of retriever: ``matches(spec)`` says whether a retriever spec is this family's, ``options`` is the class
    of its options, ``system(spec, options)`` its results-folder name, ``build(spec, options, runtime)`` makes it;
    ``names`` are the fixed names it answers to (listed when a name is unknown) and ``presets`` names that stand for
    it with some options set (``bm25-lucene``); ``needs(spec)`` what running it needs (``r2med.needs``), known
    without loading anything."""

    name: str
    matches: Callable[[RetrieverSpec], bool]
    options: type
    system: Callable[[RetrieverSpec, Any], str]
    build: Builder
    names: tuple[str, ...] = ()
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    description: str = ""
    needs: Callable[[RetrieverSpec], tuple[Need, ...]] = _no_needs

    def option_names(self) -> set[str]:
        from r2med.options import options_of

        return {opt.name for opt in options_of(self.options)}


_BM25_PRESETS = MappingProxyType({"bm25-lucene": MappingProxyType({"variant": "lucene"})})

#: The retriever families, tried in order (the last one, dense, takes every name left: zoo names, model
#: directories and hub ids, and fails with the valid names when none fits).
FAMILIES: tuple[RetrieverFamily, ...] = (
    RetrieverFamily("python", lambda spec: spec.encoder is not None, DenseOptions, _python_system, _python,
                    description="a Python model object (r2med.run): an r2med.Encoder or an MTEB-style encode"),
    RetrieverFamily("bm25", lambda spec: spec.name.strip().lower() in ("bm25", *_BM25_PRESETS), BM25Options,
                    _bm25_system, _bm25, names=("bm25", *_BM25_PRESETS), presets=_BM25_PRESETS,
                    description="BM25 over Lucene's English analysis (r2med or lucene variant)"),
    RetrieverFamily("openai", lambda spec: spec.name.strip().lower().startswith("openai:"), DenseOptions,
                    lambda spec, options: system_name(_remote_model(spec)), _remote,
                    description="openai:<model id>: any OpenAI-compatible embeddings endpoint ($OPENAI_BASE_URL)",
                    needs=lambda spec: (Need("llm-server", "an OpenAI-compatible /v1/embeddings server "
                                                           "($OPENAI_BASE_URL)"),)),
    RetrieverFamily("dense", lambda spec: True, DenseOptions, _dense_system, _dense,
                    description="a dense model of the zoo (r2med models list), a local model directory or a hub id",
                    needs=_dense_needs),
)


def check_known(spec: RetrieverSpec) -> None:
    """UsageError naming the valid retrievers (as building it would) when no family can build ``spec``: a name that is
    no fixed name, zoo model, model directory, path or hub id. Looks nothing up and loads nothing, so that a pipeline
    file's unknown name is found (and reported as the file's) before any work."""
    if spec.encoder is not None or spec.family().name != "dense":
        return
    from r2med.retrievers.dense.zoo import _HF_ID, _is_path_like, model_registry

    text = spec.name.strip()
    if text in model_registry() or _is_path_like(text) or Path(text).expanduser().exists() or _HF_ID.fullmatch(text):
        return
    _resolve_zoo(text, DenseOptions())  # raises the UsageError building it raises (the valid names, a suggestion)


def family_of(name: str) -> RetrieverFamily:
    """The family of the retriever called ``name`` (not a Python model)."""
    return RetrieverSpec(name).family()


def retriever_option_classes() -> tuple[type, ...]:
    """Every options class a retriever may take (each once): what ``r2med run`` offers as flags."""
    seen: list[type] = [RetrieverOptions]
    for family in FAMILIES:
        if family.options not in seen:
            seen.append(family.options)
    return tuple(seen)


def make_retriever(spec: RetrieverSpec | str, *, cache_dir: Path | None, progress: bool = True) -> Retriever:
    """``bm25``, any zoo model (``r2med models list``), a local model directory, a hub id, or
    ``openai:<model id>`` served by any OpenAI-compatible embeddings endpoint (``$OPENAI_BASE_URL``).

    ``spec``: a :class:`RetrieverSpec` or just a name (``NAME:key=value`` too); ``cache_dir``: R2MED_HOME (None:
    nothing cached). ``spec.identical_ids`` ("drop"/"keep") overrides the family's ``ignore_identical_ids``.
    Unknown names fail with the valid list and a suggestion.
    """
    if isinstance(spec, str):
        spec = RetrieverSpec.parse(spec)
    family = spec.family()
    retriever = family.build(spec, spec.resolved(), Runtime(cache_dir, progress))
    if spec.named is not None:  # the user's name for its results (its caches stay keyed by the model)
        retriever.name = spec.named
    if spec.identical_ids is not None:  # default: as the official numbers of the family (dense drop, BM25 keep)
        retriever.ignore_identical_ids = spec.identical_ids == "drop"
    return retriever
