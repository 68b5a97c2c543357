"""The document x term matrices of a BM25 index: compressed sparse rows over NumPy arrays, and their product with a
dense block, by SciPy's kernel or, for small collections without SciPy loaded, by NumPy in the same order.

Importing ``scipy.sparse`` costs 0.1-0.2 s (SciPy's array-API layer imports ``numpy.f2py``, ``numpy.testing``,
``numpy.ma`` ...) and 20 ms more when the interpreter exits, more than scoring a small collection takes; the quick
start's whole run is 0.5 s. So an index keeps its matrices as plain arrays (:class:`CsrMatrix`) and
:func:`product` chooses the kernel:

- BM25's C kernel (``csr_product``, ``csrc/bm25/matrix.c``) wherever it was built: SciPy's loop below, written again, and
  compiled without fused multiply-add;
- SciPy's ``csr_matvecs`` when ``scipy.sparse`` is already loaded or the product is large (NumPy's kernel would
  take longer than SciPy's import, :func:`choose_kernel`): for every row and every column of the block it adds
  ``data[j] * block[indices[j]]`` to a zero, entry by entry in the row's order, each product and each sum rounded
  to the result type;
- otherwise :func:`numpy_product`, which does the same additions in the same order, position by position along the
  rows (the rows' first entries for all rows at once, then their second entries, ...): every product and sum is
  the same IEEE operation on the same operands, so the result is bit-identical (tested against SciPy on random
  matrices and on scifact's BM25 scores, ``tests/retrievers/bm25/test_bm25_sparse.py``).

(That holds where SciPy's kernel rounds each product before adding it, as x86-64 builds do; a build that fused
multiply and add would differ from both the NumPy kernel and the official numbers in the last bit.)

>>> m = CsrMatrix(np.array([2.0, 3.0, 4.0]), np.array([0, 2, 1]), np.array([0, 2, 2, 3]), (3, 3))
>>> m.toarray().tolist()
[[2.0, 0.0, 3.0], [0.0, 0.0, 0.0], [0.0, 4.0, 0.0]]
>>> product(m, np.array([[1.0], [10.0], [100.0]]), kernel="numpy").ravel().tolist()
[302.0, 0.0, 40.0]
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from r2med.retrievers.bm25 import kernel as _kernel

__all__ = ["CsrMatrix", "choose_kernel", "load_kernel", "native_product", "numpy_product", "product", "rows_increasing"]

#: what NumPy's kernel costs, in nanoseconds (measured on x86-64): a pass over the rows' ``k``-th entries (one per
#: entry of the longest row: Python and indexing overhead), each stored entry, each cell (entry x column of the block)
NUMPY_NS_PER_PASS, NUMPY_NS_PER_ENTRY, NUMPY_NS_PER_CELL = 5000, 3, 1.5
#: the most NumPy's kernel may be expected to take when SciPy is not loaded yet (50 ms, less than SciPy's import)
NUMPY_BUDGET_NS = 50_000_000


class CsrMatrix:
    """A matrix in compressed sparse row form: row ``i``'s entries are ``data[indptr[i]:indptr[i + 1]]`` in the
    columns ``indices[indptr[i]:indptr[i + 1]]`` (increasing). What a BM25 index needs of
    ``scipy.sparse.csr_matrix``, whose attributes it shares; :meth:`to_scipy` gives one (without copying).

    >>> m = CsrMatrix.from_scipy_like(CsrMatrix(np.array([1, 5]), np.array([1, 0]), np.array([0, 1, 2]), (2, 2)))
    >>> m, m.nnz, m.row_sums().tolist()
    (CsrMatrix(shape=(2, 2), nnz=2, dtype=int64), 2, [1, 5])
    """

    __slots__ = ("data", "indices", "indptr", "shape")

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> None:
        self.data = data
        self.indices = indices
        self.indptr = indptr
        self.shape = (int(shape[0]), int(shape[1]))
        if len(indptr) != self.shape[0] + 1 or len(indices) != len(data) or int(indptr[0]) != 0 \
                or int(indptr[-1]) != len(data):
            raise ValueError(f"not a CSR matrix of shape {self.shape}: {len(indptr)} row pointers, "
                             f"{len(indices)} column indices, {len(data)} values")

    @classmethod
    def from_scipy_like(cls, matrix: Any) -> CsrMatrix:
        """The arrays of a ``scipy.sparse.csr_matrix`` (or of anything with ``data``, ``indices``, ``indptr``,
        ``shape``), not copied when each row's columns are increasing, as an index's counts are. A SciPy matrix with
        a row's columns out of order or repeated is put in canonical form first, on a copy (``sum_duplicates``: a
        repeated term's counts add up): every scoring kernel then adds a document's terms in the same order.

        >>> import scipy.sparse as sp
        >>> m = CsrMatrix.from_scipy_like(sp.csr_matrix(([3, 1, 2], [2, 0, 2], [0, 3]), shape=(1, 3)))
        >>> m.indices.tolist(), m.data.tolist()
        ([0, 2], [1, 5])
        """
        if isinstance(matrix, CsrMatrix):
            return matrix
        if getattr(matrix, "format", "csr") != "csr":  # a CSC matrix has the same attributes, meaning the transpose
            raise TypeError(f"expected a CSR matrix, got a {matrix.format!r} one; convert it with .tocsr()")
        indices, indptr = np.asarray(matrix.indices), np.asarray(matrix.indptr)
        if not rows_increasing(indptr, indices):
            if not callable(getattr(matrix, "sum_duplicates", None)):
                raise ValueError("a row's column indices are not increasing; sort them (and add up repeated columns) "
                                 "before building an index")
            matrix = matrix.copy()
            matrix.sum_duplicates()
            indices, indptr = np.asarray(matrix.indices), np.asarray(matrix.indptr)
        return cls(np.asarray(matrix.data), indices, indptr, matrix.shape)

    @property
    def nnz(self) -> int:
        """The number of stored entries."""
        return len(self.data)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def __repr__(self) -> str:
        return f"CsrMatrix(shape={self.shape}, nnz={self.nnz}, dtype={self.data.dtype})"

    def with_data(self, data: np.ndarray) -> CsrMatrix:
        """The same rows and columns holding ``data`` (the index's weights over its counts)."""
        return CsrMatrix(data, self.indices, self.indptr, self.shape)

    def row_sums(self) -> np.ndarray:
        """The sum of each row (exact for integer data: int64).

        >>> CsrMatrix(np.array([1, 2, 3]), np.array([0, 1, 0]), np.array([0, 2, 2, 3]), (3, 2)).row_sums().tolist()
        [3, 0, 3]
        """
        data = self.data.astype(np.int64 if self.data.dtype.kind in "iub" else np.float64, copy=False)
        starts = np.asarray(self.indptr[:-1], dtype=np.int64)
        filled = starts < np.asarray(self.indptr[1:], dtype=np.int64)  # reduceat gives an empty row data[start]
        sums = np.zeros(self.shape[0], dtype=data.dtype)
        if filled.any():
            sums[filled] = np.add.reduceat(data, starts[filled])  # one pass, no running-sum array of nnz items
        return sums

    def toarray(self) -> np.ndarray:
        """The dense matrix."""
        out = np.zeros(self.shape, dtype=self.data.dtype)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        out[rows, self.indices] = self.data
        return out

    def by_column(self) -> CsrMatrix:
        """The transpose in the same form (scipy's ``tocsc()`` arrays): each column's rows in increasing order.

        >>> t = CsrMatrix(np.array([1, 2, 3]), np.array([1, 0, 1]), np.array([0, 2, 3]), (2, 2)).by_column()
        >>> t.indptr.tolist(), t.indices.tolist(), t.data.tolist()
        ([0, 1, 3], [0, 0, 1], [2, 1, 3])
        """
        native = _kernel.native
        if native is not None and self.data.dtype in (np.float32, np.float64):  # BM25's C kernel: two passes, no sort
            wide = max(self.shape) >= 2**31 or self.nnz >= 2**31
            index_type = np.int64 if wide else np.int32  # rows and row pointers alike
            indptr = np.empty(self.shape[1] + 1, dtype=np.int64)
            rows, data = np.empty(self.nnz, dtype=index_type), np.empty_like(self.data)
            native.csr_transpose(np.ascontiguousarray(self.indptr, dtype=index_type),
                                 np.ascontiguousarray(self.indices, dtype=index_type), np.ascontiguousarray(self.data),
                                 indptr, rows, data)
            return CsrMatrix(data, rows, indptr.astype(index_type, copy=False), (self.shape[1], self.shape[0]))
        order = np.argsort(self.indices, kind="stable")  # rows stay increasing within a column
        rows = np.repeat(np.arange(self.shape[0], dtype=self.indices.dtype), np.diff(self.indptr))
        indptr = np.zeros(self.shape[1] + 1, dtype=self.indptr.dtype)
        np.cumsum(np.bincount(self.indices, minlength=self.shape[1]), out=indptr[1:])
        return CsrMatrix(self.data[order], rows[order], indptr, (self.shape[1], self.shape[0]))

    def to_scipy(self) -> Any:
        """This matrix as a ``scipy.sparse.csr_matrix`` over the same arrays (imports SciPy)."""
        import scipy.sparse as sp

        matrix = sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape, copy=False)
        matrix.has_sorted_indices = True
        return matrix


