"""BM25 as R2MED runs it: Lucene's English analyzer, then R2MED's official scoring (``"r2med"``)
or Lucene's own (``"lucene"``).

>>> from r2med.retrievers.bm25 import BM25Index
>>> index = BM25Index.build([["cat", "sat"], ["dog"]], doc_ids=["a", "b"])
>>> index.search_run(["q1"], [["cat"]], k=1)
{'q1': {'a': 0.13362249732017517}}

The index takes analysed token lists; :func:`analyze` / :class:`EnglishAnalyzer` make them
from text exactly as Pyserini's default analyzer does.
"""

from r2med.retrievers.bm25.analyzer import EnglishAnalyzer, analyze
from r2med.retrievers.bm25.index import VARIANTS, BM25Index, BM25Params, Hits
from r2med.retrievers.bm25.ranking import adjust_score_ties, top_k

__all__ = [
    "VARIANTS",
    "BM25Index",
    "BM25Params",
    "EnglishAnalyzer",
    "Hits",
    "adjust_score_ties",
    "analyze",
    "top_k",
]
