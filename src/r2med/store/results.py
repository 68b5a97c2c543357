"""Result files in the official layout and format, and the one grammar of the paths of their folders.

``<out>/base retriever/<system>/<Dataset>.json``, ``<out>/gar/<method>/<llm>/<system>/<Dataset>.json``,
``<out>/reranker/<reranker>/<system>/top_<k>/<Dataset>.json``; each JSON is
``{"dataset_name","model_name","evaluation_time":"<m> minutes","test":{...5-decimal means...}}``
(keys sorted, indent 2, as the authors wrote them). Beside it: ``<Dataset>.run`` (TREC run) and
``<Dataset>.per_query.jsonl`` (unrounded per-query values). Which files make a result set and how a stored one
is read: :mod:`r2med.store.result_set`.

:class:`SystemPath` is the only parser of a system's folder path (``gar/hyde/gpt4/nv``): the stages, the CLI and
the reports all read paths through it, the official repository's ``results/`` tree included (:class:`OfficialTree`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from r2med.errors import UsageError
from r2med.io.atomic import write_atomic, write_text_atomic
from r2med.io.names import check_name
from r2med.store.result_set import ResultFiles
from r2med.store.runs import write_trec_run
from r2med.types import Run, Scores

BASE = "base retriever"
KINDS = (BASE, "gar", "reranker", "fusion", "agent")
#: the last folder of a reranker's path: ``top_<k>``, k written as ``str(k)`` (``top_010`` would not name ``top_10``)
_TOP_K = re.compile(r"top_(0|[1-9][0-9]*)")
_SHAPES = ("'base retriever/<system>', 'gar/<method>/<llm>/<system>', 'reranker/<reranker>/<system>/top_<k>', "
           "'fusion/<system>' or 'agent/<style>/<llm>/<system>'")


@dataclass(frozen=True)
class OfficialTree:
    """How the official repository's ``results/`` tree spells a reranker's folder: ``reranker/<short>/top_<k>``,
    with a short name (``mono``) and no retriever level (they all reranked one retriever's ranking).

    ``reranker_names``: short name -> the published name (``mono`` -> ``monobert``); ``reranker_retriever``: the
    retriever implied (``nv``). The reports take both from the published numbers' package data.
    """

    reranker_names: Mapping[str, str]
    reranker_retriever: str


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
    def parse(cls, text: str, *, tree: OfficialTree | None = None) -> SystemPath:
        """The system path ``text`` spells (outer and doubled ``/`` ignored); UsageError naming the shapes otherwise.

        Every shape, and ``str`` gives the path back:

        >>> [str(SystemPath.parse(t)) for t in ("base retriever/bm25", "/gar/hyde/gpt4/nv/", "fusion/bm25+minilm",
        ...                                      "reranker/bge/nv/top_10", "agent/search-r1/qwen/bm25")]
        ... # doctest: +NORMALIZE_WHITESPACE
        ['base retriever/bm25', 'gar/hyde/gpt4/nv', 'fusion/bm25+minilm', 'reranker/bge/nv/top_10',
         'agent/search-r1/qwen/bm25']

        With ``tree``, also the official results/ tree's ``reranker/<short>/top_<k>``, read as the published path:

        >>> tree = OfficialTree({"mono": "monobert"}, "nv")
        >>> [str(SystemPath.parse(t, tree=tree)) for t in ("reranker/mono/top_10", "reranker/x/top_5")]
        ['reranker/monobert/nv/top_10', 'reranker/x/nv/top_5']
        >>> SystemPath.parse("reranker/bge/nv/top_010")
        Traceback (most recent call last):
        ...
        r2med.errors.UsageError: 'reranker/bge/nv/top_010' is not a system path; expected 'base retriever/<system>', 'gar/<method>/<llm>/<system>', 'reranker/<reranker>/<system>/top_<k>', 'fusion/<system>' or 'agent/<style>/<llm>/<system>'
        """
        parts = [p for p in text.strip("/").split("/") if p]
        kind, count = (parts[0], len(parts)) if parts else ("", 0)
        top = _TOP_K.fullmatch(parts[-1]) if kind == "reranker" else None
        if kind in (BASE, "fusion") and count == 2:
            return cls(kind, parts[1])
        if kind == "gar" and count == 4:
            return cls.gar(parts[1], parts[2], parts[3])
        if kind == "agent" and count == 4:
            return cls.agent(parts[1], parts[2], parts[3])
        if top is not None and count == 4:
            return cls.rerank(parts[1], parts[2], int(top.group(1)))
        if top is not None and count == 3 and tree is not None:
            return cls.rerank(tree.reranker_names.get(parts[1], parts[1]), tree.reranker_retriever, int(top.group(1)))
        official = " (or, in the official results/ tree, 'reranker/<reranker>/top_<k>')" if tree is not None else ""
        raise UsageError(f"'{text}' is not a system path; expected {_SHAPES}{official}")

    @classmethod
    def maybe(cls, text: str, *, tree: OfficialTree | None = None) -> SystemPath | None:
        """The system path ``text`` spells (:meth:`parse`), or None when it spells none.

        >>> SystemPath.maybe("fusion/a+b") == SystemPath.fusion("a+b"), SystemPath.maybe("my/own")
        (True, None)
        """
        try:
            return cls.parse(text, tree=tree)
        except UsageError:
            return None

    @classmethod
    def ending(cls, folder: Path, *, tree: OfficialTree | None = None) -> SystemPath | None:
        """The system path a folder's path ends with (its deepest level from which the rest parses), else None.

        >>> str(SystemPath.ending(Path("/r/results/gar/hyde/gpt4/nv")))
        'gar/hyde/gpt4/nv'
        >>> str(SystemPath.ending(Path("out/base retriever/gar"))), SystemPath.ending(Path("/r/runs/mine"))
        ('base retriever/gar', None)
        >>> tree = OfficialTree({"mono": "monobert"}, "nv")
        >>> str(SystemPath.ending(Path("/r/results/reranker/mono/top_10"), tree=tree))
        'reranker/monobert/nv/top_10'
        """
        parts = Path(folder).parts
        for start in range(len(parts) - 1, -1, -1):
            where = cls.maybe("/".join(parts[start:]), tree=tree) if parts[start] in KINDS else None
            if where is not None:
                return where
        return None

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
    return ResultFiles.of(where.directory(out), dataset)


def write_result(
    out: Path, where: SystemPath, dataset: str, scores: Scores, run: Run, *, seconds: float, model_name: str | None = None
) -> ResultFiles:
    """Write the run, the per-query values and then the result JSON for one (system, dataset)."""
    planned = result_files(out, where, dataset)
    run_path = write_trec_run(run, planned.run, tag=where.system)

    def per_query(handle: IO[str]) -> None:
        for qid, values in scores.per_query.items():
            handle.write(json.dumps({"qid": qid, **values}) + "\n")

    pq_path = write_atomic(planned.per_query, per_query)
    # the official reranker files name the reranker, the others the retriever
    model = model_name or (where.reranker if where.kind == "reranker" and where.reranker else where.system)
    record = result_record(dataset, model, scores, seconds)
    result_path = write_text_atomic(planned.result, json.dumps(record, indent=2, sort_keys=True))
    return ResultFiles(result_path, run_path, pq_path)



def match_system(text: str, systems: Sequence[str]) -> str | None:
    """The one of ``systems`` (system paths, ``base retriever/bm25``) that ``text`` names: itself, or the one whose
    last parts are ``text``'s (``bm25`` for ``base retriever/bm25``: no quoting of ``base retriever/`` needed);
    ``None`` when none does; UsageError listing the candidates when several do (``bm25`` with ``fusion/bm25`` too).

    >>> match_system("bm25", ["base retriever/bm25", "base retriever/bm25-lucene"])
    'base retriever/bm25'
    >>> match_system("hyde/gpt4/nv", ["gar/hyde/gpt4/nv", "base retriever/nv"])
    'gar/hyde/gpt4/nv'
    >>> match_system("nv", ["x/y"]) is None
    True
    >>> match_system("bm25", ["base retriever/bm25", "fusion/bm25"])
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: 'bm25' fits 2 systems: 'base retriever/bm25', 'fusion/bm25'; name one of them
    """
    wanted = [part for part in text.strip("/").split("/") if part]
    if not wanted:
        return None
    key = "/".join(wanted)
    if key in systems:
        return key
    fits = [s for s in systems if s.split("/")[-len(wanted):] == wanted]
    if len(fits) > 1:
        raise UsageError(f"{text!r} fits {len(fits)} systems: {', '.join(repr(f) for f in sorted(fits))}; name one of them")
    return fits[0] if fits else None
