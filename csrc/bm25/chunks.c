/* BM25's C kernel: the chunk table (module.c says what each call does). */
#include "native.h"

static unsigned char IS_SEPARATOR[256];
static unsigned char IS_EDGE[256]; /* tokenizer.EDGE_PUNCTUATION: printable ASCII but letters, digits and "_" */

void chunk_tables_init(void) {
    for (int b = 0; b < 256; b++) {
        IS_SEPARATOR[b] = b <= 0x20 || b == 0x7F;
        IS_EDGE[b] = b >= 0x21 && b <= 0x7E && b != '_' && !(b >= '0' && b <= '9') && !(b >= 'a' && b <= 'z') &&
                     !(b >= 'A' && b <= 'Z');
    }
}

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
    if (stop_words && PyUnicode_Check(stop_words)) { /* a str is a sequence of its characters: not meant */
        PyErr_SetString(PyExc_TypeError, "ChunkTable: stop_words must be a sequence of str, not a str");
        return NULL;
    }
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

/* The C-contiguous buffer of `object`, with its format; -1 with an exception naming `name` when it has none. */
static int get_buffer(PyObject *object, Py_buffer *view, const char *where, const char *name) {
    if (PyObject_GetBuffer(object, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) return 0;
    PyErr_Format(PyExc_TypeError, "%s: %s must be a contiguous buffer (a bytearray the kernel made, or a NumPy array)",
                 where, name);
    return -1;
}

/* Whether `view` holds integers of `size` bytes: raw bytes (a bytearray the kernel made, or a view of one) of a
 * length that is a multiple of `size`, or an array of signed integers of that size; their number via *n. -1 with
 * an exception naming `name` otherwise (an int32 array where int64 items are meant is refused, not misread). */
static int int_items(const Py_buffer *view, const char *where, const char *name, Py_ssize_t size, Py_ssize_t *n) {
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int raw = view->itemsize == 1 && (!strcmp(f, "B") || !strcmp(f, "b") || !strcmp(f, "c"));
    int ints = view->itemsize == size && f[0] && !f[1] && strchr("bhilq", f[0]);
    if ((!raw && !ints) || view->len % size) {
        PyErr_Format(PyExc_ValueError, "%s: %s must hold int%zd items (the kernel's bytes or an int%zd array), got "
                     "%zd bytes of format '%s'", where, name, 8 * size, 8 * size, view->len, f);
        return -1;
    }
    *n = view->len / size;
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
    /* a tuple of its own: its references keep every text alive while the GIL is released, whatever another
     * thread does to the caller's list meanwhile. Making it may run Python code (the caller's __iter__), so the
     * table is checked, and marked as scanned, only after it, with no Python code in between. */
    PyObject *seq = PySequence_Check(arg) ? PySequence_Tuple(arg) : NULL;
    if (!seq) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "scan: texts must be a sequence of str");
        }
        return NULL;
    }
    PyObject *result = NULL, *occ = NULL, *per = NULL, *new_chunks = NULL, *terms = NULL;
    int marked = 0; /* this call set t->scanning */
    Py_ssize_t n_texts = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
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
    if (check_free(t, 1, 0) < 0) goto done;
    t->scanning = marked = 1; /* until the new chunks are handed out: making their str may run Python code */
    /* the texts stay alive (the tuple holds them) and a str's characters never change: read without the GIL */
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
    if (marked) t->scanning = 0;
    PyMem_Free(texts);
    Py_XDECREF(occ);
    Py_XDECREF(per);
    Py_XDECREF(new_chunks);
    Py_XDECREF(terms);
    Py_DECREF(seq);
    return result;
}

