"""An agent's configuration (``AgentConfig``: style, LLM, limits; the authors' defaults) and its stop reasons."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from r2med.agent import protocols as pr
from r2med.agent import styles as st
from r2med.agent.templates import MODEL_TEMPLATE, resolve_template, templates
from r2med.errors import UsageError
from r2med.llm.endpoint import LLMOptions
from r2med.llm.reasoning import POLICIES
from r2med.options import option, redefault

if TYPE_CHECKING:
    from r2med.http import Secret

#: why a query's loop ended
STOP_REASONS = {
    "answer": "the model gave its answer",
    "no-answer": "the model stopped without a search and without an answer",
    "length": "a generation reached max_tokens",
    "search-limit": "the model asked for a search beyond max_searches",
    "repeated-search": "Search-R1 asked the same search twice in a row (only with --stop-on-repeat)",
    "empty-search": "the model closed an empty search query (Search-R1: only with --stop-on-repeat)",
    "max-turns": "the turn limit was reached with the model still searching",
    "context-full": "the prompt leaves no room in the server's context (the output so far is kept)",
    "budget": "the request or token budget ran out",
    "error": "a request failed after its retries (the query is not written; rerun to retry it)",
}


@dataclass(frozen=True, kw_only=True)
class AgentConfig(LLMOptions):
    """One agent: ``style`` (search-r1 | search-o1), the LLM (``r2med.llm.endpoint``: ``llm_model`` at ``base_url``;
    ``llm_name`` names its folder, default the model id) and the loop's limits. ``None`` takes the style's default
    (the authors')."""

    style: str = option(None, "the agent: search-r1 (Search-R1's loop) or search-o1 (Search-o1's, with "
                        "Reason-in-Documents); default: the protocol's", choices=lambda: tuple(st.STYLES))
    protocol: str | None = option(None, "the authors' settings the agent runs with: search-r1-eval (Search-R1 as "
                                  "evaluated: greedy, 500 tokens, cuts at 500/4096 tokens, 4 turns + a final one), "
                                  "search-r1-infer (its infer.py), search-o1 (run_search_o1.py); default: "
                                  "search-r1-eval for search-r1; other flags override its values",
                                  choices=lambda: tuple(pr.PROTOCOLS))
    stop_on_repeat: bool = option(False, "Search-R1: also end a query on a repeated or empty search query or a "
                                  "turn cut by max-tokens (stops the authors' loops do not have)")
    chat_template: str | None = option(None, "how the user turn is wrapped: a template of r2med's table (default: the "
                                       "model's own chat_template when its tokenizer_config.json is local or in the "
                                       "Hugging Face cache, else the table's by the model name)",
                                       choices=lambda: tuple(templates().names()))
    search_top_k: int | None = option(None, "documents per search (default: the protocol's: Search-R1 3, "
                                      "Search-o1 10)", minimum=1)
    max_searches: int | None = option(None, "searches per query (default: the protocol's: search-r1-eval one per turn, "
                                       "search-r1-infer and search-o1 10)", minimum=0)
    max_turns: int | None = option(None, "generations per query (default: the protocol's: search-r1-eval 4 "
                                    "and one final answer turn, search-r1-infer 11, search-o1 15)", minimum=1)
    max_tokens: int | None = redefault(LLMOptions, "max_tokens", None,
                                       note="default: the protocol's: search-r1-eval 500, "
                                       "search-r1-infer 1024, search-o1 8192 (QwQ 20480)")
    temperature: float | None = redefault(LLMOptions, "temperature", None, note="default: the protocol's: "
                                          "search-r1-eval 0 (greedy), search-r1-infer and search-o1 0.7")
    top_p: float | None = redefault(LLMOptions, "top_p", None, note="default: the protocol's: "
                                    "search-r1-eval 1, search-o1 0.8, search-r1-infer the server's")
    concurrency: int = redefault(LLMOptions, "concurrency", 16)
    context_length: int | None = option(None, "tokens per request (prompt + completion) the server takes; default: "
                                        "learned from the server (vLLM's /v1/models max_model_len, llama.cpp's /props "
                                        "context per slot); max-tokens is clamped to what is left and a query whose "
                                        "prompt fills it ends context-full", minimum=1, keyed=False)
    search_wait: float = option(0.05, "--search-with URL: seconds a search waits for the searches of other queries "
                                "to join its request (it goes at once when every running query waits for one)",
                                minimum=0, keyed=False)
    seeds: list[int] | None = option(None, "a sampled protocol's runs: one stored run per seed (each under "  # noqa: RUF009
                                     "LLM-seedN) and their mean and sample sd; a greedy one refuses more than one",
                                     keyed=False, in_file=False, metavar="S1,S2,...")
    runs: int | None = option(None, "as --seeds 1,...,N", minimum=1, keyed=False, in_file=False)
    policy: str = option("fallback", "a query the agent did not answer: fallback = the plain question as hy_doc, "
                         "authors = the whole output, error = leave it out (a failed query)", choices=POLICIES,
                         flag="--answer-policy", aliases=("answer_policy",))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.protocol is not None:
            row = pr.protocol(self.protocol)  # UsageError with the valid names
            if self.style is None:
                object.__setattr__(self, "style", row.style)
            elif self.style != row.style:
                raise UsageError(f"protocol {self.protocol!r} runs style {row.style!r}, not {self.style!r}: drop "
                                 "--style or pass a protocol of that style "
                                 f"({', '.join(p.name for p in pr.PROTOCOLS.values() if p.style == self.style)})")
        for name in ("style", "llm_model", "base_url"):
            if not getattr(self, name):
                raise UsageError(f"needs {name}: an agent needs a style (or a protocol), llm_model and base_url "
                                 "(e.g. search-r1, MODEL, http://localhost:8000/v1)")
        st.agent_style(self.style)  # UsageError with the valid names
        if self.policy not in POLICIES:
            raise UsageError(f"unknown answer policy {self.policy!r}; valid: {', '.join(POLICIES)}")
        for name in ("search_top_k", "max_turns", "max_tokens", "concurrency", "max_requests"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name.replace('_', '-')} must be at least 1, got {value}")
        if self.max_searches is not None and self.max_searches < 0:
            raise UsageError(f"max-searches must be at least 0, got {self.max_searches}")
        if self.chat_template is not None and not self.chat_template.startswith(MODEL_TEMPLATE):
            templates().get(self.chat_template)
        if self.seeds is not None and self.runs is not None:
            raise UsageError("pass --seeds or --runs, not both (--runs N is --seeds 1,...,N)")
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(self.seeds)):
            raise UsageError(f"--seeds needs distinct seeds, got {','.join(map(str, self.seeds))}")
        if self.seed_list() and self.seed is not None:
            raise UsageError(f"--seed {self.seed} and --seeds/--runs: pass one of them")

    def seed_list(self) -> list[int] | None:
        """The seeds of ``--seeds`` or ``--runs N`` (1..N), or None (one run, ``seed`` as given)."""
        if self.runs is not None:
            return list(range(1, self.runs + 1))
        return list(self.seeds) if self.seeds is not None else None

    def seeded(self) -> list[AgentConfig]:
        """One config per seed of ``--seeds``/``--runs`` (its ``seed`` set, its results under ``LLM-seedN``), or
        ``[self]``. A greedy protocol (temperature 0) gives the same run for every seed: more than one is refused."""
        seeds = self.seed_list()
        if seeds is None:
            return [self]
        resolved = self.resolved()
        if len(seeds) > 1 and resolved.temperature == 0:
            raise UsageError(f"protocol {resolved.protocol} is greedy (temperature 0): every seed gives the same run, "
                             "so one run is its result; drop --seeds/--runs, or sample (e.g. --temperature 0.7) "
                             "to measure the spread of a sampled agent")
        return [replace(self, seeds=None, runs=None, seed=seed, llm_name=f"{self.name}-seed{seed}") for seed in seeds]

    @property
    def name(self) -> str:
        return self.llm_name or self.llm_model

    def secret(self) -> Secret:
        """The key EVERY request to the LLM server carries: its completions and what the agent asks of the server
        itself (``/tokenize``, ``/detokenize``, ``/v1/models``, ``/props``). One rule, the completions' client's
        (``ChatClient`` via ``LLMOptions.client``: ``r2med.http.resolve_key`` of ``--api-key-env``'s value, else
        ``$OPENAI_API_KEY``, else none for a local server), so a server that checks a key on every path (vLLM's
        ``--api-key``) answers each of them; MissingResourceError (exit 4) where the completions would get one."""
        from r2med.http import check_base_url, resolve_key

        model = str(self.llm_model)
        return resolve_key(check_base_url(str(self.base_url), provider=model), provider=model, key=self.api_key(),
                           env=self.api_key_env)

    @property
    def protocol_row(self) -> pr.Protocol:
        """The protocol this agent runs (the style's default when none is named)."""
        return pr.protocol(self.protocol or pr.default_protocol(st.agent_style(self.style).name))

    def resolved(self) -> AgentConfig:
        """Every ``None`` replaced by the protocol's value (the authors'); the chat template: the model's own
        (``model:<sha256>``), else the table's by the model's name (UsageError when it names none: pass
        ``chat_template``)."""
        style = st.agent_style(self.style)
        d = self.protocol_row
        found, _ = resolve_template(str(self.llm_model), self.chat_template, self.name)
        template = None if found is None else found.name
        if template is None:
            raise UsageError(f"no chat template is known for {self.llm_model!r}; pass --chat-template "
                             f"({', '.join(templates().names())})")
        max_turns = self.max_turns or d.max_turns
        if d.max_searches is not None and not self.max_turns:  # the turns are at least the searches + 1
            max_turns = max(max_turns, (self.max_searches or 0) + 1)
        max_searches = d.max_searches if self.max_searches is None else self.max_searches
        return replace(
            self, style=style.name, protocol=d.name, chat_template=template,
            search_top_k=self.search_top_k or d.search_top_k,
            max_searches=max_turns if max_searches is None else max_searches,  # None: one per turn
            max_turns=max_turns,
            max_tokens=self.max_tokens or d.max_tokens or style.max_tokens(self.llm_model),
            temperature=d.temperature if self.temperature is None else self.temperature,
            top_p=d.top_p if self.top_p is None else self.top_p,
        )

    def key(self) -> dict[str, Any]:
        """What determines the agent's output (manifests, summaries): its keyed options (no address, key, timeout,
        concurrency or budget), in the order r2med has always written them."""
        resolved = self.resolved()
        out = {name: getattr(resolved, name) for name in _KEY_ORDER}
        out["extra"] = st.agent_style(self.style).extra(self.llm_model)
        out["protocol_settings"] = resolved.protocol_row.settings()
        if out["style"] == "search-o1":  # the Reason-in-Documents call's own, fixed sampling
            out["reason_in_documents"] = {**st.O1_REASON_SAMPLING, **st.O1_REASON_EXTRA}
        return out


#: the keyed options of an agent, in the order of its manifests and summaries
_KEY_ORDER = ("style", "protocol", "stop_on_repeat", "llm_model", "chat_template", "search_top_k", "max_searches", "max_turns", "max_tokens",
              "temperature", "top_p", "seed", "policy")
