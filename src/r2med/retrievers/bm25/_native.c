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
 * an expand, first_terms or count runs, no clear while anything runs (RuntimeError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned char IS_SEPARATOR[256];
static unsigned char IS_EDGE[256]; /* tokenizer.EDGE_PUNCTUATION: printable ASCII but letters, digits and "_" */

/* ------------------------------------------------------------------ growable arrays */

typedef struct {
    void *data;
    size_t len;   /* items */
    size_t cap;   /* items */
    size_t item;  /* bytes per item */
} Vec;

static int vec_reserve(Vec *v, size_t need) {
    if (need <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < need) cap *= 2;
    void *grown = realloc(v->data, cap * v->item);
    if (!grown) return -1;
    v->data = grown;
    v->cap = cap;
    return 0;
}

static void vec_free(Vec *v) {
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

#define VEC_AT(v, type, i) (((type *)(v).data)[i])

/* ------------------------------------------------------------------ hashing */

static const uint64_t ONES = 0x0101010101010101ULL, HIGHS = 0x8080808080808080ULL;

/* A word with the high bit set in (at least) the lowest byte of `w` that is a separator (< 0x21 or 0x7F); 0
 * when none is. Bits above the lowest one may be wrong (a borrow), which is why only the lowest is used. */
static inline uint64_t separator_bits(uint64_t w) {
    uint64_t controls = (w - 0x21 * ONES) & ~w & HIGHS;
    uint64_t x = w ^ (0x7F * ONES);
    return controls | ((x - ONES) & ~x & HIGHS);
}

static inline uint64_t load_word(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* The first n (<= 8) bytes at p as a little-endian word, zero-padded. */
static inline uint64_t load_partial(const unsigned char *p, size_t n) {
    uint64_t w = 0;
    for (size_t i = n; i-- > 0;) w = (w << 8) | p[i];
    return w;
}

static inline uint64_t hash_key(uint64_t k1, uint64_t k2, uint64_t n) {
    uint64_t h = (k1 * 0x9E3779B97F4A7C15ULL) ^ (k2 * 0xC2B2AE3D27D4EB4FULL) ^ (n * 0x165667B19E3779F9ULL);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
    return h;
}

/* The hash of a chunk longer than 16 bytes (its first 16 bytes are k1, k2). */
static uint64_t hash_long(const unsigned char *p, size_t n, uint64_t k1, uint64_t k2) {
    uint64_t h = hash_key(k1, k2, n);
    size_t i = 16;
    for (; i + 8 <= n; i += 8) h = hash_key(h, load_word(p + i), i);
    if (i < n) h = hash_key(h, load_partial(p + i, n - i), i);
    return h;
}

/* ------------------------------------------------------------------ ChunkTable */

/* A slot of the hash table: a chunk's first 16 bytes as two little-endian words, zero-padded (a chunk holds no
 * NUL byte, so a chunk of up to 16 bytes is told apart by k1, k2, len alone; a longer one compares its other
 * bytes too), its hash, length and id. One cache line holds two slots: a lookup reads one. */
typedef struct {
    uint64_t k1, k2;
    uint64_t hash;
    int32_t len; /* 0: a free slot (a chunk is never empty) */
    int32_t chunk;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t n_slots;      /* a power of two, at least twice the chunks */
    int bits;            /* log2(n_slots): a chunk's first slot is the top `bits` bits of its hash */
    Vec bytes;           /* the chunks' bytes, one after the other (char) */
    Vec offset;          /* per chunk: where its bytes start in `bytes` (int64) */
    Vec length;          /* per chunk: its length in bytes (int32) */
    Vec term_start;      /* per analysed chunk: where its term ids start in `terms` (int64) */
    Vec term_count;      /* per analysed chunk: how many term ids it has (int32) */
    Vec terms;           /* the term ids of all analysed chunks (int64) */
    size_t scanned;      /* the chunks handed out by scans (as new chunks): ids below this */
    int words;           /* scan analyses plain words itself (see simple_term) */
    int stemming;        /* ... and stems them */
    PyObject *stop_words; /* ... and drops these (a tuple of str) */
    int scanning;        /* a scan is walking the texts (GIL released): no other scan, no clear */
    int expanding;       /* expands walking the term ids (GIL released): no set_terms, no clear */
} ChunkTable;

static void table_release(ChunkTable *t) {
    free(t->slots);
    t->slots = NULL;
    t->n_slots = 0;
    vec_free(&t->bytes);
    vec_free(&t->offset);
    vec_free(&t->length);
    vec_free(&t->term_start);
    vec_free(&t->term_count);
    vec_free(&t->terms);
}

static int table_reset(ChunkTable *t) {
    table_release(t);
    t->bytes.item = 1;
    t->offset.item = sizeof(int64_t);
    t->length.item = sizeof(int32_t);
    t->term_start.item = sizeof(int64_t);
    t->term_count.item = sizeof(int32_t);
    t->terms.item = sizeof(int64_t);
    t->scanned = 0;
    t->bits = 16;
    t->slots = calloc((size_t)1 << t->bits, sizeof(Slot));
    if (!t->slots) return -1;
    t->n_slots = (size_t)1 << t->bits;
    return 0;
}

/* Twice the slots (the table is half full) and every chunk re-inserted; -1 when out of memory. */
static int table_grow(ChunkTable *t) {
    int bits = t->bits + 1;
    size_t n_slots = (size_t)1 << bits;
    Slot *slots = calloc(n_slots, sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < t->n_slots; i++) {
        if (!t->slots[i].len) continue;
        size_t s = (size_t)(t->slots[i].hash >> (64 - bits));
        while (slots[s].len) s = (s + 1) & (n_slots - 1);
        slots[s] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    t->bits = bits;
    return 0;
}

/* Add chunk p[0:n] (keys k1, k2, hash h) in the free slot s; its id, -1 when out of memory, -2 when the ids
 * ran out. */
static int64_t table_add(ChunkTable *t, size_t s, const unsigned char *p, size_t n, uint64_t k1, uint64_t k2,
                         uint64_t h) {
    size_t id = t->offset.len;
    if (id >= INT32_MAX || n > INT32_MAX) return -2;
    if (vec_reserve(&t->bytes, t->bytes.len + n) < 0 || vec_reserve(&t->offset, id + 1) < 0 ||
        vec_reserve(&t->length, id + 1) < 0)
        return -1;
    memcpy((char *)t->bytes.data + t->bytes.len, p, n);
    VEC_AT(t->offset, int64_t, id) = (int64_t)t->bytes.len;
    VEC_AT(t->length, int32_t, id) = (int32_t)n;
    t->bytes.len += n;
    t->offset.len = t->length.len = id + 1;
    Slot *slot = &t->slots[s];
    slot->k1 = k1;
    slot->k2 = k2;
    slot->hash = h;
    slot->len = (int32_t)n;
    slot->chunk = (int32_t)id;
    if (2 * (id + 1) > t->n_slots && table_grow(t) < 0) return -1;
    return (int64_t)id;
}

/* The hash of chunk p[0:n] (k1, k2: its first 16 bytes, zero-padded). */
static inline uint64_t chunk_hash(const unsigned char *p, size_t n, uint64_t k1, uint64_t k2) {
    return n <= 16 ? hash_key(k1, k2, n) : hash_long(p, n, k1, k2);
}

/* The id of chunk p[0:n] (k1, k2: its first 16 bytes, zero-padded; h: its hash), added when new; -1 when out
 * of memory, -2 when the ids ran out. */
static inline int64_t table_find_or_add(ChunkTable *t, const unsigned char *p, size_t n, uint64_t k1,
                                        uint64_t k2, uint64_t h) {
    size_t mask = t->n_slots - 1;
    size_t s = (size_t)(h >> (64 - t->bits));
    for (;;) {
        const Slot *slot = &t->slots[s];
        if (!slot->len) return table_add(t, s, p, n, k1, k2, h);
        if (slot->hash == h && (size_t)slot->len == n && slot->k1 == k1 && slot->k2 == k2 &&
            (n <= 16 || memcmp((const char *)t->bytes.data + VEC_AT(t->offset, int64_t, slot->chunk) + 16, p + 16,
                               n - 16) == 0))
            return slot->chunk;
        s = (s + 1) & mask;
    }
}

/* The chunk starting at p[0] (not a separator), of the bytes before `end`; `room` bytes may be read from p
 * (at least end - p). Sets its length and keys. */
static inline size_t chunk_at(const unsigned char *p, size_t before_end, size_t room, uint64_t *k1,
                              uint64_t *k2) {
    static const uint64_t LOW[9] = {0, 0xFFULL, 0xFFFFULL, 0xFFFFFFULL, 0xFFFFFFFFULL, 0xFFFFFFFFFFULL,
                                    0xFFFFFFFFFFFFULL, 0xFFFFFFFFFFFFFFULL, ~0ULL};
    size_t n;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
    if (room >= 16) { /* two word loads; the first separator by bit tricks */
        uint64_t a = load_word(p), b = load_word(p + 8);
        uint64_t m = separator_bits(a);
        if (m) {
            n = (size_t)__builtin_ctzll(m) / 8;
        } else if ((m = separator_bits(b))) {
            n = 8 + (size_t)__builtin_ctzll(m) / 8;
        } else {
            n = 16;
            while (n < before_end && !IS_SEPARATOR[p[n]]) n++;
        }
        if (n > before_end) n = before_end;
        *k1 = n >= 8 ? a : a & LOW[n];
        *k2 = n >= 16 ? b : (n <= 8 ? 0 : b & LOW[n - 8]);
        return n;
    }
#endif
    (void)room;
    n = 0;
    while (n < before_end && !IS_SEPARATOR[p[n]]) n++;
    size_t first = n < 8 ? n : 8;
    *k1 = load_partial(p, first);
    *k2 = n <= 8 ? 0 : load_partial(p + 8, n < 16 ? n - 8 : 8);
    return n;
}

static PyObject *ChunkTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"words", "stop_words", "stemming", NULL};
    int words = 0, stemming = 1;
    PyObject *stop_words = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$pOp:ChunkTable", kwlist, &words, &stop_words, &stemming))
        return NULL;
    PyObject *stops = stop_words ? PySequence_Tuple(stop_words) : PyTuple_New(0);
    if (!stops) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stops); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(stops, i))) {
            PyErr_SetString(PyExc_TypeError, "ChunkTable: stop_words must be str");
            Py_DECREF(stops);
            return NULL;
        }
    }
    ChunkTable *t = (ChunkTable *)type->tp_alloc(type, 0);
    if (!t) {
        Py_DECREF(stops);
        return NULL;
    }
    t->words = words;
    t->stemming = stemming;
    t->stop_words = stops;
    if (table_reset(t) < 0) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    return (PyObject *)t;
}

