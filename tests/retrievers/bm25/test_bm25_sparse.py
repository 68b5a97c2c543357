"""The BM25 index's sparse matrices (``r2med.retrievers.bm25.sparse``): the C kernel's product and NumPy's add the
same products in the same order as SciPy's CSR kernel, bit for bit, and a small collection is scored without
importing SciPy."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from r2med.retrievers.bm25 import index as index_module
from r2med.retrievers.bm25 import kernel
from r2med.retrievers.bm25.index import BM25Index
from r2med.retrievers.bm25.sparse import CsrMatrix, choose_kernel, native_product, numpy_product, product


def random_csr(rng, n_rows, n_cols, dtype, *, max_len=40, unsorted=False):
    """Rows of 0..max_len entries (some empty), values over 12 orders of magnitude and both signs, so that the order
    of the additions shows in the last bits."""
    lengths = rng.integers(0, max_len + 1, n_rows)
    lengths[rng.random(n_rows) < 0.2] = 0
    columns = [rng.choice(n_cols, min(n, n_cols), replace=False) for n in lengths]
    columns = [c if unsorted else np.sort(c) for c in columns]
    indptr = np.zeros(n_rows + 1, dtype=np.int32)
    np.cumsum([len(c) for c in columns], out=indptr[1:])
    indices = np.concatenate(columns).astype(np.int32) if n_rows else np.empty(0, np.int32)
    data = (rng.standard_normal(len(indices)) * 10.0 ** rng.integers(-6, 6, len(indices))).astype(dtype)
    return CsrMatrix(data, indices, indptr, (n_rows, n_cols))


def bits(array):
    return array.view(np.uint32 if array.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(6))
def test_numpy_product_is_scipys_bit_for_bit(dtype, seed):
    rng = np.random.default_rng(seed)
    n_rows, n_cols, n_vecs = rng.integers(1, 300), rng.integers(1, 200), rng.integers(1, 40)
    matrix = random_csr(rng, n_rows, n_cols, dtype, unsorted=seed % 2 == 1)  # any stored order: the same order
    block = (rng.standard_normal((n_cols, n_vecs)) * 10.0 ** rng.integers(-6, 6, (n_cols, n_vecs))).astype(dtype)
    block[rng.random((n_cols, n_vecs)) < 0.7] = 0  # a query block is mostly zeros
    ours = numpy_product(matrix, block)
    theirs = sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape) @ block
    assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape == (n_rows, n_vecs)
    assert np.array_equal(bits(ours), bits(theirs))
    if kernel.native is not None:  # BM25's C kernel, where it was built
        native = native_product(matrix, block)
        assert native.dtype == dtype and np.array_equal(bits(native), bits(theirs))
        wide = CsrMatrix(matrix.data, matrix.indices.astype(np.int64), matrix.indptr.astype(np.int64), matrix.shape)
        assert np.array_equal(bits(native_product(wide, block)), bits(theirs))
    # a sum in another order (float64, or pairwise) differs somewhere: the test can tell orders apart
    assert not np.array_equal(bits(ours), bits(matrix.toarray().astype(np.float64).dot(block).astype(dtype))) or \
        matrix.nnz < 50


def test_numpy_product_adds_in_the_rows_order():
    # 1e8 + 1 is 1e8 in float32: the order of the three additions decides the sum
    data = np.array([1e8, 1.0, -1e8, -1e8, 1e8, 1.0], dtype=np.float32)
    matrix = CsrMatrix(data, np.array([0, 1, 2, 0, 2, 1]), np.array([0, 3, 6]), (2, 3))
    block = np.ones((3, 1), dtype=np.float32)
    assert numpy_product(matrix, block).ravel().tolist() == [0.0, 1.0]
    assert product(matrix, block, kernel="scipy").ravel().tolist() == [0.0, 1.0]
    if kernel.native is not None:
        assert product(matrix, block, kernel="native").ravel().tolist() == [0.0, 1.0]


def test_empty_matrices_and_blocks():
    empty = CsrMatrix(np.empty(0, np.float32), np.empty(0, np.int32), np.zeros(4, np.int32), (3, 5))
    assert numpy_product(empty, np.ones((5, 2), np.float32)).tolist() == [[0.0, 0.0]] * 3
    one = CsrMatrix(np.array([2.0], np.float32), np.array([1]), np.array([0, 0, 1]), (2, 2))
    assert numpy_product(one, np.ones((2, 0), np.float32)).shape == (2, 0)
    if kernel.native is not None:
        assert native_product(empty, np.ones((5, 2), np.float32)).tolist() == [[0.0, 0.0]] * 3
        assert native_product(one, np.ones((2, 0), np.float32)).shape == (2, 0)
    with pytest.raises(ValueError, match="cannot multiply"):
        product(one, np.ones((2, 1), np.float64))
    with pytest.raises(ValueError, match="unknown kernel 'torch'"):
        product(one, np.ones((2, 1), np.float32), kernel="torch")
    with pytest.raises(ValueError, match="not a CSR matrix of shape"):
        CsrMatrix(np.ones(2), np.array([0, 1]), np.array([0, 1]), (2, 2))
    with pytest.raises(ValueError, match="not a CSR matrix of shape"):
        CsrMatrix(np.ones(2), np.array([0, 1]), np.array([1, 2, 2]), (2, 2))  # the first row does not start at 0


def test_row_sums_with_empty_rows_first_inside_and_last():
    """reduceat gives an empty row the value at its start; row_sums gives 0 (worked out by hand)."""
    counts = CsrMatrix(np.array([2, 3, 4, 1], dtype=np.int32), np.array([0, 2, 1, 2]),
                       np.array([0, 0, 2, 2, 4, 4]), (5, 3))
    assert counts.row_sums().tolist() == [0, 5, 0, 5, 0] and counts.row_sums().dtype == np.int64
    assert CsrMatrix(np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64), np.zeros(3, dtype=np.int64),
                     (2, 4)).row_sums().tolist() == [0, 0]
    floats = CsrMatrix(np.array([0.5, 0.25]), np.array([0, 1]), np.array([0, 0, 2]), (2, 2))
    assert floats.row_sums().tolist() == [0.0, 0.75]


def test_matrix_helpers_equal_scipys():
    rng = np.random.default_rng(7)
    matrix = random_csr(rng, 50, 30, np.float64)
    counts = matrix.with_data(rng.integers(1, 9, matrix.nnz).astype(np.int32))
    reference = sp.csr_matrix((counts.data, counts.indices, counts.indptr), shape=counts.shape)
    assert np.array_equal(counts.toarray(), reference.toarray())
    assert counts.row_sums().tolist() == np.asarray(reference.sum(axis=1)).ravel().tolist()
    columns, csc = counts.by_column(), reference.tocsc()
    assert columns.shape == (30, 50)
    for name in ("indptr", "indices", "data"):
        assert getattr(columns, name).tolist() == getattr(csc, name).tolist(), name
    again = counts.to_scipy()
    assert (again != reference).nnz == 0 and np.shares_memory(again.data, counts.data)  # no copy
    assert CsrMatrix.from_scipy_like(reference).toarray().tolist() == reference.toarray().tolist()


def rows_of(lengths):
    """A float32 matrix whose rows have ``lengths`` entries (columns 0, 1, ...)."""
    indptr = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.concatenate([np.arange(n) for n in lengths]).astype(np.int32)
    return CsrMatrix(np.ones(len(indices), np.float32), indices, indptr, (len(lengths), max(lengths)))


def test_the_c_kernel_is_chosen_wherever_it_was_built():
    assert kernel.native is not None, "BM25's C kernel was not built: install a C compiler and reinstall r2med"
    for lengths in ([100] * 500, [100] * 20 + [20_000]):
        assert choose_kernel(rows_of(lengths), 1000) == "native"


@pytest.mark.skipif(kernel.native is None, reason="BM25's C kernel was not built (the test above says so)")
def test_the_c_kernel_refuses_arrays_that_do_not_fit():
    m = CsrMatrix(np.array([1.0, 2.0], np.float32), np.array([0, 1], np.int32), np.array([0, 1, 2], np.int32), (2, 2))
    block, out = np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32)
    csr_product = kernel.native.csr_product
    with pytest.raises(ValueError, match=r"indices\[1\] = 5 is not in \[0, 2\)"):
        csr_product(m.indptr, np.array([0, 5], np.int32), m.data, block, out)
    with pytest.raises(ValueError, match=r"indptr\[1\] = 3 is not a row pointer"):
        csr_product(np.array([0, 3, 2], np.int32), m.indices, m.data, block, out)
    with pytest.raises(ValueError, match="indices nnz items of indptr's type"):
        csr_product(m.indptr, m.indices.astype(np.int64), m.data, block, out)  # int32 and int64 mixed
    with pytest.raises(ValueError, match="data, block and out must be of one float type"):
        csr_product(m.indptr, m.indices, m.data, block.astype(np.float64), out)
    with pytest.raises(ValueError, match="block must be a C-contiguous 2-D array of float32 or float64"):
        csr_product(m.indptr, m.indices, m.data, block.ravel(), out)
    with pytest.raises(ValueError, match="indptr must be a C-contiguous 1-D array of int32 or int64"):
        csr_product(m.indptr.astype(np.float32), m.indices, m.data, block, out)
    with pytest.raises(ValueError, match="the shapes do not fit"):
        csr_product(m.indptr, m.indices, m.data, block, np.zeros((3, 1), np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):  # NumPy's own refusal of the buffer
        csr_product(m.indptr, m.indices, m.data, block, np.zeros((4, 2), np.float32)[::2, :1])
    assert out.tolist() == [[0.0], [0.0]]  # nothing written by a refused call
    csr_product(m.indptr, m.indices, m.data, block, out)
    assert out.tolist() == [[1.0], [2.0]]


def test_the_kernel_is_numpy_only_for_small_products_without_scipy(monkeypatch):
    monkeypatch.setattr(kernel, "native", None)  # an install without a C compiler
    monkeypatch.delitem(sys.modules, "scipy.sparse")
    abstracts = rows_of([100] * 500)  # the quick start's size: 50,000 entries
    assert choose_kernel(abstracts, 50) == "numpy"
    assert choose_kernel(abstracts, 1000) == "scipy"  # NumPy would take longer than SciPy's import
    # one long row costs NumPy a pass per entry, however few the cells
    assert choose_kernel(rows_of([100] * 20 + [20_000]), 1) == "scipy"
    assert choose_kernel(rows_of([100] * 20 + [2_000]), 1) == "numpy"
    empty = CsrMatrix(np.empty(0, np.float32), np.empty(0, np.int32), np.zeros(1, np.int32), (0, 3))
    assert choose_kernel(empty, 10) == "numpy"
    monkeypatch.undo()
    monkeypatch.setattr(kernel, "native", None)
    assert choose_kernel(abstracts, 50) == "scipy"  # loaded already: its kernel is the faster one


_LOADS_BEFORE_THREADS = r"""
import sys
import numpy as np
from r2med.retrievers.bm25 import index as index_module
from r2med.retrievers.bm25.index import BM25Index
index = BM25Index.build([["a", "b"], ["b", "c"], ["c"]] * 10, workers=2)
threads = index_module.in_threads
def in_threads(fn, items, workers=None):
    assert "scipy.sparse" in sys.modules, "the threads would import SciPy"
    return threads(fn, items, workers)
