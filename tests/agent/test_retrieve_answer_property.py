"""The parser of a retrieval server's ``/retrieve`` answer (``r2med.agent.remote._hits``) is total (issue 35).

Any JSON value in (nested objects and lists, text of any Unicode with lone surrogates, ints past a float's range and
past the digits ``str()`` writes, NaN and infinities, booleans, null): a ``Hits`` out, or ``BadAnswer`` (retried,
then the query fails naming the server), never another exception. What it returns is what the agent may use: per
query at most ``topk`` results of distinct ids a run file can hold, finite float scores, text that UTF-8 can hold,
and the server's order (each kept result is the first of its id in the server's list).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from r2med.agent.remote import Hits, _hits
from r2med.http import BadAnswer
from r2med.io.ids import id_problem

#: an int of more digits than ``str()`` writes (made by ``map``: hypothesis cannot show it in a strategy's repr)
HUGE = st.just(None).map(lambda _: 10 ** 5000)
#: text of any code point, lone surrogates included
TEXT = st.text(st.characters(codec=None, categories=None), max_size=12)
IDS = st.one_of(st.sampled_from(["d1", "d2", "d3", "d 1", "d\t1", "", "病例1", "d\u200b1", "\ud800"]), TEXT,
                st.integers(), HUGE, st.booleans(), st.none(), st.floats())
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.just(10 ** 400),
                    st.just(-(10 ** 400)), st.booleans(), st.none(), TEXT)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), HUGE, st.floats(), TEXT)
ANY_JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(TEXT, inner, max_size=4)), max_leaves=20)
#: a result, mostly of the right shape, its parts of any value
RESULT = st.one_of(
    st.fixed_dictionaries({"document": st.fixed_dictionaries({"id": IDS, "contents": st.one_of(TEXT, ANY_JSON)}),
                           "score": NUMBERS}),
    st.fixed_dictionaries({"document": st.fixed_dictionaries({"id": st.sampled_from(["d1", "d2", "d3", "d4"]),
                                                              "contents": TEXT}),
                           "score": st.floats(-1e9, 1e9)}),
    ANY_JSON,
)
ANSWERS = st.one_of(
    ANY_JSON,
    st.fixed_dictionaries({"result": st.lists(st.one_of(st.lists(RESULT, max_size=8), ANY_JSON), max_size=3)}),
)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=ANSWERS, n=st.integers(0, 3), topk=st.integers(1, 4))
def test_any_answer_gives_usable_hits_or_bad_answer(answer, n, topk):
    try:
        hits = _hits(answer, n, topk)
    except BadAnswer:
        return
    assert isinstance(hits, Hits)
    assert len(hits.rows) == n
    listed = answer["result"]
    for rows, sent in zip(hits.rows, listed):
        ids = [docid for docid, _, _ in rows]
        assert len(rows) <= topk
        assert len(set(ids)) == len(ids)
        for docid, score, contents in rows:
            assert isinstance(docid, str) and id_problem(docid) is None
            assert type(score) is float and math.isfinite(score)
            assert isinstance(contents, str) and _utf8(contents)
        # the server's order: the first occurrence of each id, the first topk of them
        first = list(dict.fromkeys(str(e["document"]["id"]) for e in sent))
        assert ids == first[:topk]
    assert hits.repeated >= 0 and hits.beyond >= 0


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=12), topk=st.integers(1, 6))
def test_cut_counts_add_up(ids, topk):
    """Every result sent is kept, a repeat, or past topk: kept + repeated + beyond = sent."""
    answer = {"result": [[{"document": {"id": d, "contents": d}, "score": float(-i)} for i, d in enumerate(ids)]]}
    hits = _hits(answer, 1, topk)
    kept = hits.rows[0]
    assert len(kept) + hits.repeated + hits.beyond == len(ids)
    assert len(kept) == min(topk, len(set(ids)))
    assert hits.repeated == len(ids) - len(set(ids))
