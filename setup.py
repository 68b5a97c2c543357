"""The one thing pyproject.toml cannot say without an experimental table: BM25's C kernel.

``r2med.retrievers.bm25._native`` (``csrc/bm25/``) does BM25's per-token work: the chunk table, plain words, counts,
weights and scores (``csrc/bm25/module.c`` says what each call does; docs/bm25.md, "The C kernel"). It is
optional: where it does not build (no C compiler), the install goes on and r2med runs the same steps in NumPy
(``r2med/retrievers/bm25/chunks.py``), with the same results, slower.
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "r2med.retrievers.bm25._native",
            sources=[f"csrc/bm25/{name}.c" for name in ("module", "chunks", "porter", "matrix")],
            depends=["csrc/bm25/native.h"],
            # BM25 scores must be SciPy's sums bit for bit: no multiply and add fused into one rounding; only the
            # module's init is exported
            extra_compile_args=[] if sys.platform == "win32" else ["-ffp-contract=off", "-fvisibility=hidden"],
            optional=True,
        )
    ]
)
