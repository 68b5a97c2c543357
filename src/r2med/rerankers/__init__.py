"""Rerankers: cross-encoders, a pointwise LLM (RankLLaMA) and listwise LLMs (RankGPT's sliding window).

Every reranker maps ``(queries, corpus, run) -> run`` over each query's first ``top_k`` documents
(``base.Reranker``); documents below the top k keep their order under the reranked ones. Names
resolve through ``registry.make_reranker``; ``stage.rerank_results`` evaluates and stores results in
the official layout. Importing this package imports none of its modules (each name below loads its module
when first used, ``r2med.lazy``); torch, sentence-transformers, peft and the LLM client load when a reranker is built.

>>> from r2med.rerankers import parse_permutation, sliding_windows
>>> sliding_windows(30), parse_permutation("[2] > [1]", 3)
([(10, 30), (0, 20)], [1, 0, 2])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from r2med.lazy import lazy_exports

if TYPE_CHECKING:
    from r2med.rerankers.base import Reranker, assemble, order_by_scores, ranked_scores, split_head
    from r2med.rerankers.permutation import PermutationReport, parse_permutation, read_permutation
    from r2med.rerankers.prompts import rankgpt_messages
    from r2med.rerankers.windows import apply_permutation, sliding_windows

__all__ = [
    "PermutationReport",
    "Reranker",
    "apply_permutation",
    "assemble",
    "order_by_scores",
    "parse_permutation",
    "ranked_scores",
    "rankgpt_messages",
    "read_permutation",
    "sliding_windows",
    "split_head",
]

#: each name's module, imported when the name is first used (a run without a listwise reranker needs no
#: permutation parsing or prompts)
_EXPORTS = {
    **dict.fromkeys(("Reranker", "assemble", "order_by_scores", "ranked_scores", "split_head"), "r2med.rerankers.base"),
    **dict.fromkeys(("PermutationReport", "parse_permutation", "read_permutation"), "r2med.rerankers.permutation"),
    **dict.fromkeys(("rankgpt_messages",), "r2med.rerankers.prompts"),
    **dict.fromkeys(("apply_permutation", "sliding_windows"), "r2med.rerankers.windows"),
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
