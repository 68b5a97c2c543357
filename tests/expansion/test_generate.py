"""The expand stage (``expand_dataset``) and ``r2med expand`` against a local scripted chat server (``tests/llm/chat_server.py``)."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))
from chat_server import ChatServer, Empty, Reply, Status, reply_for

from r2med.cli.expand import register
from r2med.datasets import load_dir
from r2med.errors import InvalidInputError, R2MedError, UsageError
from r2med.expansion.generate import ExpansionConfig
from r2med.expansion.prompts import build_prompt
from r2med.expansion.published import read_expansions
from r2med.llm import Budget, BudgetExceeded, ChatClient, SamplingParams
from r2med.settings import get_settings
from r2med.stages.expand import expand_dataset
from r2med.types import Run

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny"
FAST = {"backoff": 0.001, "max_backoff": 0.01}


@pytest.fixture
def server():
    with ChatServer() as running:
        yield running


@pytest.fixture
def tiny():
    """tests/data/tiny (q1, q2, q3; q1 has an extra field "answer") under an R2MED name, for its prompts."""
    return load_dir(TINY, "Biology")


def hyde_prompt(text: str) -> str:
    return build_prompt("hyde", "Biology", text)


def config(server, method="hyde", **kwargs) -> ExpansionConfig:
    return config_for(server.base_url, method, **kwargs)


def config_for(base_url: str, method="hyde", **kwargs) -> ExpansionConfig:
    return ExpansionConfig(method, kwargs.pop("llm_model", "tiny-llm"), base_url,
                           SamplingParams(temperature=0.7, max_tokens=48, seed=42), concurrency=2, **kwargs)


def client(server, **kwargs) -> ChatClient:
    return ChatClient(kwargs.pop("model", "tiny-llm"), server.base_url, max_retries=2, **FAST, **kwargs)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_hyde_writes_the_official_file_in_dataset_order(server, tiny, tmp_path):
    report = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    out = rows(tmp_path / "query_with_hydoc.jsonl")
    assert [r["id"] for r in out] == ["q1", "q2", "q3"]
    assert list(out[0])[:3] == ["id", "text", "hy_doc"]  # the official three first, extras after
    # the server answers "A passage about <user turn>." and the user turn is the filled Biology HyDE prompt
    assert out[1]["hy_doc"] == reply_for(hyde_prompt("how is blood sugar controlled"))
    assert out[0]["answer"] == "aspirin" and out[0]["fell_back"] is False  # the query's own extra field is kept
    assert (report.queries, report.cached, report.requested, report.failed, report.written) == (3, 0, 3, 0, 3)
    body = server.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert (body["model"], body["temperature"], body["max_tokens"], body["seed"]) == ("tiny-llm", 0.7, 48, 42)
    record = rows(tmp_path / "generations.jsonl")[0]
    for name in ("key", "text", "reasoning", "answer", "truncated", "usage", "sampling", "prompt_sha256", "model",
                 "seed", "started_at", "finished_at"):
        assert name in record
    # r2med's own reader of expansion files accepts the output
    assert read_expansions(tmp_path / "query_with_hydoc.jsonl", method="hyde", llm="tiny").hy_docs["q2"] == out[1]["hy_doc"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["report"]["usage"]["requests"] == 3 and summary["prompt_dataset"] == "Biology"


def test_a_rerun_repeats_no_finished_request(server, tiny, tmp_path):
    part = replace(tiny, queries={"q2": tiny.queries["q2"]})
    expand_dataset(part, config(server), out_dir=tmp_path, client=client(server), progress=False)
    report = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (report.cached, report.requested, report.usage.requests) == (1, 2, 2)
    assert sorted(r.prompt for r in server.requests) == sorted(hyde_prompt(t) for t in tiny.queries.values())
    again = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (again.cached, again.requested, again.usage.requests, len(server.requests)) == (3, 0, 0, 3)
    # other sampling is another request (the seed is part of the key)
    other = replace(config(server), sampling=SamplingParams(temperature=0.7, max_tokens=48, seed=7))
    assert expand_dataset(tiny, other, out_dir=tmp_path, client=client(server), progress=False).requested == 3


def test_a_failed_query_is_listed_not_written_and_retried_next_time(server, tiny, tmp_path):
    server.script(hyde_prompt("what lowers a fever"), *[Status(500)] * 3)
    server.script(hyde_prompt("an unjudged query"), *[Empty()] * 3)
    report = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert report.failed == 2 and set(report.failures) == {"q1", "q3"} and not report.complete
    assert "HTTP 500" in report.failures["q1"] and "empty content" in report.failures["q3"]
    written = rows(tmp_path / "query_with_hydoc.jsonl")
    assert [r["id"] for r in written] == ["q2"] and all(r["hy_doc"].strip() for r in written)
    assert report.usage.failures == 2 and report.usage.retries == 4
    rerun = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (rerun.cached, rerun.requested, rerun.failed, rerun.written) == (1, 2, 0, 3)


def test_a_plain_output_is_written_byte_exact(server, tiny, tmp_path):
    # the official generation stored the model's text as it came: whitespace around it included
    server.script(hyde_prompt("what lowers a fever"), Reply("\n\nAspirin lowers fever.\n"))
    expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    out = {r["id"]: r for r in rows(tmp_path / "query_with_hydoc.jsonl")}
    assert out["q1"]["hy_doc"] == "\n\nAspirin lowers fever.\n" and out["q1"]["fell_back"] is False


def test_reasoning_outputs_split_flag_and_fall_back(server, tiny, tmp_path):
    server.script(hyde_prompt("what lowers a fever"), Reply("<think>Fever is...</think>\n\nAspirin lowers fever."))
    server.script(hyde_prompt("how is blood sugar controlled"), Reply("<think>Insulin, glucagon and", finish_reason="length"))
    server.script(hyde_prompt("an unjudged query"), Reply("", reasoning_content="Let me see", finish_reason="length"))
    cfg = config(server, llm_model="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    report = expand_dataset(tiny, cfg, out_dir=tmp_path, client=client(server), progress=False)
    out = {r["id"]: r for r in rows(tmp_path / "query_with_hydoc.jsonl")}
    assert out["q1"]["hy_doc"] == "Aspirin lowers fever." and out["q1"]["style"] == "think"
    # both cut-off traces (one inline, one in reasoning_content) fall back to the plain query, counted
    assert out["q2"]["hy_doc"] == "how is blood sugar controlled" and out["q2"]["truncated"] is True
    assert out["q3"]["hy_doc"] == "an unjudged query" and out["q3"]["fell_back"] is True
    assert (report.truncated, report.fell_back, report.failed) == (2, 2, 0)
    record = next(r for r in rows(tmp_path / "generations.jsonl") if r["qid"] == "q1")
    assert (record["reasoning"], record["answer"], record["truncated"]) == ("Fever is...", "Aspirin lowers fever.", False)
    assert record["text"] == "<think>Fever is...</think>\n\nAspirin lowers fever."  # the raw output, kept whole

    # another policy reuses the stored generations: no new request
    authors = expand_dataset(tiny, replace(cfg, policy="authors"), out_dir=tmp_path, client=client(server),
                                  progress=False)
    out = {r["id"]: r for r in rows(tmp_path / "query_with_hydoc.jsonl")}
    assert authors.requested == 0 and out["q2"]["hy_doc"] == "<think>Insulin, glucagon and"  # the whole text
    assert out["q3"]["hy_doc"] == "an unjudged query"  # an empty text is never used, whatever the policy
    strict = expand_dataset(tiny, replace(cfg, policy="error"), out_dir=tmp_path, client=client(server),
                                 progress=False)
    assert set(strict.failures) == {"q2", "q3"} and "cut off before its answer" in strict.failures["q2"]


def test_lamer_fills_the_first_stage_top_10(server, tiny, tmp_path):
    run = Run({"q1": {"d4": 3.0, "d1": 2.0}, "q2": {"d2": 1.0}, "q3": {"d3": 1.0}}, name="bm25")
    report = expand_dataset(tiny, config(server, "lamer"), out_dir=tmp_path, client=client(server),
                                 first_stage=run, progress=False)
    assert report.written == 3
    prompt = next(r.prompt for r in server.requests if "what lowers a fever" in r.prompt)
    assert prompt.endswith("\n[1]. fever is a sign of infection\n[2]. aspirin reduces fever and pain")
    with pytest.raises(UsageError, match="lamer needs a first-stage run"):
        expand_dataset(tiny, config(server, "lamer"), out_dir=tmp_path, progress=False)
    with pytest.raises(InvalidInputError, match="does not fit Biology") as info:
        expand_dataset(tiny, config(server, "lamer"), out_dir=tmp_path, first_stage=Run({"q1": {"dX": 1.0}}),
                            progress=False)
    assert any("'dX'" in p for p in info.value.problems) and any("'q2' has no ranking" in p for p in info.value.problems)


def test_budget_keeps_what_finished_and_a_rerun_completes(server, tiny, tmp_path):
    limited = client(server, budget=Budget(max_requests=2))
    with pytest.raises(BudgetExceeded) as info:
        expand_dataset(tiny, replace(config(server), concurrency=1), out_dir=tmp_path, client=limited,
                            progress=False)
    report = info.value.report
    assert (report.written, report.failed) == (2, 1) and "budget" in report.stopped
    assert [r["id"] for r in rows(tmp_path / "query_with_hydoc.jsonl")] == ["q1", "q2"]
    rerun = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (rerun.requested, rerun.written, len(server.requests)) == (1, 3, 3)


def test_the_default_folder_is_where_run_looks(isolated_home, tiny):
    from r2med.expansion.published import find_expansions
    from r2med.stages.expand import Expand

    folder = Expand(config_for("http://127.0.0.1:9/v1", llm_model="org/Qwen 7B")).folder(tiny)
    assert folder == isolated_home / "expansions" / "Biology" / "hyde" / "org_Qwen_7B"
    (folder / "query_with_hydoc.jsonl").parent.mkdir(parents=True)
    (folder / "query_with_hydoc.jsonl").write_text('{"id": "q1", "hy_doc": "x"}\n')
    assert find_expansions(replace(tiny, source=""), "hyde", "org_Qwen_7B", settings=get_settings()) == (
        folder / "query_with_hydoc.jsonl")


# ------------------------------------------------------------------ CLI
def expand(*argv: object) -> tuple[int, str, str]:
    """``r2med expand ARGS`` through a parser built with ``register`` (as cli.py does), in-process."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="r2med", parents=[common])
    register(parser.add_subparsers(dest="command"), common)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            args = parser.parse_args(["expand", *map(str, argv)])
            code = args.func(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
        except R2MedError as exc:
            print(f"r2med: error: {exc}", file=sys.stderr)
            code = exc.exit_code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def data_dir(tmp_path):
    shutil.copytree(TINY, tmp_path / "data" / "Biology")
    return tmp_path / "data"


def test_cli_default_place_summary_and_json(server, data_dir, isolated_home):
    code, out, err = expand("--method", "hyde", "--llm-model", "org/Tiny-LLM", "--base-url", server.base_url,
                            "--data-dir", data_dir, "--max-tokens", "48")
    assert code == 0, err
    assert "the authors' 'local' defaults" in err and "'max_tokens': 48" in err and "'seed': 42" in err
    target = isolated_home / "expansions" / "Biology" / "hyde" / "org_Tiny-LLM" / "query_with_hydoc.jsonl"
    assert len(rows(target)) == 3
    assert "Biology: 3 queries, 0 cached, 3 requested, 0 failed, 0 truncated traces, 0 fell back" in out
    code, out, _ = expand("--method", "hyde", "--llm-model", "org/Tiny-LLM", "--base-url", server.base_url,
                          "--data-dir", data_dir, "--max-tokens", "48", "--json")
    report = json.loads(out)["Biology"]
    assert code == 0 and (report["cached"], report["requested"], report["usage"]["requests"]) == (3, 0, 0)


def test_cli_failures_exit_6_after_writing_the_rest(server, data_dir, tmp_path):
    server.script(hyde_prompt("what lowers a fever"), *[Status(502)] * 2)
    code, out, _ = expand("--method", "hyde", "--llm-model", "m", "--base-url", server.base_url, "--data-dir",
                          data_dir, "--out", tmp_path / "x", "--max-retries", "1", "-q")
    assert code == 6 and "failed q1: " in out and "HTTP 502" in out
    assert [r["id"] for r in rows(tmp_path / "x" / "query_with_hydoc.jsonl")] == ["q2", "q3"]


def test_cli_lamer_from_a_results_directory_and_usage_errors(server, data_dir, tmp_path):
    results = tmp_path / "results" / "base retriever" / "bm25"
    results.mkdir(parents=True)
    (results / "Biology.run").write_text("q1 Q0 d1 1 2.0 bm25\nq2 Q0 d2 1 1.0 bm25\nq3 Q0 d3 1 1.0 bm25\n")
    code, _, err = expand("--method", "lamer", "--llm-model", "m", "--base-url", server.base_url, "--data-dir",
                          data_dir, "--first-stage", results, "--out", tmp_path / "l", "-q")
    assert code == 0, err
    assert len(rows(tmp_path / "l" / "query_with_hydoc.jsonl")) == 3
    code, _, err = expand("--method", "lamer", "--llm-model", "m", "--base-url", server.base_url, "--data-dir", data_dir)
    assert code == 2 and "--first-stage" in err
    code, _, err = expand("--method", "hyde", "--llm-model", "m", "--data-dir", data_dir)
    assert code == 2 and "--base-url is required" in err
    code, _, err = expand("--method", "lamer", "--llm-model", "m", "--base-url", server.base_url, "--data-dir",
                          data_dir, "--first-stage", tmp_path)
    assert code == 4 and "Biology.run" in err


def test_cli_budget_exits_6_after_writing_what_finished(server, data_dir, tmp_path):
    code, out, err = expand("--method", "hyde", "--llm-model", "m", "--base-url", server.base_url, "--data-dir",
                            data_dir, "--out", tmp_path / "b", "--max-requests", "1", "--concurrency", "1")
    assert code == 6 and "request budget of 1 spent" in err and "Biology: 3 queries" in out
    assert len(rows(tmp_path / "b" / "query_with_hydoc.jsonl")) == 1
