/* r2med.retrievers.bm25._native: the per-token work of BM25 indexing in C.
 *
 * Everything here is bookkeeping over bytes and integers; the analysis itself (Lucene's tokenizer and
 * filters) stays in Python and runs once per distinct chunk. Where this module was not built, r2med does the
 * same work in NumPy (chunks.py, vocabulary.py); the tests check that both give the same arrays.
 *
 * ChunkTable: a hash table of chunks (runs of bytes between separator bytes: the ASCII controls, space and
 * DEL, all of class OTHER for Lucene's tokenizer) -> chunk id, and each chunk's term ids once Python has
 * analysed it. Chunk ids are handed out in order of first occurrence.
 * ChunkTable(*, words=False, stop_words=(), stemming=True)
 *   scan(texts) -> (occurrences, chunks_per_text, new_chunks, words)
 *       texts: a sequence of str (a chunk's key is its UTF-8 bytes, lone surrogates as "surrogatepass" writes
 *       them; an ASCII text's characters are those bytes, so it is read in place, without the GIL).
 *       occurrences: the chunk id of every chunk of every text, in order (int32); chunks_per_text: int64;
 *       new_chunks: the chunks not handed out before, decoded (UTF-8, surrogatepass), in id order; words: for
 *       a table made with words=True, what the analyzer makes of each new chunk that is a plain word (its term,
 *       or "" for none: simple_term), None for the others, which Python analyses; else None.
 *   set_terms(found): the term ids (a sequence of int sequences) of the next chunks handed out, in id order.
 *   expand(occurrences, chunks_per_text) -> (term_ids, terms_per_text): each occurrence replaced by its
 *       chunk's term ids (int64).
 *   first_terms(parts, n_ids) -> (order, first_text): over the texts of the scanned batches `parts`
 *       ((occurrences, chunks_per_text) pairs, in order), the distinct term ids in order of first occurrence
 *       and the text (counted over all parts) each first occurs in (int64).
 *   count(occurrences, chunks_per_text, final, n_terms) -> (columns, counts, per_row): each text of a scanned
 *       batch as a sparse count vector of its terms' final ids (final[term id], in [0, n_terms)): its distinct
 *       final ids in increasing order (int32), their counts (int32), and how many per text (int64).
 *   clear(), len(table) (the chunks handed out).
 * Arrays come back as bytearrays (numpy.frombuffer reads them without a copy).
 *
 * Threads: the bytes and integers are walked with the GIL released. A scan may run beside set_terms, expand,
 * first_terms and count (they touch different parts of the table); no two scans at once, no set_terms while
 * an expand, first_terms or count runs, no clear while anything runs (RuntimeError). Each call reads (and runs
 * the caller's Python code on) its arguments first, then checks the table and marks it, with no Python code in
 * between. The arrays a call is given are checked, then read without the GIL: a caller must not change them
 * from another thread while the call runs (r2med's callers pass arrays no other thread holds).
 */
#include "native.h"

/* ------------------------------------------------------------------ module */

static PyMethodDef module_methods[] = {
    {"stem_ascii", stem_ascii, METH_O, "stem_ascii(word) -> porter.stem(word), for a word of ASCII characters"},
    {"gensim_weights", gensim_weights, METH_VARARGS,
     "gensim_weights(indptr, indices, counts, norm, idf, out, start, stop): scoring.gensim_weights over rows"},
    {"csr_transpose", csr_transpose, METH_VARARGS,
     "csr_transpose(indptr, indices, data, out_indptr, out_rows, out_data): the transpose (by_column) into out_*"},
    {"score_columns", score_columns, METH_VARARGS,
     "score_columns(indptr, rows, data, query_ptr, terms, weights, out): query scores from a transposed matrix"},
    {"csr_product", csr_product, METH_VARARGS,
     "csr_product(indptr, indices, data, block, out): out += csr @ block, added up as SciPy's csr_matvecs"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native",
    "The per-token work of BM25 indexing in C (chunk table, renumbering, row counts).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    chunk_tables_init();
    if (PyType_Ready(&ChunkTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Py_INCREF(&ChunkTableType);
    if (PyModule_AddObject(m, "ChunkTable", (PyObject *)&ChunkTableType) < 0) {
        Py_DECREF(&ChunkTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