static PyObject *ChunkTable_set_terms(ChunkTable *t, PyObject *found) {
    /* every term id is read into arrays of our own first: reading them may run Python code (a generator, an
     * __index__), which could clear the table or start a count on another thread. The table is checked and
     * changed only after, with no Python code in between. */
    PyObject *items = PySequence_Fast(found, "set_terms: expected a sequence of term id sequences");
    if (!items) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    Vec counts = {NULL, 0, 0, sizeof(int32_t)}, ids = {NULL, 0, 0, sizeof(int64_t)};
    if (vec_reserve(&counts, (size_t)n + 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *chunk = PySequence_Fast(PySequence_Fast_GET_ITEM(items, i), "set_terms: each chunk's terms must be "
                                                                              "a sequence of term ids");
        if (!chunk) goto done;
        Py_ssize_t m = PySequence_Fast_GET_SIZE(chunk);
        if (m > INT32_MAX || vec_reserve(&ids, ids.len + (size_t)m) < 0) {
            Py_DECREF(chunk);
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            long long id = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(chunk, k));
            if (id < 0) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "set_terms: chunk %zd's term id %lld is negative", i, id);
                Py_DECREF(chunk);
                goto done;
            }
            VEC_AT(ids, int64_t, ids.len++) = (int64_t)id;
        }
        Py_DECREF(chunk);
        VEC_AT(counts, int32_t, counts.len++) = (int32_t)m;
    }
    if (check_free(t, 0, 1) < 0) goto done;
    size_t first = t->term_count.len, pending = t->scanned - first;
    if ((size_t)n > pending) {
        PyErr_Format(PyExc_ValueError, "set_terms: %zu chunks wait for their terms, got terms for %zd", pending, n);
        goto done;
    }
    if (vec_reserve(&t->term_start, first + (size_t)n) < 0 || vec_reserve(&t->term_count, first + (size_t)n) < 0 ||
        vec_reserve(&t->terms, t->terms.len + ids.len) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    size_t at = t->terms.len;
    if (ids.len) memcpy((int64_t *)t->terms.data + at, ids.data, ids.len * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++) {
        VEC_AT(t->term_start, int64_t, first + (size_t)i) = (int64_t)at;
        VEC_AT(t->term_count, int32_t, first + (size_t)i) = VEC_AT(counts, int32_t, i);
        at += (size_t)VEC_AT(counts, int32_t, i);
    }
    t->terms.len = at;
    t->term_start.len = t->term_count.len = first + (size_t)n;
    result = Py_NewRef(Py_None);
done:
    vec_free(&counts);
    vec_free(&ids);
    Py_DECREF(items);
    return result;
}

/* The (occurrences, chunks_per_text) pair of one scanned batch, checked against each other and the table: every
 * occurrence a chunk that has its terms. Sets the numbers of occurrences, texts and term ids (tokens); -1 with
 * an exception set when they do not fit. */
static int check_scanned(ChunkTable *t, Py_buffer *occ_view, Py_buffer *per_view, const char *where,
                         Py_ssize_t *n_occ, Py_ssize_t *n_texts, int64_t *n_tokens) {
    if (int_items(occ_view, where, "occurrences", 4, n_occ) < 0 ||
        int_items(per_view, where, "chunks_per_text", 8, n_texts) < 0)
        return -1;
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
    PyObject *occ_object, *per_object;
    if (!PyArg_ParseTuple(args, "OO:expand", &occ_object, &per_object) ||
        get_buffer(occ_object, &occ_view, "expand", "occurrences") < 0)
        return NULL;
    if (get_buffer(per_object, &per_view, "expand", "chunks_per_text") < 0) {
        PyBuffer_Release(&occ_view);
        return NULL;
    }
    PyObject *result = NULL, *ids_out = NULL, *per_out = NULL;
    if (check_free(t, 0, 0) < 0) goto done;
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
    if (!PyArg_ParseTuple(args, "On:first_terms", &parts, &n_ids)) return NULL;
    if (n_ids < 0 || n_ids > PY_SSIZE_T_MAX / 8) {
        PyErr_Format(PyExc_ValueError, "first_terms: n_ids = %zd is not a number of term ids", n_ids);
        return NULL;
    }
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
    for (Py_ssize_t k = 0; k < n_parts; k++) { /* views[] starts zeroed: obj NULL marks one not taken */
        PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(items, k), "first_terms: each part must be an "
                                                                             "(occurrences, chunks_per_text) pair");
        if (!pair) goto done;
        int ok = PySequence_Fast_GET_SIZE(pair) == 2 &&
                 get_buffer(PySequence_Fast_GET_ITEM(pair, 0), &views[2 * k], "first_terms", "occurrences") == 0 &&
                 get_buffer(PySequence_Fast_GET_ITEM(pair, 1), &views[2 * k + 1], "first_terms", "chunks_per_text") == 0;
        if (!ok && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "first_terms: each part must be an (occurrences, chunks_per_text) pair");
        Py_DECREF(pair);
        if (!ok) goto done;
    }
    if (check_free(t, 0, 0) < 0) goto done;
    for (Py_ssize_t k = 0; k < n_parts; k++)
        if (check_scanned(t, &views[2 * k], &views[2 * k + 1], "first_terms", &sizes[2 * k], &sizes[2 * k + 1],
                          &n_tokens) < 0)
            goto done;
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

