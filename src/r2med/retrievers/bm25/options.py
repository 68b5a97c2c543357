"""BM25's options (``r2med run --bm25-variant/--k1/--b``, a ``[[retriever]]`` table's ``variant``/``k1``/``b``,
``--retriever bm25:variant=lucene``), declared once (``r2med.options``)."""

from __future__ import annotations

from dataclasses import dataclass

from r2med.options import option

#: ``r2med``: the published numbers (gensim's LuceneBM25Model, query-side weighting); ``lucene``: Anserini's BM25
VARIANTS: tuple[str, ...] = ("r2med", "lucene")
#: the published parameters (Pyserini's defaults)
K1, B = 0.9, 0.4
#: The largest k1 float32 scoring represents: past it a term's weight is ~1/k1, so Lucene's ``1 + tf * cache`` rounds
#: to 1 (every score 0 from k1 ~1e7) and gensim's two float32 weights multiply below float32's smallest number (from
#: k1 ~1e22); published tunings stay under 3.
K1_MAX = 1000.0


@dataclass(frozen=True, kw_only=True)
class BM25Options:
    """How BM25 scores: the variant and its two parameters."""

    variant: str = option("r2med", "r2med: the published numbers (gensim LuceneBM25Model, query-side weighting); "
                          "lucene: Anserini's BM25", choices=VARIANTS, flag="--bm25-variant", aliases=("bm25_variant",))
    k1: float = option(K1, "BM25 k1: term-frequency saturation (float32 scores hold k1 up to 1000)", minimum=0,
                       maximum=K1_MAX)
    b: float = option(B, "BM25 b: document-length normalisation", minimum=0, maximum=1)


def system_name(options: BM25Options) -> str:
    """``bm25`` for the published configuration; otherwise the variant and the non-default parameters.

    >>> system_name(BM25Options()), system_name(BM25Options(variant="lucene", b=0.75))
    ('bm25', 'bm25-lucene-k1_0.9-b_0.75')
    """
    name = "bm25" if options.variant == "r2med" else f"bm25-{options.variant}"
    if (options.k1, options.b) != (K1, B):
        name += f"-k1_{options.k1:g}-b_{options.b:g}"
    return name
