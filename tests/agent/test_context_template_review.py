"""Review of the context budget and the model's own chat template (issue 23 items 3, 4) as a hostile user:

- a stored agent result is keyed by the context it ran under (``--context-length`` or the server's): the context
  clamps ``max_tokens`` and ends queries ``context-full``, so a result made under another one is not reused;
- a model's chat template is untrusted input: one that does not compile or fails while rendering is a one-line
  exit-5 error naming its file, found before any request; it is rendered in a sandbox only with a jinja2 that has
  no known sandbox escape (>= 3.1.6, as transformers asks), and ``namespace(_x=...)`` is refused as transformers
  refuses it.
"""

from __future__ import annotations

import json

import pytest
from completion_server import CompletionServer

from conftest import DATA
from r2med.agent.loop import AgentConfig
from r2med.agent.templates import model_chat_template, require_jinja2, resolve_template
from r2med.config import AgentSpec, PipelineSpec
from r2med.errors import InvalidInputError, MissingExtraError
from r2med.pipeline import run_pipeline

SYSTEM = "agent/search-r1/test-model/bm25"


# ---------------------------------------------------------------------------------- the context keys the result
@pytest.fixture
def biology(tmp_path):
    data = tmp_path / "data"
    (data / "Biology").mkdir(parents=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (data / "Biology" / name).write_bytes((DATA / "tiny" / name).read_bytes())
    return data


def _run(server, data, out, **kwargs):
    config = AgentConfig(protocol="search-r1-infer", llm_model="test-model", base_url=server.base_url,
                         chat_template="chatml", concurrency=1, max_retries=0, **kwargs)
    (outcome,) = run_pipeline(PipelineSpec(agent=AgentSpec(config), data_dir=data, output=out), progress=False)[SYSTEM]
    manifest = json.loads((out / SYSTEM / "Biology.manifest.json").read_text())
    return outcome, manifest


def test_a_result_made_under_another_context_is_not_reused(biology, tmp_path, isolated_home):
    """Every prompt of the tiny set is longer than 200 tokens (its Search-R1 instructions alone are ~600
    characters, one token each on the scripted server): under a 200-token context every query ends context-full
    before its first request; without one, every query gets an answer or no-answer. A stored result of one must
    never stand for the other."""
    out = tmp_path / "out"
    with CompletionServer() as free:  # no context known (its /v1/models answers 404)
        first, stored = _run(free, biology, out)
    assert not first.reused and free.requests
    assert "context-full" not in stored["details"]["agent"]["stop_reasons"]
    queries, first_reasons = stored["details"]["agent"]["queries"], stored["details"]["agent"]["stop_reasons"]

    with CompletionServer() as given:  # --context-length 200: another result
        second, stored = _run(given, biology, out, context_length=200)
    assert not second.reused and given.requests == []  # no prompt fits: nothing is sent
    assert stored["details"]["agent"]["stop_reasons"] == {"context-full": queries}

    with CompletionServer(max_model_len=200) as learned:  # the same 200 tokens, learned from vLLM's /v1/models
        third, _ = _run(learned, biology, out)
    assert third.reused and learned.requests == []  # the same context: the same result

    with CompletionServer(max_model_len=100_000) as large:  # a context that clamps nothing: the first run's result,
        fourth, stored = _run(large, biology, out)  # made again from the response cache (the same requests)
    assert not fourth.reused and large.requests == []
    assert stored["details"]["agent"]["stop_reasons"] == first_reasons


# ---------------------------------------------------------------------------------- a template is untrusted input
def _model(tmp_path, template, name="m"):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "bos_token": "<s>"}))
    model_chat_template.cache_clear()
    return directory


@pytest.mark.parametrize(("template", "why"), [
    ("{% for m in messages %}{{ m['content'] }", "unexpected '}'"),  # does not compile
    ("{{ 1 / 0 }}", "division by zero"),  # fails while rendering, outside jinja2's own errors
    ("{{ messages[0]['content'] + 1 }}", "can only concatenate str"),
])
def test_a_broken_template_is_one_line_naming_its_file_before_any_request(tmp_path, template, why):
    directory = _model(tmp_path, template)
    where = str(directory / "tokenizer_config.json")
    with pytest.raises(InvalidInputError) as caught:
        model_chat_template(str(directory)).wrap("Hi")
    assert caught.value.exit_code == 5 and where in str(caught.value) and why in str(caught.value)
    assert "--chat-template NAME" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(InvalidInputError, match=why):  # found when the template is chosen, before the run
        resolve_template(str(directory), None)


