"""The arithmetic of the two BM25 variants, bit for bit.

Two reference implementations are reproduced here, each with its own rounding:

``r2med`` -- gensim 4.x ``LuceneBM25Model`` as R2MED's official code uses it
    idf(t)    = ln(N + 1) - ln(df(t) + 0.5)                 (float64, ``math.log``)
    w(t, x)   = idf(t) * tf / (tf + k1 * ((1 - b) + b * |x| / avgdl))   (float64)
    avgdl     = (total tokens) / N, N = every document, empty ones included
    Documents *and* queries are weighted with this formula (a query's length
    |q| counts only the tokens known to the corpus vocabulary). Both weight
    vectors are stored as float32 and the score is their dot product,
    accumulated in float32 in increasing term-id order (scipy's CSR product,
    exactly what gensim's ``SparseMatrixSimilarity`` does).

``lucene`` -- Lucene 9 ``BM25Similarity`` as Anserini/Pyserini 0.22.1 runs it
    idf(t)    = (float) ln(1 + (N - df + 0.5) / (df + 0.5)),  N = documents
                with at least one token (Lucene's ``docCount``)
    avgdl     = (float) (total tokens / N)
    norm(d)   = SmallFloat.intToByte4(|d|), a lossy one-byte length
    cache[i]  = 1f / (k1 * ((1 - b) + b * byte4ToInt(i) / avgdl))  (float32)
    weight    = boost * idf,  boost = how often the term occurs in the query
    term score= weight - weight / (1 + tf * cache[norm(d)])          (float32)
    score(d)  = (float) sum over matched query terms, summed in double.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "LENGTH_TABLE",
    "byte4_to_int",
    "gensim_idf",
    "gensim_length_norm",
    "gensim_weights",
    "int_to_byte4",
    "lucene_idf",
    "lucene_norm_inverse",
    "lucene_term_scores",
]


# --------------------------------------------------------------------------- gensim (r2med)


def gensim_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """gensim ``LuceneBM25Model.precompute_idfs``: ``ln(N + 1) - ln(df + 0.5)`` in float64.

    Computed with :func:`math.log` (once per distinct df), as gensim does, so the
    values are bit-identical to gensim's.

    >>> gensim_idf(np.array([1, 3]), 3).round(6).tolist()
    [0.980829, 0.133531]
    """
    df = np.asarray(df, dtype=np.int64)
    uniq, inverse = np.unique(df, return_inverse=True)
    log_n = math.log(n_docs + 1.0)
    values = np.array([log_n - math.log(int(f) + 0.5) for f in uniq], dtype=np.float64)
    return values[inverse].reshape(df.shape)


def gensim_length_norm(lengths: np.ndarray, *, k1: float, b: float, avgdl: float) -> np.ndarray:
    """gensim's ``k1 * (1 - b + b * num_tokens / avgdl)`` per document (or query), float64.

    Python evaluates ``1 - b + b * n / avgdl`` as ``(1 - b) + ((b * n) / avgdl)``; the same
    order is used here so that the float64 results are identical.

    >>> gensim_length_norm(np.array([2, 3]), k1=0.9, b=0.4, avgdl=8 / 3).tolist()
    [0.81, 0.9450000000000001]
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    return k1 * ((1.0 - b) + (b * lengths) / avgdl)


