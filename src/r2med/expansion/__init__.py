"""Generation-augmented retrieval (HyDE, Query2doc, LameR): the method table, prompts, query composition.

Importing this package imports none of its modules: each name below loads its module when first used
(``r2med.lazy``). The LLM client and generation live in their own modules, the parsers of reasoning models' outputs
in :mod:`r2med.llm.reasoning`.

>>> from r2med.expansion import bm25_query, gar_method
>>> bm25_query("hyde", "q", "doc"), gar_method("LameR").first_stage
('doc', True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from r2med.lazy import lazy_exports

if TYPE_CHECKING:
    from r2med.expansion.compose import BM25_COMPOSITIONS, COMPOSE_METHODS, bm25_query, bm25_query_for, dense_inputs
    from r2med.expansion.methods import (
        GAR_METHODS,
        Bm25Composition,
        GarMethod,
        gar_method,
        gar_methods,
        method_names,
    )
    from r2med.expansion.prompts import (
        DEFAULT_SAMPLING,
        DEFAULT_SYSTEM_PROMPT,
        METHODS,
        SKY_T1_SYSTEM_PROMPT,
        build_prompt,
        chat_messages,
        format_passages,
        prompt_datasets,
        prompt_sha256,
        prompt_template,
        sampling_params,
        system_prompt_for,
    )

__all__ = [
    "BM25_COMPOSITIONS", "COMPOSE_METHODS", "DEFAULT_SAMPLING", "DEFAULT_SYSTEM_PROMPT", "GAR_METHODS", "METHODS",
    "SKY_T1_SYSTEM_PROMPT", "Bm25Composition", "GarMethod", "bm25_query", "bm25_query_for", "build_prompt",
    "chat_messages", "dense_inputs", "format_passages", "gar_method", "gar_methods", "method_names",
    "prompt_datasets", "prompt_sha256", "prompt_template", "sampling_params", "system_prompt_for",
]

#: each name's module, imported when the name is first used (a BM25 run reads the expansion options, not the
#: prompts)
_EXPORTS = {
    **dict.fromkeys(("BM25_COMPOSITIONS", "COMPOSE_METHODS", "bm25_query", "bm25_query_for", "dense_inputs"),
                    "r2med.expansion.compose"),
    **dict.fromkeys(("GAR_METHODS", "Bm25Composition", "GarMethod", "gar_method", "gar_methods", "method_names"),
                    "r2med.expansion.methods"),
    **dict.fromkeys(("DEFAULT_SAMPLING", "DEFAULT_SYSTEM_PROMPT", "METHODS", "SKY_T1_SYSTEM_PROMPT", "build_prompt",
                     "chat_messages", "format_passages", "prompt_datasets", "prompt_sha256", "prompt_template",
                     "sampling_params", "system_prompt_for"), "r2med.expansion.prompts"),
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
