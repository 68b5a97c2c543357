"""BM25 as R2MED runs it: Lucene's English analyzer, then R2MED's official scoring (``"r2med"``)
or Lucene's own (``"lucene"``).

>>> from r2med.retrievers.bm25 import BM25Index
>>> index = BM25Index.build([["cat", "sat"], ["dog"]], doc_ids=["a", "b"])
>>> index.search_run(["q1"], [["cat"]], k=1)
{'q1': {'a': 0.13362249732017517}}

The index takes analysed token lists; :func:`analyze` / :class:`EnglishAnalyzer` make them
from text exactly as Pyserini's default analyzer does.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it (imported when first used: ``r2med.retrievers.bm25.options``, which the
#: command line reads, must not pull in numpy, scipy and the analyzer's tables)
_PUBLIC = {
    "VARIANTS": "options", "BM25Index": "index", "BM25Params": "index", "Hits": "index", "EnglishAnalyzer": "analyzer",
    "analyze": "analyzer", "adjust_score_ties": "ranking", "top_k": "ranking",
}
__all__ = ["VARIANTS", "BM25Index", "BM25Params", "EnglishAnalyzer", "Hits", "adjust_score_ties", "analyze", "top_k"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