def gensim_weights(tf: np.ndarray, norm: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """gensim ``LuceneBM25Model.get_term_weights``: ``idf * (tf / (tf + norm))``, float64.

    ``tf``, ``norm`` (:func:`gensim_length_norm` of the document or query each entry
    belongs to) and ``idf`` are aligned arrays; the caller casts the result to float32.

    >>> gensim_weights(np.array([1]), np.array([0.81]), np.array([0.4700036292457356])).tolist()
    [0.259670513395434]
    """
    out = np.asarray(tf, dtype=np.float64) + norm
    np.divide(tf, out, out=out)
    np.multiply(idf, out, out=out)
    return out


# --------------------------------------------------------------------------- Lucene

# SmallFloat: lengths below NUM_FREE_VALUES are stored exactly, the rest as a
# 4-bit-mantissa float (longToInt4) offset by NUM_FREE_VALUES.
_MAX_INT4 = 231  # SmallFloat.longToInt4(Integer.MAX_VALUE)
_NUM_FREE_VALUES = 255 - _MAX_INT4  # 24


def _long_to_int4(values: np.ndarray) -> np.ndarray:
    values = values.astype(np.int64)
    out = values.copy()
    # numBits = 64 - numberOfLeadingZeros(v), the bit length; frexp is exact below 2**53
    num_bits = np.frexp(values.astype(np.float64))[1].astype(np.int64)
    normal = num_bits >= 4
    shift = num_bits[normal] - 4
    encoded = (values[normal] >> shift) & 0x07  # the 4 leading bits, minus the implicit one
    encoded |= (shift + 1) << 3
    out[normal] = encoded
    return out


def _int4_to_long(values: np.ndarray) -> np.ndarray:
    values = values.astype(np.int64)
    bits = values & 0x07
    shift = (values >> 3) - 1
    return np.where(shift == -1, bits, (bits | 0x08) << np.maximum(shift, 0))


def int_to_byte4(lengths: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.intToByte4``: a length encoded into one byte (lossy above 23).

    >>> int_to_byte4(np.array([0, 23, 24, 25, 100, 1000])).tolist()
    [0, 23, 24, 25, 57, 87]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and lengths.min() < 0:
        raise ValueError("lengths must be non-negative")
    out = lengths.copy()
    big = lengths >= _NUM_FREE_VALUES
    out[big] = _NUM_FREE_VALUES + _long_to_int4(lengths[big] - _NUM_FREE_VALUES)
    return out.astype(np.uint8)


def byte4_to_int(codes: np.ndarray) -> np.ndarray:
    """Lucene ``SmallFloat.byte4ToInt``: the length a norm byte stands for.

    >>> byte4_to_int(np.array([23, 24, 57, 87], dtype=np.uint8)).tolist()
    [23, 24, 96, 984]
    """
    codes = np.asarray(codes).astype(np.int64) & 0xFF
    out = codes.copy()
    big = codes >= _NUM_FREE_VALUES
    out[big] = _NUM_FREE_VALUES + _int4_to_long(codes[big] - _NUM_FREE_VALUES)
    return out


#: ``BM25Similarity.LENGTH_TABLE``: the decoded length of every norm byte, as float32.
LENGTH_TABLE: np.ndarray = byte4_to_int(np.arange(256)).astype(np.float32)
LENGTH_TABLE.flags.writeable = False


def lucene_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """``BM25Similarity.idf``: ``(float) ln(1 + (N - df + 0.5) / (df + 0.5))``.

    >>> lucene_idf(np.array([1, 3]), 3).tolist()
    [0.9808292388916016, 0.133531391620636]
    """
    df = np.asarray(df, dtype=np.float64)
    return np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)


def lucene_norm_inverse(k1: float, b: float, avgdl: np.float32) -> np.ndarray:
    """The 256-entry cache ``1f / (k1 * ((1 - b) + b * LENGTH_TABLE[i] / avgdl))`` in float32."""
    k1_f = np.float32(k1)
    b_f = np.float32(b)
    avgdl_f = np.float32(avgdl)
    with np.errstate(divide="ignore"):
        return np.float32(1.0) / (k1_f * ((np.float32(1.0) - b_f) + (b_f * LENGTH_TABLE) / avgdl_f))


def lucene_term_scores(weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``BM25Scorer.score``: ``weight - weight / (1 + x)`` in float32, with ``x = tf * cache[norm]``."""
    weight = np.asarray(weight, dtype=np.float32)
    x = np.asarray(x, dtype=np.float32)
    return weight - weight / (np.float32(1.0) + x)
