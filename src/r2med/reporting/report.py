"""A self-contained HTML report: leaderboard with bars, by task and body system, per-query wins/losses, drill-down.

The page has no external resource and no script: the plots are matplotlib SVGs inlined in the page, the page is
rendered by jinja2 with autoescaping, so every text that comes from data (query and document texts, expansions,
system and file names) is shown as text. A Content-Security-Policy meta tag forbids scripts and network requests as
a second line. A drill-down of more than ``ReportOptions.inline_queries`` queries (300; R2MED's 876 made one 11 MB
page) is written as one page per dataset in ``<report>_files/`` (the same blocks, the same rules), which the browser
reads when it is opened; the report keeps its index: each query's values and A - B, linking to its block.

The leaderboard shows the datasets the results hold, any collection (``r2med.reporting.columns``); below it
the same rows by R2MED task and, where the query files carry it, by body system (``r2med.reporting.breakdown``;
a note says why a breakdown is missing). The drill-down needs the datasets' texts and judgements: from
``data_dir`` or the hub cache under R2MED_HOME (never downloaded here; other collections need ``data_dir``). Without them the runs' document ids and scores are shown and
a note says what to pass. A GAR system's expansion is read from the official local layout,
``<dataset dir>/<method>/<llm>/query_with_hydoc.jsonl``, else from where r2med writes generated ones
(``$R2MED_HOME/expansions/<Dataset>/<method>/<llm>/``). An agent system's trajectory (``r2med agent``: its
turns, searches and answer) is read from ``<Dataset>.trajectories.jsonl`` beside its run, verified against the
result set's manifest first; a missing or damaged file is named in a note and nothing of it is shown.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2med.errors import InvalidInputError, MissingResourceError, R2MedError, UsageError
from r2med.io.jsonsafe import JSONLimitError, loads
from r2med.reporting import INLINE_QUERIES
from r2med.reporting.breakdown import by_body_system, by_task, dataset_dir, task_members
from r2med.reporting.compare import SystemSource, comparison_rows, start_comparison
from r2med.reporting.board import board, legend_text
from r2med.reporting.leaderboard import (
    Refused,
    RefusedResultsError,
    Row,
    SystemResults,
    paper_results,
    rows_of,
    survey,
)
from r2med.reporting.plots import leaderboard_svg, win_loss_svg
from r2med.reporting.render import render_template
from r2med.reporting.tables import pct
from r2med.settings import Settings, get_settings
from r2med.store.expansions import EXPANSION_FILE, expansion_dir
from r2med.store.result_set import PER_QUERY_SUFFIX, RUN_SUFFIX, ResultFiles, read_result_file
from r2med.store.results import SystemPath, match_system

logger = logging.getLogger(__name__)


#: the pages of a drill-down written beside ``<name>.html``: ``<name>_files/drill-<n>-<dataset>.html``
DRILL_PAGE = "drill-{index}-{name}.html"


@dataclass(frozen=True)
class ReportOptions:
    """What the report shows. ``system_a``/``system_b``: system paths in the result directory
    (default: the two best with per-query files)."""

    metric: str = "ndcg_at_10"
    system_a: str | None = None
    system_b: str | None = None
    with_paper: bool = False
    data_dir: Path | None = None
    top: int = 10
    max_doc_chars: int = 400
    max_queries: int | None = None
    n_resamples: int = 10000
    seed: int = 0
    datasets: tuple[str, ...] | None = None
    #: a drill-down of more queries than this is written as one page per dataset beside the report (its index, the
    #: per-query values with links, stays in the report): the browser reads a dataset's texts when it is opened
    inline_queries: int = INLINE_QUERIES


def _has_per_query(s: SystemResults) -> bool:
    return s.directory is not None and any(s.directory.glob(f"*{PER_QUERY_SUFFIX}"))


def _pick(systems: dict[str, SystemResults], rows: Sequence[Row], wanted: str | None, skip: str | None) -> str | None:
    if wanted is not None:
        key = match_system(wanted, list(systems))  # 'bm25' names 'base retriever/bm25' when only it fits
        if key is None:
            raise UsageError(f"system '{wanted}' is not in the result directory; there: {', '.join(systems)}")
        return key
    ranked = [r.system for r in rows if not r.published and r.system in systems]
    return next((s for s in ranked if s != skip and _has_per_query(systems[s])), None)


def _read_rows(path: Path, what: str, pick: Callable[[Any], tuple[str, Any] | None], expected: str) -> dict[str, Any]:
    """``{key: value}`` from the JSON lines of ``path`` (``pick(row)`` -> ``(key, value)``, None for a bad row);
    InvalidInputError naming every bad line."""
    out: dict[str, Any] = {}
    problems = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            picked = pick(loads(line))
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{number}: not valid JSON ({exc.msg})")
            continue
        except JSONLimitError as exc:
            problems.append(f"{path}:{number}: {exc}")
            continue
        if picked is None:
            problems.append(f"{path}:{number}: expected {expected}")
            continue
        out[picked[0]] = picked[1]
    if problems:
        raise InvalidInputError(f"{path}: {what} cannot be read", problems)
    return out


def read_expansions(path: Path) -> dict[str, str]:
    """Query id -> ``hy_doc`` of an official ``query_with_hydoc.jsonl``; InvalidInputError names bad lines."""
    def pick(row: Any) -> tuple[str, str] | None:
        if not isinstance(row, dict) or "id" not in row or "hy_doc" not in row:
            return None
        return str(row["id"]), str(row["hy_doc"])

    return _read_rows(path, "expansions", pick, '{"id": ..., "hy_doc": ...}')


def _expansion_source(system: str, folder: Path | None, dataset: str,
                      settings: Settings) -> tuple[dict[str, str] | None, str]:
    """A GAR system's expansions (query id -> ``hy_doc``) from the dataset directory's official layout, else from
    where r2med writes generated ones (``$R2MED_HOME/expansions/<Dataset>/<method>/<llm>/``: ``r2med expand``,
    ``r2med agent``); the search order of ``r2med run --expansion``."""
    where = SystemPath.maybe(system)
    if where is not None and where.kind == "agent":
        return None, ("the agent's own ranking: every document its searches returned, fused over its searches (RRF); "
                      "its trajectory is below")
    if where is None or where.kind != "gar":
        return None, "no expansion: the query was used as it is"
    method, llm = str(where.method), str(where.llm)
    places = [folder / method / llm / EXPANSION_FILE] if folder is not None else []
    places.append(expansion_dir(settings, dataset, method, llm) / EXPANSION_FILE)
    for path in places:
        if path.is_file():
            return read_expansions(path), ""
    return None, f"expansion not shown: {' and '.join(str(p) for p in places)} not found"


#: a turn or document text longer than this (or with more lines) is shown folded, its beginning in the summary
LONG_TEXT_CHARS = 600
LONG_TEXT_LINES = 8
PREVIEW_CHARS = 120


def read_trajectories(path: Path) -> dict[str, dict]:
    """Query id -> trajectory row of an agent's ``<Dataset>.trajectories.jsonl``; InvalidInputError names bad lines."""
    def pick(row: Any) -> tuple[str, dict] | None:
        if not isinstance(row, dict) or "id" not in row or not isinstance(row.get("turns", []), list) \
                or not isinstance(row.get("searches", []), list):
            return None
        return str(row["id"]), row

    return _read_rows(path, "trajectories", pick, 'a trajectory {"id", "turns": [...], "searches": [...], ...}')


