"""ReasonRank (Liu et al., 2025) exactly as its authors ran it: one prompt per window, read by their answer rules.

Every text and number comes from the authors' repository (``8421BCD/ReasonRank``) as package data
(``r2med/data/reasonrank.json``, each value with its file:line at the commit read). Per window of ``n`` passages:

- the query: ``[n]`` rewritten as ``(n)`` (``re.sub(r"\\[(\\d+)\\]", r"(\\1)", ...)``), then stripped;
- each passage: stripped, ``ftfy.fix_text``, cut to ``doc_maxlen`` tokens of the model's tokenizer
  (``tokenizer.convert_tokens_to_string(tokenizer.tokenize(text)[:512])``: 512 for the R2MED datasets), then
  ``[n]`` -> ``(n)``;
- the messages: the system prompt (the reasoning one for ``rank_GPT_reasoning``: reasonrank-7B and -32B; the
  plain one for ``rank_GPT_qwen3``: reasonrank-8B), and one user message: the prefix, a blank line, one
  ``[i] passage`` line per passage, the post prompt;
- the prompt: the messages under the tokenizer's chat template (``add_generation_prompt=True``), then
  ``ftfy.fix_text`` on the whole of it.

``request_as="text"`` sends that prompt to ``/v1/completions``, byte for byte the authors' input;
``request_as="chat"`` sends the messages (each content through ``fix_text``, as the whole prompt was) to
``/v1/chat/completions``, where the server applies the same chat template. Sampling: temperature 0 and
3,072 + 100 completion tokens (reasoning mode); temperature 0.6, top_p 0.95, top_k 20, min_p 0 (Qwen3 mode);
``repetition_penalty`` 1.0 is sent explicitly, vLLM's offline default, which vLLM's server would otherwise take
from the model's ``generation_config.json``.

The answer (``reasonrank_permutation``): ``<think>.*?</think>\\s*<answer>(.*?)</answer>`` searched in the
lower-cased text (DOTALL); else the text after the last ``<answer>``; else the whole text (a trace cut off by
the token limit: its numbers are read, as the authors' code does); every non-digit (``str.isdigit``) becomes a
space; the numbers, 1-based, with repeats and numbers outside the window dropped and the passages never named
appended in their order. A "number" Python's ``int()`` refuses (``CO₂``, ``[1]²``, 5,000 digits) makes the window
keep its order, as the authors' ``try``/``except ValueError`` does (source ``unparsable``). The windows are ``r2med.rerankers.windows.sliding_windows`` (20, step 10, from the back), which
for window 20 and step 10 are the authors' windows (``rerank/rankllm.py`` ``sliding_windows_batched``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r2med.errors import UsageError
from r2med.llm.requests import ChatJob, SamplingParams, request_key
from r2med.packaged import read_text
from r2med.rerankers.permutation import PermutationReport, ReportBuilder, isdigit_runs, kept_order

TASK = "rerank-reasonrank/1"
#: the authors' prompt modes r2med runs (``--prompt_mode`` of their ``run_rank_llm.py``)
MODES = ("rank_GPT_reasoning", "rank_GPT_qwen3")
#: how a window is sent: one text prompt under the chat template, or the chat messages
REQUEST_AS = ("text", "chat")
#: where ``reasonrank_permutation`` found the numbers; ``unparsable``: one of them is not a number to ``int()``
SOURCES = ("answer-tags", "after-answer-tag", "whole-text", "unparsable")
#: the authors' answer pattern (listwise_prompt_r1.toml:5), which ``answer_span`` finds in linear time
ANSWER_PATTERN = r"<think>.*?</think>\s*<answer>(.*?)</answer>"
#: the most digits Python's ``int()`` reads from a string (``sys.int_info.default_max_str_digits``, Python 3.11+)
INT_MAX_STR_DIGITS = 4300
_WS_ANSWER = re.compile(r"\s*<answer>")

_MODE_KEY = {"rank_GPT_reasoning": "reasoning", "rank_GPT_qwen3": "qwen3"}


@functools.cache
def authors() -> dict[str, Any]:
    """The package data ``r2med/data/reasonrank.json``: the authors' texts and numbers with their file:line."""
    return json.loads(read_text("reasonrank.json"))


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UsageError(f"unknown ReasonRank prompt mode {mode!r}; valid: {', '.join(MODES)}")
    return mode


