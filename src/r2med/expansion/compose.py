"""How an expansion becomes the retrieval query, exactly as the official R2MED evaluation composed it.

BM25 (``src/eval_bench_BM25.py``, ``load_retrieval_data``):

- hyde: the expansion alone;
- query2doc: ``query * 2 + " " + expansion``: the official code glued the two copies of the query with no space
  (``e["text"]*2+" "+e["hy_doc"]``), which merges the query's last and first words into one token. The published
  numbers use it (composition ``"query2doc"``); ``"query2doc-spaced"`` is the corrected
  ``query + " " + query + " " + expansion``;
- lamer: ``query + " " + expansion``;
- a reasoning model's output (``reasoning=True``: the official ``r1_mode``) and the agentic methods
  (search-r1, search-o1): the answer alone, whatever the method.

Dense (``src/eval_bench.py``): query2doc is one text ``query + "[SEP]" + expansion`` (no spaces); every other
method, and query2doc from a reasoning model, is the pair ``(query, expansion)`` whose two embeddings the retriever
averages. The retriever adds its query instruction to the query (never to the expansion); nothing here adds one.

The rules themselves are the rows of :data:`r2med.expansion.methods.GAR_METHODS`.

>>> bm25_query("query2doc", "Why?", "Because.")
'Why?Why? Because.'
>>> dense_inputs("hyde", "Why?", "Because.")
('Why?', 'Because.')
"""

from __future__ import annotations

from collections.abc import Mapping

from r2med.expansion.methods import GAR_METHODS, Bm25Composition, bm25_compositions, gar_method
from r2med.registry import Registry

#: Methods with a composition rule: every row of the GAR method table (``r2med.expansion.methods``).
COMPOSE_METHODS = tuple(GAR_METHODS)

#: The named BM25 compositions. "query2doc" is the official (glued) one behind the published numbers;
#: "query2doc-spaced" is the corrected one with a space between the two copies of the query.
BM25_COMPOSITIONS: Mapping[str, Bm25Composition] = bm25_compositions()


def bm25_query(method: str, query: str, expansion: str, *, reasoning: bool = False, glued: bool = True) -> str:
    """The BM25 query text for ``query`` expanded by ``expansion`` with ``method``.

    ``reasoning=True`` (the expansion is a reasoning model's answer): the answer alone, for every method, as the
    official ``r1_mode``. ``glued`` only matters for query2doc (True: official, False: corrected spacing).

    >>> bm25_query("query2doc", "Why?", "Because.", glued=False)
    'Why? Why? Because.'
    >>> bm25_query("lamer", "Why?", "Because."), bm25_query("lamer", "Why?", "Because.", reasoning=True)
    ('Why? Because.', 'Because.')
    """
    return gar_method(method).bm25(query, expansion, reasoning, glued)


def bm25_query_for(composition: str, query: str, expansion: str, *, reasoning: bool = False) -> str:
    """``bm25_query`` by composition name (a key of ``BM25_COMPOSITIONS``, e.g. "query2doc-spaced").

    >>> bm25_query_for("query2doc-spaced", "a", "b")
    'a a b'
    """
    spec = Registry("BM25 composition", BM25_COMPOSITIONS).get(composition)
    return bm25_query(spec.method, query, expansion, reasoning=reasoning, glued=spec.glued)


def dense_inputs(method: str, query: str, expansion: str, *, reasoning: bool = False) -> tuple[str, ...]:
    """The texts a dense retriever embeds: one text (query2doc) or ``(query, expansion)`` to average.

    The retriever prepends its query instruction to the query text (``query + "[SEP]" + expansion`` counts as the
    query there) and embeds the expansion of a pair without instruction; this function adds no instruction.
    ``reasoning=True`` gives the pair for query2doc too, as the official ``r1_mode``.

    >>> dense_inputs("query2doc", "Why?", "Because.")
    ('Why?[SEP]Because.',)
    >>> dense_inputs("query2doc", "Why?", "Because.", reasoning=True)
    ('Why?', 'Because.')
    """
    return gar_method(method).dense(query, expansion, reasoning)
