"""The options of generation-augmented retrieval (``r2med run --expansion``, a pipeline's ``[expansion]`` table) and
of ``r2med expand``, declared once (``r2med.options``)."""

from __future__ import annotations

from dataclasses import dataclass

from r2med.llm.endpoint import LLMOptions
from r2med.llm.reasoning import POLICIES
from r2med.options import option, redefault


def _compositions() -> tuple[str, ...]:
    """The variants only: the official composition is the default, named by no flag."""
    from r2med.expansion.methods import bm25_compositions

    return tuple(name for name, c in bm25_compositions().items() if name != c.method)


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


def _methods() -> tuple[str, ...]:
    from r2med.expansion.prompts import METHODS

    return tuple(METHODS)


def _styles() -> tuple[str, ...]:
    from r2med.llm.reasoning import STYLES

    return ("auto", *STYLES)


@dataclass(frozen=True, kw_only=True)
class ExpandOptions(LLMOptions):
    """``r2med expand``: which expansions to generate, with the LLM endpoint (``r2med.llm.endpoint``). Sampling
    options left unset take the authors' defaults for the kind of server (api.openai.com or a local one)."""

    method: str | None = option(None, "GAR method", choices=_methods)
    temperature: float | None = redefault(LLMOptions, "temperature", None,
                                          note="default: the authors' for the server, see docs/expand.md")
    top_p: float | None = redefault(LLMOptions, "top_p", None, note="default: the authors' for the server")
    max_tokens: int | None = redefault(LLMOptions, "max_tokens", None, note="default: the authors' for the server")
    style: str = option("auto", "reasoning output style (default: from the LLM name)", choices=_styles)
    policy: str = option("fallback", "a reasoning trace cut off before its answer: fallback = the plain query, "
                         "authors = the whole text (the official code), error = a failed query", choices=POLICIES)
    prompt_dataset: str | None = option(None, "use this R2MED dataset's prompts (for a dataset outside R2MED; "
                                        "default: the dataset's own)", metavar="NAME")
    max_tokens_budget: int | None = option(None, "budget: prompt + completion tokens for the whole run", minimum=1,
                                           keyed=False)