def replace_number(text: str) -> str:
    """``[n]`` -> ``(n)``, the authors' rule for the query and every passage (``utils.py:111-112``).

    >>> replace_number("see [3] and [12], not [a] or [ 4 ]")
    'see (3) and (12), not [a] or [ 4 ]'
    """
    data = authors()
    return re.sub(data["number_pattern"], data["number_replacement"], text)


def fix_text(text: str) -> str:
    """``ftfy.fix_text`` with its defaults (mojibake repaired, curly quotes straightened, NFC)."""
    from r2med.hf import require

    return require("ftfy", "llm", "ReasonRank's prompt (ftfy.fix_text)").fix_text(text)


def answer_span(text: str) -> tuple[str, int, int, str]:
    """``(string, start, end, source)``: where the authors' ``_clean_response`` (``rerank/rankllm.py:456-466``) finds
    the answer: ``string[start:end]`` is group 1 of ``re.search(ANSWER_PATTERN, text.lower(), re.DOTALL)`` (in the
    lower-cased text), else the text after the last ``<answer>``, else the whole text.

    The pattern's match is found in time linear in the text (``re.search`` backtracks: cubic on a text of many
    ``<think>x</think> <answer>`` without ``</answer>``): the leftmost ``<think>`` starts the match if any does; its
    ``.*?`` ends at the first ``</think>`` that whitespace and ``<answer>`` follow; the group ends at the next
    ``</answer>`` (none there: none after any later ``</think>`` either, so no match).

    >>> text = "<THINK>a</think> <answer>[2] > [1]</ANSWER>"
    >>> string, start, end, source = answer_span(text)
    >>> string[start:end], source
    ('[2] > [1]', 'answer-tags')
    """
    lower = text.lower()
    opened = lower.find("<think>")
    at = opened + len("<think>")
    while opened >= 0:
        close = lower.find("</think>", at)
        if close < 0:
            break
        tag = _WS_ANSWER.match(lower, close + len("</think>"))
        if tag is not None:
            end = lower.find("</answer>", tag.end())
            if end >= 0:
                return lower, tag.end(), end, "answer-tags"
            break
        at = close + 1
    after = text.rfind("<answer>")
    if after >= 0:
        return text, after + len("<answer>"), len(text), "after-answer-tag"
    return text, 0, len(text), "whole-text"


def clean_response(text: str) -> tuple[str, str]:
    """``(digits, source)``: the authors' ``_clean_response`` (``rerank/rankllm.py:456-474``): the answer between the
    tags, else after the last ``<answer>``, else the whole text; every non-digit turned into a space, stripped.

    >>> clean_response("<think>[1] > [2]?</think> <answer>[2] > [1]</answer>")
    ('2     1', 'answer-tags')
    >>> clean_response("<think>long... <answer>[3] > [1]")
    ('3     1', 'after-answer-tag')
    >>> clean_response("<think>passage [4] first, then [2]")
    ('4               2', 'whole-text')
    >>> clean_response("CO₂ [1]²")
    ('₂  1 ²', 'whole-text')
    """
    string, start, end, source = answer_span(text)
    answer = string[start:end].strip() if source == "answer-tags" else string[start:end]
    runs = [(m.start(), m.end()) for m in isdigit_runs(answer)]
    return "".join(answer[a:b] if i == 0 else " " * (a - runs[i - 1][1]) + answer[a:b]
                   for i, (a, b) in enumerate(runs)), source


