"""``Rerank``: an earlier stage's stored runs reranked; ``FirstStage`` finds them.

Results go to ``<out>/reranker/<reranker>/<system>/top_<k>/<Dataset>.run|.per_query.jsonl|.json|.manifest.json``;
a listwise reranker also leaves ``<Dataset>.windows.jsonl`` (every window's documents, new order, repairs and
reasoning trace). ``FirstStage`` finds the first-stage run of each dataset from a system name, a system path,
a directory or a file. The reranker itself (``r2med.rerankers``) is pure ``Run -> Run`` code.

Reranked runs are scored without BEIR's identical-id rule by default, as the official reranker numbers were.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.errors import MissingResourceError, UsageError
from r2med.options import option
from r2med.rerankers.base import Reranked, Reranker, check_top_k
from r2med.stages.base import component_key
from r2med.store.results import BASE, SystemPath
from r2med.types import Run

RUN_SUFFIXES = (".run", ".trec", ".jsonl", ".txt")


def run_digest(run: Run) -> str:
    """sha256 over a run's queries, documents and scores in rank order (what the reranker reads).

    >>> run_digest(Run({"q": {"a": 1.0, "b": 2.0}})) == run_digest(Run({"q": {"b": 2.0, "a": 1.0}}))
    True
    """
    digest = hashlib.sha256()
    for qid in sorted(run):
        for doc, score in run.ranked(qid):
            digest.update(f"{qid}\t{doc}\t{score!r}\n".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class FirstStage:
    """Where the first-stage runs are: one ``file`` for every dataset, or ``directory/<Dataset>.run``.

    ``system`` names the first stage in the reranker's results path.
    """

    system: str
    directory: Path | None = None
    file: Path | None = None
    #: the results directory a system name was resolved under (for the hint when its run is missing)
    output: Path | None = field(default=None, repr=False, compare=False)
    #: the datasets' directory of the command, for the same hint
    data_dir: Path | None = field(default=None, repr=False, compare=False)

    @classmethod
    def resolve(cls, spec: str | Path, *, output: Path, system: str | None = None,
                data_dir: Path | None = None) -> FirstStage:
        """From a run file, a directory of runs, a system path (``gar/hyde/gpt4/nv``) or a system name under ``output``.

        >>> FirstStage.resolve("bm25", output=Path("results"))
        FirstStage(system='bm25', directory=PosixPath('results/base retriever/bm25'), file=None)
        >>> FirstStage.resolve("gar/hyde/gpt4/nv", output=Path("results")).system
        'gar-hyde-gpt4-nv'
        """
        text = str(spec)
        path = Path(text).expanduser()
        if path.is_file():
            return cls(system or path.parent.name or path.stem, file=path)
        if path.is_dir():
            return cls(system or _system_of(path, output), directory=path)
        try:
            where = SystemPath.parse(text)
        except UsageError:
            if "/" in text or "\\" in text:
                raise MissingResourceError(f"--run {text}: no such file or directory") from None
            where = SystemPath.base(text)
        return cls(system or _name_of(where), directory=where.directory(output), output=output,
                   data_dir=data_dir)

    def path_for(self, dataset: str) -> Path:
        """The run file of ``dataset``: the file, or the first of ``<Dataset>.run|.trec|.jsonl|.txt`` (old names too),
        or the one run file in ``r2med_<Dataset>/`` (the layout of ReasonRank's published ``runs/``)."""
        if self.file is not None:
            return self.file
        assert self.directory is not None
        names = [dataset, *_old_names(dataset)]
        tried = [self.directory / f"{name}{suffix}" for name in names for suffix in RUN_SUFFIXES]
        for candidate in tried:
            if candidate.is_file():
                return candidate
        for name in names:
            folder = self.directory / f"r2med_{name}"
            inside = sorted(p for p in folder.glob("*") if p.is_file() and p.suffix in RUN_SUFFIXES) if folder.is_dir() else []
            if len(inside) == 1:
                return inside[0]
            if inside:
                raise UsageError(f"{folder} holds {len(inside)} run files ({', '.join(p.name for p in inside)}); "
                                 "pass the one to rerank as the first stage (with --tasks naming its dataset)")
        raise MissingResourceError(
            f"no first-stage run for {dataset} in {self.directory} (looked for {', '.join(p.name for p in tried[:4])}, "
            f"...); {self._make_hint(dataset)}"
        )

    def _make_hint(self, dataset: str) -> str:
        """What to do: the stored first stages beside the missing one (with the closest), and the ``r2med run`` that
        makes it, with ``--data-dir`` and ``--output`` (the name only when it is a retriever r2med knows)."""
        import difflib
        import shlex

        from r2med.retrievers.registry import FAMILIES

        assert self.directory is not None
        stored = sorted(p.name for p in self.directory.parent.glob("*") if p.is_dir()) if self.directory.parent.is_dir() else []
        known = [name for family in FAMILIES for name in family.names]
        name = self.directory.name
        close = difflib.get_close_matches(name, [*stored, *known], n=1, cutoff=0.5)
        said = f"stored first stages there: {', '.join(stored)}; " if stored else ""
        said += f"did you mean '{close[0]}'? " if close and close[0] != name else ""
        retriever = name if name in known else "NAME"
        output = self.output if self.output is not None else self.directory.parent.parent
        data = f"--data-dir {shlex.quote(str(self.data_dir))} " if self.data_dir is not None else ""
        return (f"{said}make one with: r2med run --retriever {retriever} {data}--output {shlex.quote(str(output))} "
                f"--tasks {dataset}")

    def load(self, dataset: str) -> Run:
        """The first-stage run of ``dataset`` (read with file:line validation).

        A run of a stored result set (a ``<Dataset>.manifest.json`` beside it) is read only once the set matches
        its manifest; a damaged or unfinished set is an error that says to rerun the first stage. A run file
        without a manifest is the user's own, read as it is.
        """
        from r2med.store.result_set import read_stored_run

        return read_stored_run(self.path_for(dataset), system=self.system)


def _old_names(dataset: str) -> list[str]:
    from r2med.datasets.catalog import catalog

    return list(catalog().get(dataset).aliases) if dataset in catalog() else []


def _name_of(where: SystemPath) -> str:
    if where.kind == BASE:
        return where.system
    return "-".join(where.parts)


def _system_of(path: Path, output: Path) -> str:
    try:
        relative = path.resolve().relative_to(Path(output).resolve())
        return _name_of(SystemPath.parse(relative.as_posix()))
    except (ValueError, UsageError):
        return path.resolve().name


@dataclass(frozen=True, kw_only=True)
class RerankStageOptions:
    """``[reranker]``'s own keys besides ``name`` and the reranker kind's options."""

    top_k: int = option(100, "documents reranked per query (10 or 100 in the paper)", minimum=1)
    truncate: bool = option(False, "keep only the reranked top k per query, as the official reranker runs did "
                            "(default: the rest follow in first-stage order)")
    identical_ids: str | None = option(None, "drop documents whose id equals the query id before scoring (default "
                                       "keep, as the official reranker numbers)", choices=("drop", "keep"))


class Rerank:
    """Rerank every dataset's first-stage run; results under ``reranker/<name>/<system>/top_<k>/``.

    ``first_stage`` is a ``FirstStage`` or a function ``dataset name -> Run``; ``system`` names the first
    stage (default: ``first_stage.system``). ``truncate`` keeps only the reranked ``top_k`` per query, as the
    official reranker runs did (their recall@100 equals recall@10 at top 10); by default the rest follow in
    their first-stage order. A stored result made by the same reranker, options, first-stage run and data
    is reused by the runner.
    """

    def __init__(self, reranker: Reranker, first_stage: FirstStage | Callable[[str], Run], *, system: str | None = None,
                 top_k: int = 100, truncate: bool = False, ignore_identical_ids: bool = False,
                 key: dict[str, Any] | None = None) -> None:
        check_top_k(top_k)
        if system is None:
            if not isinstance(first_stage, FirstStage):
                raise UsageError("Rerank needs system= when first_stage is a function")
            system = first_stage.system
        self.reranker = reranker
        self.key = key  # the reranker's declared options (r2med.pipeline.reranker_key), part of the result's key
        self.load = first_stage.load if isinstance(first_stage, FirstStage) else first_stage
        self.system = system
        self.top_k = top_k
        self.truncate = truncate
        self.ignore_identical_ids = ignore_identical_ids
        self.where = SystemPath.rerank(reranker.name, system, top_k)
        self._runs: dict[str, Run] = {}
        self._reported = Reranked()

    def _first(self, dataset: Dataset) -> Run:
        if dataset.name not in self._runs:
            self._runs.clear()  # one dataset's run in memory at a time
            self._runs[dataset.name] = self.load(dataset.name)
        return self._runs[dataset.name]

    def config(self, dataset: Dataset) -> dict[str, Any]:
        return {"reranker": component_key(self.reranker, self.key), "top_k": self.top_k, "truncate": self.truncate,
                "first_stage": {"system": self.system, "run_sha256": run_digest(self._first(dataset))}}

    def run(self, dataset: Dataset) -> Run:
        reranked = self.reranker.rerank(dataset.queries, dataset.corpus, self._first(dataset), top_k=self.top_k)
        # what the reranker reports comes with its result (a plain Run reports nothing)
        self._reported = reranked if isinstance(reranked, Reranked) else Reranked(name=reranked.name)
        return reranked.top_k(self.top_k) if self.truncate else reranked

    def details(self, dataset: Dataset) -> dict[str, Any]:
        return {"reranker_stats": self._reported.details()}

    def artifacts(self, dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
        return self._reported.artifacts

    def artifact_notes(self, dataset: Dataset) -> list[tuple[str, str]]:
        """The reranker's warnings about its artifacts, ``[(artifact, warning)]``, logged once the file is written."""
        return self._reported.notes
