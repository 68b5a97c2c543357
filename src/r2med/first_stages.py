"""Published first-stage runs for reranker rows (``--first-stage``): which runs a name stands for (package data
``first_stages.json``: ``authors``, the E5 top-100 runs ReasonRank's authors published, with their digests), what
fetching them needs, finding, downloading or pinning them (every file checksummed, ``r2med.store.pinned``), and
scoring them as the paper scored dense runs so they can stand beside the paper's row of their retriever.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from r2med.errors import MissingResourceError, UsageError
from r2med.needs import Need
from r2med.packaged import read_text

#: ``--first-stage`` names of published first-stage runs (package data ``first_stages.json``)
FIRST_STAGE_NAMES = {"authors": "authors-e5", "authors-e5": "authors-e5"}


def first_stage_needs(source: str) -> tuple[Need, ...]:
    """What fetching the first-stage runs ``source`` names needs: a download for published runs or a URL."""
    known = published_first_stage(source)
    if known is not None:
        return (Need("download", known["url"]),)
    if source.lower().startswith(("http://", "https://")):
        return (Need("download", source),)
    return ()


@lru_cache(maxsize=1)
def _first_stages() -> dict[str, Any]:
    return json.loads(read_text("first_stages.json"))


def published_first_stage(source: str | None) -> dict[str, Any] | None:
    """The packaged record of the published first-stage runs ``source`` names (``authors``: the E5 top 100 of
    ReasonRank's repository), else None (a path or URL of one's own).

    >>> published_first_stage("authors")["paper_row"], published_first_stage("runs/")
    ('base retriever/e5', None)
    """
    if source is None:
        return None
    key = FIRST_STAGE_NAMES.get(source.strip().lower())
    return None if key is None else dict(_first_stages()["runs"][key])


@dataclass(frozen=True)
class FirstStageRuns:
    """The stored first stage of a reranker row: ``path`` (a run file or a directory of ``<Dataset>`` runs, what
    ``PipelineSpec.first_stage`` takes), each dataset's checksummed file (``files``) and, for published runs, their
    packaged record (``known``: URL, the paper row they stand for)."""

    source: str
    path: Path
    files: tuple[Any, ...]
    known: dict[str, Any] | None = None


def resolve_first_stage(source: str, datasets: list[str], *, home: Path, force: bool = False,
                        get: Any = None) -> FirstStageRuns:
    """Find, download or pin the first-stage runs ``source`` names for ``datasets``: ``authors`` (the E5 top-100
    runs ReasonRank's authors published, checked against the digests r2med packages), an http(s) URL (``{dataset}``
    in it stands for each dataset's name; without it, one dataset), a run file (one dataset) or a directory
    (``<Dataset>.run|.trec|.jsonl|.txt`` or ReasonRank's ``r2med_<Dataset>/``). Every file is checksummed
    (``r2med.store.pinned``): a changed file is refused unless ``force``."""
    from r2med.io.digest import Digest
    from r2med.stages.rerank import FirstStage
    from r2med.store.pinned import fetch_url, pin_local

    known = published_first_stage(source)
    url = known["url"] if known is not None else (source if source.lower().startswith(("http://", "https://"))
                                                   else None)
    if url is not None:
        if "{dataset}" not in url and len(datasets) != 1:
            raise UsageError(f"--first-stage {source} is one file; name its dataset with --tasks (got "
                             f"{len(datasets)} datasets), or put {{dataset}} in the URL where each dataset's name goes")
        files = []
        for dataset in datasets:
            expected = None
            if known is not None:
                record = known["files"].get(dataset)
                if record is None:
                    raise UsageError(f"--first-stage {source}: {known['description']} cover "
                                     f"{', '.join(known['files'])}, not {dataset}")
                expected = Digest(record["sha256"], record["size"])
            files.append(fetch_url(dataset, url.replace("{dataset}", dataset), home, template=url, expected=expected,
                                   force=force, get=get))
        path = files[0].path if "{dataset}" not in url else files[0].path.parent
        return FirstStageRuns(source, path, tuple(files), known)
    local = Path(source).expanduser()
    if local.is_file():
        if len(datasets) != 1:
            raise UsageError(f"--first-stage {source} is one run file; name its dataset with --tasks (got "
                             f"{len(datasets)} datasets)")
        return FirstStageRuns(source, local, (pin_local(datasets[0], local, home, force=force),))
    if local.is_dir():
        stage = FirstStage(local.name, directory=local)
        return FirstStageRuns(source, local, tuple(pin_local(d, stage.path_for(d), home, force=force)
                                                   for d in datasets))
    raise MissingResourceError(f"--first-stage {source}: no such file or directory, and not an http(s) URL or "
                               f"'authors' (the E5 top-100 runs ReasonRank's authors published)")


def evaluate_first_stage(runs: FirstStageRuns, loaders: list[tuple[str, Any]], *, system: str,
                         metric: str = "ndcg_at_10") -> dict[str, float]:
    """``metric`` (5 decimals) of each dataset's stored first-stage run, scored as the paper scored dense runs
    (BEIR's identical-id rule), so it can stand beside the paper's row of its retriever."""
    from r2med.evaluation import evaluate
    from r2med.stages.rerank import FirstStage

    stage = FirstStage(system, file=runs.path) if runs.path.is_file() else FirstStage(system, directory=runs.path)
    values = {}
    for name, load in loaders:
        dataset = load()
        scores = evaluate(dataset.qrels, stage.load(name), ignore_identical_ids=True)
        values[name] = scores.rounded(5)[metric]
    return values
