"""The options of generation-augmented retrieval (``r2med run --expansion``, a pipeline's ``[expansion]`` table),
declared once (``r2med.options``)."""

from __future__ import annotations

from dataclasses import dataclass

from r2med.llm.reasoning import POLICIES
from r2med.options import option


def _compositions() -> tuple[str, ...]:
    from r2med.expansion.methods import bm25_compositions

    return tuple(bm25_compositions())


@dataclass(frozen=True, kw_only=True)
class ExpansionOptions:
    """``[expansion]``: generation-augmented retrieval (``--expansion METHOD/LLM``)."""

    spec: str | None = option(None, "generation-augmented retrieval with these expansions, e.g. hyde/o3-mini: the "
                              "dataset directory's, then r2med expand's, then the authors' published ones from the hub",
                              flag="--expansion", metavar="METHOD/LLM")
    answer_policy: str = option("fallback", "a reasoning output with no usable answer (trace cut off, empty): fallback "
                                "= the plain query, authors = the whole text as the official code did, error = stop",
                                choices=POLICIES)
    bm25_composition: str | None = option(None, "a BM25 composition other than the official one, stored under "
                                          "gar/<composition>/ (docs/gar.md)", choices=_compositions)
