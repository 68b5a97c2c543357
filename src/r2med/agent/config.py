"""An agent's configuration (``AgentConfig``: style, LLM, limits; the authors' defaults) and its stop reasons."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from r2med.agent import styles as st
from r2med.agent.templates import template_for_model, templates
from r2med.errors import UsageError
from r2med.llm.reasoning import POLICIES

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


@dataclass(frozen=True)
class AgentConfig:
    """One agent: ``style`` (search-r1 | search-o1), the LLM (``llm_model`` at ``base_url``; ``llm_name`` names its
    folder, default the model id), and the loop's limits. ``None`` takes the style's default (the authors')."""

    style: str
    llm_model: str
    base_url: str
    llm_name: str | None = None
    chat_template: str | None = None
    search_top_k: int | None = None
    max_searches: int | None = None
    max_turns: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    concurrency: int = 16
    policy: str = "fallback"
    max_requests: int | None = None

    def __post_init__(self) -> None:
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
        """What determines the agent's output (manifests, summaries): no address, concurrency or budget."""
        out = asdict(self.resolved())
        for name in ("base_url", "concurrency", "max_requests", "llm_name"):
            out.pop(name)
        out["extra"] = st.agent_style(self.style).extra(self.llm_model)
        if out["style"] == "search-o1":  # the Reason-in-Documents call's own, fixed sampling
            out["reason_in_documents"] = {**st.O1_REASON_SAMPLING, **st.O1_REASON_EXTRA}
        return out
