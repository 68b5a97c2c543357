"""Torch and Hugging Face hub helpers shared by the dense encoders and the rerankers.

Importing a heavy package on demand (``require``), picking the device (``resolve_device``) and the
dtype (``effective_dtype``, ``dtype_kwargs``), the hub keywords of ``from_pretrained``
(``hub_kwargs``: revision, offline mode), checking a local model path (``check_model_exists``),
turning a load failure into an exit-4 error (``load_error``) and pinning a model's weights
(``model_fingerprint``). torch, transformers and huggingface_hub are imported only inside functions.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from pathlib import Path
from typing import Any

from r2med.errors import MissingExtraError, MissingResourceError, UsageError

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

    The error names ``pip install "r2med[EXTRA]"`` (``dense`` by default, ``rerank`` for the
    rerankers) and ``purpose``, what the package is needed for (by default the extra's).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(_PACKAGES.get(module, module), extra, purpose or _PURPOSES.get(extra, extra)) from exc


def resolve_device(device: str | None) -> str:
    """``None``/``auto`` -> ``cuda`` if available, else ``mps``, else ``cpu``; checks what is asked for."""
    torch = require("torch")
    wanted = (device or "auto").strip().lower()
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
        return wanted
    if wanted == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise MissingResourceError("device 'mps' was asked for, but torch sees no MPS device; use --device cpu")
        return "mps"
    raise UsageError(f"unknown device '{device}'; valid: auto, cpu, cuda, cuda:N, mps")


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


def hub_kwargs(revision: str | None) -> dict[str, Any]:
    """``from_pretrained`` keywords for the hub: the revision, and offline mode read now from the settings."""
    from r2med.settings import get_settings

    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    if get_settings().hf_offline:
        kwargs["local_files_only"] = True
    return kwargs


def is_local(model: str) -> bool:
    return Path(model).expanduser().is_dir()


def check_model_exists(model: str) -> None:
    """Fail early, with exit 4, on a local-looking path that is not there."""
    if is_local(model):
        return
    if model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().exists():
        raise MissingResourceError(f"model directory '{model}' does not exist (or is not a directory)")


def load_error(model: str, exc: BaseException) -> MissingResourceError:
    """A hub miss (offline, unknown repo, no access) as an exit-4 error that says what to do."""
    return MissingResourceError(
        f"cannot load model '{model}': {exc}\n"
        "If it is a Hugging Face id, download it while online (huggingface-cli download) or unset "
        "HF_HUB_OFFLINE; or pass the path of a local copy."
    )


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