static void ChunkTable_dealloc(ChunkTable *t) {
    table_release(t);
    Py_XDECREF(t->stop_words);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t ChunkTable_len(ChunkTable *t) { return (Py_ssize_t)t->scanned; }

/* -1 with an exception set when a scan (`scan`) or an expand (`expand`) runs on another thread, or the table
 * lost its slots to an earlier failure and cannot get them back. */
static int check_free(ChunkTable *t, int scan, int expand) {
    if ((scan && t->scanning) || (expand && t->expanding)) {
        PyErr_SetString(PyExc_RuntimeError,
                        t->scanning ? "ChunkTable: a scan is running on another thread"
                                    : "ChunkTable: an expand is running on another thread");
        return -1;
    }
    if (!t->slots && table_reset(t) < 0) { /* an earlier reset ran out of memory */
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* A buffer of int64 items (its length in items via *n); -1 with an exception set when it is not one. */
static int int64_items(Py_buffer *view, const char *name, Py_ssize_t *n) {
    if (view->len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s must hold int64 items, got %zd bytes", name, view->len);
        return -1;
    }
    *n = view->len / (Py_ssize_t)sizeof(int64_t);
    return 0;
}

static PyObject *ChunkTable_clear(ChunkTable *t, PyObject *Py_UNUSED(ignored)) {
    if (check_free(t, 1, 1) < 0) return NULL;
    if (table_reset(t) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* Lookups go in batches: each chunk's hash is computed and its slot prefetched when it is found, and the batch
 * is looked up in order once full, so the memory reads of many lookups overlap. */
#define BATCH 64
#if defined(__GNUC__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)0)
#endif

typedef struct {
    uint64_t k1, k2, h;
    const unsigned char *p; /* the chunk's bytes in its text, or NULL: at `off` in the batch's scratch */
    size_t off, n;
} Pending;

typedef struct {
    ChunkTable *t;
    Pending items[BATCH];
    int used;
    Vec scratch; /* chunks encoded to UTF-8, each followed by 16 zero bytes (for chunk_at's word reads) */
    int32_t *out;
    size_t n_out;
} Batch;

/* Look every queued chunk up, in order; 0, or table_find_or_add's failure (-1, -2). */
static int batch_flush(Batch *b) {
    for (int i = 0; i < b->used; i++) {
        const Pending *q = &b->items[i];
        const unsigned char *p = q->p ? q->p : (const unsigned char *)b->scratch.data + q->off;
        int64_t id = table_find_or_add(b->t, p, q->n, q->k1, q->k2, q->h);
        if (id < 0) return (int)id;
        b->out[b->n_out++] = (int32_t)id;
    }
    b->used = 0;
    b->scratch.len = 0;
    return 0;
}

/* Queue the chunk p[0:n] (p NULL: at `off` in the scratch) with keys k1, k2; flush a full batch. */
static inline int batch_push(Batch *b, const unsigned char *p, size_t off, size_t n, uint64_t k1, uint64_t k2) {
    const unsigned char *bytes = p ? p : (const unsigned char *)b->scratch.data + off;
    uint64_t h = chunk_hash(bytes, n, k1, k2);
    PREFETCH(&b->t->slots[h >> (64 - b->t->bits)]);
    Pending *q = &b->items[b->used++];
    q->k1 = k1;
    q->k2 = k2;
    q->h = h;
    q->p = p;
    q->off = off;
    q->n = n;
    return b->used == BATCH ? batch_flush(b) : 0;
}

/* Code point c as UTF-8 at q (lone surrogates as three bytes, as "surrogatepass" writes them); the end. */
static inline unsigned char *put_utf8(unsigned char *q, Py_UCS4 c) {
    if (c < 0x80) {
        *q++ = (unsigned char)c;
    } else if (c < 0x800) {
        *q++ = (unsigned char)(0xC0 | (c >> 6));
        *q++ = (unsigned char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *q++ = (unsigned char)(0xE0 | (c >> 12));
        *q++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (unsigned char)(0x80 | (c & 0x3F));
    } else {
        *q++ = (unsigned char)(0xF0 | (c >> 18));
        *q++ = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
        *q++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (unsigned char)(0x80 | (c & 0x3F));
    }
    return q;
}

/* Encode characters d[from:to] (any unit type) into the scratch and queue them as one chunk. */
#define PUSH_ENCODED(b, d, from, to)                                                                              \
    do {                                                                                                          \
        if (vec_reserve(&(b)->scratch, (b)->scratch.len + 4 * ((to) - (from)) + 16) < 0) return -1;               \
        size_t off_ = (b)->scratch.len;                                                                           \
        unsigned char *first_ = (unsigned char *)(b)->scratch.data + off_, *q_ = first_;                          \
        for (size_t k_ = (from); k_ < (to); k_++) q_ = put_utf8(q_, (d)[k_]);                                     \
        size_t m_ = (size_t)(q_ - first_);                                                                        \
        memset(q_, 0, 16);                                                                                        \
        (b)->scratch.len = off_ + m_ + 16;                                                                        \
        uint64_t w1_, w2_;                                                                                        \
        chunk_at(first_, m_, m_ + 16, &w1_, &w2_);                                                                \
        int status_ = batch_push((b), NULL, off_, m_, w1_, w2_);                                                  \
        if (status_ < 0) return status_;                                                                          \
    } while (0)

/* A one-byte-per-character text (ASCII or Latin-1, p[0:end]); *count: its chunks. Its chunks of ASCII
 * characters are their own UTF-8 bytes; a chunk with a Latin-1 character (a byte >= 0x80) is encoded first. */
static int scan_ucs1(Batch *b, const unsigned char *p, size_t end, int ascii, int64_t *count) {
    size_t j = 0;
    uint64_t k1, k2;
    for (;;) {
        while (j < end && IS_SEPARATOR[p[j]]) j++;
        if (j >= end) return 0;
        size_t n = chunk_at(p + j, end - j, end - j, &k1, &k2);
        int latin1 = 0;
        if (!ascii) {
            if (n <= 16) {
                latin1 = ((k1 | k2) & HIGHS) != 0;
            } else {
                for (size_t k = 0; k < n && !latin1; k++) latin1 = p[j + k] >= 0x80;
            }
        }
        if (latin1) {
            PUSH_ENCODED(b, p, j, j + n);
        } else {
            int status = batch_push(b, p + j, 0, n, k1, k2);
            if (status < 0) return status;
        }
        (*count)++;
        j += n;
    }
}

/* A text of two or four bytes per character (d[0:end]); *count: its chunks. Each chunk is encoded first. */
#define SCAN_WIDE(NAME, UNIT)                                                                                     \
    static int NAME(Batch *b, const UNIT *d, size_t end, int64_t *count) {                                        \
        size_t j = 0;                                                                                             \
        for (;;) {                                                                                                \
            while (j < end && (d[j] <= 0x20 || d[j] == 0x7F)) j++;                                                \
            if (j >= end) return 0;                                                                               \
            size_t start = j;                                                                                     \
            while (j < end && !(d[j] <= 0x20 || d[j] == 0x7F)) j++;                                               \
            PUSH_ENCODED(b, d, start, j);                                                                         \
            (*count)++;                                                                                           \
        }                                                                                                         \
    }
SCAN_WIDE(scan_ucs2, Py_UCS2)
SCAN_WIDE(scan_ucs4, Py_UCS4)

typedef struct {
    const void *data;
    Py_ssize_t length; /* code points */
    int kind;
    int ascii;
} Text;

static size_t porter_stem(char *w, char *cv, size_t n);

/* What the analyzer makes of a plain word chunk (analyzer.py, EnglishAnalyzer._chunk_terms): an ASCII chunk
 * whose core (the chunk without the ASCII punctuation at its ends, tokenizer.EDGE_PUNCTUATION: every printable
 * ASCII character but letters, digits and "_") is 1-255 letters and digits is that one token, lower-cased, then
 * "" when it is a stop word, else Porter-stemmed (when stemming). A new reference: the term, "" (no term), or None
 * for any other chunk (Python analyses it). */
static PyObject *simple_term(ChunkTable *t, const unsigned char *p, size_t n) {
    size_t a = 0, b = n;
    for (size_t i = 0; i < n; i++)
        if (p[i] >= 0x80) Py_RETURN_NONE;
    while (a < b && IS_EDGE[p[a]]) a++;
    while (b > a && IS_EDGE[p[b - 1]]) b--;
    size_t m = b - a;
    if (m == 0 || m > 255) Py_RETURN_NONE;
    char w[2 * 256 + 4], *cv = w + 258;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = p[a + i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + ('a' - 'A'));
        else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) Py_RETURN_NONE;
        w[i] = (char)c;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->stop_words); i++) {
        PyObject *stop = PyTuple_GET_ITEM(t->stop_words, i);
        if (PyUnicode_IS_ASCII(stop) && (size_t)PyUnicode_GET_LENGTH(stop) == m &&
            memcmp(PyUnicode_DATA(stop), w, m) == 0)
            return PyUnicode_FromStringAndSize("", 0);
    }
    if (t->stemming) m = porter_stem(w, cv, m);
    return PyUnicode_FromStringAndSize(w, (Py_ssize_t)m);
}

static PyObject *ChunkTable_scan(ChunkTable *t, PyObject *arg) {
    if (check_free(t, 1, 0) < 0) return NULL;
    PyObject *seq = PySequence_Fast(arg, "scan: texts must be a sequence of str");
    if (!seq) return NULL;
    PyObject *result = NULL, *occ = NULL, *per = NULL, *new_chunks = NULL, *terms = NULL;
    Py_ssize_t n_texts = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Text *texts = PyMem_Malloc((size_t)(n_texts ? n_texts : 1) * sizeof(Text));
    if (!texts) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t most = 1; /* a chunk takes one code point and a separator, but a text's last chunk no separator */
    for (Py_ssize_t i = 0; i < n_texts; i++) {
        PyObject *s = items[i];
        if (!PyUnicode_Check(s)) {
            PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(s), "__name__");
            PyObject *repr = name ? PyObject_Repr(s) : NULL;
            PyObject *cut = repr ? PyUnicode_Substring(repr, 0, 80) : NULL;
            if (cut) PyErr_Format(PyExc_TypeError, "texts[%zd] must be str, got %S: %U", i, name, cut);
            Py_XDECREF(name);
            Py_XDECREF(repr);
            Py_XDECREF(cut);
            goto done;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(s) < 0) goto done;
#endif
        texts[i].data = PyUnicode_DATA(s);
        texts[i].length = PyUnicode_GET_LENGTH(s);
        texts[i].kind = PyUnicode_KIND(s);
        texts[i].ascii = PyUnicode_IS_ASCII(s);
        most += texts[i].length / 2 + 1;
    }
    occ = PyByteArray_FromStringAndSize(NULL, most * (Py_ssize_t)sizeof(int32_t));
    per = occ ? PyByteArray_FromStringAndSize(NULL, n_texts * (Py_ssize_t)sizeof(int64_t)) : NULL;
    if (!per) goto done;
    int32_t *out = (int32_t *)PyByteArray_AS_STRING(occ);
    int64_t *per_text = (int64_t *)PyByteArray_AS_STRING(per);
    size_t n_out = 0;
    int failed = 0;
    t->scanning = 1;
    /* the texts stay alive (seq holds them) and a str's characters never change: read without the GIL */
    Py_BEGIN_ALLOW_THREADS
    Batch *batch = malloc(sizeof(Batch));
    if (!batch) {
        failed = 1;
    } else {
        batch->t = t;
        batch->used = 0;
        batch->scratch = (Vec){NULL, 0, 0, 1};
        batch->out = out;
        batch->n_out = 0;
    }
    for (Py_ssize_t i = 0; i < n_texts && !failed; i++) {
        const Text *text = &texts[i];
        size_t end = (size_t)text->length;
        int64_t count = 0;
        int status;
        if (text->kind == PyUnicode_1BYTE_KIND)
            status = scan_ucs1(batch, text->data, end, text->ascii, &count);
        else if (text->kind == PyUnicode_2BYTE_KIND)
            status = scan_ucs2(batch, text->data, end, &count);
        else
            status = scan_ucs4(batch, text->data, end, &count);
        if (status < 0) failed = status == -2 ? 2 : 1;
        per_text[i] = count;
    }
    if (batch) {
        if (!failed) {
            int status = batch_flush(batch);
            if (status < 0) failed = status == -2 ? 2 : 1;
        }
        n_out = batch->n_out;
        vec_free(&batch->scratch);
        free(batch);
    }
    Py_END_ALLOW_THREADS
    t->scanning = 0;
    if (failed) { /* the chunks added so far stay, above `scanned`: the next scan hands them out */
        if (failed == 2)
            PyErr_SetString(PyExc_OverflowError, "scan: more than 2**31 - 1 distinct chunks");
        else
            PyErr_NoMemory();
        goto done;
    }
    if (PyByteArray_Resize(occ, (Py_ssize_t)(n_out * sizeof(int32_t))) < 0) goto done;
    /* new: every chunk not handed out yet (a failed scan's too), in id order */
    size_t first_new = t->scanned, n_new = t->offset.len - first_new;
    new_chunks = PyList_New((Py_ssize_t)n_new);
    terms = t->words ? PyList_New((Py_ssize_t)n_new) : Py_NewRef(Py_None);
    if (!new_chunks || !terms) goto done;
    for (size_t k = 0; k < n_new; k++) {
        size_t c = first_new + k;
        const unsigned char *bytes = (const unsigned char *)t->bytes.data + VEC_AT(t->offset, int64_t, c);
        size_t length = (size_t)VEC_AT(t->length, int32_t, c);
        PyObject *s = PyUnicode_DecodeUTF8((const char *)bytes, (Py_ssize_t)length, "surrogatepass");
        if (!s) goto done;
        PyList_SET_ITEM(new_chunks, (Py_ssize_t)k, s);
        if (t->words) {
            PyObject *term = simple_term(t, bytes, length);
            if (!term) goto done;
            PyList_SET_ITEM(terms, (Py_ssize_t)k, term);
        }
    }
    result = PyTuple_Pack(4, occ, per, new_chunks, terms);
    if (result) t->scanned = t->offset.len;
done:
    PyMem_Free(texts);
    Py_XDECREF(occ);
    Py_XDECREF(per);
    Py_XDECREF(new_chunks);
    Py_XDECREF(terms);
    Py_DECREF(seq);
    return result;
}

static PyObject *ChunkTable_set_terms(ChunkTable *t, PyObject *found) {
    if (check_free(t, 0, 1) < 0) return NULL;
    PyObject *items = PySequence_Fast(found, "set_terms: expected a sequence of term id sequences");
    if (!items) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    size_t first = t->term_count.len, pending = t->scanned - first;
    if ((size_t)n > pending) {
        PyErr_Format(PyExc_ValueError, "set_terms: %zu chunks wait for their terms, got terms for %zd", pending, n);
        goto done;
    }
    size_t at = t->terms.len;
    if (vec_reserve(&t->term_start, first + (size_t)n) < 0 || vec_reserve(&t->term_count, first + (size_t)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ids = PySequence_Fast(PySequence_Fast_GET_ITEM(items, i), "set_terms: each chunk's terms must be "
                                                                            "a sequence of term ids");
        if (!ids) goto undo;
        Py_ssize_t m = PySequence_Fast_GET_SIZE(ids);
        if (m > INT32_MAX || vec_reserve(&t->terms, at + (size_t)m) < 0) {
            Py_DECREF(ids);
            PyErr_NoMemory();
            goto undo;
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            long long id = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ids, k));
            if (id < 0) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "set_terms: chunk %zd's term id %lld is negative", i, id);
                Py_DECREF(ids);
                goto undo;
            }
            VEC_AT(t->terms, int64_t, at + (size_t)k) = (int64_t)id;
        }
        Py_DECREF(ids);
        VEC_AT(t->term_start, int64_t, first + (size_t)i) = (int64_t)at;
        VEC_AT(t->term_count, int32_t, first + (size_t)i) = (int32_t)m;
        at += (size_t)m;
    }
    /* all or nothing: the lengths move only once every chunk's terms are in */
    t->terms.len = at;
    t->term_start.len = t->term_count.len = first + (size_t)n;
    result = Py_None;
    Py_INCREF(result);
    goto done;
