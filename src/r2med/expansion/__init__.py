"""Generation-augmented retrieval (HyDE, Query2doc, LameR): prompts, reasoning-output parsing, query composition.

Only small pure functions are imported here; the LLM client and generation live in their own modules.

>>> from r2med.expansion import bm25_query, split_reasoning
>>> bm25_query("hyde", "q", split_reasoning("<think>t</think> doc").answer)
'doc'
"""

from r2med.expansion.compose import (
    BM25_COMPOSITIONS,
    COMPOSE_METHODS,
    Bm25Composition,
    bm25_query,
    bm25_query_for,
    dense_inputs,
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
from r2med.expansion.reasoning import (
    POLICIES,
    STYLES,
    ParsedOutput,
    authors_answer,
    choose_answer,
    detect_style,
    split_reasoning,
    style_for_llm,
)

__all__ = [
    "BM25_COMPOSITIONS", "COMPOSE_METHODS", "DEFAULT_SAMPLING", "DEFAULT_SYSTEM_PROMPT", "METHODS", "POLICIES",
    "SKY_T1_SYSTEM_PROMPT", "STYLES", "Bm25Composition", "ParsedOutput", "authors_answer", "bm25_query",
    "bm25_query_for", "build_prompt", "chat_messages", "choose_answer", "dense_inputs", "detect_style",
    "format_passages", "prompt_datasets", "prompt_sha256", "prompt_template", "sampling_params", "split_reasoning",
    "style_for_llm", "system_prompt_for",
]
