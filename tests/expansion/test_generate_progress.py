"""Generating expansions shows one bar over the queries still to request (``r2med expand``), with the retries and
failures beside it; none with progress off, and none when every answer is already stored."""

from __future__ import annotations

import sys
from pathlib import Path

from progress_helpers import forbid_bars, record_bars

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))
from chat_server import ChatServer, Status

from r2med.datasets import load_dir
from r2med.expansion.generate import ExpansionConfig
from r2med.expansion.prompts import build_prompt
from r2med.llm import ChatClient, SamplingParams
from r2med.stages.expand import expand_dataset

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny"


def run(server, out: Path, *, progress: bool = True):
    config = ExpansionConfig("hyde", "tiny-llm", server.base_url, SamplingParams(temperature=0.7, max_tokens=48, seed=1),
                             concurrency=1)
    client = ChatClient("tiny-llm", server.base_url, max_retries=2, backoff=0.001, max_backoff=0.01)
    return expand_dataset(load_dir(TINY, "Biology"), config, out_dir=out, client=client, progress=progress)


def test_one_bar_over_the_queries_with_retries_beside_it(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    with ChatServer() as server:
        server.script(build_prompt("hyde", "Biology", "what lowers a fever"), Status(503))  # one retry, then answered
        report = run(server, tmp_path)
        assert report.written == 3
        [bar] = bars
        assert (bar.desc, bar.unit, bar.total, bar.updates, bar.closed) == ("Biology: hyde tiny-llm", "query", 3,
                                                                            [1, 1, 1], True)
        assert bar.postfix == {"retries": 1, "failures": 0}
        run(server, tmp_path)  # all stored: nothing to request, no bar
        assert len(bars) == 1


def test_progress_off_creates_no_bar(monkeypatch, tmp_path):
    forbid_bars(monkeypatch)
    with ChatServer() as server:
        assert run(server, tmp_path, progress=False).written == 3
