"""``--compile``: a local encoder's forward pass under ``torch.compile``, checked against eager on its first batch.

``compile_model`` wraps the model with ``torch.compile(model, dynamic=True)``: one graph whose batch size and
length are symbols, so the token-budget batches (each its own shape) do not each compile again (torch still
specialises a batch of one text, or of one token, once each). On CUDA inductor generates Triton kernels; on a CPU,
C++ that it builds with the system's compiler (gcc or clang). Compiling happens on the first call, which takes
seconds for a small model and minutes for an 8B one; it pays off on long encodes only.

The first batch of each model tower runs both ways; ``check_compiled`` compares the two sets of vectors text by
text and stops the run (``CompileMismatchError``, exit 6) when they differ beyond the noise of the dtype the model
computes in (``TOLERANCE``: on the cosine between a text's two vectors and on their lengths). A
compile that fails (inductor cannot build its kernels: no C++ compiler, an unsupported operation) is
``CompileFailedError`` (exit 6) naming the cause. Neither loses anything: the embedding cache keeps what was
finished, and the same command without ``--compile`` goes on from there (compiled and eager vectors are the same
within that noise, so the cache key does not record ``--compile``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from r2med.errors import ProviderError

#: compute dtype -> the largest ``1 - cosine`` between a text's compiled and eager vectors that is noise; their
#: lengths may differ by ``sqrt(2 x tolerance)`` relatively (the same angle: a difference of relative size e turns
#: a vector by at most e, and 1 - cos(e) ~ e^2 / 2). float32: reassociated sums, ~1e-7 relative per value (1e-6
#: leaves a wide margin); half precision: a few units in the last place of a 10-bit (float16) or 7-bit (bfloat16)
#: mantissa per layer. For scale: bfloat16 vectors of the same text padded on the left and on the right (an 8B
#: shape with random weights) differed by up to 1 - cosine = 2.5e-3 (issue 36); a graph that gets the model wrong
#: (a dropped mask, shifted positions) is off by far more.
TOLERANCE = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2}


class CompileFailedError(ProviderError):
    """``torch.compile`` could not compile or run the model (exit 6)."""


class CompileMismatchError(ProviderError):
    """The compiled model's vectors differ from eager's beyond the dtype's noise (exit 6)."""


def compile_model(model: Any) -> Callable[..., Any]:
    """``torch.compile(model, dynamic=True)``; compiling itself happens on the first call."""
    import torch

    return torch.compile(model, dynamic=True)


def compile_failed(name: str, device: str, exc: BaseException) -> CompileFailedError:
    """The error of a compile (or compiled run) that raised ``exc``, with what to do."""
    first = (str(exc).strip().splitlines() or [""])[0][:500]
    hint = ("; on a CPU inductor builds C++ kernels with the system's compiler: install gcc or clang (or set CXX)"
            if not device.startswith("cuda") else "")
    return CompileFailedError(f"{name}: torch.compile failed on {device} ({type(exc).__name__}: {first}){hint}; "
                              "run without --compile (what is encoded is kept)")


def check_compiled(name: str, dtype: str, eager: np.ndarray, compiled: np.ndarray) -> float:
    """The worst per-text cosine between ``compiled`` and ``eager`` vectors (rows: texts); ``CompileMismatchError``
    naming the worst text when a text's ``1 - cosine`` is beyond ``TOLERANCE[dtype]`` or the relative difference
    of its two lengths beyond ``sqrt(2 x TOLERANCE[dtype])``.

    >>> eager = np.array([[3.0, 4.0], [1.0, 0.0]])
    >>> check_compiled("m", "float32", eager, eager + 1e-7)
    1.0
    >>> round(check_compiled("m", "bfloat16", eager, np.array([[3.0, 4.0], [0.9, 0.1]])), 6)  # 1 - cos: 6.1e-3
    0.993884
    >>> try:
    ...     check_compiled("m", "float32", eager, np.array([[3.0, 4.0], [0.9, 0.1]]))
    ... except CompileMismatchError as exc:
    ...     print(exc)
    m: --compile changed the vectors of the first batch beyond float32 noise: text 2 of 2 has cosine 0.993884 between its compiled and eager vectors (1 - cosine = 6.1e-03, at most 1.0e-06 allowed) and lengths 0.905539 (compiled) and 1 (eager), 9.4e-02 apart relatively (at most 1.4e-03); run without --compile (eager is the reference)
    """
    a = np.asarray(eager, dtype=np.float64)
    b = np.asarray(compiled, dtype=np.float64)
    if a.shape != b.shape:
        raise CompileMismatchError(f"{name}: --compile gave vectors of shape {b.shape}, eager {a.shape}")
    tolerance = TOLERANCE.get(dtype, TOLERANCE["bfloat16"])
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both_zero = (na == 0) & (nb == 0)
    cosine = np.where(both_zero, 1.0, (a * b).sum(axis=1) / np.maximum(na * nb, np.finfo(np.float64).tiny))
    cosine = np.where(np.isfinite(cosine), cosine, -1.0)
    length = np.where(both_zero, 0.0, np.abs(na - nb) / np.maximum(np.maximum(na, nb), np.finfo(np.float64).tiny))
    # each text's distance from its limits (1: at a limit); the worst text is named
    off = np.maximum((1 - cosine) / tolerance, np.where(np.isfinite(length), length, np.inf) / np.sqrt(2 * tolerance))
    if (off > 1).any():
        i = int(np.argmax(off))
        raise CompileMismatchError(
            f"{name}: --compile changed the vectors of the first batch beyond {dtype} noise: text {i + 1} of "
            f"{len(a)} has cosine {cosine[i]:.6f} between its compiled and eager vectors (1 - cosine = "
            f"{1 - cosine[i]:.1e}, at most {tolerance:.1e} allowed) and lengths {nb[i]:.6g} (compiled) and "
            f"{na[i]:.6g} (eager), {length[i]:.1e} apart relatively (at most {np.sqrt(2 * tolerance):.1e}); run "
            "without --compile (eager is the reference)")
    return float(np.round(cosine.min(), 12)) if len(cosine) else 1.0