def reasonrank_permutation(text: str, n: int) -> PermutationReport:
    """The window's new order (0-based permutation of ``range(n)``) from a ReasonRank answer, by the authors' rules
    (``clean_response``, then ``receive_permutation``, ``rerank/rankllm.py:483-527``).

    The numbers are the runs of ``str.isdigit`` characters (``rankllm.py:468-474``); the authors read them with
    ``int(x) - 1`` and, when one raises ``ValueError``, keep the window's order (``rankllm.py:512-516``: "unexcepted
    output!"). ``int()`` refuses a run holding a digit that is not decimal (``²``, ``₂``, ``①``: ``isdigit`` but not
    ``isdecimal``) and one of more than 4,300 digits (Python's ``int_max_str_digits``, the default since 3.11;
    leading zeros count). So here a run parses when all its characters are decimal (``str.isdecimal``, of any
    script: ``٣`` is 3, as for ``int()``) and it is at most ``INT_MAX_STR_DIGITS`` long; else the window keeps its
    order, source ``unparsable`` (decided without ``int()``, whatever ``sys.set_int_max_str_digits`` says; huge
    numbers are never converted).

    >>> r = reasonrank_permutation("<think>...</think>\\n<answer>[3] > [3] > [9] > [1]</answer>", 4)
    >>> r.order, r.duplicates, r.out_of_range, r.missing, r.source
    ((2, 0, 1, 3), (3,), (9,), (2, 4), 'answer-tags')
    >>> r = reasonrank_permutation("<think>Passage [3] discusses CO₂ levels; [5] is", 5)
    >>> r.order, r.source, r.unreadable
    ((0, 1, 2, 3, 4), 'unparsable', '₂')
    """
    builder = ReportBuilder(n)
    string, start, end, source = answer_span(text or "")
    for run in isdigit_runs(string, start, end):
        a, b = run.span()
        token = string[a:min(b, a + INT_MAX_STR_DIGITS + 1)]
        if b - a > INT_MAX_STR_DIGITS or not token.isdecimal():
            shown = token if len(token) <= 40 else f"{token[:20]}... ({b - a} characters)"
            return kept_order(n, "unparsable", shown)
        builder.digits(string, a, b)
    return builder.report(source)


def _trace(text: str) -> str:
    """The reasoning between ``<think>`` and ``</think>`` (to the end when never closed), for the window log."""
    start = text.find("<think>")
    if start < 0:
        return ""
    end = text.find("</think>", start)
    return text[start + len("<think>"):end if end >= 0 else len(text)].strip()


def load_tokenizer(source: str, revision: str | None = None, *,
                   purpose: str = "ReasonRank's prompt (the model's tokenizer)") -> Any:
    """The tokenizer of ``source`` (a local directory, or a hub id from the local Hugging Face cache or the hub)."""
    from r2med.hf import check_model_exists, hub_kwargs, load_error, require

    transformers = require("transformers", "llm", purpose)
    check_model_exists(source, revision)
    try:
        return transformers.AutoTokenizer.from_pretrained(source, **hub_kwargs(revision, source))
    except (OSError, ValueError) as exc:
        raise load_error(source, exc) from exc