/* Each of the n_rows rows (per_row[r] entries, one after the other in columns/counts, n entries in all) with its
 * entries in increasing column order (every column below n_cols, none twice in a row): a counting sort of all the
 * entries by column, which keeps each column's rows in order, then each entry put back in its row, in column
 * order. Two passes over the entries, no per-row comparison sort. -1 when out of memory (nothing changed). */
static int sort_rows(int32_t *columns, int32_t *counts, const int64_t *per_row, Py_ssize_t n_rows, size_t n,
                     Py_ssize_t n_cols) {
    int64_t *first = calloc((size_t)n_cols + 1, sizeof(int64_t)); /* column c's entries: [first[c], first[c + 1]) */
    int64_t *next = malloc(((size_t)n_cols + 1) * sizeof(int64_t));
    int32_t *row_of = malloc((n ? n : 1) * sizeof(int32_t)), *count_of = malloc((n ? n : 1) * sizeof(int32_t));
    int64_t *row_at = malloc(((size_t)n_rows + 1) * sizeof(int64_t));
    int status = -1;
    if (!first || !next || !row_of || !count_of || !row_at) goto done;
    for (size_t e = 0; e < n; e++) first[columns[e] + 1]++;
    for (Py_ssize_t c = 0; c < n_cols; c++) first[c + 1] += first[c];
    memcpy(next, first, ((size_t)n_cols + 1) * sizeof(int64_t));
    size_t e = 0;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        row_at[r] = (int64_t)e;
        for (int64_t k = 0; k < per_row[r]; k++, e++) {
            int64_t at = next[columns[e]]++;
            row_of[at] = (int32_t)r;
            count_of[at] = counts[e];
        }
    }
    for (Py_ssize_t c = 0; c < n_cols; c++) {
        for (int64_t at = first[c]; at < first[c + 1]; at++) {
            int64_t to = row_at[row_of[at]]++;
            columns[to] = (int32_t)c;
            counts[to] = count_of[at];
        }
    }
    status = 0;
done:
    free(first);
    free(next);
    free(row_of);
    free(count_of);
    free(row_at);
    return status;
}

/* count's view of a chunk: its one final term id (>= 0), or one of these */
enum { NO_TERMS = -1, MANY_TERMS = -2, NO_FINAL_ID = -3 };

static PyObject *ChunkTable_count(ChunkTable *t, PyObject *args) {
    Py_buffer views[3] = {{0}};
    PyObject *objects[3];
    Py_ssize_t n_terms;
    if (!PyArg_ParseTuple(args, "OOOn:count", &objects[0], &objects[1], &objects[2], &n_terms)) return NULL;
    PyObject *result = NULL, *columns_out = NULL, *counts_out = NULL, *per_row_out = NULL;
    int32_t *seen = NULL, *single = NULL;
    Py_ssize_t n_occ, n_texts, n_final;
    int64_t n_tokens;
    static const char *names[3] = {"occurrences", "chunks_per_text", "final"};
    for (int k = 0; k < 3; k++)
        if (get_buffer(objects[k], &views[k], "count", names[k]) < 0) goto done;
    Py_buffer *occ_view = &views[0], *per_view = &views[1], *final_view = &views[2];
    if (check_free(t, 0, 0) < 0 || check_scanned(t, occ_view, per_view, "count", &n_occ, &n_texts, &n_tokens) < 0 ||
        int_items(final_view, "count", "final", 8, &n_final) < 0)
        goto done;
    if (n_terms < 0 || n_terms > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "count: n_terms = %zd is not in [0, 2**31)", n_terms);
        goto done;
    }
    const int32_t *occ = (const int32_t *)occ_view->buf;
    const int64_t *chunks = (const int64_t *)per_view->buf;
    const int64_t *final = (const int64_t *)final_view->buf;
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
    int failed = 0;
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
        for (size_t k = 0; k < distinct; k++) {
            counts[out + k] = seen[row[k]];
            seen[row[k]] = 0;
        }
        per_row[i] = (int64_t)distinct;
        out += distinct;
    }
    if (bad < 0 && sort_rows(columns, counts, per_row, n_texts, out, n_terms) < 0) failed = 1;
    Py_END_ALLOW_THREADS
    t->expanding--;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "count: text %zd has term id %lld, which has no final id in [0, %zd)", bad,
                     (long long)bad_id, n_terms);
        goto done;
    }
    if (failed) {
        PyErr_NoMemory();
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
    for (int k = 0; k < 3; k++)
        if (views[k].obj) PyBuffer_Release(&views[k]);
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

PyTypeObject ChunkTableType = {
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

