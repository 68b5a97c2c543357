"""An agent's configuration (``AgentConfig``: style, LLM, limits; the authors' defaults) and its stop reasons."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from r2med.agent import styles as st
from r2med.agent.templates import template_for_model, templates
from r2med.errors import UsageError
from r2med.llm.endpoint import LLMOptions
from r2med.llm.reasoning import POLICIES
from r2med.options import option, redefault

#: why a query's loop ended
STOP_REASONS = {
    "answer": "the model gave its answer",
    "no-answer": "the model stopped without a search and without an answer",
    "length": "a generation reached max_tokens",
    "search-limit": "the model asked for a search beyond max_searches",
    "repeated-search": "Search-R1 asked the same search twice in a row",
    "empty-search": "the model closed an empty search query",
    "max-turns": "the turn limit was reached with the model still searching",
    "budget": "the request or token budget ran out",
    "error": "a request failed after its retries (the query is not written; rerun to retry it)",
}


@dataclass(frozen=True, kw_only=True)
class AgentConfig(LLMOptions):
    """One agent: ``style`` (search-r1 | search-o1), the LLM (``r2med.llm.endpoint``: ``llm_model`` at ``base_url``;
    ``llm_name`` names its folder, default the model id) and the loop's limits. ``None`` takes the style's default
    (the authors')."""

    style: str = option(None, "the agent: search-r1 (Search-R1's loop) or search-o1 (Search-o1's, with "
                        "Reason-in-Documents)", choices=lambda: tuple(st.STYLES))
    chat_template: str | None = option(None, "how the user turn is wrapped (default: from the model name)",
                                       choices=lambda: tuple(templates().names()))
    search_top_k: int | None = option(None, "documents per search (default: Search-R1 3, Search-o1 10)", minimum=1)
    max_searches: int | None = option(None, "searches per query (default 10)", minimum=0)
    max_turns: int | None = option(None, "generations per query (default: Search-R1 11, Search-o1 15)", minimum=1)
    max_tokens: int | None = redefault(LLMOptions, "max_tokens", None,
                                       note="default: Search-R1 1024; Search-o1 8192, QwQ 20480")
    temperature: float | None = redefault(LLMOptions, "temperature", None, note="default 0.7, both styles")
    top_p: float | None = redefault(LLMOptions, "top_p", None, note="default: Search-o1 0.8, Search-R1 the server's")
    concurrency: int = redefault(LLMOptions, "concurrency", 16)
    policy: str = option("fallback", "a query the agent did not answer: fallback = the plain question as hy_doc, "
                         "authors = the whole output, error = leave it out (a failed query)", choices=POLICIES,
                         flag="--answer-policy", aliases=("answer_policy",))

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("style", "llm_model", "base_url"):
            if not getattr(self, name):
                raise UsageError(f"needs {name}: an agent needs style, llm_model and base_url (e.g. search-r1, "
                                 "MODEL, http://localhost:8000/v1)")
        st.agent_style(self.style)  # UsageError with the valid names
        if self.policy not in POLICIES:
            raise UsageError(f"unknown answer policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        for name in ("search_top_k", "max_turns", "max_tokens", "concurrency", "max_requests"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name.replace('_', '-')} must be at least 1, got {value}")
        if self.max_searches is not None and self.max_searches < 0:
            raise UsageError(f"max-searches must be at least 0, got {self.max_searches}")
        if self.chat_template is not None:
            templates().get(self.chat_template)

    @property
    def name(self) -> str:
        return self.llm_name or self.llm_model

    def resolved(self) -> AgentConfig:
        """Every ``None`` replaced by the style's default; the chat template from the model's name (UsageError
        when it names none: pass ``chat_template``)."""
        style = st.agent_style(self.style)
        d = style.defaults
        template = self.chat_template or template_for_model(self.llm_model) or template_for_model(self.name)
        if template is None:
            raise UsageError(f"no chat template is known for {self.llm_model!r}; pass --chat-template "
                             f"({', '.join(templates().names())})")
        return replace(
            self, style=style.name, chat_template=template,
            search_top_k=self.search_top_k or d.top_k,
            max_searches=d.max_searches if self.max_searches is None else self.max_searches,
            max_turns=self.max_turns or max(d.max_turns, (self.max_searches or 0) + 1),
            max_tokens=self.max_tokens or style.max_tokens(self.llm_model),
            temperature=d.temperature if self.temperature is None else self.temperature,
            top_p=d.top_p if self.top_p is None else self.top_p,
        )

    def key(self) -> dict[str, Any]:
        """What determines the agent's output (manifests, summaries): its keyed options (no address, key, timeout,
        concurrency or budget), in the order r2med has always written them."""
        resolved = self.resolved()
        out = {name: getattr(resolved, name) for name in _KEY_ORDER}
        out["extra"] = st.agent_style(self.style).extra(self.llm_model)
        if out["style"] == "search-o1":  # the Reason-in-Documents call's own, fixed sampling
            out["reason_in_documents"] = {**st.O1_REASON_SAMPLING, **st.O1_REASON_EXTRA}
        return out


#: the keyed options of an agent, in the order of its manifests and summaries
_KEY_ORDER = ("style", "llm_model", "chat_template", "search_top_k", "max_searches", "max_turns", "max_tokens",
              "temperature", "top_p", "seed", "policy")
