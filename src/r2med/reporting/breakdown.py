"""The breakdowns the R2MED paper reports: a leaderboard's values grouped by task or by body system.

- **By task** (:func:`by_task`): R2MED's catalog gives each dataset its task (Q&A reference retrieval:
  Biology, Bioinformatics, Medical-Sciences; clinical evidence retrieval: MedXpertQA-Exam, MedQA-Diag,
  PMC-Treatment; clinical case retrieval: PMC-Clinical, IIYi-Clinical). A task's value is the mean of the
  row's values on the task's datasets shown (the same exact decimal mean as the average), only when the
  row has all of them. Published rows get the same means of the paper's per-dataset numbers, so the
  paper's task averages stand beside ours. A task with only some of its datasets shown says so in its
  header (``Q&A reference retrieval (1 of 3)``). Other collections have no task and are left out.
- **By body system** (:func:`by_body_system`): R2MED's query files carry a ``body_system`` field. A body
  system's value is the mean of the per-query values (``<Dataset>.per_query.jsonl``) of the queries with
  that body system, pooled over the datasets shown, for a row with per-query values on every dataset
  holding such queries (rounded to 5 decimals, as a result file's means are). The query files come from
  ``--data-dir`` or the hub cache. The paper publishes no per-query values, so published rows have none here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from r2med.datasets.catalog import catalog, get_spec
from r2med.errors import InvalidInputError, MissingResourceError
from r2med.reporting.columns import Breakdown
from r2med.reporting.compare import read_per_query
from r2med.reporting.leaderboard import Row, SystemResults, exact_mean, shown_datasets
from r2med.reporting.official import normalise_metric
from r2med.settings import Settings, get_settings
from r2med.store.result_set import ResultFiles

logger = logging.getLogger(__name__)

#: ``--by`` choices: the plain table (one column per dataset) and the two breakdowns
BY = ("dataset", "task", "body-system")
#: the query field that holds a query's body system in R2MED's query files
BODY_SYSTEM_FIELD = "body_system"


def task_members(datasets: Sequence[str]) -> dict[str, list[str]]:
    """Task -> its datasets among ``datasets``, tasks in the catalog's order (datasets outside R2MED left out).

    >>> task_members(["Biology", "PMC-Clinical", "scifact", "Medical-Sciences"])
    {'Q&A reference retrieval': ['Biology', 'Medical-Sciences'], 'Clinical case retrieval': ['PMC-Clinical']}
    """
    shown = set(datasets)
    members: dict[str, list[str]] = {}
    for name in catalog().names():
        members.setdefault(get_spec(name).task, [])
        if name in shown:
            members[get_spec(name).task].append(name)
    return {task: names for task, names in members.items() if names}


def _task_size(task: str) -> int:
    return sum(1 for name in catalog().names() if get_spec(name).task == task)


def by_task(rows: Sequence[Row]) -> Breakdown:
    """Each row's mean per R2MED task over the datasets shown; MissingResourceError when no dataset shown has one."""
    shown = shown_datasets(rows)
    members = task_members(shown)
    if not members:
        raise MissingResourceError(
            f"--by task: none of the datasets shown ({', '.join(shown)}) is one of R2MED's, and only those have a "
            "task (R2MED's catalog); show R2MED datasets, or use --by dataset"
        )
    labels = {task: task if len(names) == _task_size(task) else f"{task} ({len(names)} of {_task_size(task)})"
              for task, names in members.items()}
    values: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        have = {labels[task]: exact_mean([row.values[ds] for ds in names])
                for task, names in members.items() if all(ds in row.values for ds in names)}
        values[(row.system, row.source)] = have
    others = [ds for ds in shown if ds not in catalog()]
    legend = ("Task columns: mean over each task's datasets shown ("
              + "; ".join(f"{labels[task]}: {', '.join(names)}" for task, names in members.items())
              + "), only for systems with all of them; a published row's are the same means of the paper's "
                "per-dataset numbers.")
    if others:
        legend += f" Not in a task (not R2MED datasets): {', '.join(others)}."
    return Breakdown("task", tuple(labels.values()), values, legend,
                     {labels[task]: tuple(names) for task, names in members.items()})


def dataset_dir(name: str, data_dir: Path | None, settings: Settings) -> tuple[Path | None, str | None]:
    """The directory of dataset ``name`` under ``data_dir``, else in the hub cache (R2MED's only; never downloaded),
    and, when there is none, why not (else ``None``)."""
    from r2med.datasets.hub import cache_dir, is_cached
    from r2med.datasets.loading import local_dataset_dirs

    if data_dir is not None:
        try:
            return local_dataset_dirs(Path(data_dir), [name])[0][1], None
        except (MissingResourceError, InvalidInputError) as exc:
            return None, str(exc)
    if name not in catalog():
        return None, f"{name} is not an R2MED dataset, so it is not in the hub cache; pass --data-dir with its directory"
    spec = get_spec(name)
    if is_cached(spec, settings):
        return cache_dir(spec, settings), None
    return None, (f"{name} is neither under --data-dir nor in the cache ({cache_dir(spec, settings)}); pass --data-dir "
                  f"or run 'r2med datasets download {name}'")


