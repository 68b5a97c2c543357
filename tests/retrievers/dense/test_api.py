"""Embedding-API encoders against a real local HTTP server (``embedding_server.py``), no network.

Vectors are checked against the server's deterministic ones, in input order across batches and
concurrent requests; retries, waits and failures against what the server was told to do; the
API key against every place it must never appear.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import types

import numpy as np
import pytest
from embedding_server import Drop, EmbeddingServer, Fail, Malformed, Sleep, expected_embedding, usage_tokens

from r2med.errors import MissingResourceError, ProviderError, UsageError
from r2med.retrievers.dense.api import OpenAIEmbeddings, VoyageEmbeddings
from r2med.retrievers.dense.api_text import r2med_text
from r2med.retrievers.dense.base import Encoder

SECRET = "sk-test-SECRET-0123456789abcdef"
TEXTS = [f"text number {i} about topic {i % 5}" for i in range(23)]


@pytest.fixture
def server():
    srv = EmbeddingServer(dim=8, api_key=SECRET).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("VOYAGE_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def make(server: EmbeddingServer, cls=OpenAIEmbeddings, model: str = "test-model", **options) -> OpenAIEmbeddings:
    defaults = {"base_url": server.url, "backoff_base": 0.01, "backoff_max": 0.05, "timeout": 5}
    return cls(model, **{**defaults, **options})


def expected(texts, dim=8, instruction=""):
    return np.stack([expected_embedding(instruction + t, dim) for t in texts]).astype(np.float32)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text


# -- vectors, order, batching ---------------------------------------------------------------------


def test_is_an_encoder_and_hides_the_key(server):
    enc = make(server)
    assert isinstance(enc, Encoder)
    assert enc.name == "openai/test-model"
    assert_no_secret(repr(enc), str(enc.__dict__), json.dumps(enc.cache_key("query")), repr(enc.stats))


def test_vectors_in_input_order_across_batches_and_concurrency(server):
    # Batches take different times, so they finish out of order; the server also lists each
    # batch's embeddings in reverse order.
    server.delay = lambda inputs: (sum(map(ord, inputs[0])) % 5) * 0.01
    enc = make(server, batch_size=3, max_concurrency=4)
    got = enc.encode(TEXTS, kind="document")
    assert got.dtype == np.float32 and got.shape == (23, 8)
    np.testing.assert_allclose(got, expected(TEXTS), atol=1e-6)
    assert all(len(batch) <= 3 for batch in server.inputs)
    assert sorted(t for batch in server.inputs for t in batch) == sorted(TEXTS)
    assert server.max_in_flight <= 4
    assert enc.stats == {
        "requests": 8, "retries": 0, "waited_s": 0, "tokens": sum(usage_tokens(t) for t in TEXTS),
        "texts": 23, "batches": 8, "truncated": 0,
    }


def test_sequential_and_concurrent_agree(server):
    one = make(server, batch_size=4, max_concurrency=1).encode(TEXTS, kind="query")
    many = make(server, batch_size=4, max_concurrency=3).encode(TEXTS, kind="query", batch_size=2)
    np.testing.assert_array_equal(one, many)
    assert len(server.requests) == 6 + 12


def test_request_shape_instruction_and_dimensions(server):
    enc = make(server, dimensions=4)
    got = enc.encode(["a b", "c"], kind="query", instruction="Represent: ")
    body = server.requests[0].body
    assert body == {"model": "test-model", "input": ["Represent: a b", "Represent: c"], "encoding_format": "float", "dimensions": 4}
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert server.requests[0].path == "/v1/embeddings"
    np.testing.assert_allclose(got, expected(["a b", "c"], dim=4, instruction="Represent: "), atol=1e-6)


def test_vectors_are_normalised_even_when_the_server_does_not(server):
    server.scale = 3.0
    got = make(server).encode(TEXTS[:5], kind="document")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, expected(TEXTS[:5]), atol=1e-6)


def test_token_budget_splits_batches(server):
    texts = ["x" * 30] * 7  # 10 estimated tokens each (3 characters per token)
    make(server, batch_size=100, max_batch_tokens=25).encode(texts, kind="document")
    assert sorted(len(batch) for batch in server.inputs) == [1, 2, 2, 2]


def test_empty_input_and_empty_text(server):
    enc = make(server, dimensions=4)
    assert make(server).encode([], kind="query").shape == (0, 0)
    assert enc.encode([], kind="query").shape == (0, 4)
    assert not server.requests
    got = enc.encode(["", "b"], kind="document")  # the server rejects "" as OpenAI does
    assert server.inputs == [[" ", "b"]]
    np.testing.assert_allclose(got, expected([" ", "b"], dim=4), atol=1e-6)


def test_bad_kind_is_a_usage_error(server):
    with pytest.raises(UsageError, match="kind"):
        make(server).encode(["a"], kind="passage")


def test_progress_bar_runs(server, capsys):
    got = make(server, batch_size=5).encode(TEXTS, kind="document", progress=True)
    assert got.shape == (23, 8)


def test_r2med_preprocessing_sends_what_the_official_code_sent(server):
    text = 'first line\nsecond "quoted" caf\u00e9'
    enc = make(server, preprocess="r2med")
    got = enc.encode([text], kind="document")
    assert server.inputs == [[r2med_text(text)]] == [['"first line second \\"quoted\\" caf\\u00e9"']]
    np.testing.assert_allclose(got[0], expected_embedding(r2med_text(text), 8), atol=1e-6)
    assert enc.cache_key("document")["preprocess"] == "r2med"


# -- truncation -----------------------------------------------------------------------------------


def test_long_texts_are_truncated_counted_and_logged_once(server, caplog):
    caplog.set_level(logging.DEBUG)
    enc = make(server, max_input_tokens=10)  # tiktoken is unused for an unknown model: 3 chars/token
    long_text = "abcdefghij" * 10
    enc.encode(["short", long_text], kind="document", instruction="I: ")
    assert server.inputs[0] == ["I: short", ("I: " + long_text)[:30]]
    assert enc.stats["truncated"] == 1
    enc.encode([long_text, long_text], kind="document")
    assert server.inputs[1] == [long_text[:30]] * 2
    assert enc.stats["truncated"] == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "truncated" in r.getMessage()]
    assert len(warnings) == 1 and "1 of 2 texts" in warnings[0].getMessage()
    assert enc.cache_key("document")["max_input_tokens"] == 10


# -- retries and failures -------------------------------------------------------------------------


def test_two_429_then_success(server):
    server.fail(429, times=2)
    enc = make(server)
    got = enc.encode(TEXTS[:3], kind="query")
    np.testing.assert_allclose(got, expected(TEXTS[:3]), atol=1e-6)
    assert len(server.requests) == 3
    assert enc.stats["retries"] == 2 and enc.stats["requests"] == 3 and enc.stats["batches"] == 1


@pytest.mark.parametrize(("headers", "wait"), [({"retry_after": "0.05"}, 0.05), ({"retry_after_ms": "30"}, 0.03)])
def test_retry_after_is_honoured(server, headers, wait):
    server.enqueue(Fail(429, **headers))
    enc = make(server, backoff_base=5.0, backoff_max=5.0)  # an ignored Retry-After would wait >= 2.5 s
    enc.encode(["a"], kind="query")
    assert enc.stats["waited_s"] == pytest.approx(wait)
    first, second = server.requests
    assert second.at - first.at >= wait * 0.9


def test_backoff_without_retry_after_is_bounded(server):
    server.fail(503, times=3)
    enc = make(server, backoff_base=0.01, backoff_max=0.02)
    enc.encode(["a"], kind="query")
    # equal jitter: each wait is between half and all of min(cap, base * 2**attempt)
    assert 0.005 + 0.01 + 0.01 <= enc.stats["waited_s"] <= 0.01 + 0.02 + 0.02


def test_5xx_are_retried(server):
    server.enqueue(Fail(500), Fail(502), Fail(503))
    enc = make(server)
    enc.encode(["a", "b"], kind="document")
    assert enc.stats["retries"] == 3 and len(server.requests) == 4


def test_persistent_500_ends_in_provider_error(server):
    server.fail(500, times=10)
    enc = make(server, max_retries=3)
    with pytest.raises(ProviderError) as info:
        enc.encode(["a"], kind="query")
    assert info.value.exit_code == 6
    assert "4 attempts" in str(info.value) and "injected failure 500" in str(info.value)
    assert len(server.requests) == 4 and enc.stats["retries"] == 3


def test_401_fails_at_once_and_never_shows_the_key(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with EmbeddingServer(api_key="the-right-key") as srv:
        enc = make(srv)
        with pytest.raises(ProviderError) as info:
            enc.encode(["a"], kind="query")
        assert len(srv.requests) == 1 and enc.stats["retries"] == 0
        assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"  # it was sent ...
    message = str(info.value)
    assert "HTTP 401" in message and "Incorrect API key provided: ***" in message and "OPENAI_API_KEY" in message
    assert_no_secret(message, repr(info.value), str(info.value.args), caplog.text, repr(enc))  # ... and never shown


def test_key_never_logged_during_retries(server, caplog):
    caplog.set_level(logging.DEBUG)
    server.enqueue(Fail(429, body={"error": {"message": f"slow down, {SECRET}"}}), Fail(500))
    enc = make(server)
    enc.encode(["a"], kind="query")
    assert "retry 1/6" in caplog.text and "***" in caplog.text
    assert_no_secret(caplog.text)


def test_other_4xx_fail_at_once_with_the_server_message(server):
    server.enqueue(Fail(404, body={"error": {"message": "The model `nope` does not exist"}}))
    with pytest.raises(ProviderError, match="HTTP 404: The model `nope` does not exist"):
        make(server).encode(["a"], kind="query")
    assert len(server.requests) == 1


def test_quota_429_is_not_retried(server):
    server.enqueue(Fail(429, body={"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}))
    with pytest.raises(ProviderError, match="exceeded your current quota"):
        make(server).encode(["a"], kind="query")
    assert len(server.requests) == 1


def test_too_long_retry_after_fails(server):
    server.enqueue(Fail(429, retry_after="3600"))
    with pytest.raises(ProviderError, match="asks to wait 3600 s"):
        make(server).encode(["a"], kind="query")
    assert len(server.requests) == 1


def test_timeout_is_retried(server):
    server.enqueue(Sleep(5.0))
    enc = make(server, timeout=0.5)
    got = enc.encode(["a"], kind="query")
    np.testing.assert_allclose(got, expected(["a"]), atol=1e-6)
    assert enc.stats["retries"] == 1 and len(server.requests) == 2


def test_timeouts_exhaust_retries(server):
    server.enqueue(Sleep(3.0), Sleep(3.0))
    with pytest.raises(ProviderError, match="timed out after 0.2 s"):
        make(server, timeout=0.2, max_retries=1).encode(["a"], kind="query")


def test_dropped_connection_is_retried(server):
    server.enqueue(Drop())
    enc = make(server)
    enc.encode(["a"], kind="query")
    assert enc.stats["retries"] == 1 and len(server.requests) == 2


def test_malformed_json_is_retried_then_fails(server):
    # the one policy of r2med.http (chat's and completions' too): a 2xx answer that is not JSON is retried
    server.enqueue(Malformed())
    enc = make(server)
    np.testing.assert_allclose(enc.encode(["a"], kind="query"), expected(["a"]), atol=1e-6)
    assert enc.stats["retries"] == 1 and len(server.requests) == 2
    server.enqueue(Malformed(), Malformed())
    with pytest.raises(ProviderError, match="still failing after 2 attempts .* not JSON") as info:
        make(server, max_retries=1).encode(["a"], kind="query")
    assert info.value.exit_code == 6 and len(server.requests) == 4


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"data": []}, "returned 0 embeddings for 2 inputs"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}, "repeated index 0"),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]}, "different widths"),
        ({"data": [{"index": 0, "embedding": "nan?"}, {"index": 1, "embedding": None}]}, "embedding"),
    ],
)
def test_answers_that_do_not_fit_are_provider_errors(server, body, problem):
    server.enqueue(Fail(200, body=body), Fail(200, body=body))  # retried as a 5xx is: twice, then given up
    with pytest.raises(ProviderError, match=problem) as info:
        make(server, max_retries=1).encode(["a", "b"], kind="query")
    assert "still failing after 2 attempts" in str(info.value) and len(server.requests) == 2


def test_a_failing_batch_stops_the_others(server):
    server.delay = 0.05
    server.enqueue(Fail(400, body={"error": {"message": "bad input"}}))
    with pytest.raises(ProviderError, match="bad input"):
        make(server, batch_size=1, max_concurrency=2).encode(TEXTS, kind="document")
    assert len(server.requests) < len(TEXTS)


def test_unreachable_server_is_a_missing_resource():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    enc = OpenAIEmbeddings("m", base_url=f"http://127.0.0.1:{port}/v1", backoff_base=0.01)
    with pytest.raises(MissingResourceError, match=f"cannot reach http://127.0.0.1:{port}/v1/embeddings") as info:
        enc.encode(["a"], kind="query")
    # nothing ever answered there: one attempt, one line, exit 4 (chat and completions do the same)
    assert info.value.exit_code == 4 and "connection refused (is the server started?)" in str(info.value)
    assert enc.stats["requests"] == 1 and enc.stats["retries"] == 0


# -- keys and configuration -----------------------------------------------------------------------


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("VOYAGE_API_KEY")
    with pytest.raises(MissingResourceError, match="set the environment variable OPENAI_API_KEY") as info:
        OpenAIEmbeddings("text-embedding-3-large")
    assert info.value.exit_code == 4
    with pytest.raises(MissingResourceError, match="VOYAGE_API_KEY"):
        VoyageEmbeddings()
    with pytest.raises(MissingResourceError, match="MY_KEY"):
        OpenAIEmbeddings("m", base_url="https://example.org/v1", api_key_env="MY_KEY")


def test_local_server_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with EmbeddingServer() as srv:
        got = make(srv).encode(["a"], kind="query")
        assert "authorization" not in srv.requests[0].headers
    np.testing.assert_allclose(got, expected(["a"]), atol=1e-6)


def test_a_key_passed_as_the_variable_name_is_not_echoed():
    with pytest.raises(UsageError, match="NAME of an environment variable") as info:
        OpenAIEmbeddings("m", api_key_env=SECRET)
    assert_no_secret(str(info.value))


def test_base_url_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    enc = OpenAIEmbeddings("m", backoff_base=0.01)
    enc.encode(["a"], kind="query")
    assert len(server.requests) == 1
    assert enc.cache_key("query")["host"] == f"127.0.0.1:{server.port}"


def test_bad_options_are_usage_errors():
    for options in ({"batch_size": 0}, {"max_concurrency": 0}, {"dimensions": -1}, {"base_url": "ftp://x"}, {"preprocess": "odd"}):
        with pytest.raises(UsageError):
            OpenAIEmbeddings("m", **{"base_url": "http://localhost:1/v1", **options})


def test_cache_key(server):
    enc = make(server, dimensions=4, max_input_tokens=6000)
    key = enc.cache_key("query")
    assert key == {
        "provider": "openai", "host": f"127.0.0.1:{server.port}", "model": "test-model", "dimensions": 4,
        "max_input_tokens": 6000, "tokenizer": "chars/3", "preprocess": "plain", "normalize": True, "dtype": "float32",
    }
    assert enc.cache_key("document") == key
    assert_no_secret(json.dumps(key))


# -- Voyage ---------------------------------------------------------------------------------------


def test_voyage_sends_input_type_from_kind(server):
    enc = make(server, VoyageEmbeddings, model="voyage-3", batch_size=2)
    queries = enc.encode(["q1", "q2", "q3"], kind="query")
    docs = enc.encode(["d1"], kind="document")
    assert [r.body["input_type"] for r in server.requests] == ["query", "query", "document"]
    assert all(r.body["model"] == "voyage-3" and "encoding_format" not in r.body for r in server.requests)
    np.testing.assert_allclose(queries, expected(["q1", "q2", "q3"]), atol=1e-6)
    np.testing.assert_allclose(docs, expected(["d1"]), atol=1e-6)
    assert enc.stats["tokens"] == 4 and enc.name == "voyage/voyage-3"
    assert enc.cache_key("query")["input_type"] == "query"
    assert enc.cache_key("document")["input_type"] == "document"
    assert enc.cache_key("query")["provider"] == "voyage"


def test_voyage_dimensions_and_no_input_type(server):
    enc = make(server, VoyageEmbeddings, model="voyage-3-large", dimensions=4, use_input_type=False)
    got = enc.encode(["a"], kind="query")
    assert server.requests[0].body == {"model": "voyage-3-large", "input": ["a"], "output_dimension": 4}
    assert got.shape == (1, 4)
    assert enc.cache_key("query")["input_type"] is None


def test_voyage_retries_like_openai(server):
    server.fail(429, times=1, retry_after="0")
    server.fail(503, times=1)
    enc = make(server, VoyageEmbeddings)
    enc.encode(["a"], kind="document")
    assert enc.stats["retries"] == 2 and len(server.requests) == 3


# -- token counting with tiktoken (a stand-in module: the real one downloads its encodings) ------


class _CharEncoding:
    """One token per character, like a tiktoken ``Encoding``."""

    name = "fake_bpe"

    def encode(self, text, disallowed_special=None):
        assert disallowed_special == ()  # special-token text in a document must not raise
        return [ord(c) for c in text]

    def decode(self, tokens):
        return "".join(map(chr, tokens))


def fake_tiktoken(behaviour):
    module = types.ModuleType("tiktoken")

    def encoding_for_model(model):
        if behaviour == "unknown":
            raise KeyError(model)
        if behaviour == "offline":
            raise ConnectionError("cannot download cl100k_base")
        return _CharEncoding()

    module.encoding_for_model = encoding_for_model
    return module


def test_tiktoken_counts_and_cuts_when_it_knows_the_model(server, monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", fake_tiktoken("ok"))
    enc = make(server, max_input_tokens=5)
    enc.encode(["abcdefgh", "abc"], kind="document")
    assert server.inputs == [["abcde", "abc"]]
    assert enc.cache_key("document")["tokenizer"] == "tiktoken:fake_bpe"
    assert make(server, VoyageEmbeddings).cache_key("query")["tokenizer"] == "chars/3"  # Voyage: never tiktoken


@pytest.mark.parametrize("behaviour", ["unknown", "offline"])
def test_tiktoken_falls_back_to_the_estimate(server, monkeypatch, caplog, behaviour):
    monkeypatch.setitem(sys.modules, "tiktoken", fake_tiktoken(behaviour))
    enc = make(server)
    assert enc.cache_key("query")["tokenizer"] == "chars/3"
    assert ("estimating 3 characters per token" in caplog.text) == (behaviour == "offline")


def test_run_with_any_openai_compatible_embeddings_server(server, monkeypatch, cli, tmp_path):
    # --retriever openai:<model id>: the id goes to $OPENAI_BASE_URL's /embeddings (vLLM, TEI, ...)
    from conftest import DATA

    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    result = cli("run", "--retriever", "openai:Org/Embed-1", "--data-dir", DATA / "tiny", "--output", tmp_path,
                 "--query-instruction", "Q: ", "--json")
    assert result.code == 0, result.err
    assert {r.body["model"] for r in server.requests} == {"Org/Embed-1"}
    sent = [t for r in server.requests for t in r.inputs]
    assert "Q: what lowers a fever" in sent and "aspirin reduces fever and pain" in sent
    assert (tmp_path / "base retriever" / "Org__Embed-1" / "tiny.json").is_file()
    assert cli("run", "--retriever", "openai:", "--data-dir", DATA / "tiny", "--output", tmp_path).code == 2


def test_concurrency_reaches_the_openai_compatible_encoder(server, monkeypatch):
    # a server with N copies of the model (vLLM --data-parallel-size N) is busy only with N requests in flight
    from r2med.retrievers.registry import RetrieverSpec, make_retriever

    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    assert make_retriever("openai:Org/Embed-1", cache_dir=None).encoder.max_concurrency == 4
    assert make_retriever("openai:Org/Embed-1:concurrency=16", cache_dir=None).encoder.max_concurrency == 16
    spec = RetrieverSpec.parse("openai:Org/Embed-1", given={"concurrency": 8})  # --concurrency 8
    assert make_retriever(spec, cache_dir=None).encoder.max_concurrency == 8
