"""``Retrieve``: a retriever on a dataset, with its plain queries or with an expansion (GAR)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.datasets.model import Dataset
from r2med.retrievers.base import Retriever
from r2med.settings import Settings
from r2med.stages.base import component_key
from r2med.store.results import SystemPath
from r2med.types import Run

if TYPE_CHECKING:
    from r2med.expansion.apply import PreparedQueries


@dataclass(frozen=True)
class Expansion:
    """Which expansions a GAR stage searches with: ``method``/``llm`` (published or generated), the answer
    ``policy`` for reasoning outputs, and a non-default BM25 ``composition`` (stored under its own name)."""

    method: str
    llm: str
    policy: str = "fallback"
    composition: str | None = None

    @classmethod
    def parse(cls, text: str, *, policy: str = "fallback", composition: str | None = None) -> Expansion:
        """From ``"<method>/<llm>"`` (``r2med run --expansion``)."""
        from r2med.expansion.published import parse_expansion_spec

        method, llm = parse_expansion_spec(text)
        return cls(method, llm, policy, composition)


class Retrieve:
    """Search each dataset with ``retriever``: results under ``base retriever/<name>/`` or, with an
    ``expansion``, ``gar/<method>/<llm>/<name>/`` (a non-default BM25 composition in place of the method);
    ``name`` is ``system`` when given, else the retriever's; ``key``: the retriever's declared options
    (``RetrieverSpec.key()``), which key the stored result with what the retriever's ``describe`` adds."""

    def __init__(self, retriever: Retriever, *, top_k: int = 100, expansion: Expansion | None = None,
                 settings: Settings | None = None, system: str | None = None, key: dict[str, Any] | None = None) -> None:
        self.retriever = retriever
        self.key = key  # the retriever's declared options (RetrieverSpec.key()), part of the result's key
        self.top_k = top_k
        self.expansion = expansion
        self.settings = settings
        self.ignore_identical_ids = retriever.ignore_identical_ids
        name = system or retriever.name  # ``system``: the user's name for it (``r2med run --name``)
        if expansion is None:
            self.where = SystemPath.base(name)
        else:
            self.where = SystemPath.gar(expansion.composition or expansion.method, expansion.llm, name)
        self._paths: dict[str, Path] = {}  # expansion file per dataset, found once
        self._prepared: dict[str, PreparedQueries] = {}

    def _expansion_file(self, dataset: Dataset) -> Path:
        from r2med.expansion.published import find_expansions

        assert self.expansion is not None
        if dataset.name not in self._paths:
            self._paths[dataset.name] = find_expansions(dataset, self.expansion.method, self.expansion.llm,
                                                        settings=self.settings)
        return self._paths[dataset.name]

    def config(self, dataset: Dataset) -> dict[str, Any]:
        config: dict[str, Any] = {"retriever": component_key(self.retriever, self.key, dataset.name), "top_k": self.top_k}
        if self.expansion is not None:
            from r2med.io.readers import file_sha256

            path = self._expansion_file(dataset)
            config["expansion"] = {
                "method": self.expansion.method, "llm": self.expansion.llm, "file": str(path),
                "sha256": file_sha256(path), "answer_policy": self.expansion.policy,
                "bm25_composition": self.expansion.composition,
                # a plain model's text is used byte for byte (older results stripped it under "fallback")
                "plain_text": "byte-exact",
            }
        return config

    def run(self, dataset: Dataset) -> Run:
        if self.expansion is None:
            return self.retriever.retrieve(dataset, top_k=self.top_k)
        from r2med.expansion.apply import prepare_queries
        from r2med.expansion.published import read_expansions

        method, llm = self.expansion.method, self.expansion.llm
        expansions = read_expansions(self._expansion_file(dataset), method=method, llm=llm)
        prepared = prepare_queries(dataset, expansions, policy=self.expansion.policy)
        self._prepared[dataset.name] = prepared
        return self.retriever.retrieve_expanded(dataset, prepared, top_k=self.top_k,
                                                composition=self.expansion.composition)

    def details(self, dataset: Dataset) -> dict[str, Any]:
        prepared = self._prepared.get(dataset.name)
        if prepared is None:
            return {}
        return {"expansion": {**prepared.summary(), "style": prepared.style,
                              "fell_back_ids": prepared.fell_back[:100], "truncated_ids": prepared.truncated[:100]}}

    def artifacts(self, dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
        return {}
