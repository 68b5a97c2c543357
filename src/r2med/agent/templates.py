"""Chat templates for text completion: how one user turn is wrapped before the model continues it.

The agents' authors generate with the raw model: the question goes through the tokenizer's chat template
(one user turn, generation prompt added), and every later turn continues that text. Through an
OpenAI-compatible server that is a text completion (``POST /v1/completions``) of the templated prompt, so
r2med applies the template itself, from this table. The beginning-of-sequence token is left to the
server's tokenizer (vLLM and llama.cpp add it as the model asks).

>>> wrap("chatml", "Hi")
'<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
>>> template_for_model("Qwen/QwQ-32B"), template_for_model("PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo")
('qwq', 'qwen2.5')
>>> template_for_model("PeterJinGo/SearchR1-nq_hotpotqa_train-llama3.2-3b-em-ppo"), template_for_model("Qwen/QwQ-32B-Preview")
('llama3', None)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from r2med.registry import Registry


@dataclass(frozen=True)
class ChatTemplate:
    """``before`` + the user's text + ``after``: a one-turn prompt with the generation prompt added."""

    name: str
    before: str
    after: str
    description: str

    def wrap(self, text: str) -> str:
        return f"{self.before}{text}{self.after}"


_QWEN_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"

TEMPLATES: Mapping[str, ChatTemplate] = MappingProxyType({t.name: t for t in (
    ChatTemplate("qwen2.5", _QWEN_SYSTEM + "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n",
                 "Qwen2.5 instruct models (and the Search-R1 checkpoints trained from them): ChatML with Qwen's "
                 "default system turn"),
    ChatTemplate("qwq", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n<think>\n",
                 "QwQ-32B: ChatML, the generation prompt opens the thinking block"),
    ChatTemplate("chatml", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n",
                 "ChatML without a system turn (Qwen3 in thinking mode, other ChatML models)"),
    ChatTemplate("gemma", "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n", "Gemma 2 and 3"),
    ChatTemplate("llama3", "<|start_header_id|>user<|end_header_id|>\n\n",
                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "Llama 3.x instruct"),
    ChatTemplate("raw", "", "", "no template: the prompt as is (base models)"),
)})

#: model name pattern -> template, first match wins
#: Llama 3 before the Search-R1 names (its Llama-3.2 checkpoints, ``...-llama3.2-3b-em-ppo``, are Llama 3 models);
#: QwQ-32B-Preview matches nothing (its template is not QwQ-32B's, which opens a thinking block): pass one
_BY_NAME: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"qwq.*preview", re.IGNORECASE), None),
    (re.compile(r"qwq", re.IGNORECASE), "qwq"),
    (re.compile(r"llama[-_]?3", re.IGNORECASE), "llama3"),
    (re.compile(r"qwen[-_]?2\.5|searchr1|search-r1", re.IGNORECASE), "qwen2.5"),
    (re.compile(r"qwen", re.IGNORECASE), "chatml"),
    (re.compile(r"gemma", re.IGNORECASE), "gemma"),
)


def templates() -> Registry[ChatTemplate]:
    return Registry("chat template", TEMPLATES)


def template_for_model(model: str) -> str | None:
    """The template a model id or path names (``None``: not recognised; pass ``--chat-template``)."""
    return next((name for pattern, name in _BY_NAME if pattern.search(model)), None)  # first match, None included


def wrap(name: str, text: str) -> str:
    """``text`` as the one user turn of template ``name``."""
    return templates().get(name).wrap(text)
