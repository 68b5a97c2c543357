"""The text ``r2med reproduce`` prints: a reproduction's comparison (``comparison_text``), one plan
(``plan_text``, ``--dry-run``) and every plan (``plans_text``, ``--list``), each from what the library returns
(``r2med.reproduction``: a ``Reproduction``, ``Plan.to_json()``, ``list_plans()``).

>>> print(_diff(0.47891), _diff(-0.0001), _diff(None))
+47.89 -0.01 -
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from r2med.reporting.tables import markdown_table, md_text, pct

if TYPE_CHECKING:
    from r2med.reproduction.run import Reproduction

_STATUS = {True: "ok", False: "DIFFERENT", None: "not compared"}


def _cell(value: float | None) -> str:
    return "-" if value is None else pct(value)


def _diff(value: float | None) -> str:
    return "-" if value is None else ("-" if value < 0 else "+") + pct(abs(value))


def first_stage_text(data: Mapping[str, Any]) -> str:
    """A reranker row's stored first stage, evaluated, beside the paper's row of its retriever, and its checksums."""
    rows = [[name, _cell(v["first_stage"]), _cell(v["paper"]), _diff(v["difference"])]
            for name, v in data["datasets"].items()]
    if "average" in data:
        rows.append(["average", _cell(data["average"]["first_stage"]), _cell(data["average"]["paper"]), "-"])
    checked = ", ".join(f"{f['dataset']} sha256 {f['sha256'][:12]}..." for f in data["files"])
    return "\n".join([
        f"first stage: {data['published_runs'] or data['source']}, evaluated before reranking, beside the paper's "
        f"{data['paper_row']} (x100)",
        markdown_table(["dataset", "first stage", "paper", "diff"], rows, align_right=[False, True, True, True]),
        f"first-stage files (checksummed; a changed file is refused): {checked}\n"])


def comparison_text(done: Reproduction) -> str:
    """Ours beside the paper per dataset, the average line of a leaderboard-only row, and the verdict."""
    plan, a = done.plan, done.average
    lines = [] if done.first_stage is None else [first_stage_text(done.first_stage)]
    table = [[r.dataset, _cell(r.ours), _cell(r.paper), _diff(r.difference), _STATUS[r.ok]] for r in done.rows]
    lines.append(f"{done.system} ({done.retriever}{', answer policy ' + plan.answer_policy if plan.expansion else ''}): "
                 f"{done.metric} x100, ours vs the paper, tolerance {done.tolerance * 100:.2f}")
    lines.append(markdown_table(["dataset", "ours", "paper", "diff", "status"], table,
                                align_right=[False, True, True, True, False]))
    if a is not None:
        board = plan.leaderboard
        assert board is not None  # an average is checked for a leaderboard row only
        head = (f"The leaderboard publishes only this row's average ({board.name}: {board.average:.2f}, over the 8 "
                f"datasets); no per-dataset numbers, so the average is compared, to {a.tolerance * 100:.2f}: ")
        if a.ours is None or a.difference is None:
            lines.append(head + f"not compared, {8 - len(a.missing)} of 8 datasets were run (missing: "
                         f"{', '.join(a.missing)})")
        else:
            sign = "-" if a.difference < 0 else "+"
            lines.append(head + f"ours {a.shown}, leaderboard {board.average:.2f}, diff {sign}{abs(a.difference):.2f}: "
                         f"{'ok' if a.ok else 'DIFFERENT'}")
    if done.failed:
        what = "datasets" if a is None else "compared (datasets and the average)"
        lines.append(f"{len(done.failed)} of {done.compared} {what} differ by more than the tolerance: "
                     f"{', '.join(done.failed)}")
    elif done.compared:
        lines.append("the average matches" if a is not None else f"all {done.compared} compared datasets match")
    return "\n".join(lines)


def plan_text(data: Mapping[str, Any], needs: Sequence[str], server: str | None = None) -> str:
    """One plan (``Plan.to_json()``) and the text of each need; ``server``: the LLM server it would call (a row
    that calls none: None); ``data["command"]``, where given: the command line that runs it."""
    board = data["leaderboard"]
    lines = [f"{data['system']}: what r2med would run (nothing is loaded)"]
    if board:
        lines.append(f"  leaderboard: #{board['rank']} {board['name']}, average {board['average']:.2f}")
    compared = "the paper per dataset" if data["compare"] == "datasets" else "the average (the only number published)"
    lines.append(f"  compared on: {compared}")
    if data["retriever"]:
        lines.append(f"  retriever: {data['retriever']} (top {data['top_k']})")
    if data["expansion"]:
        e = data["expansion"]
        where = (f"the authors' published {e['file']} (hub config {e['hub_config']}, split {e['hub_split']}; looked "
                 f"for in {', '.join(e['searched'])})" if e["source"] == "hub" else "generated with r2med expand")
        lines.append(f"  expansion: {e['spec']}, {where}; answer policy {data['answer_policy']}")
    if data["first_stage"]:
        f = data["first_stage"]
        runs = "r2med's own run" if f["runs"] == "r2med" else f"stored runs {f.get('url', f['runs'])}"
        lines.append(f"  first stage: {f['system']}, {runs}")
    if data["reranker"]:
        lines.append(f"  reranker: {data['reranker']} over the top {data['rerank_top_k']} (only those kept)")
    if server is not None:
        lines.append(f"  LLM server: {server}")
    lines.append("  needs:")
    lines.extend(f"    - {text}" for text in needs)
    if data.get("command"):
        lines.append(f"  command: {data['command']}")
    return "\n".join(lines)


def plans_text(entries: Sequence[Mapping[str, Any]]) -> str:
    """Every leaderboard row and published folder (``list_plans()``) with its plan and needs, then what they are."""
    body = []
    for e in entries:
        plan = e["plan"]
        if plan is None:
            body.append([e["rank"] or "-", md_text(e["system"]), f"{e['average']:.2f}", "-", "-", "-",
                         md_text(f"no plan: {e['problem']}")])
            continue
        expansion, first = plan["expansion"], plan["first_stage"]
        shown = "-" if expansion is None else f"{expansion['spec']} ({expansion['source']})"
        reranker = ("-" if plan["reranker"] is None
                    else f"{plan['reranker']} top {plan['rerank_top_k']} of {first['system']}")
        needs = ", ".join(dict.fromkeys(n["kind"] for n in plan["needs"])) or "-"
        body.append([e["rank"] or "-", md_text(e["system"]), f"{e['average']:.2f}",
                     md_text(plan["retriever"] or first["runs"]), md_text(shown), md_text(reranker), needs])
    on_board = sum(e["on_leaderboard"] for e in entries)
    table = markdown_table(["#", "system", "avg", "retriever", "expansion (source)", "reranker", "needs"], body,
                           align_right=[True, False, True, False, False, False, False])
    return (f"{table}\n\n{len(entries)} systems: the {on_board} rows of the public leaderboard (#: its rank; avg: its "
            f"average) and the {len(entries) - on_board} published result folders not on it (avg: the mean of their "
            "published numbers). Expansion source 'hub': the authors' published files (the dataset directory, then "
            "r2med's generated ones, then the hub). r2med reproduce SYSTEM --dry-run shows one plan in full.")
