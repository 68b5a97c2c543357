/* BM25's C kernel: products, weights and transposes of CSR matrices (module.c says what each call does). */
#include "native.h"

/* ------------------------------------------------------------------ arrays */

/* The item kind of a buffer: 'i' (signed integer) or 'f' (floating point), or 0. */
static char buffer_kind(const Py_buffer *view) {
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (f[0] && !f[1]) {
        if (strchr("bhilq", f[0])) return 'i';
        if (strchr("fd", f[0])) return 'f';
    }
    return 0;
}

/* The index array item at i (int32 or int64 by `wide`). */
static inline int64_t item_at(const void *array, int wide, Py_ssize_t i) {
    return wide ? ((const int64_t *)array)[i] : ((const int32_t *)array)[i];
}

/* What a call takes as an array: its kind ('i' signed integer, 'f' floating point), item size (0: 4 or 8),
 * dimensions and whether it is written. */
typedef struct {
    const char *name;
    char kind;
    Py_ssize_t size;
    int ndim;
    int writable;
} ArraySpec;

static const char *type_words(char kind, Py_ssize_t size) {
    if (kind == 'i') return size == 4 ? "int32" : size == 8 ? "int64" : "int32 or int64";
    return size == 4 ? "float32" : size == 8 ? "float64" : "float32 or float64";
}

/* The C-contiguous buffers of objects[0:n] as specs[0:n] say; 0, or -1 with an exception naming the first that
 * does not fit (every buffer released then). */
static int get_arrays(const char *where, PyObject *const *objects, const ArraySpec *specs, int n, Py_buffer *views) {
    for (int k = 0; k < n; k++) {
        const ArraySpec *spec = &specs[k];
        int flags = PyBUF_FORMAT | PyBUF_ND | PyBUF_C_CONTIGUOUS | (spec->writable ? PyBUF_WRITABLE : 0);
        int got = PyObject_GetBuffer(objects[k], &views[k], flags) == 0;
        Py_ssize_t item = got ? views[k].itemsize : 0;
        if (got && views[k].ndim == spec->ndim && buffer_kind(&views[k]) == spec->kind &&
            (spec->size ? item == spec->size : (item == 4 || item == 8)))
            continue;
        if (got) {
            PyErr_Format(PyExc_ValueError, "%s: %s must be a C-contiguous %d-D array of %s", where, spec->name,
                         spec->ndim, type_words(spec->kind, spec->size));
            PyBuffer_Release(&views[k]);
        }
        while (k-- > 0) PyBuffer_Release(&views[k]);
        return -1;
    }
    return 0;
}

static void release_arrays(Py_buffer *views, int n) {
    for (int k = 0; k < n; k++) PyBuffer_Release(&views[k]);
}

/* indptr (rows + 1), indices, data: a CSR matrix with n_cols columns. Checked: the row pointers (0 first, nnz last,
 * never decreasing) and every column index. */
