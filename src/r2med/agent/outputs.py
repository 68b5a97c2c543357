"""What an agent run leaves: its report, the answer each trajectory gives, its ranking, the expansion rows.

Pure functions over the trajectories the loop (``r2med.agent.loop``) wrote; the file names of an agent's
output folder are here too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r2med.agent import styles as st
from r2med.agent.config import STOP_REASONS, AgentConfig
from r2med.datasets.model import Dataset
from r2med.io.atomic import strict_json, write_strict  # noqa: F401 - the agent's files are strict JSON
from r2med.store.expansions import EXPANSION_FILE  # noqa: F401 - an agent's folder holds the official file
from r2med.types import Run

CACHE_FILE = "agent-cache.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
SUMMARY_FILE = "summary.json"
#: RRF's k for the agent's own ranking (the usual 60)
RRF_K = 60


@dataclass
class AgentReport:
    """What one ``run_agent`` call did."""

    dataset: str
    style: str
    llm: str
    protocol: str = ""
    queries: int = 0
    written: int = 0
    llm_calls: int = 0
    cached_calls: int = 0
    search_calls: int = 0
    repeated_searches: int = 0
    #: HTTP requests to a retrieval server (``--search-with URL``): each carries the searches of concurrent queries
    search_requests: int = 0
    #: a retrieval server's results the agent dropped (``r2med.agent.remote``): ``repeated`` ids, ``beyond_topk``
    search_cut: dict[str, int] = field(default_factory=dict)
    searches: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    fell_back: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None
    seconds: float = 0.0
    paths: dict[str, Path] = field(default_factory=dict)
    run: Run | None = None
    trajectories: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.failures and self.stopped is None

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("run", "trajectories")}
        out["paths"] = {k: str(v) for k, v in self.paths.items()}
        return out


def _r1_eval_answer(trajectory: dict[str, Any]) -> str | None:
    """qa_em.py ``extract_solution`` (73-82): the last ``<answer>`` pair, stripped, of the model's responses.

    Adaptation: the authors search prompt + responses + observations and need two pairs, since their prompt
    holds the example; but the instruction holds two pairs ("inside <answer> and </answer>", "<answer> Beijing
    </answer>") and the invalid-action message one more, so a query that never answered would score "Beijing"
    or "and". Here only the model's own turns count (None: it never answered)."""
    found = re.findall(r"<answer>(.*?)</answer>", "".join(t["text"] for t in trajectory["turns"]), flags=re.DOTALL)
    return found[-1].strip() if found else None


def _r1_first_answer(trajectory: dict[str, Any]) -> str | None:
    """R2MED's cut for its Search-R1 LLMs (``src/base.py`` ``split_response_for_r1``, qwen-*-ins): the first
    ``<answer>`` pair of the output, stripped (its "else the whole text" is ``--answer-policy authors``)."""
    return st.first_between(trajectory["output"], *st.R1_ANSWER)


def _o1_answer(trajectory: dict[str, Any]) -> str | None:
    """R2MED's cut for its thinking LLMs (``src/base.py`` ``split_response_for_r1``, qwq-32b, qwen3-32b) on
    Search-o1's output, which run_search_o1.py keeps whatever ended the loop (the turn limit included): the
    text after the first ``</think>``, stripped, else the whole output."""
    output = trajectory["output"]
    return (output.split("</think>", 1)[1] if "</think>" in output else output).strip() or None


#: a protocol's answer rule (``Protocol.answer_rule``) -> the text of a trajectory that becomes ``hy_doc``
ANSWER_RULES = {"r1-eval": _r1_eval_answer, "r1-first": _r1_first_answer, "o1": _o1_answer}


def answer_of(rule: str, trajectory: dict[str, Any]) -> str | None:
    """The part of a trajectory that becomes ``hy_doc`` under answer rule ``rule`` (None: no answer; a failed
    query has none).

    >>> answer_of("r1-first", {"stop_reason": "answer", "output": "<think>x</think><answer> B </answer>"})
    'B'
    >>> answer_of("o1", {"stop_reason": "max-turns", "output": "hm</think>\\n\\nAspirin."})
    'Aspirin.'
    >>> answer_of("r1-eval", {"stop_reason": "answer", "turns": [{"text": "<answer>A</answer><answer>B</answer>"}]})
    'B'
    """
    if trajectory["stop_reason"] in ("error", "budget") or not trajectory.get("turns", True):
        return None
    return ANSWER_RULES[rule](trajectory)


def agent_ranking(trajectories: list[dict[str, Any]], *, top_k: int = 100, name: str = "agent") -> Run:
    """Every document the agent's searches returned, fused over its searches by RRF (k=60; a query without a search
    has an empty ranking).

    >>> t = [{"id": "q", "searches": [{"ids": ["a", "b"]}, {"ids": ["b"]}]}]
    >>> agent_ranking(t)["q"]  # b: 1/62 + 1/61, a: 1/61
    {'b': 0.03252247488101534, 'a': 0.01639344262295082}
    """
    from r2med.fusion import rrf

    out = Run(name=name)
    for row in trajectories:
        qid = row["id"]
        runs = [Run({qid: {did: float(len(s["ids"]) - i) for i, did in enumerate(s["ids"])}})
                for s in row["searches"] if s["ids"]]
        out[qid] = dict(rrf(runs, k=RRF_K, depth=top_k).get(qid, {})) if runs else {}
    return out


def expansion_rows(dataset: Dataset, config: AgentConfig, rows: list[dict[str, Any]],
                    report: AgentReport) -> list[dict[str, Any]]:
    """The official expansion rows (dataset order) and the report's counts."""
    out = []
    reasons: Counter[str] = Counter()
    for row in rows:
        reasons[row["stop_reason"]] += 1
        report.searches += len(row["searches"])
        report.prompt_tokens += sum(t["prompt_tokens"] for t in row["turns"])
        report.completion_tokens += sum(t["completion_tokens"] for t in row["turns"])
        for search in row["searches"]:
            used = search.get("reason_in_documents")
            if used:
                report.prompt_tokens += used["prompt_tokens"]
                report.completion_tokens += used["completion_tokens"]
        qid, text = row["id"], row["question"]
        if row["stop_reason"] in ("error", "budget"):
            report.failures[qid] = row["error"] or STOP_REASONS[row["stop_reason"]]
            continue
        answer = row["answer"]
        fell_back = False
        if not answer:
            if config.policy == "error":
                report.failures[qid] = f"no answer ({row['stop_reason']}: {STOP_REASONS[row['stop_reason']]})"
                continue
            answer, fell_back = (row["output"], False) if config.policy == "authors" else (text, True)
            if not answer.strip():
                answer, fell_back = text, True
        report.fell_back += fell_back
        extra = {k: v for k, v in dataset.query_fields.get(qid, {}).items() if k not in ("id", "text", "hy_doc")}
        out.append({"id": qid, "text": text, "hy_doc": answer, **extra, "answer_policy": config.policy,
                    "style": config.style, "stop_reason": row["stop_reason"], "searches": len(row["searches"]),
                    "fell_back": fell_back})
    report.stop_reasons = dict(sorted(reasons.items()))
    report.written = len(out)
    return out


def seed_spread(tables: dict[int, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Per dataset and measure, the mean and the sample standard deviation (n - 1, as agent papers report runs)
    over the seeded runs' score tables (``{seed: summarise(...)}``); ``sd`` is None for one run.

    >>> spread = seed_spread({1: {"A": {"ndcg_at_10": 0.2}}, 2: {"A": {"ndcg_at_10": 0.4}},
    ...                       3: {"A": {"ndcg_at_10": 0.3}}})
    >>> spread["A"]["ndcg_at_10"]
    {'mean': 0.3, 'sd': 0.1, 'runs': 3}
    """
    import statistics

    first = next(iter(tables.values()), {})
    out: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for dataset, row in first.items():
        out[dataset] = {}
        for key in row:
            values = [table[dataset][key] for table in tables.values()]
            out[dataset][key] = {"mean": round(statistics.fmean(values), 10),
                                 "sd": round(statistics.stdev(values), 10) if len(values) > 1 else None,
                                 "runs": len(values)}
    return out
