"""The listwise prompt: RankGPT's conversation, optionally with first-stage scores (InsertRank).

RankGPT (Sun et al., 2023) shows a window's passages one chat turn each, numbered ``[1]`` .. ``[n]``,
each cut to its first ``max_words`` words (300) with white space collapsed, and asks for
``[] > []``. With ``scores``, each passage line also carries its first-stage score, in the spirit of
InsertRank (which puts BM25 scores in the prompt), and the final instruction says what they are.
"""

from __future__ import annotations

from collections.abc import Sequence

SYSTEM = "You are RankGPT, an intelligent assistant that can rank passages based on their relevancy to the query."
OPENING = "I will provide you with {num} passages, each indicated by number identifier []. \nRank the passages based on their relevance to query: {query}."
READY = "Okay, please provide the passages."
RECEIVED = "Received passage [{rank}]."
CLOSING = (
    "Search Query: {query}. \nRank the {num} passages above based on their relevance to the search query. "
    "The passages should be listed in descending order using identifiers. The most relevant passages should be "
    "listed first. The output format should be [] > [], e.g., [1] > [2]. Only response the ranking results, "
    "do not say any word or explain."
)
SCORES_NOTE = (
    " Each passage shows the score a first-stage retriever gave it (higher means it looked more relevant to "
    "that retriever); use it as a hint, not as the answer."
)


def cut_words(text: str, max_words: int | None) -> str:
    """The first ``max_words`` white-space separated words, joined by single spaces (all of them for None).

    >>> cut_words("  a  b\\n c d ", 3), cut_words("a\\tb", None)
    ('a b c', 'a b')
    """
    words = text.split()
    return " ".join(words if max_words is None else words[:max_words])


def rankgpt_messages(
    query: str, passages: Sequence[str], *, max_words: int | None = 300, scores: Sequence[float] | None = None
) -> list[dict[str, str]]:
    """RankGPT's chat messages for one window (``scores``: first-stage scores shown beside each passage).

    >>> m = rankgpt_messages("q?", ["first  passage", "second"], scores=[12.5, 3.25])
    >>> [x["role"] for x in m]
    ['system', 'user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user']
    >>> m[3]["content"], m[4]["content"]
    ('[1] (first-stage score: 12.5) first passage', 'Received passage [1].')
    >>> m[-1]["content"].startswith("Search Query: q?. \\nRank the 2 passages above")
    True
    """
    if scores is not None and len(scores) != len(passages):
        raise ValueError(f"{len(passages)} passages but {len(scores)} scores")
    num = len(passages)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": OPENING.format(num=num, query=query)},
        {"role": "assistant", "content": READY},
    ]
    for rank, text in enumerate(passages, start=1):
        shown = cut_words(text, max_words)
        if scores is not None:
            shown = f"(first-stage score: {float(scores[rank - 1]):.4g}) {shown}"
        messages.append({"role": "user", "content": f"[{rank}] {shown}"})
        messages.append({"role": "assistant", "content": RECEIVED.format(rank=rank)})
    closing = CLOSING.format(query=query, num=num)
    messages.append({"role": "user", "content": closing + (SCORES_NOTE if scores is not None else "")})
    return messages
