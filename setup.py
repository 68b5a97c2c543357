"""The one thing pyproject.toml cannot say without an experimental table: BM25's C kernel.

``r2med.retrievers.bm25._native`` does BM25 indexing's per-token work (the chunk table, renumbering, row
counts; see its source). It is optional: where it does not build (no C compiler), the install goes on and
r2med runs the same steps in NumPy (``r2med/retrievers/bm25/chunks.py``), with the same results, slower.
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "r2med.retrievers.bm25._native",
            sources=["src/r2med/retrievers/bm25/_native.c"],
            # BM25 scores must be SciPy's sums bit for bit: no multiply and add fused into one rounding
            extra_compile_args=[] if sys.platform == "win32" else ["-ffp-contract=off"],
            optional=True,
        )
    ]
)
