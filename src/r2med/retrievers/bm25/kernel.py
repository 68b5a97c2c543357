"""BM25's C kernel, where it was built: the module :mod:`r2med.retrievers.bm25._native`, else ``None``.

The kernel does indexing's per-token work (the chunk table, renumbering terms in order of first occurrence,
counting each row's terms); its callers (:mod:`~r2med.retrievers.bm25.chunks`,
:mod:`~r2med.retrievers.bm25.vocabulary`) run the same steps in NumPy where it is ``None`` (an install without
a C compiler), with the same results. They read :data:`native` when called, so a test can set it to ``None``.
"""

from __future__ import annotations

from types import ModuleType

native: ModuleType | None
try:
    from r2med.retrievers.bm25 import _native as native
except ImportError:  # not built (no C compiler at install time): NumPy does the same work
    native = None

__all__ = ["native"]