undo:
    /* nothing to undo: the lengths were not moved, so the next set_terms writes over these items */
done:
    Py_DECREF(items);
    return result;
}

/* The (occurrences, chunks_per_text) pair of one scanned batch, checked against each other and the table: every
 * occurrence a chunk that has its terms. Sets the numbers of occurrences, texts and term ids (tokens); -1 with
 * an exception set when they do not fit. */
static int check_scanned(ChunkTable *t, Py_buffer *occ_view, Py_buffer *per_view, const char *where,
                         Py_ssize_t *n_occ, Py_ssize_t *n_texts, int64_t *n_tokens) {
    if (occ_view->len % (Py_ssize_t)sizeof(int32_t)) {
        PyErr_Format(PyExc_ValueError, "%s: occurrences must hold int32 items, got %zd bytes", where, occ_view->len);
        return -1;
    }
    if (int64_items(per_view, "chunks_per_text", n_texts) < 0) return -1;
    *n_occ = occ_view->len / (Py_ssize_t)sizeof(int32_t);
    const int32_t *occ = (const int32_t *)occ_view->buf;
    const int64_t *chunks = (const int64_t *)per_view->buf;
    int64_t sum = 0;
    for (Py_ssize_t i = 0; i < *n_texts; i++) {
        if (chunks[i] < 0 || chunks[i] > *n_occ - sum) {
            PyErr_Format(PyExc_ValueError, "%s: chunks_per_text[%zd] = %lld runs past the %zd occurrences", where, i,
                         (long long)chunks[i], *n_occ);
            return -1;
        }
        sum += chunks[i];
    }
    if (sum != *n_occ) {
        PyErr_Format(PyExc_ValueError, "%s: chunks_per_text adds up to %lld, got %zd occurrences", where,
                     (long long)sum, *n_occ);
        return -1;
    }
    int32_t analysed = (int32_t)t->term_count.len;
    const int32_t *count = (const int32_t *)t->term_count.data;
    int64_t tokens = 0;
    for (Py_ssize_t i = 0; i < *n_occ; i++) {
        if (occ[i] < 0 || occ[i] >= analysed) {
            PyErr_Format(PyExc_ValueError, "%s: occurrence %zd is chunk %d, which has no terms", where, i, occ[i]);
            return -1;
        }
        tokens += count[occ[i]];
    }
    *n_tokens = tokens;
    return 0;
}

