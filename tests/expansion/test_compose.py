"""Query composition for BM25 and dense retrieval, on hand-made strings and the authors' Biology-demo expansion."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from r2med.errors import UsageError
from r2med.expansion.compose import BM25_COMPOSITIONS, bm25_query, bm25_query_for, dense_inputs
from r2med.llm.reasoning import choose_answer, split_reasoning, style_for_llm

# The authors' own HyDE expansions by qwen-7b (Biology), copied from ../shared/samples/Biology-demo/hyde/qwen-7b.
DEMO = DATA / "expansion" / "biology_demo_hyde_qwen-7b.jsonl"


@pytest.fixture(scope="module")
def demo() -> list[dict]:
    return [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines()]


def test_bm25_rules_on_small_strings():
    assert bm25_query("hyde", "Q.", "E.") == "E."
    assert bm25_query("query2doc", "Q.", "E.") == "Q.Q. E."               # official: copies glued
    assert bm25_query("query2doc", "Q.", "E.", glued=False) == "Q. Q. E."  # corrected
    assert bm25_query("lamer", "Q.", "E.") == "Q. E."
    assert bm25_query("lamer", "Q.", "E.", glued=False) == "Q. E."        # glued only concerns query2doc
    for method in ("hyde", "query2doc", "lamer"):
        assert bm25_query(method, "Q.", "A.", reasoning=True) == "A."
    for method in ("search-r1", "search-o1"):
        assert bm25_query(method, "Q.", "A.") == "A."


def test_named_compositions():
    assert set(BM25_COMPOSITIONS) == {"hyde", "query2doc", "query2doc-spaced", "lamer", "search-r1", "search-o1"}
    assert BM25_COMPOSITIONS["query2doc"].glued and not BM25_COMPOSITIONS["query2doc-spaced"].glued
    assert bm25_query_for("query2doc", "a", "b") == "aa b"
    assert bm25_query_for("Query2doc-Spaced", "a", "b") == "a a b"
    assert bm25_query_for("query2doc-spaced", "a", "b", reasoning=True) == "b"
    with pytest.raises(UsageError, match="unknown BM25 composition 'query2doc-space'; did you mean 'query2doc-spaced'"):
        bm25_query_for("query2doc-space", "a", "b")


def test_dense_rules_on_small_strings():
    assert dense_inputs("query2doc", "Q.", "E.") == ("Q.[SEP]E.",)
    assert dense_inputs("query2doc", "Q.", "E.", reasoning=True) == ("Q.", "E.")
    for method in ("hyde", "lamer", "search-r1", "search-o1"):
        assert dense_inputs(method, "Q.", "E.") == ("Q.", "E.")
        assert dense_inputs(method, "Q.", "E.", reasoning=True) == ("Q.", "E.")


def test_unknown_method():
    with pytest.raises(UsageError, match="unknown GAR method 'hyd'; did you mean 'hyde'"):
        bm25_query("hyd", "q", "e")
    with pytest.raises(UsageError, match="Valid: hyde, lamer, query2doc, search-o1, search-r1"):
        dense_inputs("cot", "q", "e")


def test_authors_biology_demo(demo):
    assert [e["id"] for e in demo] == ["0", "1"]
    first = demo[0]
    query, hy_doc = first["text"], first["hy_doc"]
    assert len(query) == 557 and len(hy_doc) == 1981
    # qwen-7b is a plain model: the official hy_doc is used as it is, and parsing keeps it (it has no outer spaces)
    parsed = split_reasoning(hy_doc, style=style_for_llm("qwen-7b"))
    assert choose_answer(parsed, fallback=query) == (hy_doc, False)
    assert choose_answer(parsed, fallback=query, policy="authors") == (hy_doc, False)

    assert bm25_query("hyde", query, hy_doc) == hy_doc
    glued = bm25_query("query2doc", query, hy_doc)
    # the query ends 'they still "expect" to?' and starts 'Claim in article': glued they make one token 'to?Claim'
    assert 'they still "expect" to?Claim in article about why insects' in glued
    assert glued.endswith('still "expect" to? Certainly! Here’s a passage' + hy_doc[len("Certainly! Here’s a passage"):])
    assert len(glued) == 2 * 557 + 1 + 1981
    spaced = bm25_query("query2doc", query, hy_doc, glued=False)
    assert 'they still "expect" to? Claim in article about why insects' in spaced
    assert len(spaced) == 2 * 557 + 2 + 1981
    lamer = bm25_query("lamer", query, hy_doc)
    assert lamer == query + " " + hy_doc and len(lamer) == 557 + 1 + 1981

    (joined,) = dense_inputs("query2doc", query, hy_doc)
    assert 'still "expect" to?[SEP]Certainly! Here’s a passage to help address' in joined
    assert len(joined) == 557 + 5 + 1981
    assert dense_inputs("hyde", query, hy_doc) == (query, hy_doc)

    second = demo[1]
    assert bm25_query("query2doc", second["text"], second["hy_doc"]).startswith(
        second["text"] + "Why do I only breathe out of one nostril?")