static int check_csr(const char *where, Py_buffer *indptr, Py_buffer *indices, Py_ssize_t nnz, Py_ssize_t n_cols) {
    int wide = indptr->itemsize == 8;
    Py_ssize_t n_rows = indptr->shape[0] - 1;
    if (n_rows < 0 || indices->shape[0] != nnz || indices->itemsize != indptr->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: indptr needs n_rows + 1 items, indices nnz items of indptr's type", where);
        return -1;
    }
    for (Py_ssize_t i = 0; i <= n_rows; i++) {
        int64_t p = item_at(indptr->buf, wide, i), before = i ? item_at(indptr->buf, wide, i - 1) : 0;
        if ((i == 0 && p != 0) || p < before || p > nnz || (i == n_rows && p != nnz)) {
            PyErr_Format(PyExc_ValueError, "%s: indptr[%zd] = %lld is not a row pointer of %zd entries", where, i,
                         (long long)p, nnz);
            return -1;
        }
    }
    for (Py_ssize_t j = 0; j < nnz; j++) {
        int64_t c = item_at(indices->buf, wide, j);
        if (c < 0 || c >= n_cols) {
            PyErr_Format(PyExc_ValueError, "%s: indices[%zd] = %lld is not in [0, %zd)", where, j, (long long)c,
                         n_cols);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ csr_product */

/* out (n_rows x n_vecs, zeros) += csr (indptr, indices, data) @ block (n_cols x n_vecs), as SciPy's csr_matvecs adds
 * it up: each row's entries in order, out[i, k] += data[j] * block[indices[j], k], every product and sum rounded
 * to the type (the module is compiled with -ffp-contract=off: no fused multiply-add). */
#define CSR_PRODUCT(NAME, I, T)                                                                                   \
    static void NAME(const I *indptr, const I *indices, const T *data, const T *block, T *out, Py_ssize_t n_rows, \
                     Py_ssize_t n_vecs) {                                                                         \
        for (Py_ssize_t i = 0; i < n_rows; i++) {                                                                 \
            T *y = out + n_vecs * i;                                                                              \
            for (I jj = indptr[i]; jj < indptr[i + 1]; jj++) {                                                    \
                const T a = data[jj];                                                                             \
                const T *x = block + n_vecs * (Py_ssize_t)indices[jj];                                            \
                for (Py_ssize_t k = 0; k < n_vecs; k++) y[k] += a * x[k];                                         \
            }                                                                                                     \
        }                                                                                                         \
    }
CSR_PRODUCT(csr_product_i32_f32, int32_t, float)
CSR_PRODUCT(csr_product_i32_f64, int32_t, double)
CSR_PRODUCT(csr_product_i64_f32, int64_t, float)
CSR_PRODUCT(csr_product_i64_f64, int64_t, double)

PyObject *csr_product(PyObject *Py_UNUSED(module), PyObject *args) {
    static const ArraySpec specs[5] = {{"indptr", 'i', 0, 1, 0}, {"indices", 'i', 0, 1, 0}, {"data", 'f', 0, 1, 0},
                                       {"block", 'f', 0, 2, 0}, {"out", 'f', 0, 2, 1}};
    PyObject *o[5];
    Py_buffer v[5];
    if (!PyArg_ParseTuple(args, "OOOOO:csr_product", &o[0], &o[1], &o[2], &o[3], &o[4]) ||
        get_arrays("csr_product", o, specs, 5, v) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_buffer *indptr = &v[0], *indices = &v[1], *data = &v[2], *block = &v[3], *out = &v[4];
    Py_ssize_t n_rows = indptr->shape[0] - 1, nnz = data->shape[0];
    Py_ssize_t n_cols = block->shape[0], n_vecs = block->shape[1];
    if (block->itemsize != data->itemsize || out->itemsize != data->itemsize) {
        PyErr_SetString(PyExc_ValueError, "csr_product: data, block and out must be of one float type");
        goto done;
    }
    if (n_rows < 0 || out->shape[0] != n_rows || out->shape[1] != n_vecs) {
        PyErr_SetString(PyExc_ValueError, "csr_product: the shapes do not fit (indptr n_rows + 1, indices and data "
                                          "nnz, block n_cols x n_vecs, out n_rows x n_vecs)");
        goto done;
    }
    /* the row pointers and column indices are checked, so that nothing is read out of bounds */
    if (check_csr("csr_product", indptr, indices, nnz, n_cols) < 0) goto done;
    int wide = indptr->itemsize == 8;
    int dbl = data->itemsize == 8;
    Py_BEGIN_ALLOW_THREADS
    if (wide && dbl)
        csr_product_i64_f64(indptr->buf, indices->buf, data->buf, block->buf, out->buf, n_rows, n_vecs);
    else if (wide)
        csr_product_i64_f32(indptr->buf, indices->buf, data->buf, block->buf, out->buf, n_rows, n_vecs);
    else if (dbl)
        csr_product_i32_f64(indptr->buf, indices->buf, data->buf, block->buf, out->buf, n_rows, n_vecs);
    else
        csr_product_i32_f32(indptr->buf, indices->buf, data->buf, block->buf, out->buf, n_rows, n_vecs);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_arrays(v, 5);
    return result;
}

/* ------------------------------------------------------------------ gensim_weights */

/* out[j] = (float)(idf[indices[j]] * (tf / (tf + norm[row]))) for the entries j of rows [start, stop): scoring.py's
 * gensim_weights, the same float64 operations in the same order, rounded to float32 once at the end. */
#define GENSIM_WEIGHTS(NAME, I, C)                                                                                \
    static void NAME(const I *indptr, const I *indices, const C *counts, const double *norm, const double *idf,    \
                     float *out, Py_ssize_t start, Py_ssize_t stop) {                                             \
        for (Py_ssize_t i = start; i < stop; i++) {                                                               \
            const double n = norm[i];                                                                             \
            for (I j = indptr[i]; j < indptr[i + 1]; j++) {                                                       \
                const double tf = (double)counts[j];                                                              \
                double x = tf + n;                                                                                \
                x = tf / x;                                                                                       \
                out[j] = (float)(idf[indices[j]] * x);                                                            \
            }                                                                                                     \
        }                                                                                                         \
    }
GENSIM_WEIGHTS(gensim_weights_i32_c32, int32_t, int32_t)
GENSIM_WEIGHTS(gensim_weights_i64_c32, int64_t, int32_t)
GENSIM_WEIGHTS(gensim_weights_i32_c64, int32_t, int64_t)
GENSIM_WEIGHTS(gensim_weights_i64_c64, int64_t, int64_t)

PyObject *gensim_weights(PyObject *Py_UNUSED(module), PyObject *args) {
    static const ArraySpec specs[6] = {{"indptr", 'i', 0, 1, 0}, {"indices", 'i', 0, 1, 0}, {"counts", 'i', 0, 1, 0},
                                       {"norm", 'f', 8, 1, 0},   {"idf", 'f', 8, 1, 0},     {"out", 'f', 4, 1, 1}};
    PyObject *o[6];
    Py_buffer v[6];
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "OOOOOOnn:gensim_weights", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &start, &stop) ||
        get_arrays("gensim_weights", o, specs, 6, v) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_buffer *indptr = &v[0], *indices = &v[1], *counts = &v[2], *norm = &v[3], *idf = &v[4], *out = &v[5];
    if (indices->itemsize != indptr->itemsize) {
        PyErr_SetString(PyExc_ValueError, "gensim_weights: indices must be of indptr's type");
        goto done;
    }
    Py_ssize_t n_rows = indptr->shape[0] - 1, nnz = counts->shape[0], n_terms = idf->shape[0];
    if (n_rows < 0 || indices->shape[0] != nnz || out->shape[0] != nnz || norm->shape[0] != n_rows || start < 0 ||
        stop < start || stop > n_rows) {
        PyErr_SetString(PyExc_ValueError, "gensim_weights: the shapes do not fit (indptr n_rows + 1; indices, counts "
                                          "and out nnz; norm n_rows; 0 <= start <= stop <= n_rows)");
        goto done;
    }
    /* the rows' pointers and column indices are checked (only those this call reads), so that nothing is read or
     * written out of bounds */
    int wide = indptr->itemsize == 8;
    for (Py_ssize_t i = start; i <= stop; i++) {
        int64_t p = item_at(indptr->buf, wide, i), before = i == start ? 0 : item_at(indptr->buf, wide, i - 1);
        if (p < before || p > nnz) {
            PyErr_Format(PyExc_ValueError, "gensim_weights: indptr[%zd] = %lld is not a row pointer of %zd entries",
                         i, (long long)p, nnz);
            goto done;
        }
    }
    for (int64_t j = item_at(indptr->buf, wide, start); j < item_at(indptr->buf, wide, stop); j++) {
        int64_t c = item_at(indices->buf, wide, j);
        if (c < 0 || c >= n_terms) {
            PyErr_Format(PyExc_ValueError, "gensim_weights: indices[%zd] = %lld is not a term of idf (%zd terms)", j,
                         (long long)c, n_terms);
            goto done;
        }
    }
    int wide_counts = counts->itemsize == 8;
    Py_BEGIN_ALLOW_THREADS
    if (wide && wide_counts)
        gensim_weights_i64_c64(indptr->buf, indices->buf, counts->buf, norm->buf, idf->buf, out->buf, start, stop);
    else if (wide)
        gensim_weights_i64_c32(indptr->buf, indices->buf, counts->buf, norm->buf, idf->buf, out->buf, start, stop);
    else if (wide_counts)
        gensim_weights_i32_c64(indptr->buf, indices->buf, counts->buf, norm->buf, idf->buf, out->buf, start, stop);
    else
        gensim_weights_i32_c32(indptr->buf, indices->buf, counts->buf, norm->buf, idf->buf, out->buf, start, stop);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_arrays(v, 6);
    return result;
}

/* ------------------------------------------------------------------ csr_transpose, score_columns */

PyObject *csr_transpose(PyObject *Py_UNUSED(module), PyObject *args) {
    static const ArraySpec specs[6] = {{"indptr", 'i', 0, 1, 0},     {"indices", 'i', 0, 1, 0},
                                       {"data", 'f', 0, 1, 0},       {"out_indptr", 'i', 0, 1, 1},
                                       {"out_rows", 'i', 0, 1, 1},   {"out_data", 'f', 0, 1, 1}};
    PyObject *o[6];
    Py_buffer v[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:csr_transpose", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]) ||
        get_arrays("csr_transpose", o, specs, 6, v) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nnz = v[2].shape[0], n_cols = v[3].shape[0] - 1, n_rows = v[0].shape[0] - 1;
    if (n_cols < 0 || v[4].shape[0] != nnz || v[5].shape[0] != nnz || v[5].itemsize != v[2].itemsize ||
        v[3].itemsize != 8 || v[4].itemsize != v[1].itemsize) {
        PyErr_SetString(PyExc_ValueError, "csr_transpose: out_indptr needs n_cols + 1 int64 items, out_rows nnz items "
                                          "of indices' type, out_data nnz items of data's type");
        goto done;
    }
    if (check_csr("csr_transpose", &v[0], &v[1], nnz, n_cols) < 0) goto done;
    int wide = v[0].itemsize == 8, f64 = v[2].itemsize == 8;
    int64_t *next = malloc((size_t)(n_cols ? n_cols : 1) * sizeof(int64_t));
    if (!next) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *out_indptr = v[3].buf;
    Py_BEGIN_ALLOW_THREADS
    memset(out_indptr, 0, (size_t)(n_cols + 1) * sizeof(int64_t));
    for (Py_ssize_t j = 0; j < nnz; j++) out_indptr[item_at(v[1].buf, wide, j) + 1]++;
    for (Py_ssize_t c = 0; c < n_cols; c++) {
        out_indptr[c + 1] += out_indptr[c];
        next[c] = out_indptr[c];
    }
    for (Py_ssize_t i = 0; i < n_rows; i++) { /* rows in increasing order: each column's rows stay increasing */
        for (int64_t j = item_at(v[0].buf, wide, i); j < item_at(v[0].buf, wide, i + 1); j++) {
            int64_t at = next[item_at(v[1].buf, wide, j)]++;
            if (wide)
                ((int64_t *)v[4].buf)[at] = i;
            else
                ((int32_t *)v[4].buf)[at] = (int32_t)i;
            if (f64)
                ((double *)v[5].buf)[at] = ((const double *)v[2].buf)[j];
            else
                ((float *)v[5].buf)[at] = ((const float *)v[2].buf)[j];
        }
    }
    Py_END_ALLOW_THREADS
    free(next);
    result = Py_NewRef(Py_None);
done:
    release_arrays(v, 6);
    return result;
}

/* out[q, row] (n_queries x n_rows, zeros, float32) = sum over query q's terms t, in the given (increasing) order, of
 * data[j] * weight for the entries j of column t: the float32 products and sums of csr_product's loop for the
 * query's nonzero weights, in the same order for every row (adding a zero weight's product leaves a sum as it
 * was), so the scores are bit-identical to it. */
PyObject *score_columns(PyObject *Py_UNUSED(module), PyObject *args) {
    static const ArraySpec specs[7] = {{"indptr", 'i', 0, 1, 0},    {"rows", 'i', 0, 1, 0},   {"data", 'f', 4, 1, 0},
                                       {"query_ptr", 'i', 8, 1, 0}, {"terms", 'i', 8, 1, 0},  {"weights", 'f', 4, 1, 0},
                                       {"out", 'f', 4, 2, 1}};
    PyObject *o[7];
    Py_buffer v[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:score_columns", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]) ||
        get_arrays("score_columns", o, specs, 7, v) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n_cols = v[0].shape[0] - 1, nnz = v[2].shape[0], n_queries = v[3].shape[0] - 1;
    Py_ssize_t n_entries = v[4].shape[0];
    if (n_cols < 0 || n_queries < 0 || v[5].shape[0] != n_entries || v[3].itemsize != 8 || v[4].itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "score_columns: query_ptr needs n_queries + 1 int64 items, terms (int64) "
                                          "and weights one item per query term");
        goto done;
    }
    int wide = v[0].itemsize == 8;
    Py_ssize_t n_rows = v[6].shape[1]; /* out: n_queries x n_rows */
    if (v[6].shape[0] != n_queries) {
        PyErr_SetString(PyExc_ValueError, "score_columns: out must be n_queries x n_rows");
        goto done;
    }
    if (check_csr("score_columns", &v[0], &v[1], nnz, n_rows) < 0) goto done;
    const int64_t *qp = v[3].buf, *terms = v[4].buf;
    for (Py_ssize_t q = 0; q <= n_queries; q++) {
        if (qp[q] < (q ? qp[q - 1] : 0) || qp[q] > n_entries || (q == 0 && qp[q] != 0) ||
            (q == n_queries && qp[q] != n_entries)) {
            PyErr_Format(PyExc_ValueError, "score_columns: query_ptr[%zd] = %lld does not fit %zd query terms", q,
                         (long long)qp[q], n_entries);
            goto done;
        }
    }
    for (Py_ssize_t e = 0; e < n_entries; e++) {
        if (terms[e] < 0 || terms[e] >= n_cols) {
            PyErr_Format(PyExc_ValueError, "score_columns: terms[%zd] = %lld is not a column (%zd)", e,
                         (long long)terms[e], n_cols);
            goto done;
        }
    }
    const float *data = v[2].buf, *weights = v[5].buf;
    float *out = v[6].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t q = 0; q < n_queries; q++) {
        float *acc = out + n_rows * q;
        for (int64_t e = qp[q]; e < qp[q + 1]; e++) {
            const float w = weights[e];
            int64_t lo = item_at(v[0].buf, wide, terms[e]), hi = item_at(v[0].buf, wide, terms[e] + 1);
            if (wide) {
                const int64_t *rows = v[1].buf;
                for (int64_t j = lo; j < hi; j++) acc[rows[j]] += data[j] * w;
            } else {
                const int32_t *rows = v[1].buf;
                for (int64_t j = lo; j < hi; j++) acc[rows[j]] += data[j] * w;
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_arrays(v, 7);
    return result;
}