static PyObject *ChunkTable_expand(ChunkTable *t, PyObject *args) {
    Py_buffer occ_view, per_view;
    if (check_free(t, 0, 0) < 0) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*:expand", &occ_view, &per_view)) return NULL;
    PyObject *result = NULL, *ids_out = NULL, *per_out = NULL;
    Py_ssize_t n_occ, n_texts;
    int64_t total;
    if (check_scanned(t, &occ_view, &per_view, "expand", &n_occ, &n_texts, &total) < 0) goto done;
    const int32_t *occ = (const int32_t *)occ_view.buf;
    const int64_t *chunks = (const int64_t *)per_view.buf;
    const int32_t *count = (const int32_t *)t->term_count.data;
    const int64_t *start = (const int64_t *)t->term_start.data;
    const int64_t *terms = (const int64_t *)t->terms.data;
    ids_out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(total * (int64_t)sizeof(int64_t)));
    per_out = ids_out ? PyByteArray_FromStringAndSize(NULL, n_texts * (Py_ssize_t)sizeof(int64_t)) : NULL;
    if (!per_out) goto done;
    int64_t *ids = (int64_t *)PyByteArray_AS_STRING(ids_out);
    int64_t *per_text = (int64_t *)PyByteArray_AS_STRING(per_out);
    t->expanding++;
    Py_BEGIN_ALLOW_THREADS
    int64_t at = 0;
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n_texts; i++) {
        int64_t before = at;
        for (int64_t k = 0; k < chunks[i]; k++, o++) {
            int32_t c = occ[o];
            const int64_t *from = terms + start[c];
            for (int32_t q = 0; q < count[c]; q++) ids[at++] = from[q];
        }
        per_text[i] = at - before;
    }
    Py_END_ALLOW_THREADS
    t->expanding--;
    result = PyTuple_Pack(2, ids_out, per_out);