def rows_increasing(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether each row's column indices increase strictly (no column out of order, none repeated).

    >>> rows_increasing(np.array([0, 2, 3]), np.array([0, 5, 1])), rows_increasing(np.array([0, 2]), np.array([3, 3]))
    (True, False)
    """
    if len(indices) < 2:
        return True
    rises = np.diff(np.asarray(indices, dtype=np.int64)) > 0
    row_starts = np.asarray(indptr[1:-1], dtype=np.int64)
    new_row = np.zeros(len(indices), dtype=bool)
    new_row[row_starts[row_starts < len(indices)]] = True  # an entry that starts a row may be below the one before
    return bool((rises | new_row[1:]).all())


def choose_kernel(matrix: CsrMatrix, columns: int) -> str:
    """``"native"`` where BM25's C kernel was built; else ``"scipy"`` when ``scipy.sparse`` is loaded or NumPy's
    kernel would take longer than importing SciPy, else ``"numpy"`` (the same result every way).

    ``columns``: the columns of every block ``matrix`` will be multiplied by (a search's queries, in all its chunks),
    so that one search makes one choice. NumPy's kernel costs a pass per entry of the longest row and SciPy's does
    not: one very long document (a book among abstracts) sends a product to SciPy.
    """
    if _kernel.native is not None:
        return "native"
    if "scipy.sparse" in sys.modules:
        return "scipy"
    longest = int(np.diff(matrix.indptr).max()) if matrix.shape[0] else 0
    cost = NUMPY_NS_PER_PASS * longest + matrix.nnz * (NUMPY_NS_PER_ENTRY + NUMPY_NS_PER_CELL * max(columns, 1))
    return "numpy" if cost <= NUMPY_BUDGET_NS else "scipy"


def load_kernel(kernel: str) -> None:
    """Import what ``kernel`` needs (``scipy.sparse`` for ``"scipy"``) in the calling thread: a search does this
    before its threads multiply, so that they do not all import SciPy at once (threads importing one package
    together can each find modules the other has only half initialised)."""
    if kernel == "scipy":
        import scipy.sparse  # noqa: F401


def product(matrix: CsrMatrix, block: np.ndarray, *, kernel: str | None = None) -> np.ndarray:
    """``matrix @ block`` for a dense 2-D ``block`` of ``matrix``'s data type: (rows of matrix) x (columns of block).

    ``kernel``: ``"native"``, ``"scipy"``, ``"numpy"`` or ``None`` (:func:`choose_kernel`); the result is the same
    every way.
    """
    if block.ndim != 2 or block.shape[0] != matrix.shape[1] or block.dtype != matrix.data.dtype:
        raise ValueError(f"cannot multiply {matrix!r} by a {block.dtype} block of shape {block.shape}")
    kernel = kernel or choose_kernel(matrix, block.shape[1])
    if kernel == "native":
        return native_product(matrix, block)
    if kernel == "scipy":
        return matrix.to_scipy() @ block
    if kernel != "numpy":
        raise ValueError(f"unknown kernel {kernel!r}; valid: 'native', 'scipy', 'numpy'")
    return numpy_product(matrix, block)


def native_product(matrix: CsrMatrix, block: np.ndarray) -> np.ndarray:
    """``matrix @ block`` by BM25's C kernel: SciPy's ``csr_matvecs`` loop (every product and sum rounded to the
    type, no fused multiply-add), for float32 or float64 data.

    >>> m = CsrMatrix(np.array([1e8, 1.0, -1e8], dtype=np.float32), np.array([0, 1, 0]), np.array([0, 3]), (1, 2))
    >>> native_product(m, np.ones((2, 1), dtype=np.float32)).ravel().tolist()  # (1e8 + 1) - 1e8 in float32
    [0.0]
    """
    if _kernel.native is None:
        raise RuntimeError("BM25's C kernel (r2med.retrievers.bm25._native) was not built; use kernel='numpy'")
    out = np.zeros((matrix.shape[0], block.shape[1]), dtype=np.result_type(matrix.data.dtype, block.dtype))
    indptr = np.ascontiguousarray(matrix.indptr)
    if indptr.dtype not in (np.int32, np.int64):
        indptr = indptr.astype(np.int64)
    indices = np.ascontiguousarray(matrix.indices, dtype=indptr.dtype)
    _kernel.native.csr_product(indptr, indices, np.ascontiguousarray(matrix.data), np.ascontiguousarray(block), out)
    return out


def numpy_product(matrix: CsrMatrix, block: np.ndarray) -> np.ndarray:
    """``matrix @ block`` added up as SciPy's CSR kernel does, with NumPy.

    Each output row starts at zero and gets ``data[j] * block[indices[j]]`` added for its entries ``j`` in order.
    The rows are taken longest first, so that the rows with a ``k``-th entry are a prefix: pass ``k`` adds the
    ``k``-th entry of each of them, one product and one sum per output cell, as SciPy's loop does.

    >>> m = CsrMatrix(np.array([1e8, 1.0, -1e8], dtype=np.float32), np.array([0, 1, 0]), np.array([0, 3]), (1, 2))
    >>> numpy_product(m, np.ones((2, 1), dtype=np.float32)).ravel().tolist()  # (1e8 + 1) - 1e8 in float32
    [0.0]
    """
    n_rows = matrix.shape[0]
    out_dtype = np.result_type(matrix.data.dtype, block.dtype)
    out = np.zeros((n_rows, block.shape[1]), dtype=out_dtype)
    if matrix.nnz == 0 or block.shape[1] == 0:
        return out
    lengths = np.diff(matrix.indptr)
    order = np.argsort(-lengths, kind="stable")  # longest rows first
    by_length = lengths[order]
    starts = matrix.indptr[:-1][order].astype(np.int64)
    # rows with more than k entries: the first having[k] rows of ``order``
    having = np.searchsorted(-by_length, -np.arange(int(by_length[0]), dtype=by_length.dtype), side="left")
    acc = np.zeros_like(out)  # rows in ``order``
    data, indices = matrix.data, matrix.indices
    for k, n in enumerate(having.tolist()):
        at = starts[:n] + k
        acc[:n] += data[at][:, None] * block[indices[at]]
    out[order] = acc
    return out
