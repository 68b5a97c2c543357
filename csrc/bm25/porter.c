/* BM25's C kernel: Lucene's Porter stemmer for ASCII words. */
#include "native.h"

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

size_t porter_stem(char *w, char *cv, size_t n) {
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

PyObject *stem_ascii(PyObject *Py_UNUSED(module), PyObject *word) {
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