def _trajectory_source(system: str, run_file: Path) -> tuple[dict[str, dict] | None, str]:
    """An agent system's trajectories (query id -> row) and, when they cannot be shown, why (else "")."""
    where = SystemPath.maybe(system)
    if where is None or where.kind != "agent":
        return None, ""
    path = ResultFiles.of(run_file.parent, run_file.stem).artifact("trajectories")
    try:
        return read_result_file(path, read_trajectories), ""
    except FileNotFoundError:
        return None, f"trajectory not shown: {path} not found"
    except OSError as exc:
        return None, f"trajectory not shown: {path} cannot be read ({exc})"
    except R2MedError as exc:  # DamagedFileError (checksum, missing member), InvalidInputError (no manifest)
        return None, f"trajectory not shown: {exc}"


def _text_block(text: object) -> dict:
    """A text as the page shows it: whole, or folded (``long``) behind its first line."""
    text = "" if text is None else str(text)
    long = len(text) > LONG_TEXT_CHARS or text.count("\n") >= LONG_TEXT_LINES
    first = " ".join(text.split())
    preview = first if len(first) <= PREVIEW_CHARS else first[:PREVIEW_CHARS] + " \u2026"
    return {"text": text, "long": long, "preview": preview, "chars": len(text)}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tokens(entry: dict) -> str:
    return f"{_int(entry.get('prompt_tokens'))} prompt + {_int(entry.get('completion_tokens'))} completion tokens"