def test_a_namespace_attribute_with_an_underscore_is_refused_as_transformers_refuses_it(tmp_path):
    directory = _model(tmp_path, "{% set ns = namespace(_secret=1) %}ok")
    with pytest.raises(InvalidInputError, match="_secret"):
        model_chat_template(str(directory)).wrap("Hi")


def test_jinja2_with_known_sandbox_escapes_is_refused(tmp_path, monkeypatch):
    import jinja2

    monkeypatch.setattr(jinja2, "__version__", "3.1.5")  # CVE-2025-27516: |attr escapes the sandbox before 3.1.6
    with pytest.raises(MissingExtraError) as caught:
        require_jinja2("rendering a chat template")
    assert caught.value.exit_code == 3 and "3.1.5" in str(caught.value) and "3.1.6" in str(caught.value)
    directory = _model(tmp_path, "{{ messages[0]['content'] }}")
    with pytest.raises(MissingExtraError):
        resolve_template(str(directory), None)
    monkeypatch.setattr(jinja2, "__version__", "3.1.6")
    assert require_jinja2("x") is jinja2


def test_the_template_key_covers_the_special_tokens_it_renders(tmp_path):
    """Zephyr's template writes ``eos_token`` after the user's turn: a checkpoint with the same template and another
    ``eos_token`` (a fine-tune's) gets another prompt, so it must not share the first one's key (stored results)."""
    template = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] + eos_token }}\n{% endfor %}<|assistant|>\n"
    first, second = (tmp_path / "a", tmp_path / "b")
    for directory, eos in ((first, "</s>"), (second, "<|im_end|>")):
        directory.mkdir()
        (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": eos}))
    model_chat_template.cache_clear()
    a, b = model_chat_template(str(first)), model_chat_template(str(second))
    # (jinja2 drops the template's last newline)
    assert a.wrap("Hi") == "<|user|>\nHi</s>\n<|assistant|>" and b.wrap("Hi") == "<|user|>\nHi<|im_end|>\n<|assistant|>"
    assert a.name != b.name and a.name.startswith("model:") and b.name.startswith("model:")
    model_chat_template.cache_clear()
    assert model_chat_template(str(first)).name == a.name  # the same files: the same key


# ---------------------------------------------------------------------------------- the bound without a tokenizer
def test_the_byte_bound_holds_for_tokenizers_that_normalize_unicode():
    """Qwen2's tokenizer normalizes NFC before its byte-level BPE; NFC decomposes "composition exclusions" such as
    U+FB2C (HEBREW LETTER SHIN WITH DAGESH AND SHIN DOT, 3 UTF-8 bytes) into three characters (6 bytes), and NFKC
    (SentencePiece's nmt_nfkc) turns U+FDFA (3 bytes) into 18 Arabic letters and spaces (33 bytes). A byte-level
    BPE without merges gives one token per byte of the normalized text: the bound must not be below it."""
    tokenizers = pytest.importorskip("tokenizers")
    import unicodedata

    from r2med.agent.tokens import ByteBound

    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    for form, char, normalizer in (("NFC", "\ufb2c", tokenizers.normalizers.NFC()),
                                   ("NFKC", "\ufdfa", tokenizers.normalizers.NFKC())):
        text = "Question: " + char * 100
        assert len(unicodedata.normalize(form, char).encode()) > len(char.encode())  # it grows when normalized
        bpe = tokenizers.Tokenizer(tokenizers.models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))
        bpe.normalizer = normalizer
        bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        true = len(bpe.encode(text).ids)
        assert true == len(unicodedata.normalize(form, text).encode())  # one token per byte, worked out
        assert ByteBound().count(text) >= true, form


# ---------------------------------------------------------------------------------- a hostile server's answers
def test_a_hostile_server_answering_deeply_nested_json_is_ignored_not_a_crash(caplog):
    """``json.loads`` raises RecursionError (not ValueError) on JSON nested 100,000 deep: the server's /v1/models
    and /props answers are then not a context (a warning), and an error body is quoted, never a traceback."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from r2med.agent.context import context_window
    from r2med.http.retry import BadAnswer, error_message, json_object

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(BadAnswer, match="not JSON"):
        json_object(deep)
    assert error_message(deep, limit=20) == "[" * 20 + "..."

    class Hostile(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = deep.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert context_window(f"http://127.0.0.1:{server.server_address[1]}/v1", "m", timeout=30) is None
    finally:
        server.shutdown()
        server.server_close()
    assert caplog.text.count("answer is not JSON") == 2  # /v1/models, then /props
