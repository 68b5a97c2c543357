"""Result files in the official layout and format.

``<out>/base retriever/<system>/<Dataset>.json``, ``<out>/gar/<method>/<llm>/<system>/<Dataset>.json``,
``<out>/reranker/<reranker>/<system>/top_<k>/<Dataset>.json``; each JSON is
``{"dataset_name","model_name","evaluation_time":"<m> minutes","test":{...5-decimal means...}}``
(keys sorted, indent 2, as the authors wrote them). Beside it: ``<Dataset>.run`` (TREC run) and
``<Dataset>.per_query.jsonl`` (unrounded per-query values). The JSON is written last, so its
presence marks a complete result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from r2med.errors import UsageError
from r2med.io.atomic import write_atomic, write_text_atomic
from r2med.io.names import check_name
from r2med.store.runs import write_trec_run
from r2med.types import Run, Scores

BASE = "base retriever"
KINDS = (BASE, "gar", "reranker", "fusion", "agent")


@dataclass(frozen=True)
class SystemPath:
    """Where a system's results live, relative to the output directory.

    >>> SystemPath.base("bm25").parts
    ('base retriever', 'bm25')
    >>> SystemPath.parse("gar/hyde/gpt4/nv")
    SystemPath(kind='gar', system='nv', method='hyde', llm='gpt4', reranker=None, top_k=None)
    >>> str(SystemPath.parse("reranker/bge/nv/top_10"))
    'reranker/bge/nv/top_10'
    """

    kind: str
    system: str
    method: str | None = None
    llm: str | None = None
    reranker: str | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        """Every name is one folder under the output directory (``r2med.io.names``): ``..``, ``/``, an absolute
        path or an empty name would put the results somewhere else, so they are refused (UsageError)."""
        if self.kind not in KINDS:
            raise UsageError(f"system path kind {self.kind!r} is not one of: {', '.join(KINDS)}")
        roles = {"system": self.system}
        if self.kind in ("gar", "agent"):
            roles.update(method=self.method, llm=self.llm)
        if self.kind == "reranker":
            roles["reranker"] = self.reranker
            if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 1:
                raise UsageError(f"a reranker's top_k must be a positive integer, got {self.top_k!r}")
        for role, name in roles.items():
            check_name(name, what=f"the {role} name")

    @classmethod
    def base(cls, system: str) -> SystemPath:
        return cls(BASE, system)

    @classmethod
    def gar(cls, method: str, llm: str, system: str) -> SystemPath:
        return cls("gar", system, method=method, llm=llm)

    @classmethod
    def rerank(cls, reranker: str, system: str, top_k: int) -> SystemPath:
        return cls("reranker", system, reranker=reranker, top_k=top_k)

    @classmethod
    def fusion(cls, system: str) -> SystemPath:
        """A fused pipeline's results: ``fusion/<system>`` (r2med's own; the official tree has none)."""
        return cls("fusion", system)

    @classmethod
    def agent(cls, style: str, llm: str, system: str) -> SystemPath:
        """An agent's own ranking: ``agent/<style>/<llm>/<retriever it searched with>`` (r2med's own)."""
        return cls("agent", system, method=style, llm=llm)

    @classmethod
    def parse(cls, text: str) -> SystemPath:
        parts = [p for p in text.strip("/").split("/") if p]
        if len(parts) == 2 and parts[0] == BASE:
            return cls.base(parts[1])
        if len(parts) == 4 and parts[0] == "gar":
            return cls.gar(parts[1], parts[2], parts[3])
        if len(parts) == 2 and parts[0] == "fusion":
            return cls.fusion(parts[1])
        if len(parts) == 4 and parts[0] == "agent":
            return cls.agent(parts[1], parts[2], parts[3])
        if len(parts) == 4 and parts[0] == "reranker" and parts[3].startswith("top_") and parts[3][4:].isdigit():
            return cls.rerank(parts[1], parts[2], int(parts[3][4:]))
        raise UsageError(
            f"'{text}' is not a system path; expected 'base retriever/<system>', "
            "'gar/<method>/<llm>/<system>', 'reranker/<reranker>/<system>/top_<k>', 'fusion/<system>' or "
            "'agent/<style>/<llm>/<system>'"
        )

    @property
    def parts(self) -> tuple[str, ...]:
        if self.kind == BASE:
            return (BASE, self.system)
        if self.kind in ("gar", "agent"):
            return (self.kind, str(self.method), str(self.llm), self.system)
        if self.kind == "fusion":
            return ("fusion", self.system)
        return ("reranker", str(self.reranker), self.system, f"top_{self.top_k}")

    def __str__(self) -> str:
        return "/".join(self.parts)

    def directory(self, out: Path) -> Path:
        return Path(out).joinpath(*self.parts)


@dataclass(frozen=True)
class ResultFiles:
    result: Path
    run: Path
    per_query: Path


def result_record(dataset: str, model: str, scores: Scores, seconds: float) -> dict:
    """The official result JSON object (means rounded to 5 decimals, time in minutes to 2)."""
    return {
        "dataset_name": dataset,
        "model_name": model,
        "evaluation_time": f"{round(seconds / 60, 2)} minutes",
        "test": scores.rounded(5),
    }


def result_files(out: Path, where: SystemPath, dataset: str) -> ResultFiles:
    """Where the files of one (system, dataset) result live."""
    folder = where.directory(out)
    return ResultFiles(folder / f"{dataset}.json", folder / f"{dataset}.run", folder / f"{dataset}.per_query.jsonl")


def write_result(
    out: Path, where: SystemPath, dataset: str, scores: Scores, run: Run, *, seconds: float, model_name: str | None = None
) -> ResultFiles:
    """Write the run, the per-query values and then the result JSON for one (system, dataset)."""
    folder = where.directory(out)
    run_path = write_trec_run(run, folder / f"{dataset}.run", tag=where.system)

    def per_query(handle: IO[str]) -> None:
        for qid, values in scores.per_query.items():
            handle.write(json.dumps({"qid": qid, **values}) + "\n")

    pq_path = write_atomic(folder / f"{dataset}.per_query.jsonl", per_query)
    # the official reranker files name the reranker, the others the retriever
    model = model_name or (where.reranker if where.kind == "reranker" and where.reranker else where.system)
    record = result_record(dataset, model, scores, seconds)
    result_path = write_text_atomic(folder / f"{dataset}.json", json.dumps(record, indent=2, sort_keys=True))
    return ResultFiles(result_path, run_path, pq_path)


def read_result(path: Path) -> dict:
    """Read an official result JSON."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