def _search_view(number: int, search: dict, judged: dict[str, int], has_judgements: bool) -> dict:
    ids = [str(i) for i in search.get("ids") or []]
    scores = list(search.get("scores") or [])
    hits = []
    for rank, docid in enumerate(ids, start=1):
        score = scores[rank - 1] if rank <= len(scores) else None
        rel = judged.get(docid) if has_judgements else None
        mark, css = ("?", "unjudged") if rel is None else ((f"\u2713 {rel}", "rel") if rel > 0 else ("\u2717", "nonrel"))
        hits.append({"rank": rank, "docid": docid, "mark": mark, "css": css,
                     "score": f"{score:.4f}" if isinstance(score, (int, float)) else "-"})
    used = search.get("reason_in_documents")
    reasoning = None
    if isinstance(used, dict):
        reasoning = {**_text_block(used.get("text")), "finish": used.get("finish_reason"), "tokens": _tokens(used)}
    condensed = search.get("condensed")
    return {"number": number, "query": str(search.get("query", "")), "hits": hits,
            "condensed": None if condensed is None else str(condensed), "reasoning": reasoning}


def _trajectory_view(row: dict, judged: dict[str, int], has_judgements: bool) -> dict:
    """One query's trajectory for the page: its turns in order, each with the search it asked for (a search is
    matched to the first later turn whose text holds its query), the stop reason, the answer and the tokens."""
    searches = [_search_view(i, s, judged, has_judgements)
                for i, s in enumerate((s for s in row.get("searches") or [] if isinstance(s, dict)), start=1)]
    turns = [t for t in row.get("turns") or [] if isinstance(t, dict)]
    pending = list(searches)
    steps = []
    prompt_tokens = completion_tokens = 0
    for number, turn in enumerate(turns, start=1):
        text = str(turn.get("text", ""))
        search = None
        if pending and not turn.get("note") and pending[0]["query"] in text:
            search = pending.pop(0)
        prompt_tokens += _int(turn.get("prompt_tokens"))
        completion_tokens += _int(turn.get("completion_tokens"))
        seconds = turn.get("seconds")
        steps.append({"number": number, **_text_block(text), "finish": turn.get("finish_reason"),
                      "stop": turn.get("stop"), "tokens": _tokens(turn), "note": turn.get("note"),
                      "seconds": f"{seconds:.2f} s" if isinstance(seconds, (int, float)) else "", "search": search})
    for s in row.get("searches") or []:
        used = s.get("reason_in_documents") if isinstance(s, dict) else None
        if isinstance(used, dict):
            prompt_tokens += _int(used.get("prompt_tokens"))
            completion_tokens += _int(used.get("completion_tokens"))
    answer = row.get("answer")
    summary = (f"{row.get('style', 'agent')} ({row.get('llm', '?')}): {len(turns)} turns, {len(searches)} searches, "
               f"stop reason {row.get('stop_reason')}; {prompt_tokens} prompt + {completion_tokens} completion tokens")
    return {"summary": summary, "stop_reason": str(row.get("stop_reason")), "error": row.get("error"),
            "answer": None if answer is None else str(answer), "prompt": {**_text_block(row.get("prompt")), "long": True},
            "steps": steps, "unmatched": pending}


