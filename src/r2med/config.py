"""Pipeline specs: datasets -> (expansion) -> one or more retrievers -> (fusion), from TOML or CLI flags.

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

    [[retriever]]
    name = "bm25"                 # anything `r2med run --retriever` takes
    bm25_variant = "r2med"

    [[retriever]]
    name = "/models/all-MiniLM-L6-v2"
    batch_size = 64

    [fusion]                      # needed with two or more retrievers
    method = "rrf"                # rrf | combsum | combmnz | interpolate
    k = 60

Unknown keys are errors (a typo must not silently fall back to a default).

>>> spec = parse_spec({"retriever": [{"name": "bm25"}]}, base=Path("."))
>>> spec.retrievers[0].name, spec.fusion, spec.top_k
('bm25', None, 100)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from r2med.errors import InvalidInputError, MissingResourceError
from r2med.retrievers.registry import RetrieverSpec

_RETRIEVER_KEYS = {f.name for f in fields(RetrieverSpec)}
_FUSION_KEYS = {"method", "k", "weights", "norm", "alpha"}


@dataclass(frozen=True)
class FusionSpec:
    method: str = "rrf"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PipelineSpec:
    retrievers: tuple[RetrieverSpec, ...]
    name: str | None = None
    datasets: tuple[str, ...] | None = None
    data_dir: Path | None = None
    output: Path = Path("results")
    top_k: int = 100
    expansion: str | None = None
    answer_policy: str = "fallback"
    fusion: FusionSpec | None = None

    def as_dict(self) -> dict[str, Any]:
        """The resolved spec (recorded in manifests)."""
        return {
            "name": self.name, "datasets": list(self.datasets or []), "data_dir": str(self.data_dir or ""),
            "top_k": self.top_k, "expansion": self.expansion, "answer_policy": self.answer_policy,
            "retrievers": [vars(r) for r in self.retrievers],
            "fusion": {"method": self.fusion.method, **self.fusion.options} if self.fusion else None,
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
        raise InvalidInputError(f"{where}: expected a path string, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def parse_spec(raw: dict[str, Any], *, base: Path, source: str = "pipeline spec") -> PipelineSpec:
    """A :class:`PipelineSpec` from the parsed TOML; ``base`` resolves relative paths."""
    _check_keys(raw, {"pipeline", "expansion", "retriever", "fusion"}, source)
    head = _table(raw, "pipeline", source)
    _check_keys(head, {"name", "datasets", "data_dir", "output", "top_k"}, f"{source} [pipeline]")
    retrievers_raw = raw.get("retriever", [])
    if not isinstance(retrievers_raw, list) or not retrievers_raw:
        raise InvalidInputError(f"{source}: needs at least one [[retriever]] table with a name (e.g. name = \"bm25\")")
    retrievers = []
    for i, entry in enumerate(retrievers_raw, start=1):
        where = f"{source} [[retriever]] #{i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidInputError(f"{where}: needs name = \"bm25\" or a dense model name/path")
        _check_keys(entry, _RETRIEVER_KEYS, where)
        retrievers.append(RetrieverSpec(**entry))
    fusion = None
    if "fusion" in raw:
        table = _table(raw, "fusion", source)
        _check_keys(table, _FUSION_KEYS, f"{source} [fusion]")
        fusion = FusionSpec(str(table.get("method", "rrf")), {k: v for k, v in table.items() if k != "method"})
    if len(retrievers) > 1 and fusion is None:
        raise InvalidInputError(f"{source}: {len(retrievers)} retrievers need a [fusion] table (e.g. method = \"rrf\")")
    expansion = _table(raw, "expansion", source)
    _check_keys(expansion, {"spec", "answer_policy"}, f"{source} [expansion]")
    datasets = head.get("datasets")
    if isinstance(datasets, str):
        datasets = [datasets]
    if datasets is not None and not (isinstance(datasets, list) and all(isinstance(d, str) for d in datasets)):
        raise InvalidInputError(f"{source} [pipeline]: datasets must be a list of names, got {datasets!r}")
    top_k = head.get("top_k", 100)
    if not isinstance(top_k, int) or top_k < 1:
        raise InvalidInputError(f"{source} [pipeline]: top_k must be a positive integer, got {top_k!r}")
    return PipelineSpec(
        retrievers=tuple(retrievers),
        name=head.get("name"),
        datasets=tuple(datasets) if datasets else None,
        data_dir=_path(head["data_dir"], base, f"{source} data_dir") if "data_dir" in head else None,
        output=_path(head["output"], base, f"{source} output") if "output" in head else Path("results"),
        top_k=top_k,
        expansion=expansion.get("spec"),
        answer_policy=expansion.get("answer_policy", "fallback"),
        fusion=fusion,
    )


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