def read_query_groups(folder: Path, field: str = BODY_SYSTEM_FIELD) -> dict[str, tuple[str, ...]]:
    """Query id -> the values of ``field`` of a dataset directory's query file (a string, or a list of strings; empty
    ones and other types are left out); InvalidInputError naming the file's problems."""
    from r2med.datasets.local import find_layout, read_queries
    from r2med.io.problems import Problems
    from r2med.io.readers import HashingLines

    problems = Problems()
    path = find_layout(Path(folder)).queries
    _, extra = read_queries(HashingLines(path, problems))
    if problems.errors:
        raise InvalidInputError(f"{path}: the queries cannot be read", problems.errors)
    groups = {}
    for qid, fields in extra.items():
        value = fields.get(field)
        listed = value if isinstance(value, list) else [value]
        names = tuple(dict.fromkeys(v.strip() for v in listed if isinstance(v, str) and v.strip()))
        if names:
            groups[qid] = names
    return groups


def _per_query(system: SystemResults, dataset: str, metric: str) -> dict[str, float] | None:
    result = system.files.get(dataset)
    if result is None:
        return None
    path = ResultFiles.of_result(result).per_query
    return read_per_query(path, metric) if path.is_file() else None


def by_body_system(rows: Sequence[Row], systems: Sequence[SystemResults], *, metric: str = "ndcg_at_10",
                   data_dir: Path | None = None, settings: Settings | None = None,
                   locate: Callable[[str], tuple[Path | None, str | None]] | None = None) -> Breakdown:
    """Each row's mean per body system (see the module docstring); MissingResourceError when no query file of the
    datasets shown carries one, naming where each was looked for. ``locate``: dataset name -> (its directory, or
    why there is none), by default ``dataset_dir`` (the report first tries the directory its manifests record)."""
    settings = settings or get_settings()
    key = normalise_metric(metric)
    shown = shown_datasets(rows)
    groups: dict[str, dict[str, tuple[str, ...]]] = {}
    missing: list[str] = []
    for dataset in shown:
        folder, why = locate(dataset) if locate is not None else dataset_dir(dataset, data_dir, settings)
        if folder is None:
            missing.append(f"{dataset}: {why}")
            continue
        found = read_query_groups(folder)
        if found:
            groups[dataset] = found
        else:
            missing.append(f"{dataset}: no query in {folder} has a '{BODY_SYSTEM_FIELD}'")
    if not groups:
        raise MissingResourceError(f"--by body-system: no query of the datasets shown carries a body system "
                                   f"('{BODY_SYSTEM_FIELD}' in the query file): " + "; ".join(missing))
    for line in missing:
        logger.warning("--by body-system: %s", line)
    counts: dict[str, int] = {}
    holders: dict[str, list[str]] = {}
    for dataset, by_query in groups.items():
        for names in by_query.values():
            for name in names:
                counts[name] = counts.get(name, 0) + 1
                if dataset not in holders.setdefault(name, []):
                    holders[name].append(dataset)
    order = sorted(counts, key=lambda n: (n.casefold(), n))
    labels = {name: f"{name} (n={counts[name]})" for name in order}
    by_system = {(s.system, s.source): s for s in systems}
    values: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        system = by_system.get((row.system, row.source))
        per_query = {ds: _per_query(system, ds, key) for ds in groups} if system and not system.published else {}
        values[(row.system, row.source)] = _group_means(per_query, groups, holders, labels)
    legend = (f"Body-system columns: mean per-query {key} over the queries with that body system "
              f"('{BODY_SYSTEM_FIELD}' of {', '.join(groups)}), pooled over those datasets; n = such queries in the "
              "query files; only for systems with per-query values (the .per_query.jsonl files) on each dataset "
              "holding them (the paper publishes none).")
    if missing:
        legend += " Without body systems: " + "; ".join(missing) + "."
    return Breakdown("body-system", tuple(labels.values()), values, legend,
                     {labels[name]: tuple(holders[name]) for name in order})


def _group_means(per_query: Mapping[str, dict[str, float] | None], groups: Mapping[str, Mapping[str, tuple[str, ...]]],
                 holders: Mapping[str, list[str]], labels: Mapping[str, str]) -> dict[str, float]:
    """Body-system label -> the mean of the row's per-query values of its queries (rows lacking a dataset: none)."""
    out = {}
    for name, label in labels.items():
        if any(per_query.get(ds) is None for ds in holders[name]):
            continue
        values = [per_query[ds][qid] for ds in holders[name] for qid, names in groups[ds].items()  # type: ignore[index]
                  if name in names and qid in per_query[ds]]  # type: ignore[operator]
        if values:
            out[label] = round(exact_mean(values), 5)  # 5 decimals, as a result file's means: one display rule
    return out