def recorded_dataset(dataset: str, picks: list[tuple[str, SystemResults]]
                     ) -> tuple[Path | None, str | None, dict[str, str]] | None:
    """The dataset directory the manifest of the first picked system records for ``dataset`` (absolute, written by
    ``r2med run``), why it cannot be used (or ``None``), and the sha256 of its files then; ``None`` when no manifest
    records a directory (results of an older r2med, the official tree): then the hub cache is tried."""
    from r2med.manifest import MANIFEST_SUFFIX

    for _, s in picks:
        for path in sorted(s.directory.glob(f"*{MANIFEST_SUFFIX}")):
            if path.name[: -len(MANIFEST_SUFFIX)].lower() not in _names_of(dataset):
                continue
            try:
                recorded = loads(path.read_text(encoding="utf-8")).get("dataset") or {}
            except (OSError, ValueError, JSONLimitError, AttributeError):
                continue
            directory, sha = recorded.get("directory"), recorded.get("sha256")
            if not isinstance(directory, str) or not isinstance(sha, dict) or not sha:
                continue
            folder = Path(directory)
            if not folder.is_dir():
                return None, (f"the directory the run read ({folder}, recorded in {path}) is gone; pass --data-dir"), {}
            return folder, None, {str(k): str(v) for k, v in sha.items()}
    return None


@dataclass
class _DrillInputs:
    """What a dataset's drill-down shows, read (the slow part: the dataset and the runs): ``runs``, ``values``,
    ``expansions`` and ``trajectories`` by label; ``data`` is None when the texts cannot be shown."""

    dataset: str
    folder: Path | None
    data: Any
    notes: list[str]
    runs: dict[str, Any]
    values: dict[str, dict[str, float]]
    expansions: dict[str, tuple[dict[str, str] | None, str]]
    trajectories: dict[str, tuple[dict[str, dict] | None, str]]


def _read_drill(dataset: str, picks: list[tuple[str, SystemResults]], options: ReportOptions,
                settings: Settings) -> _DrillInputs:
    """Read what ``dataset``'s drill-down shows; R2MedError when a run cannot be used."""
    from r2med.datasets.local import load_dir
    from r2med.store.runs import read_run

    notes: list[str] = []
    recorded = None if options.data_dir is not None else recorded_dataset(dataset, picks)
    if recorded is not None:
        folder, why, expected = recorded
    else:
        (folder, why), expected = dataset_dir(dataset, options.data_dir, settings), None
    data = load_dir(folder, dataset) if folder is not None and why is None else None
    if data is not None and expected is not None:
        changed = sorted(name for name, sha in expected.items() if data.sha256.get(name) != sha)
        if changed:  # the directory no longer holds the files the run read: showing them would show wrong texts
            data, why = None, (f"{folder} is not the data the runs read: {', '.join(changed)} differ from the sha256 "
                               "recorded in the manifest; pass --data-dir with the dataset the runs searched")
    note = f"texts and judgements not shown: {why}" if why else None
    if note:  # the page says it too; a page with empty text columns must not come without a word
        logger.warning("%s: %s", dataset, note)
    if note:
        notes.append(note)
    runs, values, expansions, trajectories = {}, {}, {}, {}
    for label, s in picks:
        run_files = [p for p in sorted(s.directory.glob(f"*{RUN_SUFFIX}")) if p.stem.lower() in _names_of(dataset)]
        if not run_files:
            notes.append(f"{label}: no run file for {dataset} in {s.directory}")
            continue
        runs[label] = read_result_file(run_files[0], read_run)
        values[label] = SystemSource(label, s.system, directory=s.directory).per_query(dataset, options.metric) or {}
        expansions[label] = _expansion_source(s.system, folder, dataset, settings)
        trajectories[label] = _trajectory_source(s.system, run_files[0])
        if trajectories[label][1]:
            notes.append(f"{label}: {trajectories[label][1]}")
    return _DrillInputs(dataset, folder, data, notes, runs, values, expansions, trajectories)


