"""Torch and Hugging Face hub helpers shared by the dense encoders and the rerankers.

Importing a heavy package on demand (``require``), picking the device (``resolve_device``) and the
dtype (``effective_dtype``, ``dtype_kwargs``), the hub keywords of ``from_pretrained``
(``hub_kwargs``: revision, offline mode), checking a local model path (``check_model_exists``),
turning a load failure into an exit-4 error (``load_error``) and pinning a model's weights
(``model_fingerprint``). torch, transformers and huggingface_hub are imported only inside functions.

Reaching the hub: before r2med's first request to the hub, ``require_hub`` opens one TCP connection to the
hub's host (or to the proxy that would carry the request), bounded by ``PROBE_TIMEOUT`` seconds, DNS included.
When that fails, the command stops at once with ``HubUnreachableError`` (exit 4) and one line saying what to do,
instead of entering huggingface_hub's retry loop (five retries with backoff per request, ~25 s each, ending in
a traceback of the HTTP client). The answer is kept for ``PROBE_TTL`` seconds, so eight datasets cost one probe.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from r2med.errors import HubUnreachableError, MissingExtraError, MissingResourceError, UsageError

logger = logging.getLogger(__name__)

#: The compute dtypes a model spec or a reranker may ask for.
DTYPES = ("float32", "float16", "bfloat16")

_PACKAGES = {
    "torch": "torch",
    "transformers": "transformers",
    "sentence_transformers": "sentence-transformers",
    "peft": "peft",
}


#: What each extra's packages are needed for, as ``MissingExtraError`` says it.
_PURPOSES = {"dense": "dense retrieval", "rerank": "reranking"}


def require(module: str, extra: str = "dense", purpose: str | None = None) -> Any:
    """Import ``module`` (torch, transformers, sentence_transformers, peft) or raise ``MissingExtraError``.

    The error names the command that installs EXTRA as r2med was installed (``r2med.installed``; ``dense`` by
    default, ``rerank`` for the rerankers) and ``purpose``, what the package is needed for (by default the extra's).
    """
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(_PACKAGES.get(module, module), extra, purpose or _PURPOSES.get(extra, extra)) from exc
    from r2med.io.progress import others_imported

    others_imported()  # a model loaded under r2med's bar draws no bar of its own ("Loading weights", a download)
    return imported


def resolve_device(device: str | None) -> str:
    """``None``/``auto`` -> ``cuda`` if available, else ``mps``, else ``cpu``; checks what is asked for.

    One device: a list (``cuda:0,cuda:2``, which the dense encoders and the local rerankers spread over,
    ``resolve_devices``) names its first here, with a note in the log.
    """
    torch = require("torch")
    wanted = (device or "auto").strip().lower()
    if "," in wanted:
        first = resolve_devices(wanted)[0]
        logger.info("device list %s: this model runs on one device, %s", device, first)
        return first
    if wanted == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    if wanted == "cpu":
        return "cpu"
    if wanted == "cuda" or wanted.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise MissingResourceError(
                f"device '{device}' was asked for, but torch sees no CUDA device; use --device cpu"
            )
        if wanted != "cuda":
            number = wanted[len("cuda:"):]
            if not number.isdigit():
                raise UsageError(f"unknown device '{device}'; valid: auto, cpu, cuda, cuda:N, mps")
            count = torch.cuda.device_count()
            if int(number) >= count:
                raise MissingResourceError(f"device '{device}' was asked for, but torch sees {count} CUDA "
                                           f"device(s): cuda:0 to cuda:{count - 1}")
            wanted = f"cuda:{int(number)}"
        return wanted
    if wanted == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise MissingResourceError("device 'mps' was asked for, but torch sees no MPS device; use --device cpu")
        return "mps"
    raise UsageError(f"unknown device '{device}'; valid: auto, cpu, cuda, cuda:N, mps")


def resolve_devices(device: str | None) -> list[str]:
    """The devices a dense encoder spreads its texts over, one worker process each (``r2med.retrievers.dense.devices``).

    ``cuda`` (and ``auto`` where torch sees CUDA) is every visible GPU (``cuda:0`` ... ``cuda:N-1``; a single one
    stays ``cuda``); a comma-separated list picks (``cuda:0,cuda:2``). A list names devices of one kind, each GPU
    once; ``cpu,cpu`` is two CPU worker processes (the stand-in for GPUs the tests use). Anything else is one device,
    as ``resolve_device`` says.

    >>> resolve_devices("cpu"), resolve_devices(" CPU , cpu ")
    (['cpu'], ['cpu', 'cpu'])
    >>> resolve_devices("cpu,,cpu")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: device list 'cpu,,cpu' has an empty entry; write e.g. cuda:0,cuda:2
    """
    torch = require("torch")
    wanted = (device or "auto").strip().lower()
    parts = [part.strip() for part in wanted.split(",")]
    if not all(parts):
        raise UsageError(f"device list '{device}' has an empty entry; write e.g. cuda:0,cuda:2")
    if len(parts) == 1:
        one = resolve_device(parts[0])
        count = torch.cuda.device_count() if one == "cuda" else 1
        return [f"cuda:{i}" for i in range(count)] if count > 1 else [one]
    if "auto" in parts or "cuda" in parts:
        raise UsageError(f"device list '{device}': name each device of a list (cuda:0,cuda:2 or cpu,cpu); "
                         "cuda alone means every visible GPU")
    devices = [resolve_device(part) for part in parts]
    kinds = sorted({d.split(":")[0] for d in devices})
    if len(kinds) > 1:
        raise UsageError(f"device list '{device}' mixes {' and '.join(kinds)}; a list names devices of one kind")
    twice = sorted({d for d in devices if devices.count(d) > 1 and d != "cpu"})
    if twice:
        raise UsageError(f"device list '{device}' names {', '.join(twice)} twice; name each GPU once")
    return devices


def effective_dtype(dtype: str | None, device: str) -> str:
    """Half precision only on CUDA; float32 everywhere else."""
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"unknown dtype '{dtype}'; valid: {', '.join(DTYPES)}")
    if not device.startswith("cuda"):
        if dtype not in (None, "float32"):
            logger.info("dtype %s is used on CUDA only; computing in float32 on %s", dtype, device)
        return "float32"
    return dtype or "float32"


def torch_dtype(name: str) -> Any:
    return getattr(require("torch"), name)


def dtype_kwargs(name: str) -> dict[str, Any]:
    """``from_pretrained`` keyword for a dtype (``dtype`` since transformers 4.56, ``torch_dtype`` before)."""
    transformers = require("transformers")
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return {key: torch_dtype(name)}


def hub_kwargs(revision: str | None, model: str | None = None) -> dict[str, Any]:
    """``from_pretrained`` keywords for the hub: the revision, and ``local_files_only`` when offline.

    Offline means ``HF_HUB_OFFLINE`` (read now from the settings) or, for ``model`` a hub id (not a local
    directory), a hub that cannot be reached: the model then loads from the local Hugging Face cache without
    a request (``load_error`` says what to do when it is not there).
    """
    from r2med.settings import get_settings

    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    if get_settings().hf_offline:
        kwargs["local_files_only"] = True
    elif model is not None and not is_local(model):
        reason = hub_unreachable()
        if reason is not None:
            logger.info("the hub cannot be reached (%s); loading %s from the local Hugging Face cache only", reason, model)
            kwargs["local_files_only"] = True
    return kwargs


def adapter_kwargs(hub: dict[str, Any]) -> dict[str, Any]:
    """What a *model* ``from_pretrained`` (``AutoModel*``, and sentence-transformers' ``model_kwargs``) needs
    beside ``hub`` (``hub_kwargs``' answer): with ``local_files_only``, the same for transformers' look-up of a
    PEFT adapter, which does not pass it on (transformers 5.x) and would ask the hub for ``adapter_config.json``
    through huggingface_hub's retries.

    >>> adapter_kwargs({"local_files_only": True}), adapter_kwargs({"revision": "abc"})
    ({'adapter_kwargs': {'local_files_only': True}}, {})
    """
    return {"adapter_kwargs": {"local_files_only": True}} if hub.get("local_files_only") else {}


def is_local(model: str) -> bool:
    return Path(model).expanduser().is_dir()


def check_model_exists(model: str, revision: str | None = None) -> None:
    """Fail early, with exit 4, on a local-looking path that is not there, and on a hub id that is not in the
    local Hugging Face cache while the hub cannot be reached (before torch is imported or any work is done)."""
    if is_local(model):
        return
    if model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().exists():
        raise MissingResourceError(f"model directory '{model}' does not exist (or is not a directory)")
    from r2med.settings import get_settings

    if get_settings().hf_offline or in_hf_cache(model, revision):
        return  # offline: loading from the cache says what is missing
    reason = hub_unreachable()
    if reason is not None:
        raise load_error(model, OSError(reason))


#: A file every loadable model has in the cache (transformers, sentence-transformers, a PEFT adapter).
_MODEL_MARKERS = ("config.json", "adapter_config.json", "modules.json")


def in_hf_cache(model: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds ``model`` (a hub id) at ``revision`` (default: main)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return any(isinstance(try_to_load_from_cache(model, name, revision=revision), str) for name in _MODEL_MARKERS)
    except ValueError:  # not a valid hub id (HFValidationError): loading says so
        return True


def load_error(model: str, exc: BaseException) -> MissingResourceError:
    """A hub miss (offline, unreachable, unknown repo, no access) as an exit-4 error that says what to do."""
    from r2med.settings import get_settings

    if not get_settings().hf_offline and not is_local(model):
        reason = _cached_probe()
        if reason is not None:
            return unreachable_error(
                reason, f"download model '{model}' (not in the local Hugging Face cache)",
                f"download it where there is one ('hf download {model}') and copy the cache over, or pass the "
                "path of a local copy",
            )
    if get_settings().hf_offline and not is_local(model):  # transformers' own advice is about its own settings
        why = "HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache"
    else:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return MissingResourceError(
        f"cannot load model '{model}': {why}; if it is a Hugging Face id, download it while online "
        f"('hf download {model}') or unset HF_HUB_OFFLINE; or pass the path of a local copy"
    )


# -- can the hub be reached? ----------------------------------------------------------------------------------

#: Seconds one probe of the hub may take, name lookup and TCP connect together.
PROBE_TIMEOUT = 5.0
#: Seconds a probe's answer is reused before the hub is probed again.
PROBE_TTL = 60.0

_probes: dict[tuple[str, int], tuple[float, str | None]] = {}  # (host, port) -> (monotonic time, failure or None)
_probes_lock = threading.Lock()


def hub_endpoint() -> str:
    """The hub's base URL as huggingface_hub uses it (``HF_ENDPOINT``, default https://huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def probe_target(endpoint: str) -> tuple[str, int, str]:
    """``(host, port, description)`` of the first connection a request to ``endpoint`` opens: its host, or
    the proxy the environment names for it (``HTTPS_PROXY``, ``ALL_PROXY``, unless ``NO_PROXY`` covers it),
    as httpx and requests choose it.
    """
    import urllib.request

    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_parts.hostname:
            default = 443 if proxy_parts.scheme == "https" else 1080 if proxy_parts.scheme.startswith("socks") else 80
            return proxy_parts.hostname, proxy_parts.port or default, f"proxy {proxy_parts.hostname}:{proxy_parts.port or default}"
    shown = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    return host, port, shown


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


def connect_once(host: str, port: int, timeout: float) -> str | None:
    """Open (and close) one TCP connection to ``host:port``; ``None`` when it worked, else why not.

    The name lookup cannot be given a timeout, so the attempt runs in a daemon thread that is waited for
    ``timeout`` seconds at most.
    """
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as exc:
            outcome.append(_describe(exc))

    worker = threading.Thread(target=attempt, name="r2med-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def _fresh_probe(host: str, port: int) -> tuple[float, str | None] | None:
    """The last probe of ``host:port`` (its time and failure) while it is fresh, else None."""
    with _probes_lock:
        entry = _probes.get((host, port))
    return entry if entry is not None and time.monotonic() - entry[0] < PROBE_TTL else None


def _cached_probe() -> str | None:
    """The last probe's failure if it is still fresh (``None``: reachable, or not probed recently)."""
    entry = _fresh_probe(*probe_target(hub_endpoint())[:2])
    return entry[1] if entry is not None else None


def hub_unreachable() -> str | None:
    """Why the hub cannot be reached now (``"https://huggingface.co: gaierror: ..."``), or ``None`` when it can.

    One TCP connection per ``PROBE_TTL`` seconds decides (see the module docstring); nothing is retried.
    ``R2MED_HUB_PROBE=0`` turns the check off (always ``None``: huggingface_hub's own timeouts and retries apply).
    """
    from r2med.settings import get_settings

    if not get_settings().hub_probe:
        return None
    host, port, shown = probe_target(hub_endpoint())
    entry = _fresh_probe(host, port)
    if entry is not None:
        return entry[1]
    failure = connect_once(host, port, PROBE_TIMEOUT)
    reason = None if failure is None else f"{shown}: {failure}"
    with _probes_lock:
        _probes[(host, port)] = (time.monotonic(), reason)
    if reason is not None:
        logger.info("the Hugging Face hub cannot be reached: %s", reason)
    return reason


def unreachable_error(reason: str, what: str, offline: str) -> HubUnreachableError:
    """The one-line exit-4 error: why the hub cannot be reached, for ``what``, and the way on without it.

    >>> str(unreachable_error("https://huggingface.co: gaierror: no name", "download Biology", "use --data-dir DIR"))
    'cannot reach the Hugging Face hub (https://huggingface.co: gaierror: no name) to download Biology: connect a network, or use --data-dir DIR (R2MED_HUB_PROBE=0 skips this check)'
    """
    from r2med.settings import get_settings

    skip = " (R2MED_HUB_PROBE=0 skips this check)" if get_settings().hub_probe else ""  # no hint to do what was done
    return HubUnreachableError(f"cannot reach the Hugging Face hub ({reason}) to {what}: connect a network, or {offline}"
                               f"{skip}")


def require_hub(what: str, offline: str) -> None:
    """Raise ``unreachable_error`` (exit 4) at once when the hub cannot be reached; ``what``: the request
    (``"download R2MED/Biology/corpus.jsonl"``), ``offline``: how to go on without it."""
    reason = hub_unreachable()
    if reason is not None:
        raise unreachable_error(reason, what, offline)


_NETWORK_ERROR_NAMES = frozenset({
    "ConnectError", "ConnectTimeout", "NetworkError", "ReadTimeout", "TimeoutException", "PoolTimeout",
    "RemoteProtocolError", "ProxyError", "NewConnectionError", "MaxRetryError", "ConnectionError",
})


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a failure to connect: an ``OSError`` of the
    socket layer, or the connect/timeout errors of httpx, httpcore, requests and urllib3 (matched by name,
    so that none of them has to be imported).

    >>> is_network_error(ConnectionRefusedError(111, "refused")), is_network_error(ValueError("x"))
    (True, False)
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, socket.gaierror, socket.timeout)):
            return True
        if any(cls.__name__ in _NETWORK_ERROR_NAMES for cls in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


def model_fingerprint(model: str, revision: str | None) -> str | None:
    """What pins a model's weights: the given revision, the cached hub commit, or a local directory digest."""
    if revision:
        return revision
    path = Path(model).expanduser()
    if path.is_dir():
        digest = hashlib.sha256()
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{item.relative_to(path).as_posix()}:{item.stat().st_size}\n".encode())
        config = path / "config.json"
        if config.is_file():
            digest.update(config.read_bytes())
        return "dir:" + digest.hexdigest()[:16]
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a valid hub id (HFValidationError): the key then says "unknown"
        return None
    if isinstance(cached, str) and "/snapshots/" in cached.replace("\\", "/"):
        return cached.replace("\\", "/").split("/snapshots/")[1].split("/")[0]
    return None
