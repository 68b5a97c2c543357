"""The leaderboard: systems x the datasets their results hold (+ average), from result directories and the paper.

Result directories are read as they are, whether written by r2med or the official repository's
``results/`` tree: every ``<Dataset>.json`` holding a ``"test"`` object is one (system, dataset)
result. The system is the file's folder from its ``base retriever`` / ``gar`` / ``reranker``
level on (``gar/hyde/gpt4/nv``); the official tree's ``reranker/<short>/top_<k>`` is read as the
published ``reranker/<name>/nv/top_<k>``. Any collection is a dataset (``scifact.json`` -> ``scifact``);
R2MED's may also carry the authors' old names (``Stack-Biology``, ``PMCPatients``, ...). The columns are
the datasets the result directories hold (R2MED's in the paper's order first, then the others
alphabetically; ``r2med.reporting.columns``), or those asked for; the official tree's files of other
collections (``BEIR_NFCorpus.json``) only when asked for by name. Metric keys are read in either official
style (``ndcg_at_10``, ``NDCG@10``). The paper's rows are cut to the same columns.

With ``--with-paper`` the table also holds R2MED's public leaderboard (package data ``leaderboard.json``): the
paper's systems that are on it carry the leaderboard's own average beside the computed one (column ``leaderboard``),
and the 22 rows the leaderboard lists without per-dataset numbers are rows of source ``leaderboard`` that show
``-`` per dataset and the listed average, with a note saying so. Where the listed average differs from the mean of
the published per-dataset numbers (MedCPT's 9.02 vs 7.87; three rows 0.01 apart from rounding) a note says by how
much. The leaderboard's averages are nDCG@10 over R2MED's eight datasets: they are shown only when the table shows
those (and ``ndcg_at_10``).

A row's average is the mean over the datasets shown (``Avg`` over R2MED's eight, ``Avg (3 datasets)``
otherwise); a system missing datasets shows its coverage (``6/8``) and no average, and is ranked after the
complete ones (by coverage, then by the mean of what it has). Values are shown x100 with 2 decimals, rounded
half up in decimal arithmetic, and
averages are computed exactly in decimal from each value as written (order-independent): for
published 5-decimal values that is the arithmetic the paper's table shows (e.g. a mean of exactly
0.268850 is 26.89, where binary floating point would print 26.88). The rows are rendered by
:mod:`r2med.reporting.board`.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r2med.datasets.catalog import dataset_names
from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError, UsageError
from r2med.io.jsonsafe import JSONLimitError, loads
from r2med.manifest import MANIFEST_SUFFIX
from r2med.reporting.columns import choose_datasets, dataset_of
from r2med.reporting.official import (
    display_name,
    leaderboard_entries,
    normalise_metric,
    normalise_metrics,
    published_systems,
)
from r2med.reporting.paths import system_path
from r2med.store.result_set import read_result_file
from r2med.types import exact_mean

logger = logging.getLogger(__name__)

PAPER = "paper"
#: the source of a leaderboard row the paper's results tree has no per-dataset numbers for
LEADERBOARD = "leaderboard"
#: the metric the public leaderboard lists
LEADERBOARD_METRIC = "ndcg_at_10"


@dataclass(frozen=True)
class SystemResults:
    """Everything known about one system from one source (a result directory or the paper)."""

    system: str
    source: str
    scores: Mapping[str, Mapping[str, float]]
    directory: Path | None = None
    files: Mapping[str, Path] = field(default_factory=dict)
    note: str | None = None
    #: the public leaderboard's average (0-1, nDCG@10 over R2MED's eight) when the system is on it
    listed: float | None = None
    label: str | None = None

    @property
    def published(self) -> bool:
        return self.source in (PAPER, LEADERBOARD)

    @property
    def name(self) -> str:
        return self.label or display_name(self.system)


def _read_json(path: Path):
    return loads(path.read_text(encoding="utf-8"))


#: metrics that are fractions (every ranking measure r2med and the official files report)
_FRACTION = re.compile(r"^(ndcg|map|mrr|precision|recall|success|hit)")


#: what to do about a stored result that no longer matches its manifest (a file edited, replaced or cut short)
RERUN_FIX = ("run the command that made it again (it recomputes a result whose files do not match its manifest; "
             "--force recomputes every dataset of it), or remove its files")


@dataclass(frozen=True)
class Refused:
    """A system of a result directory whose results cannot be shown: every problem found (each naming its file and
    what is wrong, with the fix). A table leaves the whole system out: a row without one of its results, or with a
    changed one, would be a wrong row."""

    system: str
    root: Path
    problems: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.system} (in {self.root}): " + "; and ".join(self.problems)


class RefusedResultsError(InvalidInputError):
    """Some systems' results cannot be used (exit 5). ``refused`` lists them; ``shown``: how many rows were shown
    without them (0: none could be; None: a strict caller, :func:`discover` or :func:`gather`, that shows nothing
    while any is refused); ``written``: the file written without them (None when printed, or nothing was shown)."""

    def __init__(self, refused: Sequence[Refused], *, shown: int | None, written: Path | None = None) -> None:
        self.refused = list(refused)
        self.written = written
        n = len(self.refused)
        systems = f"{n} system{'s' if n != 1 else ''}"
        if shown is None:
            head = (f"the results of {systems} cannot be used (survey() or gather_all() give the others beside "
                    "them)")
        elif shown:
            where = f"{written}" if written is not None else "the table above"
            head = (f"{systems} left out of {where}: {'their' if n != 1 else 'its'} results cannot be used "
                    f"({shown} shown)")
        else:
            head = f"no system can be shown: the results of {'all ' + str(n) if n != 1 else 'the one'} found cannot be used"
        super().__init__(head, [str(r) for r in self.refused])


def survey(root: Path) -> tuple[list[SystemResults], list[Refused]]:
    """The systems with result files under ``root`` that can be shown (sorted by path), and those refused.

    A result JSON with a manifest beside it is read only when its result set matches the manifest's checksums; one
    without (the official files) is read as it is. A system with any file that cannot be used (damaged, changed,
    not JSON, a metric that no ranking can have, a second result for a dataset) is refused whole, with every problem
    of its files; the others are unaffected.
    """
    root = Path(root)
    if not root.is_dir():
        raise MissingResourceError(f"result directory {root} does not exist (expected e.g. results/ written by 'r2med run')")
    found: dict[str, dict[str, tuple[Path, dict[str, float]]]] = {}
    folders: dict[str, Path] = {}
    problems: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.json")):
        if path.name.startswith(".") or path.name.endswith(MANIFEST_SUFFIX) or not path.is_file():
            continue
        system = system_path(path.parent, root)
        problem = None
        try:
            record = read_result_file(path, _read_json)
        except DamagedFileError as exc:
            problem = f"{exc.path}: {exc.reason}; {RERUN_FIX}"
        except json.JSONDecodeError as exc:
            problem = f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); fix or remove the file"
        except JSONLimitError as exc:
            problem = f"{path}: {exc}; fix or remove the file"
        except (OSError, UnicodeDecodeError) as exc:
            problem = f"{path}: cannot be read ({exc})"
        if problem is not None:
            problems.setdefault(system, []).append(problem)
            continue
        if not isinstance(record, dict) or not isinstance(record.get("test"), dict):
            logger.debug("%s: no 'test' object, not a result file; skipped", path)
            continue
        dataset = dataset_of(path.stem, record.get("dataset_name"))
        if dataset is None:
            logger.debug("%s: not a result file name (<Dataset>.json); skipped", path)
            continue
        metrics = normalise_metrics(record["test"])
        bad = [k for k, v in metrics.items() if not math.isfinite(v)]
        outside = [k for k, v in metrics.items() if _FRACTION.match(k) and not 0.0 <= v <= 1.0]
        seen = found.setdefault(system, {})
        if bad:
            problem = f"{path}: metric {bad[0]!r} is {metrics[bad[0]]}; a result must be a finite number"
        elif outside:
            problem = (f"{path}: metric {outside[0]!r} is {metrics[outside[0]]}, outside [0, 1]; a ranking measure is "
                       "a fraction (was the file written x100?)")
        elif dataset in seen:
            problem = f"{path}: a second result for {system} on {dataset} (first: {seen[dataset][0]}); keep one"
        if problem is not None:
            problems.setdefault(system, []).append(problem)
            continue
        seen[dataset] = (path, metrics)
        folders.setdefault(system, path.parent)
    refused = [Refused(system, root, tuple(found_problems)) for system, found_problems in sorted(problems.items())]
    shown = [
        SystemResults(system, str(root), {ds: m for ds, (_, m) in by_ds.items()}, folders[system],
                      {ds: p for ds, (p, _) in by_ds.items()})
        for system, by_ds in sorted(found.items()) if by_ds and system not in problems
    ]
    return shown, refused


def discover(root: Path) -> list[SystemResults]:
    """Every system with result files under ``root`` (sorted by path), all of them usable: RefusedResultsError
    (exit 5) listing the systems whose files cannot be used otherwise (:func:`survey` gives the others too)."""
    shown, refused = survey(root)
    if refused:
        raise RefusedResultsError(refused, shown=None)
    return shown


def paper_results() -> list[SystemResults]:
    """The 71 published systems as ``SystemResults`` (source ``paper``)."""
    return [SystemResults(p.path, PAPER, p.scores, note=p.note) for p in published_systems()]


def published_board() -> list[SystemResults]:
    """What ``--with-paper`` adds: the 71 published systems, each on the leaderboard with its listed average, then
    the 22 leaderboard rows without per-dataset numbers (source ``leaderboard``, their listed average only): 93.

    >>> board_systems = published_board()
    >>> len(board_systems), sum(s.source == LEADERBOARD for s in board_systems)
    (93, 22)
    >>> medcpt = next(s for s in board_systems if s.system == "base retriever/medcpt")
    >>> medcpt.listed, len(medcpt.scores)
    (0.0902, 8)
    """
    listed = {entry.system: entry for entry in leaderboard_entries()}
    systems = []
    for system in paper_results():
        entry = listed.get(system.system)
        systems.append(SystemResults(system.system, PAPER, system.scores, note=system.note,
                                     listed=None if entry is None else _fraction(entry.average)))
    for entry in leaderboard_entries():
        if not entry.published:
            systems.append(SystemResults(entry.system, LEADERBOARD, {}, listed=_fraction(entry.average),
                                         label=entry.name))
    return systems


def _fraction(points: float) -> float:
    """x100 with 2 decimals -> the 0-1 scale, exactly as a decimal (42.85 -> 0.4285, not 0.42850000000000005)."""
    from decimal import Decimal

    return float(Decimal(repr(points)) / 100)


def _r2med_datasets() -> tuple[str, ...]:
    return tuple(dataset_names())


@dataclass(frozen=True)
class Row:
    """One leaderboard row: a system's values (0-1) of one metric on the datasets it has among ``datasets``,
    the datasets the table shows (default R2MED's eight)."""

    system: str
    name: str
    source: str
    values: Mapping[str, float]
    note: str | None = None
    datasets: tuple[str, ...] = field(default_factory=_r2med_datasets)
    #: the public leaderboard's average (0-1) when it is shown (R2MED's eight datasets, nDCG@10)
    listed: float | None = None

    @property
    def published(self) -> bool:
        return self.source in (PAPER, LEADERBOARD)

    @property
    def average_only(self) -> bool:
        """A leaderboard row without per-dataset numbers: only its listed average is known."""
        return self.source == LEADERBOARD

    @property
    def shown_average(self) -> float | None:
        """The average the table shows: the computed one, or a leaderboard-only row's listed one."""
        return self.listed if self.average_only else self.average

    @property
    def rank_key(self) -> tuple:
        """Complete systems (and leaderboard-only rows, by their listed average) first by average, then the others by
        coverage and covered mean."""
        if self.average_only:
            return (-len(self.datasets), -(self.listed or 0.0), self.system, self.source)
        return (-self.coverage, -(self.covered_mean or 0.0), self.system, self.source)

    @property
    def coverage(self) -> int:
        return sum(1 for ds in self.datasets if ds in self.values)

    @property
    def complete(self) -> bool:
        return self.coverage == len(self.datasets)

    @property
    def covered_mean(self) -> float | None:
        """Mean over the datasets it has (``None`` without any)."""
        have = [self.values[ds] for ds in self.datasets if ds in self.values]
        return exact_mean(have) if have else None

    @property
    def average(self) -> float | None:
        """Mean over the datasets shown; ``None`` unless the system has all of them."""
        return self.covered_mean if self.complete else None


def held_datasets(systems: Iterable[SystemResults]) -> set[str]:
    """The datasets a table of ``systems`` is about: those of the result directories' systems, or the paper's
    when there are only published ones."""
    systems = list(systems)
    own = [s for s in systems if not s.published] or systems
    return {ds for s in own for ds in s.scores}


def build_rows(systems: Iterable[SystemResults], metric: str = "ndcg_at_10",
               datasets: Sequence[str] | None = None) -> list[Row]:
    """Rows for ``metric`` on the datasets shown (:func:`r2med.reporting.columns.choose_datasets` of the
    datasets the systems hold and ``datasets``, the names asked for), complete systems first by average, then by
    coverage and covered mean. A published row is cut to the datasets shown.

    >>> a = SystemResults("a", "dir", {"Biology": {"ndcg_at_10": 0.5}})
    >>> b = SystemResults("b", "dir", {"Biology": {"NDCG@10": 0.7}, "MedQA-Diag": {"ndcg_at_10": 0.1}})
    >>> [(r.system, r.coverage, round(r.covered_mean, 2), r.average) for r in build_rows([a, b])]
    [('b', 2, 0.4, 0.4), ('a', 1, 0.5, None)]
    >>> [(r.system, r.coverage, r.average, len(r.datasets)) for r in build_rows([a, b], datasets=["r2med"])]
    [('b', 2, None, 8), ('a', 1, None, 8)]
    """
    systems = list(systems)
    key = normalise_metric(metric)
    shown = tuple(choose_datasets(held_datasets(systems), datasets))
    on_board = key == LEADERBOARD_METRIC and shown == _r2med_datasets()  # what the leaderboard's averages are over
    rows = []
    for s in systems:
        values = {ds: normalise_metrics(s.scores[ds])[key] for ds in shown
                  if ds in s.scores and key in normalise_metrics(s.scores[ds])}
        listed = s.listed if on_board else None
        if values or (s.source == LEADERBOARD and listed is not None):
            rows.append(Row(s.system, s.name, s.source, values, s.note, shown, listed))
    return sorted(rows, key=lambda r: r.rank_key)


def gather(result_dirs: Sequence[Path], *, with_paper: bool = False) -> list[SystemResults]:
    """Every system under ``result_dirs`` (and with ``with_paper`` the paper's and the leaderboard's:
    :func:`published_board`); MissingResourceError when none, RefusedResultsError when some cannot be used."""
    systems, refused = gather_all(result_dirs, with_paper=with_paper)
    if refused:
        raise RefusedResultsError(refused, shown=None)
    return systems


def gather_all(result_dirs: Sequence[Path], *, with_paper: bool = False
               ) -> tuple[list[SystemResults], list[Refused]]:
    """What :func:`gather` finds, and the systems refused (:func:`survey`) beside it rather than instead of it:
    the command shows the others, then says which were left out and why. RefusedResultsError (exit 5) when nothing
    else is left to show; MissingResourceError when nothing is found at all."""
    systems: list[SystemResults] = []
    refused: list[Refused] = []
    for root in result_dirs:
        found, left_out = survey(Path(root))
        if not found and not left_out:
            logger.warning("%s: no result files found (<Dataset>.json with a 'test' object)", root)
        systems.extend(found)
        refused.extend(left_out)
    if with_paper and (systems or not refused):
        systems.extend(published_board())
    if not systems and refused:
        raise RefusedResultsError(refused, shown=0)
    if not systems:
        raise MissingResourceError(
            "no results to show: give result directories (default ./results, where 'r2med run' writes; or the "
            "official results/ tree) or --with-paper"
        )
    return systems, refused


def rows_of(systems: Sequence[SystemResults], metric: str = "ndcg_at_10",
            datasets: Sequence[str] | None = None) -> list[Row]:
    """:func:`build_rows` with the errors a command gives: no such metric (UsageError), nothing on the datasets
    asked for (MissingResourceError); a warning when the paper has nothing on the datasets shown."""
    rows = build_rows(systems, metric, datasets)
    key = normalise_metric(metric)
    have = sorted({k for s in systems for m in s.scores.values() for k in normalise_metrics(m)})
    if key not in have:
        raise UsageError(f"no result has the metric '{metric}'; available: {', '.join(have)}")
    shown = choose_datasets(held_datasets(systems), datasets)
    if not rows:
        held = ", ".join(choose_datasets(held_datasets(systems), ["all"])) or "none"
        raise MissingResourceError(f"no result has {key} on {', '.join(shown)}; the results hold: {held}")
    if any(s.published for s in systems) and not any(r.published for r in rows):
        logger.warning("the paper has no results on %s; the published systems are left out (their datasets: %s)",
                       ", ".join(shown), ", ".join(dataset_names()))
    return rows


def collect(result_dirs: Sequence[Path], *, with_paper: bool = False, metric: str = "ndcg_at_10",
            datasets: Sequence[str] | None = None) -> list[Row]:
    """Leaderboard rows of ``result_dirs`` (and the paper's systems with ``with_paper``) on the datasets shown."""
    return rows_of(gather(result_dirs, with_paper=with_paper), metric, datasets)


def shown_datasets(rows: Sequence[Row]) -> tuple[str, ...]:
    """The datasets a table of ``rows`` shows (R2MED's eight for no rows)."""
    return rows[0].datasets if rows else _r2med_datasets()