def _drill_dataset(read: _DrillInputs, options: ReportOptions, diffs: dict[str, float]) -> dict:
    """A dataset's drill-down section: its queries ordered by ``|A - B|`` (``diffs``; ties and queries without a
    difference keep the runs' order), each with both systems' top documents."""
    dataset, folder, data, runs, values = read.dataset, read.folder, read.data, read.runs, read.values
    expansions, trajectories, notes = read.expansions, read.trajectories, list(read.notes)
    order = list(dict.fromkeys(q for run in runs.values() for q in run))  # run order, A's queries first
    qids = sorted(order, key=lambda q: -abs(diffs.get(q, 0.0)))  # stable: ties keep the run order
    if options.max_queries is not None:
        qids = qids[: options.max_queries]
    queries = []
    absent: set[str] = set()  # documents of the runs that the dataset's corpus does not hold: no text to show
    for qid in qids:
        judged = data.qrels.get(qid, {}) if data else {}
        systems = []
        for label, run in runs.items():
            docs = []
            for rank, (docid, score) in enumerate(run.ranked(qid)[: options.top], start=1):
                rel = judged.get(docid) if data else None
                mark, css = ("?", "unjudged") if rel is None else ((f"\u2713 {rel}", "rel") if rel > 0 else ("\u2717", "nonrel"))
                text = data.corpus.get(docid, "") if data else ""
                if data and docid not in data.corpus:
                    absent.add(docid)
                if len(text) > options.max_doc_chars:
                    text = text[: options.max_doc_chars] + " \u2026"
                docs.append({"rank": rank, "docid": docid, "score": f"{score:.4f}", "mark": mark, "css": css, "text": text})
            found = sum(1 for d in docs if d["css"] == "rel")
            hits = f"{found} of {data.qrels.n_positive(qid)} relevant in the top {options.top}" if data else "no judgements"
            table, why = expansions[label]
            expansion = None if table is None else table.get(qid)
            rows, trajectory_note = trajectories[label]
            trajectory = None
            if rows is not None:
                row = rows.get(qid)
                if row is None:
                    trajectory_note = f"no trajectory for query {qid}"
                else:
                    trajectory = _trajectory_view(row, judged, data is not None)
            systems.append({"label": label, "docs": docs, "hits": hits, "value": pct(values[label].get(qid)),
                            "expansion": expansion, "expansion_note": why or f"no expansion for query {qid}",
                            "trajectory": trajectory, "trajectory_note": trajectory_note})
        diff = diffs.get(qid)
        text = (data.queries.get(qid, "") if data else "") or "(query text not available)"
        queries.append({"qid": qid, "text": text, "systems": systems, "diff": diff,
                        "diff_text": None if diff is None else f"{100 * diff:+.2f}"})
    if absent:
        missing = (f"{len(absent)} documents of the runs are not in the corpus of {dataset} ({folder}), so their text is "
                   f"empty (e.g. {', '.join(sorted(absent)[:3])}); is --data-dir the collection the runs searched?")
        logger.warning("%s: %s", dataset, missing)
        notes.append(missing)
    return {"dataset": dataset, "notes": notes, "queries": queries}


def _names_of(dataset: str) -> set[str]:
    from r2med.datasets.catalog import catalog, get_spec

    if dataset not in catalog():
        return {dataset.lower()}
    spec = get_spec(dataset)
    return {n.lower() for n in (spec.name, *spec.aliases)}


def build_report(result_dir: Path, options: ReportOptions = ReportOptions(), *, settings: Settings | None = None) -> str:
    """The report page (HTML text) for the systems under ``result_dir`` that can be shown; the page names the
    systems whose results cannot be used (:func:`r2med.reporting.leaderboard.survey`) in the leaderboard's notes."""
    return _build_report(result_dir, options, settings)[0]


def drill_folder(output: Path) -> Path:
    """Where the drill-down pages of the report ``output`` go: ``report.html`` -> ``report_files/``.

    >>> drill_folder(Path("out/report.html")).as_posix()
    'out/report_files'
    """
    output = Path(output)
    return output.with_name(f"{output.stem}_files")


def drill_page_name(index: int, dataset: str) -> str:
    """The file name of a dataset's drill-down page: its position and its name, other characters as ``_``.

    >>> drill_page_name(3, "Medical-Sciences"), drill_page_name(9, "my data/v2")
    ('drill-3-Medical-Sciences.html', 'drill-9-my_data_v2.html')
    """
    import re

    return DRILL_PAGE.format(index=index, name=re.sub(r"[^A-Za-z0-9._-]", "_", dataset))


