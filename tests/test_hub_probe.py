"""r2med.hf's probe of the hub: where it connects, what it answers, how long the answer is kept, and what the
hub helpers do with it (models from the local cache only, one-line errors, connection errors after the probe)."""

from __future__ import annotations

import socket
import threading

import pytest

import r2med.hf
from r2med.errors import HubUnreachableError, MissingResourceError
from r2med.hf import hub_kwargs, hub_unreachable, is_network_error, load_error, probe_target

#: The real probe, kept before conftest's autouse fixture replaces it for every test.
REAL_CONNECT_ONCE = r2med.hf.connect_once
PROXIES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")


@pytest.fixture
def no_proxies(monkeypatch):
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def probes(monkeypatch, no_proxies):
    """connect_once replaced by a recorder answering what ``probes.answer`` holds (None: reachable)."""

    class Recorder(list):
        answer: str | None = "ConnectionRefusedError: [Errno 111] Connection refused"

    calls = Recorder()

    def fake(host, port, timeout):
        calls.append((host, port, timeout))
        return calls.answer

    monkeypatch.setattr(r2med.hf, "connect_once", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    return calls


def test_probe_target_is_the_endpoint_or_its_proxy(monkeypatch, no_proxies):
    assert probe_target("https://huggingface.co") == ("huggingface.co", 443, "https://huggingface.co")
    assert probe_target("http://127.0.0.1:8080") == ("127.0.0.1", 8080, "http://127.0.0.1:8080")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.lan:3128")
    assert probe_target("https://huggingface.co") == ("proxy.lan", 3128, "proxy proxy.lan:3128")
    monkeypatch.setenv("NO_PROXY", "huggingface.co")
    assert probe_target("https://huggingface.co") == ("huggingface.co", 443, "https://huggingface.co")


def test_the_answer_is_kept_then_asked_again(probes, monkeypatch):
    first = hub_unreachable()
    assert first == "https://huggingface.co: ConnectionRefusedError: [Errno 111] Connection refused"
    assert hub_unreachable() == first and len(probes) == 1  # eight datasets, one probe
    assert probes[0] == ("huggingface.co", 443, r2med.hf.PROBE_TIMEOUT)
    monkeypatch.setattr(r2med.hf, "PROBE_TTL", 0.0)
    probes.answer = None
    assert hub_unreachable() is None and len(probes) == 2


def test_connect_once_answers_for_an_open_a_closed_and_a_silent_port(monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert REAL_CONNECT_ONCE("127.0.0.1", port, 5.0) is None
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert REAL_CONNECT_ONCE("127.0.0.1", port, 5.0) == "ConnectionRefusedError: [Errno 111] Connection refused"
    release = threading.Event()

    def hang(*args, **kwargs):  # a name lookup that hangs
        release.wait(10)
        raise OSError("released")

    monkeypatch.setattr(socket, "create_connection", hang)
    try:
        assert REAL_CONNECT_ONCE("huggingface.co", 443, 0.01) == "no answer within 0.01 s"
    finally:
        release.set()


def test_network_errors_are_recognised_through_the_chain():
    class ConnectError(Exception):  # httpx's, by name
        pass

    try:
        try:
            raise ConnectError("[Errno -2] Name or service not known")
        except ConnectError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_network_error(outer)
    assert is_network_error(socket.gaierror(-2, "Name or service not known"))
    assert not is_network_error(ValueError("bad id")) and not is_network_error(FileNotFoundError("x"))


def test_models_load_from_the_local_cache_when_the_hub_is_unreachable(probes, tmp_path):
    assert hub_kwargs("abc", "org/model") == {"revision": "abc", "local_files_only": True}
    assert hub_kwargs(None, str(tmp_path)) == {} and len(probes) == 1  # a local directory: no probe
    error = load_error("org/model", OSError("not in the cache"))
    assert isinstance(error, HubUnreachableError)
    assert str(error) == (
        "cannot reach the Hugging Face hub (https://huggingface.co: ConnectionRefusedError: [Errno "
        "111] Connection refused) to download model 'org/model' (not in the local Hugging Face "
        "cache): connect a network, or download it where there is one ('hf download org/model') and "
        "copy the cache over, or pass the path of a local copy (R2MED_HUB_PROBE=0 skips this check)"
    )


def test_a_reachable_hub_changes_nothing(probes):
    probes.answer = None
    assert hub_kwargs("abc", "org/model") == {"revision": "abc"}
    error = load_error("org/model", OSError("404"))
    assert type(error) is MissingResourceError and "('hf download org/model')" in str(error)
    assert "huggingface-cli" not in str(error)


def test_offline_mode_needs_no_probe(monkeypatch, probes):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_kwargs(None, "org/model") == {"local_files_only": True}
    r2med.hf.check_model_exists("org/model")
    assert probes == []


def test_check_model_exists_fails_before_loading(probes):
    with pytest.raises(HubUnreachableError, match=r"download model 'org/model' \(not in the local Hugging Face"):
        r2med.hf.check_model_exists("org/model")
    probes.answer = None
    r2med.hf._probes.clear()
    r2med.hf.check_model_exists("org/model")  # reachable: loading fetches it


@pytest.mark.parametrize("function", ["fetch_file", "list_files"])
def test_a_connection_error_after_the_probe_is_the_one_line_error(probes, monkeypatch, tmp_path, function):
    """The probe found the hub, then huggingface_hub's client failed to connect (an httpx error is no OSError)."""
    import huggingface_hub

    from r2med.datasets import get_spec, hub
    from r2med.settings import get_settings

    class ConnectError(Exception):
        pass

    def failing(*args, **kwargs):
        raise ConnectError("[Errno 101] Network is unreachable")

    probes.answer = None
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", failing)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", failing)
    spec = get_spec("Biology")
    with pytest.raises(HubUnreachableError) as info:
        if function == "fetch_file":
            hub.fetch_file(spec, "corpus.jsonl", tmp_path, get_settings())
        else:
            hub.list_files(spec, get_settings())
    message = str(info.value)
    assert message.startswith(
        "cannot reach the Hugging Face hub (ConnectError: [Errno 101] Network is unreachable) to "
    )
    assert "\n" not in message and info.value.__cause__ is None


def test_with_the_probe_off_the_error_does_not_offer_to_turn_it_off(monkeypatch):
    from r2med.hf import unreachable_error

    hint = " (R2MED_HUB_PROBE=0 skips this check)"
    assert str(unreachable_error("x: refused", "download Biology", "use --data-dir DIR")).endswith(hint)
    monkeypatch.setenv("R2MED_HUB_PROBE", "0")
    assert str(unreachable_error("x: refused", "download Biology", "use --data-dir DIR")) == (
        "cannot reach the Hugging Face hub (x: refused) to download Biology: connect a network, or use --data-dir DIR")


def test_an_uncached_model_offline_is_one_line_without_transformers_advice(monkeypatch):
    from r2med.hf import load_error

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers_says = OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your internet "
                                "connection or see how to run the library in offline mode at 'https://hf.co/docs'.")
    error = load_error("facebook/contriever-msmarco", transformers_says)
    assert str(error) == (
        "cannot load model 'facebook/contriever-msmarco': HF_HUB_OFFLINE is set and it is not in the local Hugging "
        "Face cache; if it is a Hugging Face id, download it while online ('hf download facebook/contriever-msmarco') "
        "or unset HF_HUB_OFFLINE; or pass the path of a local copy")
    assert error.exit_code == 4
