"""Named agent protocols: how each agent's authors ran it, one row of settings per protocol, with the source of each.

A protocol is a style (the prompts and tags of ``r2med.agent.styles``) plus the settings its authors' code ran
it with: sampling, tokens per turn, the turn and search limits, the cuts of observations and context (in the
model's tokens), what a turn without a valid action does, and which text becomes the answer. Every value is
the authors'; ``SOURCES`` says where (commit, file and line), and docs/agent.md tables them.

- ``search-r1-eval``: Search-R1 as its authors *evaluated* it (``scripts/nq_hotpotqa/evaluate.sh`` through
  ``search_r1/llm_agent/generation.py`` and verl's vLLM rollout): greedy, 500 new tokens per turn, each
  observation cut to its first 500 tokens, the rolling context cut to its last 4,096 tokens, 4 turns then one
  final turn without search, an invalid action answered with "My previous action is invalid. ..." and retried.
- ``search-r1-infer``: Search-R1's ``infer.py``: sampled at 0.7, 1,024 new tokens, no cuts; a turn that ends
  with the end-of-sequence token ends the query, any other searches again (the last query of the whole text).
- ``search-o1``: ``scripts/run_search_o1.py``: 15 turns, 10 searches, 10 documents; the output is kept at the
  turn limit.

>>> protocol("search-r1-eval").max_context_tokens, protocol("search-r1-eval").final_turn
(4096, True)
>>> default_protocol("search-r1"), default_protocol("search-o1")
('search-r1-eval', 'search-o1')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from r2med.registry import Registry

#: the commits of the authors' repositories the sources below cite
COMMITS = MappingProxyType({
    "PeterGriffinJin/Search-R1": "a14dc3a",
    "sunnynexus/Search-o1": "6ced48f",
    "R2MED/R2MED": "62b7074",
})


@dataclass(frozen=True)
class Protocol:
    """One protocol's settings (``None``: not set by the authors; ``max_tokens`` ``None``: the style's per-model
    value). ``loop`` names the loop that runs it (``r2med.agent.loop``), ``answer_rule`` the text that becomes the
    answer (``r2med.agent.outputs.ANSWER_RULES``)."""

    name: str
    style: str
    loop: str
    answer_rule: str
    temperature: float
    top_p: float | None
    max_tokens: int | None
    search_top_k: int
    max_searches: int | None
    max_turns: int
    final_turn: bool = False
    max_obs_tokens: int | None = None
    max_context_tokens: int | None = None
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def needs_tokens(self) -> bool:
        """Whether the protocol cuts in the model's tokens (it needs a tokenizer: the server's or a local one)."""
        return self.max_obs_tokens is not None or self.max_context_tokens is not None

    def settings(self) -> dict[str, object]:
        """The settings stored with a result (``summary.json``)."""
        return {"protocol": self.name, "final_turn": self.final_turn, "max_obs_tokens": self.max_obs_tokens,
                "max_context_tokens": self.max_context_tokens, "answer_rule": self.answer_rule}


_R1 = "PeterGriffinJin/Search-R1"
_O1 = "sunnynexus/Search-o1"
_EVAL = "scripts/nq_hotpotqa/evaluate.sh"
_GEN = "search_r1/llm_agent/generation.py"

PROTOCOLS: Mapping[str, Protocol] = MappingProxyType({p.name: p for p in (
    Protocol(
        "search-r1-eval", "search-r1", loop="r1-eval", answer_rule="r1-eval",
        temperature=0.0, top_p=1.0, max_tokens=500, search_top_k=3, max_searches=None, max_turns=4,
        final_turn=True, max_obs_tokens=500, max_context_tokens=4096,
        description="Search-R1 as its authors evaluated it (evaluate.sh through generation.py)",
        sources=MappingProxyType({
            "greedy (temperature 0, top_p 1)": f"{_R1} verl/trainer/ppo/ray_trainer.py:508 ('do_sample': False); "
                                               "verl/workers/rollout/vllm_rollout/vllm_rollout.py:163-171",
            "max_tokens 500": f"{_R1} {_EVAL}:21 (data.max_response_length=500); verl/trainer/config/"
                              "ppo_trainer.yaml:73; verl/workers/rollout/vllm_rollout/vllm_rollout.py:108",
            "max_obs_tokens 500 (the first 500 tokens)": f"{_R1} {_EVAL}:23; {_GEN}:87-89",
            "max_context_tokens 4096 (the last 4096 tokens)": f"{_R1} {_EVAL}:20; {_GEN}:107-112",
            "max_turns 4": f"{_R1} {_EVAL}:63; {_GEN}:234",
            "final turn without search": f"{_R1} {_GEN}:278-298 (do_search=False)",
            "search_top_k 3": f"{_R1} {_EVAL}:65",
            "response cut at the first </search>, else the first </answer>": f"{_R1} {_GEN}:61-66",
            "action: the first <search>/<answer> pair": f"{_R1} {_GEN}:422-429",
            "observation \\n\\n<information>...</information>\\n\\n": f"{_R1} {_GEN}:391",
            "invalid action: message, another turn": f"{_R1} {_GEN}:396-401",
            "answer: the last of two or more <answer> pairs in prompt + response":
                f"{_R1} verl/utils/reward_score/qa_em.py:73-82",
            "prompt": f"{_R1} scripts/data_process/qa_search_test_merge.py:32-36, 75-77",
        })),
    Protocol(
        "search-r1-infer", "search-r1", loop="r1-infer", answer_rule="r1-first",
        temperature=0.7, top_p=None, max_tokens=1024, search_top_k=3, max_searches=10, max_turns=11,
        description="Search-R1's infer.py (no turn limit there: r2med stops at 10 searches, 11 turns)",
        sources=MappingProxyType({
            "temperature 0.7, max_tokens 1024": f"{_R1} infer.py:99-107",
            "search_top_k 3": f"{_R1} infer.py:64",
            "no turn limit (r2med: 10 searches, 11 turns)": f"{_R1} infer.py:94",
            "an end-of-sequence token ends the query": f"{_R1} infer.py:109-113",
            "else the last <search> of the whole text is searched ('' if none)": f"{_R1} infer.py:52-59, 118-125",
            "answer: the first <answer> pair, else the whole text (R2MED's cut)": "R2MED/R2MED src/base.py:28-33",
        })),
    Protocol(
        "search-o1", "search-o1", loop="o1", answer_rule="o1",
        temperature=0.7, top_p=0.8, max_tokens=None, search_top_k=10, max_searches=10, max_turns=15,
        description="Search-o1's run_search_o1.py",
        sources=MappingProxyType({
            "max_searches 10": f"{_O1} scripts/run_search_o1.py:74-78",
            "max_turns 15": f"{_O1} scripts/run_search_o1.py:81-84, 683",
            "search_top_k 10": f"{_O1} scripts/run_search_o1.py:88-91",
            "temperature 0.7, top_p 0.8, top_k 20": f"{_O1} scripts/run_search_o1.py:125-142",
            "max_tokens 8192 (QwQ 20480)": f"{_O1} scripts/run_search_o1.py:388-394",
            "the output is kept at the turn limit": f"{_O1} scripts/run_search_o1.py:683-685, 701",
            "answer: after the first </think>, else the whole text (R2MED's cut)": "R2MED/R2MED src/base.py:7-13",
        })),
)})

#: the protocol a style runs when no ``--protocol`` is given (docs/agent.md, "Which protocol")
DEFAULT_FOR_STYLE: Mapping[str, str] = MappingProxyType({"search-r1": "search-r1-eval", "search-o1": "search-o1"})


def protocols() -> Registry[Protocol]:
    return Registry("agent protocol", PROTOCOLS)


def protocol(name: str) -> Protocol:
    """The protocol ``name`` (UsageError with the valid names)."""
    return protocols().get(name)


def default_protocol(style: str) -> str:
    return DEFAULT_FOR_STYLE[style]
