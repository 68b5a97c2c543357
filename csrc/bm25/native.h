/* BM25's C kernel, r2med.retrievers.bm25._native: what its files share. module.c says what the module does. */
#ifndef R2MED_BM25_NATIVE_H
#define R2MED_BM25_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ growable arrays */

typedef struct {
    void *data;
    size_t len;   /* items */
    size_t cap;   /* items */
    size_t item;  /* bytes per item */
} Vec;

static inline int vec_reserve(Vec *v, size_t need) {
    if (need <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < need) cap *= 2;
    void *grown = realloc(v->data, cap * v->item);
    if (!grown) return -1;
    v->data = grown;
    v->cap = cap;
    return 0;
}

static inline void vec_free(Vec *v) {
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

#define VEC_AT(v, type, i) (((type *)(v).data)[i])


/* chunks.c: the ChunkTable type; its byte tables, set up once by module.c */
extern PyTypeObject ChunkTableType;
void chunk_tables_init(void);

/* porter.c: porter.py's stemmer for ASCII words (w: n characters and room for one more, cv: room for n + 1) */
size_t porter_stem(char *w, char *cv, size_t n);
PyObject *stem_ascii(PyObject *module, PyObject *word);

/* matrix.c: products, weights and transposes of CSR matrices */
PyObject *csr_product(PyObject *module, PyObject *args);
PyObject *gensim_weights(PyObject *module, PyObject *args);
PyObject *csr_transpose(PyObject *module, PyObject *args);
PyObject *score_columns(PyObject *module, PyObject *args);

#endif
