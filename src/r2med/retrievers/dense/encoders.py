"""Local dense encoders: the shared batching loop, device and dtype rules, and the factory.

``make_encoder(spec)`` builds the ``Encoder`` (see ``base.py``) for a ``ModelSpec``:
``sentence-transformers``/``instructor`` -> ``SentenceTransformerEncoder`` (``st_encoders.py``),
``transformers``/``gritlm`` -> ``TransformersEncoder`` and ``nv-embed`` -> ``NVEmbedEncoder``
(``hf_encoders.py``). Every encoder sorts its texts by length (longest first) so batches carry
little padding, and returns rows in input order. Models load lazily, on first use.

torch, transformers and sentence-transformers are imported only inside functions; a missing one
raises ``MissingExtraError`` naming ``pip install "r2med[dense]"``.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from r2med.errors import MissingExtraError, MissingResourceError, UsageError
from r2med.retrievers.dense.base import Encoder, Kind
from r2med.retrievers.dense.zoo import DTYPES, KINDS, ModelSpec, resolve_model

logger = logging.getLogger(__name__)

#: Bumped whenever a change here changes the vectors of an unchanged spec.
ENCODER_VERSION = 1

_PACKAGES = {"torch": "torch", "transformers": "transformers", "sentence_transformers": "sentence-transformers"}


def require(module: str) -> Any:
    """Import ``module`` (torch, transformers, sentence_transformers) or raise ``MissingExtraError``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(_PACKAGES.get(module, module), "dense", "dense retrieval") from exc


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


def length_sorted_order(texts: Sequence[str]) -> list[int]:
    """Indices of ``texts``, longest first (stable for equal lengths).

    >>> length_sorted_order(["a", "ccc", "bb", "dd"])
    [1, 2, 3, 0]
    """
    return sorted(range(len(texts)), key=lambda i: -len(texts[i]))


class BaseEncoder(ABC):
    """The batching loop shared by the local encoders; subclasses implement ``_encode_batch``."""

    name: str

    def __init__(
        self,
        spec: ModelSpec,
        *,
        device: str | None = None,
        batch_size: int | None = None,
        dtype: str | None = None,
        trust_remote_code: bool | None = None,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        self.spec = spec
        self.name = spec.name
        self.device = resolve_device(device)
        self.dtype = effective_dtype(dtype or spec.dtype, self.device)
        self.autocast = spec.autocast if self.device.startswith("cuda") else None
        self.batch_size = batch_size or spec.batch_size
        self.trust_remote_code = bool(spec.trust_remote_code or trust_remote_code)
        for kind in KINDS:
            check_model_exists(spec.model_for(kind))

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        if kind not in KINDS:
            raise UsageError(f"kind must be 'query' or 'document', got {kind!r}")
        texts = list(texts)
        size = self.batch_size if batch_size is None else batch_size
        if size < 1:
            raise UsageError(f"batch size must be >= 1, got {size}")
        if not texts:
            return np.zeros((0, self.dimension(kind)), dtype=np.float32)
        from tqdm.auto import tqdm

        order = length_sorted_order(texts)
        out: np.ndarray | None = None
        with tqdm(total=len(texts), disable=not progress, desc=f"{self.name} {kind}s", unit="text") as bar:
            for start in range(0, len(order), size):
                rows = order[start : start + size]
                vectors = np.asarray(self._encode_batch([texts[i] for i in rows], kind, instruction), dtype=np.float32)
                if out is None:
                    out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
                out[rows] = vectors
                bar.update(len(rows))
        assert out is not None
        return out

    def cache_key(self, kind: Kind) -> dict[str, Any]:
        spec = self.spec
        model = spec.model_for(kind)
        return {
            "encoder": f"r2med/{ENCODER_VERSION}",
            "model": model,
            "tower": "document" if (kind == "document" and spec.document_model) else "query",
            "revision": model_fingerprint(model, spec.revision_for(kind)),
            "backend": spec.backend,
            "pooling": spec.pooling,
            "max_length": spec.max_length_for(kind),
            "dtype": self.dtype,
            "autocast": self.autocast,
            "normalize": spec.normalize,
            "eos": spec.eos,
            "padding_side": spec.padding_side,
            "prompt_in_pooling": spec.prompt_in_pooling,
            "bidirectional": spec.bidirectional,
            "text_pair": bool(spec.document_pair and kind == "document"),
        }

    @abstractmethod
    def dimension(self, kind: Kind) -> int:
        """The embedding size of the ``kind`` tower."""

    @abstractmethod
    def _encode_batch(self, texts: list[str], kind: Kind, instruction: str) -> np.ndarray:
        """Vectors of one batch, rows in the order of ``texts``."""


def make_encoder(
    spec: ModelSpec | str,
    *,
    device: str | None = None,
    batch_size: int | None = None,
    dtype: str | None = None,
    trust_remote_code: bool | None = None,
) -> Encoder:
    """The local ``Encoder`` for ``spec`` (a ``ModelSpec``, zoo name, directory or hub id).

    ``device``: ``auto`` (default), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``. ``dtype`` overrides
    the spec's (half precision applies on CUDA only). Remote code runs only when the spec or
    ``trust_remote_code=True`` asks for it.
    """
    if isinstance(spec, str):
        spec = resolve_model(spec)
    options = {"device": device, "batch_size": batch_size, "dtype": dtype, "trust_remote_code": trust_remote_code}
    if spec.backend in ("sentence-transformers", "instructor"):
        from r2med.retrievers.dense.st_encoders import SentenceTransformerEncoder

        return SentenceTransformerEncoder(spec, **options)
    if spec.backend in ("transformers", "gritlm"):
        from r2med.retrievers.dense.hf_encoders import TransformersEncoder

        return TransformersEncoder(spec, **options)
    if spec.backend == "nv-embed":
        from r2med.retrievers.dense.hf_encoders import NVEmbedEncoder

        return NVEmbedEncoder(spec, **options)
    raise UsageError(
        f"model '{spec.name}' is served by an embedding API ({spec.model}); build it with the API embedders "
        "(r2med.retrievers.dense.api), not make_encoder"
    )
