"""Every long step of the commands shows a bar with its count, ETA and rate on stderr, and none with ``-q`` or
``--json`` (issue 16, item 7): BM25 index building and dense encoding (``run``), generation (``expand``), listwise
reranking (``rerank``) and the agent (``agent``), each against tiny local data and local fake servers."""

from __future__ import annotations

import re
import shutil
import sys

import pytest

from conftest import DATA

TINY = DATA / "tiny"
FLAGS = {"bars": (), "quiet": ("-q",), "json": ("--json",)}


def bar_lines(err: str) -> list[str]:
    """What tqdm wrote: segments with a count, an ETA and a rate (``3/4 [00:00<00:01, 2.5doc/s]``)."""
    return [s for s in re.split(r"[\r\n]", err) if re.search(r"\d+/\d+ \[\d\d:\d\d<(\d\d:\d\d|\?), [^\]]*/s", s)]


def check(result, flag: str, *, shows: tuple[str, ...], quiet_err: str = "") -> None:
    assert result.code == 0, result.err
    lines = bar_lines(result.err)
    if flag == "bars":
        for desc in shows:
            assert any(desc in line for line in lines), (desc, result.err)
    else:
        assert lines == [] and "\r" not in result.err, result.err
    if flag == "quiet":
        assert result.err == quiet_err


@pytest.mark.parametrize("flag", FLAGS)
def test_run_bm25_index(cli, tmp_path, flag):
    result = cli("run", "--data-dir", TINY, "--output", tmp_path, *FLAGS[flag])
    check(result, flag, shows=("tiny: BM25 index",))
    if flag == "bars":
        assert "doc/s" in result.err


@pytest.mark.parametrize("flag", FLAGS)
def test_run_dense_encoding(cli, tmp_path, flag):
    pytest.importorskip("torch")
    result = cli("run", "--retriever", DATA / "dense" / "tiny-bert", "--data-dir", TINY, "--output", tmp_path,
                 "--batch-size", "2", "--device", "cpu", *FLAGS[flag])
    check(result, flag, shows=("encoding documents (tiny-bert)", "encoding queries (tiny-bert)"))
    if flag == "bars":
        assert "doc/s" in result.err and "query/s" in result.err
        # which counts are drawn depends on tqdm's refresh interval; the per-batch moves are tested in
        # tests/retrievers/dense/test_dense_progress.py with recorded bars


def test_a_dense_run_draws_its_bars_on_one_line_and_no_other_bar(cli, tmp_path):
    """Issue 38, finding 10: transformers' "Loading weights" drew a second bar under r2med's encoding bar, leaving
    its 0% line, a line of its own and ESC[A in the output; now every bar of the run is drawn on the one line that
    the first result line then takes."""
    pytest.importorskip("torch")
    result = cli("run", "--retriever", DATA / "dense" / "tiny-bert", "--data-dir", TINY, "--output", tmp_path,
                 "--batch-size", "2", "--device", "cpu")
    assert result.code == 0, result.err
    bars, _, rest = result.err.partition("tiny: nDCG@10")
    assert "encoding documents (tiny-bert)" in bars and "encoding queries (tiny-bert)" in bars
    assert "\n" not in bars and "\x1b[" not in result.err and "Loading weights" not in result.err
    assert rest.count("\n") == 1 and rest.endswith("tiny.json\n")


@pytest.mark.parametrize("flag", FLAGS)
def test_expand_generation(cli, tmp_path, flag):
    sys.path.insert(0, str(DATA.parent / "llm"))
    from chat_server import ChatServer

    data = tmp_path / "data"
    shutil.copytree(TINY, data / "Biology")
    with ChatServer() as server:
        result = cli("expand", "--method", "hyde", "--llm-model", "tiny-llm", "--base-url", server.base_url,
                     "--data-dir", data, "--out", tmp_path / "out", "--max-tokens", "16", *FLAGS[flag])
    check(result, flag, shows=("Biology: hyde tiny-llm",))


@pytest.mark.parametrize("flag", FLAGS)
def test_rerank_listwise(cli, tmp_path, flag):
    sys.path.insert(0, str(DATA.parent / "rerankers"))
    from listwise_server import ListwiseServer

    run = tmp_path / "first.run"
    run.write_text("".join(f"{q} Q0 d{i} {i} {5 - i} bm25\n" for q in ("q1", "q2") for i in range(1, 5)))
    with ListwiseServer(lambda query, n, messages: " > ".join(f"[{i}]" for i in range(n, 0, -1))) as server:
        result = cli("rerank", "--run", run, "--system", "bm25", "--tasks", "tiny", "--data-dir", TINY, "--reranker",
                     "listwise", "--llm-model", "test-llm", "--base-url", server.base_url, "--top-k", "4", "--window",
                     "3", "--stride", "2", "--output", tmp_path / "out", *FLAGS[flag])
    check(result, flag, shows=("reranking (listwise-test-llm)",))


@pytest.mark.parametrize("flag", FLAGS)
def test_agent(cli, tmp_path, flag):
    sys.path.insert(0, str(DATA.parent / "agent"))
    from completion_server import CompletionServer

    with CompletionServer() as server:
        result = cli("agent", "--protocol", "search-r1-infer", "--stop-on-repeat", "--llm-model", "test-model",
                     "--base-url", server.base_url, "--chat-template", "chatml", "--data-dir", TINY, "--output",
                     tmp_path, "--concurrency", "1", *FLAGS[flag])
    # the agent's counts are its result, printed with -q too (README); no bar
    counts = "tiny: protocol search-r1-infer, 5 searches, 8 LLM calls (0 from the cache); stop reasons: answer 2, repeated-search 1\n"
    check(result, flag, shows=("tiny: search-r1 test-model",), quiet_err=counts)


def test_bar_lines_reads_tqdm_output():
    err = "\rtiny: BM25 index:   0%|          | 0/4 [00:00<?, ?doc/s]\rtiny: BM25 index: 100%|#| 4/4 [00:00<00:00, 9.1doc/s]"
    assert len(bar_lines(err)) == 2 and bar_lines("r2med: warning: 1 queries have no judgements\n") == []