index_module.in_threads = in_threads
index_module.choose_kernel = lambda matrix, columns: "scipy"
index_module._MAX_BLOCK_CELLS = 30
print(len(index.search([["a"], ["b"], ["c"], ["a", "c"]], k=2)))
"""


def test_a_search_imports_scipy_before_its_threads_do():
    done = subprocess.run([sys.executable, "-c", _LOADS_BEFORE_THREADS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "4", done.stderr


def test_one_search_makes_one_choice_for_all_its_chunks(monkeypatch):
    index = BM25Index.build([["a", "b"], ["b", "c"], ["c"]] * 10)
    chosen, used = [], []
    monkeypatch.setattr(index_module, "choose_kernel", lambda matrix, columns: chosen.append(columns) or "numpy")
    monkeypatch.setattr(index_module, "product", lambda matrix, block, kernel: used.append(kernel) or
                        product(matrix, block, kernel=kernel))
    monkeypatch.setattr(index_module, "_MAX_BLOCK_CELLS", 2 * 30)  # 2 queries a chunk
    index.search([["a"], ["b"], ["c"], ["a", "c"], ["b"]], k=3)
    assert chosen == [5] and used == ["numpy"] * 3  # the kernel for all 5 queries, used by each of the 3 chunks


def test_an_index_takes_a_scipy_matrix_as_before():
    counts = sp.csr_matrix(np.array([[1, 2, 0], [0, 0, 3], [1, 0, 0]], dtype=np.int32))
    index = BM25Index(params=BM25Index.build([["a"]]).params, vocabulary=["a", "b", "c"], counts=counts,
                      doc_ids=["x", "y", "z"])
    built = BM25Index.build([["a", "b", "b"], ["c", "c", "c"], ["a"]], doc_ids=["x", "y", "z"])
    assert index.counts is counts and index.doc_lengths.tolist() == [3, 3, 1]
    assert index.search_run(["q"], [["b", "a"]]) == built.search_run(["q"], [["b", "a"]])
    with pytest.raises(TypeError, match="expected a CSR matrix, got a 'csc' one"):  # its arrays mean the transpose
        BM25Index(params=index.params, vocabulary=["a", "b", "c"], counts=counts.tocsc())


_SMALL_RUN = r"""
import json, sys
from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.index import BM25Index
from r2med.retrievers.bm25.parallel import analyze_and_count
texts, queries, variant = json.loads(sys.argv[1])
analyzer = EnglishAnalyzer()
vocabulary, counts = analyze_and_count(texts, analyzer)
index = BM25Index(params=BM25Index.build([["x"]], variant=variant).params, vocabulary=vocabulary, counts=counts)
scores = index.score_all(analyzer.analyze_many(queries))
print(json.dumps({"scipy": sorted(m for m in sys.modules if m == "scipy" or m.startswith("scipy.")),
                  "bits": scores.view("uint32").tolist()}))
"""


@pytest.mark.parametrize("variant", ["r2med", "lucene"])
def test_a_small_collection_is_scored_without_scipy_and_the_same_bits(variant, monkeypatch):
    from r2med.retrievers.bm25.analyzer import EnglishAnalyzer

    texts = [f"Patients with fever {i % 7} received {i % 3} doses of aspirin; fever fell in {i} cases."
             for i in range(60)]
    texts += ["", "the of and", "Statins lower cholesterol and cholesterol lowers risk"]
    queries = ["fever aspirin aspirin aspirin", "cholesterol statins", "unknown words only", ""]
    done = subprocess.run([sys.executable, "-c", _SMALL_RUN, json.dumps([texts, queries, variant])],
                          capture_output=True, text=True, timeout=120, check=True)
    fresh = json.loads(done.stdout)
    assert fresh["scipy"] == []
    analyzer = EnglishAnalyzer()
    monkeypatch.setattr(index_module, "choose_kernel", lambda matrix, columns: "scipy")
    index = BM25Index.build(analyzer.analyze_many(texts), variant=variant)
    scores = index.score_all(analyzer.analyze_many(queries))
    assert scores[0].max() > 0 and scores[2].max() == 0
    assert fresh["bits"] == scores.view(np.uint32).tolist()
