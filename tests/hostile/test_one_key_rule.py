"""One key rule for every request the agent sends to its LLM server (issue 35).

Without ``--api-key-env`` the completions carried ``$OPENAI_API_KEY`` while ``/tokenize``, ``/detokenize``,
``/v1/models`` and ``/props`` carried no key: a server that checks the key on those paths (vLLM's ``--api-key``
guards ``/v1/models``; llama.cpp's guards ``/props`` and ``/tokenize``) refused the context probe, and the token
counts ``search-r1-eval`` cuts by. ``KeyedServer`` is the scripted completion server behind such a check on every
path (401 without ``Authorization: Bearer KEY``, as vLLM answers), 404 for what it lacks (``/props``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from completion_server import CompletionServer

from conftest import DATA

KEY = "sk-r2med-test-0123456789"


class KeyedServer(CompletionServer):
    """The scripted completion server (``max_model_len`` on ``/v1/models``, ``/tokenize``) that answers only requests
    carrying ``Authorization: Bearer <key>``; ``seen`` records ``(method, path, carried the key)`` of each."""

    def __init__(self, key: str, **options: Any) -> None:
        super().__init__(**options)
        self.key = key
        self.seen: list[tuple[str, str, bool]] = []
        owner = self
        inner = self._httpd.RequestHandlerClass

        class Keyed(inner):  # type: ignore[misc, valid-type]
            def _authorised(self) -> bool:
                ok = self.headers.get("Authorization") == f"Bearer {owner.key}"
                owner.seen.append((self.command, self.path, ok))
                if not ok:
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._send(401, {"error": {"message": "Unauthorized", "type": "AuthenticationError",
                                               "code": 401}})
                return ok

            def do_GET(self) -> None:
                if self._authorised():
                    super().do_GET()

            def do_POST(self) -> None:
                if self._authorised():
                    super().do_POST()

        self._httpd.RequestHandlerClass = Keyed


@pytest.fixture
def data(tmp_path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(DATA / "tiny", folder / "Biology")
    return folder


def _agent(cli, server: KeyedServer, data: Path, out: Path, *extra: str):
    return cli("agent", "--protocol", "search-r1-eval", "--llm-model", "test-model", "--chat-template", "chatml",
               "--base-url", server.base_url, "--max-retries", "0", "--timeout", "10", "--data-dir", data,
               "--output", out, "--json", *extra)


@pytest.mark.parametrize("how", ["OPENAI_API_KEY", "--api-key-env"])
def test_every_request_to_the_llm_server_carries_the_completions_key(cli, data, tmp_path, isolated_home,
                                                                     monkeypatch, how):
    if how == "OPENAI_API_KEY":  # the default: the variable the completions' client reads
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        extra: tuple[str, ...] = ()
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("R2MED_TEST_LLM_KEY", KEY)
        extra = ("--api-key-env", "R2MED_TEST_LLM_KEY")
    with KeyedServer(KEY, max_model_len=4096) as server:
        result = _agent(cli, server, data, tmp_path / "out", *extra)
    assert result.code == 0, result.err
    paths = {path for _, path, _ in server.seen}
    assert {"/v1/models", "/tokenize", "/v1/completions"} <= paths
    assert [seen for seen in server.seen if not seen[2]] == []  # every request carried the key
    summary = json.loads((isolated_home / "expansions" / "Biology" / "search-r1" / "test-model" / "summary.json")
                         .read_text())
    assert summary["context"]["length"] == 4096
    assert summary["context"]["source"].startswith("vLLM's /v1/models max_model_len")
    assert summary["context"]["counted_by"].startswith("the server's /tokenize")
    assert KEY not in result.err and KEY not in json.dumps(summary)


def test_llama_cpp_props_is_asked_with_the_key(cli, data, tmp_path, isolated_home, monkeypatch):
    """A server without ``max_model_len`` on ``/v1/models``: the agent asks ``/props`` next, with the key (the
    scripted server 404s it: the budget is off, quietly, and the run goes on)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with KeyedServer(KEY) as server:
        result = _agent(cli, server, data, tmp_path / "out")
    assert result.code == 0, result.err
    assert ("GET", "/props", True) in server.seen
    assert [seen for seen in server.seen if not seen[2]] == []
    assert "Unauthorized" not in result.err


def test_a_remote_llm_server_without_any_key_is_exit_4_before_any_request(cli, data, tmp_path, monkeypatch):
    """The rule's other half: a server that is not local and no key at all is refused before the first request
    (the probes used to go out without one, and the completions then failed)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = cli("agent", "--protocol", "search-r1-eval", "--llm-model", "test-model", "--chat-template", "chatml",
                 "--base-url", "http://llm.example.invalid/v1", "--data-dir", data, "--output", tmp_path / "out")
    assert result.code == 4, result.err
    # found by the plan, before any work (the agent's client refused it when it was built, before any request)
    assert ("agent: no API key for http://llm.example.invalid/v1: set the environment variable OPENAI_API_KEY "
            "(or name another variable with --api-key-env)") in result.err
    assert "Traceback" not in result.err