def _build_report(result_dir: Path, options: ReportOptions, settings: Settings | None, output: Path | None = None
                  ) -> tuple[str, dict[Path, str], list[Refused], int]:
    """The page, its drill-down pages (path -> HTML: none unless ``output`` is given and the drill-down holds more
    than ``options.inline_queries`` queries), the systems refused, and how many systems of ``result_dir`` it shows."""
    settings = settings or get_settings()
    found, refused = survey(Path(result_dir))
    if not found and refused:
        raise RefusedResultsError(refused, shown=0)
    if not found:
        raise MissingResourceError(f"{result_dir}: no result files found (<Dataset>.json with a 'test' object)")
    systems = {s.system: s for s in found}
    rows = rows_of(found + (paper_results() if options.with_paper else []), options.metric, options.datasets)
    data = board(rows, options.metric, refused=refused)
    a = _pick(systems, rows, options.system_a, None)
    b = _pick(systems, rows, options.system_b, a) if a is not None else None
    comparison_note = ""
    pending = None
    if a is not None and b is not None:
        held = {*systems[a].scores, *systems[b].scores}  # a dataset only a third system holds is not theirs to compare
        shown = [name for name in data["datasets"] if name in held]
        try:
            if not shown:
                raise MissingResourceError(f"{a} and {b} hold none of the datasets shown ({', '.join(data['datasets'])})")
            # the tests run (in a worker, when they are many) while the drill-down is read and the plots drawn
            pending = start_comparison(SystemSource(a, a, directory=systems[a].directory),
                                       SystemSource(b, b, directory=systems[b].directory), datasets=shown,
                                       metric=options.metric, n_resamples=options.n_resamples, seed=options.seed,
                                       meanwhile=True)
        except MissingResourceError as exc:  # A and B share no dataset
            comparison_note = str(exc)
    with pending if pending is not None else contextlib.nullcontext():
        return _finish_report(result_dir, options, settings, output, found=found, refused=refused, rows=rows,
                              data=data, picks=[(name, systems[name]) for name in (a, b) if name is not None],
                              pending=pending, comparison_note=comparison_note)


def _finish_report(result_dir: Path, options: ReportOptions, settings: Settings, output: Path | None, *,
                   found: list[SystemResults], refused: list[Refused], rows: list[Row], data: dict,
                   picks: list[tuple[str, SystemResults]], pending: Any, comparison_note: str
                   ) -> tuple[str, dict[Path, str], list[Refused], int]:
    """The rest of :func:`_build_report`, while ``pending`` (the comparison of the ``picks``, or None) is computed."""
    from r2med import __version__

    read: list[_DrillInputs | dict] = []
    for dataset in data["datasets"]:
        if any(dataset in s.files for _, s in picks):
            try:
                read.append(_read_drill(dataset, picks, options, settings))
            except R2MedError as exc:
                logger.warning("%s: drill-down not available: %s", dataset, exc)  # said on the page too
                read.append({"dataset": dataset, "notes": [f"drill-down not available: {exc}"], "queries": []})
    bars_svg = leaderboard_svg(rows, data["datasets"], data["average_label"])
    breakdowns = _breakdowns(rows, found, options, settings)
    comparison, diffs = None, {}
    cmp = pending.result() if pending is not None else None
    if cmp is not None:
        headers, body = comparison_rows(cmp)
        diffs = {r.dataset: dict(r.diffs) for r in cmp.datasets}
        has_tests = any(r.test for r in cmp.datasets)
        comparison = {"a": cmp.a, "b": cmp.b, "headers": headers, "rows": body,
                      "svg": win_loss_svg(cmp) if has_tests else "",
                      "legend": f"{cmp.metric} x100; perm p: paired randomization test ({options.n_resamples} resamples, "
                                f"seed {options.seed}); Holm p: adjusted over the datasets tested; CI: paired bootstrap "
                                "(BCa); W/T/L: queries where A is above/equal/below B."}
    elif not comparison_note:
        comparison_note = ("A per-query comparison needs two systems with per-query files (<Dataset>.per_query.jsonl, "
                           "written by 'r2med run') in the result directory.")
    drill = [r if isinstance(r, dict) else _drill_dataset(r, options, diffs.get(r.dataset, {})) for r in read]
    title = Path(result_dir).name or str(result_dir)
    pages: dict[Path, str] = {}
    for section in drill:
        section.setdefault("page", None)  # shown in the page itself unless written to a page of its own below
    if output is not None and sum(len(section["queries"]) for section in drill) > options.inline_queries:
        folder = drill_folder(output)
        for index, section in enumerate(drill, start=1):
            if not section["queries"]:
                continue
            name = drill_page_name(index, section["dataset"])
            section.update(page=f"{folder.name}/{name}", labels=[s["label"] for s in section["queries"][0]["systems"]])
            pages[folder / name] = render_template(
                "report_drill.html.j2", title=title, section=section, index=index, back=f"../{Path(output).name}",
                metric=data["metric"], version=__version__)
    page = render_template(
        "report.html.j2", title=title, source=str(result_dir), version=__version__,
        board=data, legend=legend_text(data["metric"], data["datasets"]),
        bars_svg=bars_svg, breakdowns=breakdowns, comparison=comparison,
        comparison_note=comparison_note, drill=drill,
    )
    return page, pages, refused, len(found)