done:
    Py_XDECREF(ids_out);
    Py_XDECREF(per_out);
    PyBuffer_Release(&occ_view);
    PyBuffer_Release(&per_view);
    return result;
}

static PyObject *ChunkTable_first_terms(ChunkTable *t, PyObject *args) {
    PyObject *parts;
    Py_ssize_t n_ids;
    if (check_free(t, 0, 0) < 0) return NULL;
    if (!PyArg_ParseTuple(args, "On:first_terms", &parts, &n_ids)) return NULL;
    PyObject *items = PySequence_Fast(parts, "first_terms: parts must be a sequence of (occurrences, chunks_per_text)");
    if (!items) return NULL;
    Py_ssize_t n_parts = PySequence_Fast_GET_SIZE(items);
    PyObject *result = NULL, *order_out = NULL, *first_out = NULL;
    int64_t *rank = NULL, n_tokens;
    unsigned char *visited = NULL;
    Py_buffer *views = PyMem_Calloc(2 * (size_t)(n_parts ? n_parts : 1), sizeof(Py_buffer));
    Py_ssize_t *sizes = PyMem_Calloc(2 * (size_t)(n_parts ? n_parts : 1), sizeof(Py_ssize_t));
    if (!views || !sizes) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_parts; k++) { /* a failed parse releases what it took (obj NULL again) */
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, k), "y*y*:first_terms", &views[2 * k],
                              &views[2 * k + 1]) ||
            check_scanned(t, &views[2 * k], &views[2 * k + 1], "first_terms", &sizes[2 * k], &sizes[2 * k + 1],
                          &n_tokens) < 0)
            goto done;
    }
    const int64_t *terms = (const int64_t *)t->terms.data;
    for (size_t i = 0; i < t->terms.len; i++) {
        if (terms[i] >= n_ids) {
            PyErr_Format(PyExc_ValueError, "first_terms: the table holds term id %lld, n_ids = %zd",
                         (long long)terms[i], n_ids);
            goto done;
        }
    }
    rank = malloc((n_ids ? n_ids : 1) * sizeof(int64_t));
    visited = calloc(t->term_count.len ? t->term_count.len : 1, 1);
    order_out = PyByteArray_FromStringAndSize(NULL, n_ids * (Py_ssize_t)sizeof(int64_t));
    first_out = order_out ? PyByteArray_FromStringAndSize(NULL, n_ids * (Py_ssize_t)sizeof(int64_t)) : NULL;
    if (!rank || !visited || !first_out) {
        if (!rank || !visited) PyErr_NoMemory();
        goto done;
    }
    int64_t *order = (int64_t *)PyByteArray_AS_STRING(order_out);
    int64_t *first_text = (int64_t *)PyByteArray_AS_STRING(first_out);
    const int32_t *count = (const int32_t *)t->term_count.data;
    const int64_t *start = (const int64_t *)t->term_start.data;
    int64_t next = 0;
    t->expanding++;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_ids; i++) rank[i] = -1;
    int64_t text = 0;
    for (Py_ssize_t k = 0; k < n_parts; k++) {
        const int32_t *occ = (const int32_t *)views[2 * k].buf;
        const int64_t *chunks = (const int64_t *)views[2 * k + 1].buf;
        Py_ssize_t o = 0;
        for (Py_ssize_t i = 0; i < sizes[2 * k + 1]; i++, text++) {
            for (int64_t c = 0; c < chunks[i]; c++, o++) {
                if (visited[occ[o]]) continue; /* a chunk's terms first occur at its first occurrence */
                visited[occ[o]] = 1;
                const int64_t *ids = terms + start[occ[o]];
                for (int32_t m = 0; m < count[occ[o]]; m++) {
                    if (rank[ids[m]] < 0) {
                        rank[ids[m]] = next;
                        order[next] = ids[m];
                        first_text[next++] = text;
                    }
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    t->expanding--;
    if (PyByteArray_Resize(order_out, (Py_ssize_t)next * (Py_ssize_t)sizeof(int64_t)) < 0 ||
        PyByteArray_Resize(first_out, (Py_ssize_t)next * (Py_ssize_t)sizeof(int64_t)) < 0)
        goto done;
    result = PyTuple_Pack(2, order_out, first_out);
done:
    for (Py_ssize_t k = 0; k < 2 * n_parts && views; k++)
        if (views[k].obj) PyBuffer_Release(&views[k]);
    PyMem_Free(views);
    PyMem_Free(sizes);
    free(rank);
    free(visited);
    Py_XDECREF(order_out);
    Py_XDECREF(first_out);
    Py_DECREF(items);
    return result;
}

static void sort_int32(int32_t *a, size_t n) {
    while (n > 16) { /* quicksort, median of three, recursing into the smaller side */
        int32_t x = a[0], y = a[n / 2], z = a[n - 1];
        int32_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        size_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i >= j) break;
            int32_t tmp = a[i];
            a[i] = a[j];
            a[j] = tmp;
            i++;
            j--;
        }
        size_t left = j + 1; /* a[0:left] <= pivot <= a[left:n], 0 < left < n */
        if (left < n - left) {
            sort_int32(a, left);
            a += left;
            n -= left;
        } else {
            sort_int32(a + left, n - left);
            n = left;
        }
    }
    for (size_t i = 1; i < n; i++) {
        int32_t v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

/* count's view of a chunk: its one final term id (>= 0), or one of these */
enum { NO_TERMS = -1, MANY_TERMS = -2, NO_FINAL_ID = -3 };

static PyObject *ChunkTable_count(ChunkTable *t, PyObject *args) {
    Py_buffer occ_view, per_view, final_view;
    Py_ssize_t n_terms;
    if (check_free(t, 0, 0) < 0) return NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*n:count", &occ_view, &per_view, &final_view, &n_terms)) return NULL;
    PyObject *result = NULL, *columns_out = NULL, *counts_out = NULL, *per_row_out = NULL;
    int32_t *seen = NULL, *single = NULL;
    Py_ssize_t n_occ, n_texts, n_final;
    int64_t n_tokens;
    if (check_scanned(t, &occ_view, &per_view, "count", &n_occ, &n_texts, &n_tokens) < 0 ||
        int64_items(&final_view, "final", &n_final) < 0)
        goto done;
    if (n_terms < 0 || n_terms > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "count: n_terms = %zd is not in [0, 2**31)", n_terms);
        goto done;
    }
    const int32_t *occ = (const int32_t *)occ_view.buf;
    const int64_t *chunks = (const int64_t *)per_view.buf;
    const int64_t *final = (const int64_t *)final_view.buf;
    const int32_t *count = (const int32_t *)t->term_count.data;
    const int64_t *start = (const int64_t *)t->term_start.data;
    const int64_t *terms = (const int64_t *)t->terms.data;
    size_t n_chunks = t->term_count.len;
    seen = calloc(n_terms ? n_terms : 1, sizeof(int32_t));
    single = malloc((n_chunks ? n_chunks : 1) * sizeof(int32_t));
    columns_out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n_tokens * (Py_ssize_t)sizeof(int32_t));
    counts_out = columns_out ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n_tokens * (Py_ssize_t)sizeof(int32_t))
                             : NULL;
    per_row_out = counts_out ? PyByteArray_FromStringAndSize(NULL, n_texts * (Py_ssize_t)sizeof(int64_t)) : NULL;
    if (!seen || !single || !per_row_out) {
        if (!seen || !single) PyErr_NoMemory();
        goto done;
    }
    int32_t *columns = (int32_t *)PyByteArray_AS_STRING(columns_out);
    int32_t *counts = (int32_t *)PyByteArray_AS_STRING(counts_out);
    int64_t *per_row = (int64_t *)PyByteArray_AS_STRING(per_row_out);
    size_t out = 0;
    Py_ssize_t bad = -1; /* a text with a term that has no final id */
    int64_t bad_id = 0;
    t->expanding++;
    Py_BEGIN_ALLOW_THREADS
    for (size_t c = 0; c < n_chunks; c++) { /* most chunks have one term: its final id, without the indirections */
        const int64_t *ids = terms + start[c];
        int32_t kind = count[c] == 0 ? NO_TERMS : (count[c] == 1 ? 0 : MANY_TERMS);
        for (int32_t m = 0; m < count[c]; m++)
            if (ids[m] >= n_final || final[ids[m]] < 0 || final[ids[m]] >= n_terms) kind = NO_FINAL_ID;
        single[c] = kind == 0 ? (int32_t)final[ids[0]] : kind;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n_texts && bad < 0; i++) {
        int32_t *row = columns + out;
        size_t distinct = 0;
        for (int64_t k = 0; k < chunks[i]; k++, at++) {
            int32_t c = occ[at], f = single[c];
            if (f >= 0) {
                if (seen[f]++ == 0) row[distinct++] = f;
            } else if (f == MANY_TERMS) {
                const int64_t *ids = terms + start[c];
                for (int32_t m = 0; m < count[c]; m++) {
                    f = (int32_t)final[ids[m]];
                    if (seen[f]++ == 0) row[distinct++] = f;
                }
            } else if (f == NO_FINAL_ID) {
                const int64_t *ids = terms + start[c];
                for (int32_t m = 0; m < count[c]; m++)
                    if (ids[m] >= n_final || final[ids[m]] < 0 || final[ids[m]] >= n_terms) bad_id = ids[m];
                bad = i;
                break;
            }
        }
        sort_int32(row, distinct);
        for (size_t k = 0; k < distinct; k++) {
            counts[out + k] = seen[row[k]];
            seen[row[k]] = 0;
        }
        per_row[i] = (int64_t)distinct;
        out += distinct;
    }
    Py_END_ALLOW_THREADS
    t->expanding--;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "count: text %zd has term id %lld, which has no final id in [0, %zd)", bad,
                     (long long)bad_id, n_terms);
        goto done;
    }
    if (PyByteArray_Resize(columns_out, (Py_ssize_t)(out * sizeof(int32_t))) < 0 ||
        PyByteArray_Resize(counts_out, (Py_ssize_t)(out * sizeof(int32_t))) < 0)
        goto done;
    result = PyTuple_Pack(3, columns_out, counts_out, per_row_out);
