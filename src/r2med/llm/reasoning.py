"""Reasoning-model outputs: split the trace from the answer, and pick the text used as an expansion.

Five output styles are known (``STYLES``):

- ``plain``: the whole text is the answer (instruction models, API models that hide their reasoning).
- ``think``: ``<think> trace </think> answer`` (DeepSeek-R1 and its distills, QwQ, Qwen3 in thinking mode).
  The chat templates of R1 distills and QwQ open ``<think>`` in the prompt, so their raw output often has
  only the closing tag.
- ``huatuo``: HuatuoGPT-o1's ``## Thinking ... ## Final Response ...``.
- ``sky-t1``: Sky-T1's ``<|begin_of_thought|> ... <|end_of_thought|> <|begin_of_solution|> ... <|end_of_solution|>``.
- ``search-r1``: Search-R1's ``<think>``/``<search>``/``<information>`` turns ending in ``<answer> ... </answer>``.

``split_reasoning`` parses an output cleanly (stripped answer, ``truncated`` flag); ``authors_answer`` reproduces
byte for byte what the official R2MED code (``split_response_for_r1`` in ``src/base.py``) used as ``hy_doc``,
including its habit of using the whole trace when the answer never came; ``choose_answer`` decides between them.

>>> parsed = split_reasoning("<think>Light means warmth.</think>\\n\\nInsects follow light.")
>>> parsed.style, parsed.reasoning, parsed.answer, parsed.truncated
('think', 'Light means warmth.', 'Insects follow light.', False)
>>> choose_answer(split_reasoning("Okay, let me think", style="think"), fallback="query")
('query', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from r2med.errors import ProviderError, UsageError

STYLES = ("plain", "think", "huatuo", "sky-t1", "search-r1")
POLICIES = ("fallback", "authors", "error")

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_FINAL = "Final Response"
_SKY_THOUGHT = ("<|begin_of_thought|>", "<|end_of_thought|>")
_SKY_SOLUTION = ("<|begin_of_solution|>", "<|end_of_solution|>")
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"

# The official regexes (R2MED/R2MED src/base.py, split_response_for_r1). authors_answer uses the first verbatim and
# finds what the other two find with str.find, in linear time (re.search of a lazy ".*?" between two tags backtracks
# over every opening tag: quadratic on an output of many opening tags and no closing one); tests compare the two.
_AUTHORS_HUATUO = re.compile(r"Final Response\s*(.*)", re.DOTALL)
AUTHORS_SKY = re.compile(r"<\|begin_of_solution\|>\s*([\s\S]*?)\s*<\|end_of_solution\|>")
AUTHORS_SEARCH_R1 = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

# What may sit between "Final Response" and the answer: "## Final Response:", "**Final Response:**", "**Final Response**".
_AFTER_FINAL = re.compile(r"^(?:\s*:\s*\*\*|\s*\*\*\s*:|\s*:|\*\*(?=\s))?\s*")
_THINKING_HEADING = re.compile(r"^\s*(?:#+[ \t]*)?(?:\*\*)?Thinking(?:\*\*)?:?[ \t]*(?:\n|$)")
_R1_TOKEN = re.compile(r"(?:^|[^a-z0-9])r1(?:[^a-z0-9]|$)")
_SKY_NAME = re.compile(r"sky[-_]?t1|sky-\d+b")


@dataclass(frozen=True)
class ParsedOutput:
    """One model output split into its reasoning trace and its answer.

    ``raw`` is the generated text as received (without a separate ``reasoning_content``); ``truncated`` is True
    when a trace was cut off before its answer, and ``answer`` is then "". ``style`` is the style used to parse.
    """

    raw: str
    reasoning: str
    answer: str
    truncated: bool
    style: str


def style_for_llm(llm: str, method: str | None = None) -> str:
    """The output style of an LLM, from its name, hub id or path (case-insensitive).

    Rules, in order:

    1. ``method == "search-r1"`` (the published ``qwen-3b-ins``/``qwen-7b-ins`` expansions), or "search-r1" /
       "searchr1" in the name -> ``search-r1``.
    2. "huatuo" in the name (``huatuo-o1-70b``, ``HuatuoGPT-o1-8B``) -> ``huatuo``.
    3. "sky-t1", "skyt1" or "sky-<N>b" (the authors' ``sky-32b``) -> ``sky-t1``.
    4. "no-think", "nothink" or "non-think" (``qwen3-32b-no-thinking``) -> ``plain``.
    5. "r1" as a separate token (``r1-qwen-32b``, ``deepseek-r1``, ``DeepSeek-R1-Distill-Llama-70B``),
       "deepseek-reasoner", "qwq", "thinking", or "qwen3" unless an "instruct" variant -> ``think``.
    6. Anything else (``gpt4``, ``qwen-72b``, ``o3-mini``, ``Qwen3-30B-A3B-Instruct-2507``) -> ``plain``.

    >>> [style_for_llm(n) for n in ["r1-qwen-32b", "QwQ-32B", "qwen3-32b", "huatuo-o1-70b", "sky-32b", "gpt4"]]
    ['think', 'think', 'think', 'huatuo', 'sky-t1', 'plain']
    >>> style_for_llm("qwen-7b-ins", method="search-r1"), style_for_llm("qwen-7b-ins")
    ('search-r1', 'plain')
    """
    name = llm.strip().casefold()
    if (method or "").strip().casefold() == "search-r1" or "search-r1" in name or "searchr1" in name:
        return "search-r1"
    if "huatuo" in name:
        return "huatuo"
    if _SKY_NAME.search(name):
        return "sky-t1"
    if any(marker in name for marker in ("no-think", "nothink", "non-think")):
        return "plain"
    if _R1_TOKEN.search(name) or any(marker in name for marker in ("deepseek-reasoner", "qwq", "thinking")):
        return "think"
    if "qwen3" in name and "instruct" not in name:
        return "think"
    return "plain"


def detect_style(text: str) -> str:
    """The style an output looks like, from its tags (an untagged text is ``plain``).

    >>> [detect_style(t) for t in ["a</think>b", "## Thinking\\nx", "<|begin_of_thought|>x", "<answer>y</answer>", "y"]]
    ['think', 'huatuo', 'sky-t1', 'search-r1', 'plain']
    """
    if _ANSWER_OPEN in text or "<search>" in text or "<information>" in text:
        return "search-r1"
    if _SKY_THOUGHT[0] in text or _SKY_SOLUTION[0] in text:
        return "sky-t1"
    if _THINK_CLOSE in text or _THINK_OPEN in text:
        return "think"
    if _FINAL in text or _THINKING_HEADING.match(text):
        return "huatuo"
    return "plain"


def _check_style(style: str, *, allow_auto: bool = True) -> None:
    valid = (("auto",) if allow_auto else ()) + STYLES
    if style not in valid:
        raise UsageError(f"unknown reasoning style {style!r}; valid: {', '.join(valid)}")


def _drop_open_think(text: str) -> str:
    stripped = text.lstrip()
    return stripped[len(_THINK_OPEN):] if stripped.startswith(_THINK_OPEN) else text


def _parse_think(text: str) -> tuple[str, str, bool]:
    if _THINK_CLOSE in text:
        trace, answer = text.split(_THINK_CLOSE, 1)
        return _drop_open_think(trace).strip(), answer.strip(), False
    if not text.strip():
        return "", "", False
    # No closing tag: the trace (opened by the model or by the chat template) never ended.
    return _drop_open_think(text).strip(), "", True


def _parse_huatuo(text: str) -> tuple[str, str, bool]:
    at = text.find(_FINAL)
    if at < 0:
        return _THINKING_HEADING.sub("", text, count=1).strip(), "", bool(text.strip())
    before, after = text[:at], text[at + len(_FINAL):]
    reasoning = _THINKING_HEADING.sub("", before.rstrip(" \t\r\n#*"), count=1).strip()
    return reasoning, _AFTER_FINAL.sub("", after, count=1).strip(), False


def _parse_sky(text: str) -> tuple[str, str, bool]:
    start = text.find(_SKY_SOLUTION[0])
    end = text.find(_SKY_SOLUTION[1], start + len(_SKY_SOLUTION[0])) if start >= 0 else -1
    t_start = text.find(_SKY_THOUGHT[0])
    t_end = text.find(_SKY_THOUGHT[1], t_start + 1) if t_start >= 0 else -1
    if t_start >= 0 and t_end >= 0:
        reasoning = text[t_start + len(_SKY_THOUGHT[0]):t_end]
    elif t_start >= 0:
        reasoning = text[t_start + len(_SKY_THOUGHT[0]):start if start >= 0 else len(text)]
    else:
        reasoning = text[:start] if start >= 0 else text
    if start < 0 or end < 0:
        return reasoning.strip(), "", bool(text.strip())
    return reasoning.strip(), text[start + len(_SKY_SOLUTION[0]):end].strip(), False


def _parse_search_r1(text: str) -> tuple[str, str, bool]:
    start = text.find(_ANSWER_OPEN)
    end = text.find(_ANSWER_CLOSE, start + len(_ANSWER_OPEN)) if start >= 0 else -1
    if start < 0 or end < 0:
        return text.strip(), "", bool(text.strip())
    return text[:start].strip(), text[start + len(_ANSWER_OPEN):end].strip(), False


_PARSERS = {"think": _parse_think, "huatuo": _parse_huatuo, "sky-t1": _parse_sky, "search-r1": _parse_search_r1}


def split_reasoning(text: str, *, style: str = "auto", reasoning_content: str | None = None) -> ParsedOutput:
    """Separate a model output into reasoning trace and answer.

    ``style`` is one of ``STYLES`` or ``"auto"`` (detected from the tags in ``text``; an untagged text is plain,
    so pass the style from ``style_for_llm`` to recognise a trace cut off before any tag). When the server
    returned the trace separately (``reasoning_content`` of vLLM's reasoning parser or the DeepSeek API; pass
    it even when it is ""), the trace is that and the answer is ``text``, minus a stray leading ``</think>``.
    The first ``</think>`` ends a trace; HuatuoGPT-o1's "Final Response" may carry a "## " heading, bold
    markers or a colon. An empty answer after a closed trace is ``answer=""`` with ``truncated=False``.

    >>> split_reasoning("## Thinking\\n\\nFever and rash.\\n\\n## Final Response\\n\\nMeasles.", style="huatuo").answer
    'Measles.'
    >>> p = split_reasoning("</think>\\n\\nThe answer.", reasoning_content="The trace.")
    >>> p.reasoning, p.answer, p.style
    ('The trace.', 'The answer.', 'think')
    >>> split_reasoning("<think>Hmm</think>   ").answer, split_reasoning("<think>Hmm").truncated
    ('', True)
    """
    _check_style(style)
    if reasoning_content is not None:
        rest = text.lstrip().removeprefix(_THINK_CLOSE)
        used = "think" if style in ("auto", "plain", "think") else style
        if used == "think":
            return ParsedOutput(text, reasoning_content.strip(), rest.strip(), False, used)
        inner, answer, truncated = _PARSERS[used](rest)
        trace = "\n\n".join(part for part in (reasoning_content.strip(), inner) if part)
        return ParsedOutput(text, trace, answer, truncated, used)
    used = detect_style(text) if style == "auto" else style
    if used == "plain":
        return ParsedOutput(text, "", text.strip(), False, used)
    reasoning, answer, truncated = _PARSERS[used](text)
    return ParsedOutput(text, reasoning, answer, truncated, used)


def authors_answer(text: str, *, style: str) -> str:
    """Exactly what the official R2MED code used as ``hy_doc`` for an output of ``style``.

    think: text after the first ``</think>``, stripped (the whole text, unstripped, where there is none);
    huatuo: text after the first "Final Response", stripped (a colon after it is kept, as in the official code);
    sky-t1: inside the first begin/end_of_solution pair, stripped; search-r1: inside the first closed
    ``<answer>``, stripped; plain, or a trace cut off before its answer: the whole text, unchanged.

    >>> authors_answer("<think>a</think>\\n b \\n", style="think"), authors_answer(" a ", style="think")
    ('b', ' a ')
    >>> authors_answer("## Final Response: X ", style="huatuo")
    ': X'
    """
    _check_style(style)
    if style == "auto":
        style = detect_style(text)
    if style == "think":
        return text.split(_THINK_CLOSE, 1)[1].strip() if _THINK_CLOSE in text else text
    if style == "huatuo":
        match = _AUTHORS_HUATUO.search(text)
        return match.group(1).strip() if match else text
    if style in ("sky-t1", "search-r1"):  # AUTHORS_SKY.search / AUTHORS_SEARCH_R1.findall(text)[0], then stripped
        start, end = _SKY_SOLUTION if style == "sky-t1" else (_ANSWER_OPEN, _ANSWER_CLOSE)
        found = first_pair(text, start, end)
        return found.strip() if found is not None else text
    return text


def first_pair(text: str, start: str, end: str) -> str | None:
    """What lies between the first ``start`` and the first ``end`` after it, unstripped (None: no such pair): group 1
    of ``re.search(re.escape(start) + "(.*?)" + re.escape(end), text, re.DOTALL)``, in linear time (when the first
    ``start`` has no ``end`` after it, no later one has).

    >>> first_pair("<a> x <a> y </a> z </a>", "<a>", "</a>"), first_pair("<a> open", "<a>", "</a>")
    (' x <a> y ', None)
    """
    at = text.find(start)
    close = text.find(end, at + len(start)) if at >= 0 else -1
    return text[at + len(start):close] if close >= 0 else None


def choose_answer(parsed: ParsedOutput, *, fallback: str, policy: str = "fallback") -> tuple[str, bool]:
    """The text to use as the expansion, and whether ``fallback`` was used instead of the model's answer.

    ``policy``: "fallback" (a truncated trace or an empty answer gives ``fallback``, normally the plain query),
    "authors" (``authors_answer`` of the raw text: the official behaviour, whole trace when cut off), or
    "error" (raise ``ProviderError`` for a truncated trace or an empty answer).

    A plain output (no reasoning style) is used byte for byte under every policy, surrounding whitespace
    included, as the official code used ``hy_doc``: only its emptiness is judged on the stripped text.
    A reasoning model's answer is stripped under every policy, as the official code stripped it.

    >>> choose_answer(split_reasoning("<think>a</think>b"), fallback="q")
    ('b', False)
    >>> choose_answer(split_reasoning("\\n\\nA passage. ", style="plain"), fallback="q")
    ('\\n\\nA passage. ', False)
    >>> choose_answer(split_reasoning(" \\n", style="plain"), fallback="q")
    ('q', True)
    >>> choose_answer(split_reasoning("Step 1...", style="think"), fallback="q", policy="authors")
    ('Step 1...', False)
    """
    if policy not in POLICIES:
        raise UsageError(f"unknown answer policy {policy!r}; valid: {', '.join(POLICIES)}")
    if policy == "authors":
        return authors_answer(parsed.raw, style=parsed.style), False
    if parsed.truncated or not parsed.answer:
        if policy == "error":
            problem = ("the reasoning trace was cut off before its answer" if parsed.truncated
                       else "the answer after the reasoning trace is empty")
            raise ProviderError(
                f"{problem} (style {parsed.style!r}, {len(parsed.raw)} characters: {parsed.raw[:80]!r}...); "
                "raise max_tokens, or use the answer policy 'fallback' (plain query) or 'authors' (whole text)"
            )
        return fallback, True
    return (parsed.raw if parsed.style == "plain" else parsed.answer), False
