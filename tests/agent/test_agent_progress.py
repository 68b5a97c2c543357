"""An agent run shows one bar over the queries, with its turns so far beside it (LLM calls, cached calls,
searches); none with progress off."""

from __future__ import annotations

from pathlib import Path

from completion_server import CompletionServer

from progress_helpers import forbid_bars, record_bars
from r2med.agent.loop import AgentConfig, run_agent
from r2med.agent.search import open_searcher
from r2med.datasets import load_dir
from r2med.retrievers.bm25.retriever import BM25Retriever

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny"


def agent(server, out: Path, *, progress: bool):
    dataset = load_dir(TINY, "tiny")
    config = AgentConfig(protocol="search-r1-infer", llm_model="test-model", base_url=server.base_url, chat_template="chatml",
                         concurrency=1, stop_on_repeat=True)
    return run_agent(dataset, config, open_searcher(BM25Retriever(progress=False), dataset), out_dir=out,
                     progress=progress)


def test_one_bar_over_the_queries_with_the_turns_beside_it(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    with CompletionServer() as server:
        report = agent(server, tmp_path, progress=True)
    # q1 and q2: two searches, then the answer; q3 ("an unjudged query") repeats its one search and stops there
    assert (report.llm_calls, report.search_calls) == (8, 5)
    [bar] = bars
    assert (bar.desc, bar.unit, bar.total, bar.updates, bar.closed) == ("tiny: search-r1 test-model", "query", 3,
                                                                        [1, 1, 1], True)
    assert bar.postfix == {"llm": 8, "cached": 0, "searches": 5}


def test_progress_off_creates_no_bar(monkeypatch, tmp_path):
    forbid_bars(monkeypatch)
    with CompletionServer() as server:
        assert agent(server, tmp_path, progress=False).written == 3