done:
    free(seen);
    free(single);
    Py_XDECREF(columns_out);
    Py_XDECREF(counts_out);
    Py_XDECREF(per_row_out);
    PyBuffer_Release(&occ_view);
    PyBuffer_Release(&per_view);
    PyBuffer_Release(&final_view);
    return result;
}

static PyMethodDef ChunkTable_methods[] = {
    {"scan", (PyCFunction)ChunkTable_scan, METH_O,
     "scan(texts) -> (occurrences, chunks_per_text, new_chunks, words)"},
    {"set_terms", (PyCFunction)ChunkTable_set_terms, METH_O,
     "set_terms(found): the term ids (a sequence of int sequences) of the next chunks handed out, in id order"},
    {"expand", (PyCFunction)ChunkTable_expand, METH_VARARGS,
     "expand(occurrences, chunks_per_text) -> (term_ids, terms_per_text)"},
    {"first_terms", (PyCFunction)ChunkTable_first_terms, METH_VARARGS,
     "first_terms(parts, n_ids) -> (order, first_text)"},
    {"count", (PyCFunction)ChunkTable_count, METH_VARARGS,
     "count(occurrences, chunks_per_text, final, n_terms) -> (columns, counts, per_row)"},
    {"clear", (PyCFunction)ChunkTable_clear, METH_NOARGS, "Forget every chunk."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ChunkTable_as_sequence = {
    .sq_length = (lenfunc)ChunkTable_len,
};

static PyTypeObject ChunkTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "r2med.retrievers.bm25._native.ChunkTable",
    .tp_basicsize = sizeof(ChunkTable),
    .tp_dealloc = (destructor)ChunkTable_dealloc,
    .tp_as_sequence = &ChunkTable_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Chunk bytes -> chunk id -> term ids (see the module's docstring).",
    .tp_methods = ChunkTable_methods,
    .tp_new = ChunkTable_new,
};

/* ------------------------------------------------------------------ Porter stemmer (ASCII words) */

/* porter.py's stemmer (Lucene's PorterStemmer) for a word of ASCII characters, step for step: porter.py's
 * docstring says what sets it apart from other Porter stemmers. w holds n characters and room for one more; cv
 * the consonant map ('c', 'v'); the new length is returned. */

static size_t porter_measure(const char *cv, size_t n) { /* vc pairs in cv[0:n] */
    size_t m = 0;
    for (size_t i = 1; i < n; i++) m += cv[i - 1] == 'v' && cv[i] == 'c';
    return m;
}

static int porter_has_vowel(const char *cv, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (cv[i] == 'v') return 1;
    return 0;
}

static int porter_ends(const char *w, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && memcmp(w + n - k, suffix, k) == 0;
}

static int porter_ends_cvc(const char *w, const char *cv, size_t n) {
    return n >= 3 && cv[n - 3] == 'c' && cv[n - 2] == 'v' && cv[n - 1] == 'c' && w[n - 1] != 'w' &&
           w[n - 1] != 'x' && w[n - 1] != 'y';
}

static char porter_mark(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' ? 'v' : 'c'; }

/* rules: suffix, replacement pairs ending with NULL; the first suffix w ends with decides (replaced when its stem
 * has m > 0). */
static size_t porter_replace_first(char *w, char *cv, size_t n, const char *const *rules) {
    for (; rules && rules[0]; rules += 2) {
        if (!porter_ends(w, n, rules[0])) continue;
        size_t stem = n - strlen(rules[0]);
        if (porter_measure(cv, stem) > 0) {
            size_t k = strlen(rules[1]);
            memcpy(w + stem, rules[1], k);
            for (size_t i = 0; i < k; i++) cv[stem + i] = porter_mark(rules[1][i]);
            return stem + k;
        }
        break;
    }
    return n;
}

static const char *const STEP3_A[] = {"ational", "ate", "tional", "tion", NULL};
static const char *const STEP3_C[] = {"enci", "ence", "anci", "ance", NULL};
static const char *const STEP3_E[] = {"izer", "ize", NULL};
static const char *const STEP3_L[] = {"bli", "ble", "alli", "al", "entli", "ent", "eli", "e", "ousli", "ous", NULL};
static const char *const STEP3_O[] = {"ization", "ize", "ation", "ate", "ator", "ate", NULL};
static const char *const STEP3_S[] = {"alism", "al", "iveness", "ive", "fulness", "ful", "ousness", "ous", NULL};
static const char *const STEP3_T[] = {"aliti", "al", "iviti", "ive", "biliti", "ble", NULL};
static const char *const STEP3_G[] = {"logi", "log", NULL};
static const char *const STEP4_E[] = {"icate", "ic", "ative", "", "alize", "al", NULL};
static const char *const STEP4_I[] = {"iciti", "ic", NULL};
static const char *const STEP4_L[] = {"ical", "ic", "ful", "", NULL};
static const char *const STEP4_S[] = {"ness", "", NULL};

static const char *const *porter_step3(char c) {
    switch (c) {
    case 'a': return STEP3_A;
    case 'c': return STEP3_C;
    case 'e': return STEP3_E;
    case 'l': return STEP3_L;
    case 'o': return STEP3_O;
    case 's': return STEP3_S;
    case 't': return STEP3_T;
    case 'g': return STEP3_G;
    default: return NULL;
    }
}

static const char *const *porter_step4(char c) {
    switch (c) {
    case 'e': return STEP4_E;
    case 'i': return STEP4_I;
    case 'l': return STEP4_L;
    case 's': return STEP4_S;
    default: return NULL;
    }
}

static const char *const *porter_step5(char c) { /* suffixes only, NULL-terminated */
    static const char *const A[] = {"al", NULL}, *const C[] = {"ance", "ence", NULL}, *const E[] = {"er", NULL},
                             *const I[] = {"ic", NULL}, *const L[] = {"able", "ible", NULL},
                             *const N[] = {"ant", "ement", "ment", "ent", NULL}, *const O[] = {"ion", "ou", NULL},
                             *const S[] = {"ism", NULL}, *const T[] = {"ate", "iti", NULL},
                             *const U[] = {"ous", NULL}, *const V[] = {"ive", NULL}, *const Z[] = {"ize", NULL};
    switch (c) {
    case 'a': return A;
    case 'c': return C;
    case 'e': return E;
    case 'i': return I;
    case 'l': return L;
    case 'n': return N;
    case 'o': return O;
    case 's': return S;
    case 't': return T;
    case 'u': return U;
    case 'v': return V;
    case 'z': return Z;
    default: return NULL;
    }
}

static size_t porter_stem(char *w, char *cv, size_t n) {
    if (n <= 2) return n;
    for (size_t i = 0; i < n; i++) { /* y is a vowel after a consonant (and not first) */
        char c = w[i];
        cv[i] = c == 'y' ? (i == 0 || cv[i - 1] == 'v' ? 'c' : 'v') : porter_mark(c);
    }
    /* step 1: plurals, -ed, -ing */
    if (w[n - 1] == 's') {
        if (porter_ends(w, n, "sses") || porter_ends(w, n, "ies"))
            n -= 2;
        else if (w[n - 2] != 's')
            n -= 1;
    }
    if (porter_ends(w, n, "eed")) {
        if (porter_measure(cv, n - 3) > 0) n -= 1;
    } else if ((porter_ends(w, n, "ed") && porter_has_vowel(cv, n - 2)) ||
               (porter_ends(w, n, "ing") && porter_has_vowel(cv, n - 3))) {
        n -= w[n - 1] == 'd' ? 2 : 3;
        if (porter_ends(w, n, "at") || porter_ends(w, n, "bl") || porter_ends(w, n, "iz")) {
            w[n] = 'e';
            cv[n++] = 'v';
        } else if (n >= 2 && w[n - 1] == w[n - 2] && cv[n - 1] == 'c') {
            if (w[n - 1] != 'l' && w[n - 1] != 's' && w[n - 1] != 'z') n -= 1;
        } else if (porter_measure(cv, n) == 1 && porter_ends_cvc(w, cv, n)) {
            w[n] = 'e';
            cv[n++] = 'v';
        }
    }
    /* step 2: y -> i after a vowel somewhere before it */
    if (w[n - 1] == 'y' && porter_has_vowel(cv, n - 1)) {
        w[n - 1] = 'i';
        cv[n - 1] = 'v';
    }
    /* steps 3 and 4: double suffixes, then -ic-, -full, -ness */
    if (n > 1) n = porter_replace_first(w, cv, n, porter_step3(w[n - 2]));
    n = porter_replace_first(w, cv, n, porter_step4(w[n - 1]));
    /* step 5: -ant, -ence, ... removed when the stem has m > 1 */
    if (n > 1) {
        const char *const *suffixes = porter_step5(w[n - 2]);
        for (; suffixes && suffixes[0]; suffixes++) {
            if (!porter_ends(w, n, suffixes[0])) continue;
            size_t stem = n - strlen(suffixes[0]);
            if (strcmp(suffixes[0], "ion") == 0 && (stem == 0 || (w[stem - 1] != 's' && w[stem - 1] != 't'))) continue;
            if (porter_measure(cv, stem) > 1) n = stem;
            break;
        }
    }
    /* step 6: final -e, and -ll -> -l, when m > 1 */
    size_t m = porter_measure(cv, n);
    if (w[n - 1] == 'e' && (m > 1 || (m == 1 && !porter_ends_cvc(w, cv, n - 1)))) n -= 1;
    if (w[n - 1] == 'l' && n >= 2 && w[n - 2] == 'l' && cv[n - 1] == 'c' && m > 1) n -= 1;
    return n;
}

static PyObject *stem_ascii(PyObject *Py_UNUSED(module), PyObject *word) {
    if (!PyUnicode_Check(word) || !PyUnicode_IS_ASCII(word)) {
        PyErr_SetString(PyExc_TypeError, "stem_ascii: expected an ASCII str");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    if (n <= 2) return Py_NewRef(word);
    char small[2 * 300], *w = small;
    if (n > 290) {
        w = PyMem_Malloc(2 * (size_t)n + 4);
        if (!w) return PyErr_NoMemory();
    }
    char *cv = w + n + 2;
    memcpy(w, PyUnicode_DATA(word), (size_t)n);
    size_t m = porter_stem(w, cv, (size_t)n);
    PyObject *result = (Py_ssize_t)m == n && memcmp(w, PyUnicode_DATA(word), (size_t)n) == 0
                           ? Py_NewRef(word)
                           : PyUnicode_FromStringAndSize(w, (Py_ssize_t)m);
    if (w != small) PyMem_Free(w);
    return result;
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

static PyObject *csr_product(PyObject *Py_UNUSED(module), PyObject *args) {
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
    int wide = indptr->itemsize == 8;
    for (Py_ssize_t i = 0; i <= n_rows; i++) {
        int64_t p = wide ? ((const int64_t *)indptr->buf)[i] : ((const int32_t *)indptr->buf)[i];
        int64_t before = i == 0 ? 0 : (wide ? ((const int64_t *)indptr->buf)[i - 1] : ((const int32_t *)indptr->buf)[i - 1]);
        if ((i == 0 && p != 0) || p < before || p > nnz || (i == n_rows && p != nnz)) {
            PyErr_Format(PyExc_ValueError, "csr_product: indptr[%zd] = %lld is not a row pointer of %zd entries", i,
                         (long long)p, nnz);
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < nnz; j++) {
        int64_t c = wide ? ((const int64_t *)indices->buf)[j] : ((const int32_t *)indices->buf)[j];
        if (c < 0 || c >= n_cols) {
            PyErr_Format(PyExc_ValueError, "csr_product: indices[%zd] = %lld is not a row of block (%zd rows)", j,
                         (long long)c, n_cols);
            goto done;
        }
    }
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

static PyObject *gensim_weights(PyObject *Py_UNUSED(module), PyObject *args) {
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

static PyObject *csr_transpose(PyObject *Py_UNUSED(module), PyObject *args) {
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
static PyObject *score_columns(PyObject *Py_UNUSED(module), PyObject *args) {
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
    for (int b = 0; b < 256; b++) {
        IS_SEPARATOR[b] = b <= 0x20 || b == 0x7F;
        IS_EDGE[b] = b >= 0x21 && b <= 0x7E && b != '_' && !(b >= '0' && b <= '9') && !(b >= 'a' && b <= 'z') &&
                     !(b >= 'A' && b <= 'Z');
    }
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
