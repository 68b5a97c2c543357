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

/* Get a C-contiguous 1-D buffer of integers (int32 or int64) or of floats (kind 'f', item size `float_size`, 0:
 * 4 or 8); -1 with an exception naming `name` when it is not one. */
static int get_array(PyObject *object, Py_buffer *view, const char *where, const char *name, char kind,
                     Py_ssize_t float_size, int writable) {
    if (PyObject_GetBuffer(object, view, PyBUF_FORMAT | PyBUF_ND | PyBUF_C_CONTIGUOUS |
                                             (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    Py_ssize_t item = view->itemsize;
    int ok = view->ndim == 1 && buffer_kind(view) == kind &&
             (kind == 'i' ? (item == 4 || item == 8) : (float_size ? item == float_size : (item == 4 || item == 8)));
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be a C-contiguous 1-D array of %s", where, name,
                     kind == 'i' ? "int32 or int64" : (float_size == 4 ? "float32" : "float32 or float64"));
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
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
    PyObject *objects[5];
    if (!PyArg_ParseTuple(args, "OOOOO:csr_product", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4]))
        return NULL;
    static const char *names[5] = {"indptr", "indices", "data", "block", "out"};
    Py_buffer views[5];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 5; held++) {
        int flags = PyBUF_FORMAT | PyBUF_ND | PyBUF_C_CONTIGUOUS | (held == 4 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &views[held], flags) < 0) goto done;
    }
    Py_buffer *indptr = &views[0], *indices = &views[1], *data = &views[2], *block = &views[3], *out = &views[4];
    for (int k = 0; k < 5; k++) {
        char kind = buffer_kind(&views[k]);
        size_t item = (size_t)views[k].itemsize;
        int ok = k < 2 ? kind == 'i' && (item == 4 || item == 8) && item == (size_t)indptr->itemsize
                       : kind == 'f' && (item == 4 || item == 8) && item == (size_t)data->itemsize;
        if (!ok || views[k].ndim != (k < 3 ? 1 : 2)) {
            PyErr_Format(PyExc_ValueError,
                         "csr_product: %s must be a C-contiguous %s array (indptr and indices int32 or int64 alike; "
                         "data, block and out float32 or float64 alike)",
                         names[k], k < 3 ? "1-D" : "2-D");
            goto done;
        }
    }
    Py_ssize_t n_rows = indptr->shape[0] - 1, nnz = data->shape[0];
    Py_ssize_t n_cols = block->shape[0], n_vecs = block->shape[1];
    if (n_rows < 0 || indices->shape[0] != nnz || out->shape[0] != n_rows || out->shape[1] != n_vecs) {
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
    for (int k = 0; k < held; k++) PyBuffer_Release(&views[k]);
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
    PyObject *objects[6];
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "OOOOOOnn:gensim_weights", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &objects[5], &start, &stop))
        return NULL;
    static const char *names[6] = {"indptr", "indices", "counts", "norm", "idf", "out"};
    Py_buffer views[6];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 6; held++) {
        int flags = PyBUF_FORMAT | PyBUF_ND | PyBUF_C_CONTIGUOUS | (held == 5 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &views[held], flags) < 0) goto done;
    }
    Py_buffer *indptr = &views[0], *indices = &views[1], *counts = &views[2], *norm = &views[3], *idf = &views[4],
              *out = &views[5];
    for (int k = 0; k < 6; k++) {
        char kind = buffer_kind(&views[k]);
        Py_ssize_t item = views[k].itemsize;
        int ok = views[k].ndim == 1 &&
                 (k < 2   ? kind == 'i' && (item == 4 || item == 8) && item == indptr->itemsize
                  : k == 2 ? kind == 'i' && (item == 4 || item == 8)
                  : k < 5  ? kind == 'f' && item == 8
                           : kind == 'f' && item == 4);
        if (!ok) {
            PyErr_Format(PyExc_ValueError,
                         "gensim_weights: %s must be a C-contiguous 1-D array (indptr and indices int32 or int64 "
                         "alike, counts int32 or int64, norm and idf float64, out float32)",
                         names[k]);
            goto done;
        }
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
        int64_t p = wide ? ((const int64_t *)indptr->buf)[i] : ((const int32_t *)indptr->buf)[i];
        int64_t before = i == start ? 0 : (wide ? ((const int64_t *)indptr->buf)[i - 1] : ((const int32_t *)indptr->buf)[i - 1]);
        if (p < before || p > nnz) {
            PyErr_Format(PyExc_ValueError, "gensim_weights: indptr[%zd] = %lld is not a row pointer of %zd entries",
                         i, (long long)p, nnz);
            goto done;
        }
    }
    Py_ssize_t first = (Py_ssize_t)(wide ? ((const int64_t *)indptr->buf)[start] : ((const int32_t *)indptr->buf)[start]);
    Py_ssize_t last = (Py_ssize_t)(wide ? ((const int64_t *)indptr->buf)[stop] : ((const int32_t *)indptr->buf)[stop]);
    for (Py_ssize_t j = first; j < last; j++) {
        int64_t c = wide ? ((const int64_t *)indices->buf)[j] : ((const int32_t *)indices->buf)[j];
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
    for (int k = 0; k < held; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* ------------------------------------------------------------------ csr_transpose, score_columns */

PyObject *csr_transpose(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:csr_transpose", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    static const char *names[6] = {"indptr", "indices", "data", "out_indptr", "out_rows", "out_data"};
    Py_buffer v[6];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 6; held++)
        if (get_array(o[held], &v[held], "csr_transpose", names[held], held % 3 == 2 ? 'f' : 'i', 0, held >= 3) < 0)
            goto done;
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
    for (int k = 0; k < held; k++) PyBuffer_Release(&v[k]);
    return result;
}

/* out[q, row] (zeros, float32) = sum over query q's terms t, in the given (increasing) order, of
 * data[j] * weight for the entries j of column t: the float32 products and sums of csr_product's loop for the
 * query's nonzero weights, in the same order for every row (adding a zero weight's product leaves a sum as it
 * was), so the scores are bit-identical to it. */
PyObject *score_columns(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:score_columns", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    static const char *names[7] = {"indptr", "rows", "data", "query_ptr", "terms", "weights", "out"};
    static const char kinds[7] = {'i', 'i', 'f', 'i', 'i', 'f', 'f'};
    Py_buffer v[7];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 7; held++)
        if (get_array(o[held], &v[held], "score_columns", names[held], kinds[held], 4, held == 6) < 0) goto done;
    Py_ssize_t n_cols = v[0].shape[0] - 1, nnz = v[2].shape[0], n_queries = v[3].shape[0] - 1;
    Py_ssize_t n_entries = v[4].shape[0];
    if (n_cols < 0 || n_queries < 0 || v[5].shape[0] != n_entries || v[3].itemsize != 8 || v[4].itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "score_columns: query_ptr needs n_queries + 1 int64 items, terms (int64) "
                                          "and weights one item per query term");
        goto done;
    }
    int wide = v[0].itemsize == 8;
    /* rows: the largest row index + 1 is out's row length; checked with the columns */
    Py_ssize_t n_rows = n_queries ? v[6].shape[0] / n_queries : 0;
    if (n_queries && v[6].shape[0] % n_queries) {
        PyErr_SetString(PyExc_ValueError, "score_columns: out must hold n_queries x n_rows items");
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
    for (int k = 0; k < held; k++) PyBuffer_Release(&v[k]);
    return result;
}

