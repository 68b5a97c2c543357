"""The factory of local dense encoders: ``make_encoder(spec)`` builds the ``Encoder`` for a ``ModelSpec``.

``sentence-transformers``/``instructor`` -> ``SentenceTransformerEncoder`` (``st_encoders.py``),
``transformers``/``gritlm`` -> ``TransformersEncoder`` and ``nv-embed`` -> ``NVEmbedEncoder``
(``hf_encoders.py``); all share ``encoders.BaseEncoder``. The encoder modules are imported only
when their backend is asked for.
"""

from __future__ import annotations

from r2med.errors import UsageError
from r2med.retrievers.dense.base import Encoder
from r2med.retrievers.dense.zoo import ModelSpec, resolve_model


def make_encoder(
    spec: ModelSpec | str,
    *,
    device: str | None = None,
    batch_size: int | None = None,
    batch_tokens: int | None = None,
    dtype: str | None = None,
    trust_remote_code: bool | None = None,
    compile: bool = False,
) -> Encoder:
    """The local ``Encoder`` for ``spec`` (a ``ModelSpec``, zoo name, directory or hub id).

    ``device``: ``auto`` (default: every visible GPU, else MPS, else the CPU), ``cpu``, ``cuda`` (every visible
    GPU), ``cuda:N``, a list ``cuda:0,cuda:2`` or ``mps``; several devices give a ``MultiDeviceEncoder``, one worker
    process per device (``devices.py``; ``cpu,cpu`` is two CPU workers). ``dtype`` overrides the spec's (half
    precision applies on CUDA only). ``batch_tokens``: padded tokens per batch (default: the spec's on CUDA, at most
    ``encoders.CPU_BATCH_TOKENS`` elsewhere); ``batch_size`` caps the texts of a batch. ``compile``: the forward pass
    under ``torch.compile``, checked against eager on the first batch (``compiled.py``; transformers backend). Remote
    code runs only when the spec or ``trust_remote_code=True`` asks for it.
    """
    if isinstance(spec, str):
        spec = resolve_model(spec)
    options = {"batch_size": batch_size, "batch_tokens": batch_tokens, "dtype": dtype,
               "trust_remote_code": trust_remote_code, "compile": compile}
    wanted = (device or "auto").strip().lower()
    if "," not in wanted and wanted not in ("auto", "cuda"):
        return one_device_encoder(spec, device=device, **options)
    template = one_device_encoder(spec, device=wanted.split(",")[0], **options)  # checks the model, before torch
    from r2med.hf import resolve_devices

    devices = resolve_devices(device)
    if len(devices) == 1:
        return template if devices[0] == template.device else one_device_encoder(spec, device=devices[0], **options)
    from r2med.retrievers.dense.devices import MultiDeviceEncoder

    return MultiDeviceEncoder(template, devices, build=one_device_encoder, options=options)


def one_device_encoder(spec: ModelSpec, *, device: str | None, **options) -> Encoder:
    """The encoder of ``spec`` on one device (the backend's class; nothing is loaded yet)."""
    if spec.backend in ("sentence-transformers", "instructor"):
        from r2med.retrievers.dense.st_encoders import SentenceTransformerEncoder

        return SentenceTransformerEncoder(spec, device=device, **options)
    if spec.backend in ("transformers", "gritlm"):
        from r2med.retrievers.dense.hf_encoders import TransformersEncoder

        return TransformersEncoder(spec, device=device, **options)
    if spec.backend == "nv-embed":
        from r2med.retrievers.dense.hf_encoders import NVEmbedEncoder

        return NVEmbedEncoder(spec, device=device, **options)
    raise UsageError(
        f"model '{spec.name}' is served by an embedding API ({spec.model}); build it with the API embedders "
        "(r2med.retrievers.dense.api), not make_encoder"
    )