def sampling_defaults(mode: str, reasoning_maxlen: int = 3072) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(sampling, extra)``: the authors' sampling of ``mode`` (SamplingParams fields, max tokens = reasoning
    budget + 100) and the request fields outside OpenAI's API.

    >>> sampling_defaults("rank_GPT_reasoning")
    ({'temperature': 0.0, 'max_tokens': 3172}, {'repetition_penalty': 1.0})
    >>> sampling_defaults("rank_GPT_qwen3", 1000)
    ({'temperature': 0.6, 'top_p': 0.95, 'max_tokens': 1100}, {'top_k': 20, 'min_p': 0.0, 'repetition_penalty': 1.0})
    """
    data = authors()
    table = dict(data["sampling"][_MODE_KEY[check_mode(mode)]])
    sampling = {key: table.pop(key) for key in ("temperature", "top_p") if key in table}
    sampling["max_tokens"] = reasoning_maxlen + data["answer_tokens"]
    return sampling, {**table, **data["request_defaults"]}


@dataclass
class ReasonRankPrompt:
    """ReasonRank's window prompt (a ``WindowPrompt`` of ``r2med.rerankers.listwise``; see the module docstring).

    ``tokenizer_source``: the model's tokenizer, a hub id or a directory (loaded at the first window), or
    ``tokenizer``: one already loaded; ``mode``: one of ``MODES``; ``request_as``: ``text`` or ``chat``;
    ``doc_maxlen``: tokens per passage (512: the authors' value for R2MED); ``extra``: request fields outside
    OpenAI's API (default: the mode's, see ``sampling_defaults``).
    """

    tokenizer_source: str | None = None
    mode: str = "rank_GPT_reasoning"
    request_as: str = "text"
    doc_maxlen: int = 512
    revision: str | None = None
    tokenizer: Any = field(default=None, repr=False)
    extra: dict[str, Any] | None = None
    kind = "reasonrank"
    task = TASK

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if self.request_as not in REQUEST_AS:
            raise UsageError(f"request_as must be one of {', '.join(REQUEST_AS)}, got {self.request_as!r}")
        if self.doc_maxlen < 1:
            raise UsageError(f"doc_maxlen must be at least 1 token, got {self.doc_maxlen}")
        if self.tokenizer is None and not self.tokenizer_source:
            raise UsageError("ReasonRank needs the model's tokenizer: a hub id or a local directory (--tokenizer)")
        if self.extra is None:
            self.extra = sampling_defaults(self.mode)[1]

    def _tokenizer(self) -> Any:
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(str(self.tokenizer_source), self.revision)
        if not getattr(self.tokenizer, "chat_template", None):
            raise UsageError(f"the tokenizer of {self.tokenizer_source or 'the ReasonRank model'} has no chat template; "
                             "pass the model's own tokenizer (--tokenizer DIR)")
        return self.tokenizer

    # ------------------------------------------------------------ the authors' input
    def passage(self, text: str) -> str:
        """One passage as the prompt shows it (``convert_doc_to_prompt_content`` with ``truncate_by_word=False``)."""
        tokenizer = self._tokenizer()
        content = fix_text(text.strip())
        content = tokenizer.convert_tokens_to_string(tokenizer.tokenize(content)[:self.doc_maxlen])
        return replace_number(content)

    def messages(self, query: str, passages: Sequence[str]) -> list[dict[str, str]]:
        """The authors' messages for one window (before ``fix_text``): system, and one user message."""
        data = authors()
        query = replace_number(query).strip()
        num = len(passages)
        system = data["system_prompt_reasoning" if self.mode == "rank_GPT_reasoning" else "system_prompt"]
        user = data["prefix"].format(num=num, query=query) + "\n"
        for rank, text in enumerate(passages, start=1):
            user += f"[{rank}] {self.passage(text)}\n"
        user += data["post"][_MODE_KEY[self.mode]].format(num=num, query=query)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def prompt(self, query: str, passages: Sequence[str]) -> str:
        """The authors' prompt: the messages under the chat template, then ``fix_text`` on the whole."""
        rendered = self._tokenizer().apply_chat_template(self.messages(query, passages), tokenize=False,
                                                         add_generation_prompt=True)
        return fix_text(rendered)

    # ------------------------------------------------------------ WindowPrompt
    def job(self, model: str, query: str, passages: Sequence[str], scores: Sequence[float] | None,
            params: SamplingParams) -> ChatJob:
        extra = dict(self.extra or {})
        if self.request_as == "text":
            prompt = self.prompt(query, passages)
            keyed = [{"role": "completion", "content": prompt}]
            return ChatJob(request_key(model, keyed, params, extra={"task": TASK, **extra}), keyed, params,
                           prompt=prompt, extra=extra)
        messages = [{"role": m["role"], "content": fix_text(m["content"])} for m in self.messages(query, passages)]
        return ChatJob(request_key(model, messages, params, extra={"task": TASK, **extra}), messages, params,
                       extra=extra)

    def parse(self, text: str, reasoning: str | None, n: int) -> tuple[PermutationReport, str, str]:
        """``(report, trace, answer)``; a trace the server returned apart (``reasoning_content``) is put back in
        ``<think>`` tags before the authors' rules read the whole text."""
        full = text or ""
        if reasoning and "<think>" not in full:
            full = f"<think>{reasoning}</think>{full}"
        report = reasonrank_permutation(full, n)
        string, start, end, source = answer_span(full)  # the answer tags' text is lower-cased, as the authors read it
        answer = string[start:end].strip() if source != "whole-text" else ""
        return report, _trace(full), answer

    def describe(self) -> dict[str, Any]:
        from r2med.hf import model_fingerprint

        source = self.tokenizer_source or getattr(self.tokenizer, "name_or_path", None)
        return {
            "prompt_mode": self.mode, "request_as": self.request_as, "doc_maxlen": self.doc_maxlen,
            "tokenizer": source, "tokenizer_files": model_fingerprint(source, self.revision) if source else None,
            "extra": dict(self.extra or {}), "authors_commit": authors()["commit"],
        }
