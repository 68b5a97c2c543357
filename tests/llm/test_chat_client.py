"""ChatClient against a real local HTTP server that injects faults (``chat_server.py``), no network.

Shows: every fault kind is retried and counted; exhausted retries fail one job (delivered as an error,
not fatal); fatal errors and an absent server stop the run with the right error; the budget stops new
requests but keeps what finished; concurrency is bounded; results arrive in the calling thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from chat_server import ChatServer, Empty, Garbage, Hang, NoChoices, Reply, Status, reply_for

from r2med.errors import MissingResourceError, ProviderError, UsageError
from r2med.llm import Budget, BudgetExceeded, ChatClient, ChatJob, ChatResult, SamplingParams, request_key

FAST = {"backoff": 0.001, "max_backoff": 0.01}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": text}]


def job(text: str, params: SamplingParams | None = None) -> ChatJob:
    params = params or SamplingParams(seed=42)
    return ChatJob(request_key("m", user(text), params), user(text), params)


@pytest.fixture
def server():
    with ChatServer() as running:
        yield running


def complete_once(client: ChatClient, messages, params: SamplingParams) -> ChatResult:
    async def go():
        try:
            return await client.complete(messages, params)
        finally:
            await client.aclose()

    return asyncio.run(go())


def run_many(client: ChatClient, jobs: list[ChatJob], **kwargs) -> dict[str, ChatResult | Exception]:
    got: dict[str, ChatResult | Exception] = {}
    client.complete_many(jobs, on_result=lambda j, out: got.__setitem__(j.messages[-1]["content"], out),
                         progress=False, **kwargs)
    return got


def test_every_fault_is_retried_and_counted(server):
    server.script("a", Status(429, retry_after="0"), Status(500), Hang(2.0), Garbage(), Empty(), NoChoices())
    client = ChatClient("m", server.base_url, timeout=0.5, max_retries=6, **FAST)
    result = complete_once(client, user("a"), SamplingParams(temperature=0.7, seed=42))
    assert result.text == reply_for("a") == "A passage about a."
    assert result.attempts == 7 and result.finish_reason == "stop" and result.reasoning is None
    # 6 failed attempts, then the answer: 7 requests, 6 retries, no failed job
    assert (client.usage.requests, client.usage.retries, client.usage.failures) == (7, 6, 0)
    # tokens of every JSON answer the client read: "empty" (prompt 1 word, completion "" billed as 1),
    # "no choices" (1 + the 4 words of the reply it carried in its usage) and the answer (1 + 4): 3 and 9;
    # 429/500/garbage have no usage and the hung answer came after the client gave up
    assert (client.usage.prompt_tokens, client.usage.completion_tokens) == (3, 9)
    outcomes = [r.outcome for r in server.requests if r.prompt == "a"]
    assert outcomes[:2] == ["429", "500"] and outcomes[-4:] == ["garbage", "empty", "nochoices", "ok"]
    assert server.requests[-1].body["seed"] == 42 and server.requests[-1].body["temperature"] == 0.7
    assert "max_tokens" not in server.requests[-1].body  # None means: the server's default


def test_exhausted_retries_fail_one_job_and_the_others_finish(server):
    server.script("bad", *[Status(503)] * 3)
    client = ChatClient("m", server.base_url, max_retries=2, **FAST)
    got = run_many(client, [job("ok1"), job("bad"), job("ok2")], concurrency=2)
    assert isinstance(got["bad"], ProviderError) and not isinstance(got["bad"], BudgetExceeded)
    assert "still failing after 3 attempts" in str(got["bad"]) and "HTTP 503" in str(got["bad"])
    assert got["ok1"].text == reply_for("ok1") and got["ok2"].text == reply_for("ok2")
    assert server.count("bad") == 3  # 1 + max_retries, then given up
    assert (client.usage.failures, client.usage.retries, client.usage.requests) == (1, 2, 5)


def test_empty_content_every_time_is_a_failure_never_an_empty_result(server):
    server.script("void", *[Empty()] * 3)
    client = ChatClient("m", server.base_url, max_retries=2, **FAST)
    got = run_many(client, [job("void")])
    assert isinstance(got["void"], ProviderError) and "empty content" in str(got["void"])


def test_a_client_error_is_not_retried(server):
    server.script("q", Status(400, message="max_tokens is too large"))
    client = ChatClient("m", server.base_url, max_retries=5, **FAST)
    got = run_many(client, [job("q")])
    assert "HTTP 400: max_tokens is too large" in str(got["q"])
    assert server.count("q") == 1 and client.usage.retries == 0


def test_a_rejected_key_stops_the_run(server):
    for text in ("k1", "k2", "k3", "k4"):
        server.script(text, Status(401, message="Incorrect API key provided: sk-secret"))
    client = ChatClient("m", server.base_url, api_key="sk-secret", **FAST)
    delivered = []
    with pytest.raises(ProviderError, match="HTTP 401") as info:
        client.complete_many([job(t) for t in ("k1", "k2", "k3", "k4")], concurrency=1,
                             on_result=lambda j, out: delivered.append(out), progress=False)
    assert "sk-secret" not in str(info.value) and "***" in str(info.value)  # the key never shows
    assert delivered == [] and len(server.requests) == 1  # no new request after the first 401


def test_connection_refused_is_a_missing_resource_naming_the_url():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ChatClient("m", f"http://127.0.0.1:{port}/v1", max_retries=2, **FAST)
    with pytest.raises(MissingResourceError) as info:
        run_many(client, [job("a"), job("b")])
    message = str(info.value)
    # nothing ever answered there: no retry (a server that is not started does not start in the next 30 s)
    assert f"http://127.0.0.1:{port}/v1" in message and "connection refused (is the server started?)" in message
    assert "--base-url" in message and info.value.exit_code == 4 and client.stats["retries"] == 0


def test_budget_stops_new_requests_and_keeps_what_finished(server):
    client = ChatClient("m", server.base_url, budget=Budget(max_requests=3), **FAST)
    delivered = []
    with pytest.raises(BudgetExceeded) as info:
        client.complete_many([job(f"q{i}") for i in range(5)], concurrency=1,
                             on_result=lambda j, out: delivered.append(j.messages[-1]["content"]), progress=False)
    assert delivered == ["q0", "q1", "q2"] and len(server.requests) == 3
    assert info.value.pending == 2 and info.value.exit_code == 6
    assert "request budget of 3 spent" in str(info.value) and "2 not sent" in str(info.value)


def test_token_budget(server):
    # each answer bills 1 prompt word + 4 completion words = 5 tokens: after 2 answers (10 >= 9) no more requests
    client = ChatClient("m", server.base_url, budget=Budget(max_tokens=9), **FAST)
    with pytest.raises(BudgetExceeded, match="token budget of 9 spent"):
        run_many(client, [job(f"t{i}") for i in range(4)], concurrency=1)
    assert len(server.requests) == 2


def test_concurrency_is_bounded_and_results_arrive_in_the_calling_thread():
    with ChatServer(latency=0.2) as server:
        client = ChatClient("m", server.base_url, **FAST)
        threads = set()
        client.complete_many([job(f"c{i}") for i in range(12)], concurrency=4, progress=False,
                             on_result=lambda j, out: threads.add(threading.get_ident()))
        assert server.max_in_flight == 4 and len(server.requests) == 12
        assert threads == {threading.get_ident()}


def test_complete_many_from_a_worker_thread_and_from_async_code(server):
    client = ChatClient("m", server.base_url, **FAST)
    seen: dict[str, set[int]] = {"worker": set(), "async": set()}

    def in_worker():
        client.complete_many([job("w1"), job("w2")], on_result=lambda j, o: seen["worker"].add(threading.get_ident()),
                             progress=False)
        seen["worker_thread"] = {threading.get_ident()}

    worker = threading.Thread(target=in_worker)
    worker.start()
    worker.join()
    assert seen["worker"] == seen["worker_thread"]

    async def inside_a_loop():  # e.g. a notebook: the loop runs elsewhere, results still come here
        client.complete_many([job("a1")], on_result=lambda j, o: seen["async"].add(threading.get_ident()),
                             progress=False)

    asyncio.run(inside_a_loop())
    assert seen["async"] == {threading.get_ident()}
    assert server.count() == 3


def test_reasoning_content_is_kept_apart(server):
    server.script("r", Reply("The answer.", reasoning_content="The trace.", finish_reason="stop"))
    client = ChatClient("m", server.base_url, **FAST)
    result = complete_once(client, user("r"), SamplingParams())
    assert (result.text, result.reasoning) == ("The answer.", "The trace.")


def test_a_trace_without_content_is_a_result_not_an_error(server):
    # a reasoning model cut off by max_tokens: no content yet, the trace in reasoning_content
    server.script("long", Reply("", reasoning_content="Let me think...", finish_reason="length"))
    client = ChatClient("m", server.base_url, **FAST)
    result = complete_once(client, user("long"), SamplingParams(max_tokens=5))
    assert (result.text, result.reasoning, result.finish_reason, result.attempts) == ("", "Let me think...", "length", 1)


def test_keys_and_urls(monkeypatch):
    # the one key rule of r2med.http (the embedding encoders' too): a missing key is a missing resource (exit 4)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingResourceError, match="no API key for https://api.example.com/v1: set the environment "
                                                   "variable OPENAI_API_KEY") as info:
        ChatClient("m", "https://api.example.com/v1")
    assert info.value.exit_code == 4
    with pytest.raises(MissingResourceError, match="set the environment variable MY_LLM_KEY"):
        ChatClient("m", "https://api.example.com/v1", api_key_env="MY_LLM_KEY")
    monkeypatch.setenv("MY_LLM_KEY", "sk-mine")
    assert ChatClient("m", "https://api.example.com/v1", api_key_env="MY_LLM_KEY")._secret.reveal() == "sk-mine"
    with pytest.raises(UsageError, match="NAME of an environment variable") as info:
        ChatClient("m", "https://api.example.com/v1", api_key_env="sk-pasted-key-123")
    assert "sk-pasted-key-123" not in str(info.value)
    assert "sk-" not in repr(ChatClient("m", "https://api.example.com/v1", api_key="sk-123"))
    ChatClient("m", "http://localhost:8000/v1")  # a local server needs no key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert ChatClient("m", "https://api.example.com/v1")._secret.reveal() == "sk-env"
    with pytest.raises(UsageError, match="not an http"):
        ChatClient("m", "localhost:8000")
    with pytest.raises(UsageError, match="concurrency must be at least 1"):
        ChatClient("m", "http://localhost:1/v1").complete_many([job("x")], concurrency=0, on_result=print)
