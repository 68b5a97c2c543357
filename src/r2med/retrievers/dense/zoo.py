"""The model zoo: declarative specs of dense retrievers (package data ``r2med/data/models.json``).

Every paper retriever is described as the benchmark authors' code ran it (backend, pooling,
normalisation, max lengths, dtype, remote code) with its per-dataset instructions, which are read
from ``instructions.json`` by key at load time, never copied. ``resolve_model`` also accepts a
local model directory or a Hugging Face id outside the zoo and infers a spec for it.

>>> spec = get_model("MedCPT")
>>> spec.model_for("query"), spec.model_for("document")
('ncbi/MedCPT-Query-Encoder', 'ncbi/MedCPT-Article-Encoder')
>>> get_model("medcpt-authors").model_for("query")
'ncbi/MedCPT-Article-Encoder'
>>> get_model("bge").instruction("query", "Biology")
'Represent this sentence for searching relevant passages: '
>>> get_model("qwen3-embedding-8b").instruction("query", "PMC-Clinical")
'Instruct: Given a Clinical Case, retrieve similar cases that help diagnose the case.\\nQuery:'
>>> get_model("bmr-7")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
r2med.errors.UsageError: unknown model 'bmr-7'; did you mean 'bmr-7b'? Valid: ...
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from r2med.errors import MissingResourceError, UsageError
from r2med.hf import DTYPES, is_network_error, require_hub, unreachable_error
from r2med.needs import GPU_PARAMS, Need, model_size
from r2med.packaged import read_text
from r2med.registry import Registry

logger = logging.getLogger(__name__)

BACKENDS = ("sentence-transformers", "transformers", "instructor", "gritlm", "nv-embed", "api")
POOLINGS = ("cls", "mean", "last", "last-bmr")
EOS_MODES = ("none", "append", "ensure")
KINDS = ("query", "document")

def _check(name: str, what: str, value: Any, valid: tuple) -> None:
    if value not in valid:
        shown = ", ".join(str(v) for v in valid)
        raise UsageError(f"model '{name}': {what} {value!r} is not one of: {shown}")


@dataclass(frozen=True)
class ModelSpec:
    """Everything that decides a dense model's vectors, except the texts.

    ``model`` encodes queries and ``document_model`` (when set) documents, as MedCPT's two towers.
    ``dtype``/``autocast`` apply on CUDA only; the CPU always computes in float32.
    ``eos``: ``append`` truncates to max_length-1 and appends EOS (BMRetriever), ``ensure`` appends
    it only where the tokenizer did not. ``prompt_in_pooling=False`` keeps instruction tokens out of
    mean pooling (Instructor, GritLM, ReasonIR). ``document_pair`` tokenises documents as the pair
    ``('', text)`` (MedCPT's article encoder).
    """

    name: str
    model: str
    backend: str
    pooling: str | None = None
    normalize: bool = True
    query_max_length: int | None = None
    document_max_length: int | None = None
    document_model: str | None = None
    revision: str | None = None
    document_revision: str | None = None
    dtype: str = "float32"
    autocast: str | None = None
    trust_remote_code: bool = False
    padding_side: str | None = None
    eos: str = "none"
    prompt_in_pooling: bool = True
    bidirectional: bool = False
    document_pair: bool = False
    batch_size: int = 32
    #: padded tokens per batch on a GPU (``--batch-tokens``); None: ``encoders.DEFAULT_BATCH_TOKENS``
    batch_tokens: int | None = None
    params: str | None = None
    description: str = ""
    notes: str = ""
    query_instructions: Mapping[str, str] = field(default_factory=dict, compare=False)
    document_instructions: Mapping[str, str] = field(default_factory=dict, compare=False)
    default_query_instruction: str = ""
    default_document_instruction: str = ""
    instruction_source: str = ""
    aliases: tuple[str, ...] = ()
    #: an API model (backend ``api``): the environment variable its key is read from
    api_key_env: str | None = None

    def __post_init__(self) -> None:
        _check(self.name, "backend", self.backend, BACKENDS)
        _check(self.name, "pooling", self.pooling, (*POOLINGS, None))
        _check(self.name, "dtype", self.dtype, DTYPES)
        _check(self.name, "autocast", self.autocast, (*DTYPES, None))
        _check(self.name, "eos", self.eos, EOS_MODES)
        _check(self.name, "padding_side", self.padding_side, ("left", "right", None))
        for length in (self.query_max_length, self.document_max_length):
            if length is not None and (not isinstance(length, int) or length < 2):
                raise UsageError(f"model '{self.name}': max length must be an integer >= 2, got {length!r}")
        if self.batch_size < 1:
            raise UsageError(f"model '{self.name}': batch size must be >= 1, got {self.batch_size}")
        if self.batch_tokens is not None and (type(self.batch_tokens) is not int or self.batch_tokens < 1):
            raise UsageError(f"model '{self.name}': batch tokens must be an integer >= 1, got {self.batch_tokens!r}")
        object.__setattr__(self, "query_instructions", MappingProxyType(dict(self.query_instructions)))
        object.__setattr__(self, "document_instructions", MappingProxyType(dict(self.document_instructions)))

    @property
    def needs(self) -> tuple[Need, ...]:
        """What running this model needs (``r2med.needs``): an API model its key; a local one its weights from the
        hub and, from 1B parameters on (its declared ``params``; undeclared counts as large), a GPU.

        >>> [n.text for n in get_model("voyage").needs]
        ['an API key ($VOYAGE_API_KEY)']
        >>> [n.kind for n in get_model("contriever").needs], [n.detail for n in get_model("e5").needs]
        (['model', 'hub'], ['e5: intfloat/e5-mistral-7b-instruct, 7B', 'model weights: intfloat/e5-mistral-7b-instruct'])
        """
        if self.backend == "api":
            return (Need("api-key", self.api_key_env or ""),)
        size = model_size(self.params)
        models = list(dict.fromkeys(m for m in (self.model, self.document_model) if m))
        sized = "gpu" if size is None or size >= GPU_PARAMS else "model"
        return (Need(sized, f"{self.name}: {' + '.join(models)}, {self.params or 'size not declared'}"),
                Need("hub", f"model weights: {' + '.join(models)}"))

    def model_for(self, kind: str) -> str:
        """The model id or path that encodes ``kind`` (``query`` or ``document``)."""
        _check(self.name, "kind", kind, KINDS)
        return (self.document_model or self.model) if kind == "document" else self.model

    def revision_for(self, kind: str) -> str | None:
        _check(self.name, "kind", kind, KINDS)
        if kind == "document" and self.document_model:
            return self.document_revision
        return self.revision

    def max_length_for(self, kind: str) -> int | None:
        _check(self.name, "kind", kind, KINDS)
        return self.document_max_length if kind == "document" else self.query_max_length

    def instruction(self, kind: str, dataset: str | None = None) -> str:
        """The instruction for ``kind`` on ``dataset`` (a public dataset name); ``''`` for none.

        A dataset without its own instruction gets the default instruction (empty unless given),
        with a warning when the model has per-dataset instructions for others.
        """
        _check(self.name, "kind", kind, KINDS)
        table = self.query_instructions if kind == "query" else self.document_instructions
        default = self.default_query_instruction if kind == "query" else self.default_document_instruction
        if dataset is not None and dataset in table:
            return table[dataset]
        if table and any(table.values()):
            logger.warning("model %s has no %s instruction for dataset %r; using %r", self.name, kind, dataset, default)
        return default

    def datasets(self) -> list[str]:
        """Datasets with their own instructions."""
        return sorted(set(self.query_instructions) | set(self.document_instructions))


def _read_json(name: str) -> dict:
    return json.loads(read_text(name))


def _instructions(entry: dict, protocol: dict, tasks: dict) -> tuple[dict, dict, str]:
    source = entry.get("instructions")
    if not source:
        return {}, {}, ""
    origin, key = source["from"], source["key"]
    if origin == "protocol":
        table = protocol[key]
        return dict(table.get("query", {})), dict(table.get("document", {})), f"instructions.json:{key}"
    if origin == "tasks":
        descriptions = {k: v for k, v in tasks[key].items() if not k.startswith("_")}
        query = {ds: source["query"].replace("{task}", text) for ds, text in descriptions.items()}
        document = {ds: source["document"].replace("{task}", text) for ds, text in descriptions.items()}
        return query, document, f"models.json:task_descriptions/{key}"
    raise ValueError(f"models.json: model {entry['name']!r} has unknown instruction source {origin!r}")


@lru_cache(maxsize=1)
def model_registry() -> Registry[ModelSpec]:
    """The zoo as a registry: canonical names in file order, aliases, suggestions."""
    raw = _read_json("models.json")
    protocol = _read_json("instructions.json")["instructions"]
    tasks = raw.get("task_descriptions", {})
    specs: dict[str, ModelSpec] = {}
    aliases: dict[str, str] = {}
    for entry in raw["models"]:
        fields = {k: v for k, v in entry.items() if k != "instructions"}
        query, document, source = _instructions(entry, protocol, tasks)
        spec = ModelSpec(
            **{**fields, "aliases": tuple(entry.get("aliases", ()))},
            query_instructions=query,
            document_instructions=document,
            instruction_source=source,
        )
        specs[spec.name] = spec
        aliases.update({alias: spec.name for alias in spec.aliases})
    return Registry("model", specs, aliases)


def model_names() -> list[str]:
    """Canonical zoo names, in the order of models.json (the paper's first)."""
    return model_registry().names()


def get_model(name: str) -> ModelSpec:
    """The zoo spec of ``name`` (any case, or an alias); UsageError with a suggestion if unknown."""
    return model_registry().get(name)


_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _is_path_like(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~", ".\\")) or "\\" in text or text in (".", "..")


def _is_sentence_transformers_repo(repo: str, revision: str | None) -> bool:
    """Whether the hub repo ships ``modules.json``: from the local HF cache, else the hub."""
    from huggingface_hub import file_exists, try_to_load_from_cache

    from r2med.settings import get_settings

    cached = try_to_load_from_cache(repo, "modules.json", revision=revision)
    if isinstance(cached, str):
        return True
    known_missing = cached is not None  # the cache's "looked, not there" marker
    if known_missing or isinstance(try_to_load_from_cache(repo, "config.json", revision=revision), str):
        return False
    if get_settings().hf_offline:
        raise MissingResourceError(
            f"model '{repo}' is neither in the zoo nor in the local Hugging Face cache, and HF_HUB_OFFLINE is set; "
            f"download it first ('hf download {repo}') or pass a local directory"
        )
    offline_way = f"download it where there is one ('hf download {repo}') and copy the cache over, or pass a local directory"
    require_hub(f"look up model '{repo}' (neither in the zoo nor in the local Hugging Face cache)", offline_way)
    try:
        return file_exists(repo, "modules.json", revision=revision)
    except Exception as exc:  # network or auth failure: name what failed
        if is_network_error(exc):
            raise unreachable_error(f"{type(exc).__name__}: {exc}".splitlines()[0], f"look up model '{repo}'",
                                    offline_way) from None
        raise MissingResourceError(f"cannot reach the Hugging Face hub for model '{repo}': {exc}") from exc


def resolve_model(
    name_or_path: str | os.PathLike[str],
    *,
    backend: str | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_length: int | None = None,
    query_instruction: str | None = None,
    document_instruction: str | None = None,
    trust_remote_code: bool | None = None,
    revision: str | None = None,
) -> ModelSpec:
    """A spec for a zoo name, a local model directory, or a Hugging Face id outside the zoo.

    Outside the zoo, a model with ``modules.json`` is a sentence-transformers model; any other is a
    plain transformers model with mean pooling. Instructions are the ones given (empty by default)
    and apply to every dataset. Options that are not ``None`` override the spec's own.
    """
    text = str(name_or_path).strip()
    registry = model_registry()
    if text in registry:
        spec = registry.get(text)
    else:
        path = Path(text).expanduser()
        if path.is_dir():
            spec = _infer_local(path)
        elif path.exists() or _is_path_like(text):
            raise MissingResourceError(f"model directory '{text}' does not exist (or is not a directory)")
        elif _HF_ID.fullmatch(text):
            st = _is_sentence_transformers_repo(text, revision)
            spec = _inferred(text, "sentence-transformers" if st else "transformers")
        else:
            spec = registry.get(text)  # raises UsageError with the valid names and a suggestion
    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "backend": backend,
            "pooling": pooling,
            "normalize": normalize,
            "query_max_length": max_length,
            "document_max_length": max_length,
            "trust_remote_code": trust_remote_code,
            "revision": revision,
        }.items()
        if v is not None
    }
    if query_instruction is not None:
        overrides.update(query_instructions={}, default_query_instruction=query_instruction)
    if document_instruction is not None:
        overrides.update(document_instructions={}, default_document_instruction=document_instruction)
    if overrides.get("backend") == "transformers" and spec.pooling is None and "pooling" not in overrides:
        overrides["pooling"] = "mean"
    return replace(spec, **overrides) if overrides else spec


def _infer_local(path: Path) -> ModelSpec:
    if (path / "modules.json").is_file():
        return _inferred(str(path.resolve()), "sentence-transformers")
    if (path / "config.json").is_file():
        return _inferred(str(path.resolve()), "transformers")
    raise MissingResourceError(
        f"'{path}' holds neither modules.json (sentence-transformers) nor config.json (transformers)"
    )


def _inferred(model: str, backend: str) -> ModelSpec:
    label = "sentence-transformers model" if backend == "sentence-transformers" else "transformers model, mean pooling"
    return ModelSpec(
        name=Path(model).name if Path(model).is_absolute() else model,
        model=model,
        backend=backend,
        pooling="mean" if backend == "transformers" else None,
        description=f"{label} outside the zoo",
    )