def _texts_dir(dataset: str, found: Sequence[SystemResults], options: ReportOptions,
               settings: Settings) -> tuple[Path | None, str | None]:
    """Where the report finds ``dataset``'s files, as the drill-down does: --data-dir, else the directory the results'
    manifests record, else the hub cache; and why not, when nowhere (issue 38: the note must say what is true)."""
    picks = [(s.system, s) for s in found if not s.published]
    recorded = None if options.data_dir is not None else recorded_dataset(dataset, picks)
    if recorded is None:
        return dataset_dir(dataset, options.data_dir, settings)
    return recorded[0], recorded[1]


def _breakdowns(rows: Sequence[Row], found: Sequence[SystemResults], options: ReportOptions,
                settings: Settings) -> list[dict]:
    """The report's tables by task and by body system: ``{"title", "id", "board", "legend", "note"}`` each, a note
    (and no board) saying why one cannot be shown."""
    out = []
    for title, by in (("By task", "task"), ("By body system", "body-system")):
        section = {"title": title, "id": f"by-{by}", "board": None, "legend": "", "note": ""}
        try:
            if by == "task" and not task_members(rows[0].datasets):
                raise MissingResourceError("no R2MED dataset shown: only R2MED's datasets have a task")
            breakdown = by_task(rows) if by == "task" else by_body_system(
                rows, found, metric=options.metric, data_dir=options.data_dir, settings=settings,
                locate=lambda name: _texts_dir(name, found, options, settings))
        except (MissingResourceError, InvalidInputError) as exc:
            section["note"] = f"{title.lower()}: not shown: {str(exc).removeprefix(f'--by {by}: ')}"
            out.append(section)
            continue
        data = board(rows, options.metric, breakdown)
        section.update(board=data, legend=legend_text(data["metric"], data["datasets"], breakdown))
        out.append(section)
    return out


def write_report(result_dir: Path, output: Path, options: ReportOptions = ReportOptions(), *,
                 settings: Settings | None = None) -> Path:
    """Build the report and write it to ``output`` atomically; a drill-down of more than ``options.inline_queries``
    queries goes to one page per dataset in :func:`drill_folder` (written first, each atomically; the pages of an
    earlier report there that this one does not have are removed once the page is written). When
    some systems' results cannot be used, the page shows the others and names them, and RefusedResultsError (exit 5,
    ``written`` = the page) follows the write."""
    from r2med.io.atomic import remove_file, write_text_atomic

    output = Path(output)
    page, pages, refused, shown = _build_report(result_dir, options, settings, output)
    folder = drill_folder(output)
    for path, text in pages.items():
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    path = write_text_atomic(output, page)
    if folder.is_dir():
        for stale in folder.glob(DRILL_PAGE.format(index="*", name="*")):
            if stale not in pages:
                remove_file(stale)
        if not any(folder.iterdir()):
            folder.rmdir()
    if refused:
        raise RefusedResultsError(refused, shown=shown, written=path)
    return path
