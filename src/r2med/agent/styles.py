"""The two agent protocols, as their authors' inference code runs them: prompts, tags, stops, result blocks.

Search-R1 (``PeterGriffinJin/Search-R1``, ``infer.py``) and Search-o1 (``sunnynexus/Search-o1``,
``scripts/run_search_o1.py`` and ``scripts/prompts.py``) both generate with the raw model: the question goes
through the chat template as one user turn, the model continues it until it closes a search query, the
results are appended to the same text, and the model continues again. Everything here is pure string
work (the loop is ``r2med.agent.loop``); the texts are the authors' own, character for character, except
where noted as an adaptation to medical retrieval (``README``: "Agentic search").

>>> r1_prompt(" Why do cells age")[-48:]
' Beijing </answer>. Question: Why do cells age?\\n'
>>> last_between("a <search> x </search> b <search>y</search>", "<search>", "</search>")
'y'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from r2med.llm.reasoning import first_pair

# --------------------------------------------------------------------------------------------- Search-R1

R1_SEARCH = ("<search>", "</search>")
R1_ANSWER = ("<answer>", "</answer>")
R1_INFORMATION = ("<information>", "</information>")

#: infer.py's prompt: one line (the source continues its lines with backslashes), "as your want" included
R1_PROMPT = (
    "Answer the given question. "
    "You must conduct reasoning inside <think> and </think> first every time you get new information. "
    "After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> "
    "and it will return the top searched results between <information> and </information>. "
    "You can search as many times as your want. "
    "If you find no further external knowledge needed, you can directly provide the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)
#: infer.py's ``curr_search_template``: the turn's text, then the results
R1_SEARCH_TEMPLATE = "\n\n{output_text}<information>{search_results}</information>\n\n"


#: generation.py:391 (Search-R1's evaluation loop): the observation after a search, the passages stripped
R1_EVAL_OBSERVATION = "\n\n<information>{search_results}</information>\n\n"
#: generation.py:396-398: the observation after a turn with neither a search nor an answer (the source continues
#: its lines with backslashes: one line)
R1_INVALID = (
    "\nMy previous action is invalid. "
    "If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)


def r1_eval_response(text: str) -> str:
    """generation.py:61-66: a response cut after its first ``</search>``, else after its first ``</answer>``.

    >>> r1_eval_response("<answer> A </answer> more <search> q </search> x"), r1_eval_response("<answer>B</answer>z")
    ('<answer> A </answer> more <search> q </search>', '<answer>B</answer>')
    """
    for tag in ("</search>", "</answer>"):  # text.split(tag)[0] + tag, without the list of every piece
        at = text.find(tag)
        if at >= 0:
            return text[:at] + tag
    return text


def r1_eval_action(response: str) -> tuple[str | None, str]:
    """generation.py:422-429: the first ``<search>...</search>`` or ``<answer>...</answer>`` pair's tag and its
    stripped content; ``(None, "")`` for an invalid action.

    >>> r1_eval_action("<think>x</think><search> a b </search>"), r1_eval_action("no tags")
    (('search', 'a b'), (None, ''))
    """
    # re.search(r"<(search|answer)>(.*?)</\1>", response, re.DOTALL), in linear time: of each tag, the first opening
    # with a closing after it is the only candidate (none after the first: none after a later one); the earlier wins
    found = []
    for tag in ("search", "answer"):
        at = response.find(f"<{tag}>")
        close = response.find(f"</{tag}>", at + len(tag) + 2) if at >= 0 else -1
        if close >= 0:
            found.append((at, tag, response[at + len(tag) + 2:close]))
    if not found:
        return None, ""
    _, tag, content = min(found)
    return tag, content.strip()


def r1_infer_query(text: str) -> str | None:
    """infer.py:52-59 ``get_query``: the last ``<search>...</search>`` of the whole text, not stripped (None: none).

    >>> r1_infer_query("<search> query </search> ... <search> b </search>")
    ' b '
    """
    return _last_pair(text, "<search>", "</search>")  # re.findall(r"<search>(.*?)</search>", text, re.DOTALL)[-1]


def r1_prompt(question: str) -> str:
    """infer.py's user turn: the question stripped, with a "?" added when it does not end with one."""
    question = question.strip()
    if not question.endswith("?"):
        question += "?"
    return R1_PROMPT.format(question=question)


def r1_passages(contents: Sequence[str]) -> str:
    """infer.py's ``_passages2string``: per document ``Doc {i}(Title: {first line}) {other lines}\\n``.

    >>> r1_passages(['"d1"\\nAspirin.', '"d2"\\nFever\\nand rash.'])
    'Doc 1(Title: "d1") Aspirin.\\nDoc 2(Title: "d2") Fever\\nand rash.\\n'
    """
    out = []
    for i, content in enumerate(contents, start=1):
        lines = content.split("\n")
        out.append(f"Doc {i}(Title: {lines[0]}) {chr(10).join(lines[1:])}\n")
    return "".join(out)


def r1_information(turn_text: str, passages: str) -> str:
    """What infer.py appends after a search turn (``curr_search_template``; its leading blank line included)."""
    return R1_SEARCH_TEMPLATE.format(output_text=turn_text, search_results=passages)


# --------------------------------------------------------------------------------------------- Search-o1

BEGIN_SEARCH_QUERY = "<|begin_search_query|>"
END_SEARCH_QUERY = "<|end_search_query|>"
BEGIN_SEARCH_RESULT = "<|begin_search_result|>"
END_SEARCH_RESULT = "<|end_search_result|>"

#: prompts.py ``get_multiqa_search_o1_instruction`` (the multi-hop QA one: R2MED's queries need several steps)
O1_INSTRUCTION = (
    "You are a reasoning assistant with the ability to perform web searches to help "
    "you answer the user's question accurately. You have special tools:\n\n"
    "- To perform a search: write <|begin_search_query|> your query here <|end_search_query|>.\n"
    "Then, the system will search and analyze relevant web pages, then provide you with helpful information in the "
    "format <|begin_search_result|> ...search results... <|end_search_result|>.\n\n"
    "You can repeat the search process multiple times if necessary. The maximum number of search attempts is "
    "limited to {max_searches}.\n\n"
    "Once you have all the information you need, continue your reasoning.\n\n"
    "Example:\n"
    "Question: \"Alice David is the voice of Lara Croft in a video game developed by which company?\"\n"
    "Assistant thinking steps:\n"
    "- I need to find out who voices Lara Croft in the video game.\n"
    "- Then, I need to determine which company developed that video game.\n\n"
    "Assistant:\n"
    "<|begin_search_query|>Alice David Lara Croft voice<|end_search_query|>\n\n"
    "(System returns processed information from relevant web pages)\n\n"
    "Assistant thinks: The search results indicate that Alice David is the voice of Lara Croft in a specific video "
    "game. Now, I need to find out which company developed that game.\n\n"
    "Assistant:\n"
    "<|begin_search_query|>video game developed by Alice David Lara Croft<|end_search_query|>\n\n"
    "(System returns processed information from relevant web pages)\n\n"
    "Assistant continues reasoning with the new information...\n\n"
    "Remember:\n"
    "- Use <|begin_search_query|> to request a web search and end with <|end_search_query|>.\n"
    "- When done searching, continue your reasoning.\n\n"
)
#: prompts.py ``get_task_instruction_openqa``: QwQ's variant, and every other model's
O1_TASK_QWQ = ("Please answer the following question. "
               "You should provide your final answer in the format \\boxed{{YOUR_ANSWER}}.\n\n"
               "Question:\n{question}\n\n")
O1_TASK = ("Please answer the following question. You should think step by step to solve it.\n\n"
           "Provide your final answer in the format \\boxed{{YOUR_ANSWER}}.\n\n"
           "Question:\n{question}\n\n")

#: prompts.py ``get_webpage_to_reasonchain_instruction`` (the three input headers end in two spaces)
O1_REASON_IN_DOCUMENTS = """**Task Instruction:**

You are tasked with reading and analyzing web pages based on the following inputs: **Previous Reasoning Steps**, **Current Search Query**, and **Searched Web Pages**. Your objective is to extract relevant and helpful information for **Current Search Query** from the **Searched Web Pages** and seamlessly integrate this information into the **Previous Reasoning Steps** to continue reasoning for the original question.

**Guidelines:**

1. **Analyze the Searched Web Pages:**
- Carefully review the content of each searched web page.
- Identify factual information that is relevant to the **Current Search Query** and can aid in the reasoning process for the original question.

2. **Extract Relevant Information:**
- Select the information from the Searched Web Pages that directly contributes to advancing the **Previous Reasoning Steps**.
- Ensure that the extracted information is accurate and relevant.

3. **Output Format:**
- **If the web pages provide helpful information for current search query:** Present the information beginning with `**Final Information**` as shown below.
**Final Information**

[Helpful information]

- **If the web pages do not provide any helpful information for current search query:** Output the following text.

**Final Information**

No helpful information found.

**Inputs:**
- **Previous Reasoning Steps:**  
{prev_reasoning}

- **Current Search Query:**  
{search_query}

- **Searched Web Pages:**  
{document}

Now you should analyze each web page and find helpful information based on the current search query "{search_query}" and previous reasoning steps.
"""

O1_LIMIT_MESSAGE = f"\n{BEGIN_SEARCH_RESULT}\nThe maximum search limit is exceeded. You are not allowed to search.\n{END_SEARCH_RESULT}\n"
O1_REPEAT_MESSAGE = f"\n{BEGIN_SEARCH_RESULT}\nYou have searched this query. Please refer to previous results.\n{END_SEARCH_RESULT}\n"
O1_NOTHING_FOUND = "No helpful information found."
#: run_search_o1.py's ``max_doc_len``; a page without a snippet match is cut at twice that
O1_MAX_DOC_LEN = 3000
#: run_search_o1.py's Reason-in-Documents sampling, fixed whatever the main loop's (its max_tokens is the main loop's):
#: ``SamplingParams(max_tokens=max_tokens, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)``
O1_REASON_SAMPLING = MappingProxyType({"temperature": 0.7, "top_p": 0.8})
O1_REASON_EXTRA = MappingProxyType({"top_k": 20, "repetition_penalty": 1.05})


def is_qwq(model: str) -> bool:
    """Search-o1 switches prompts, sampling and token limits on ``'qwq' in model_path.lower()``."""
    return "qwq" in model.lower()


def o1_prompt(question: str, *, max_searches: int, model: str) -> str:
    """The user turn: the instruction, then the open-QA task prompt (QwQ's variant for QwQ models)."""
    task = O1_TASK_QWQ if is_qwq(model) else O1_TASK
    return O1_INSTRUCTION.format(max_searches=max_searches) + task.format(question=question)


def o1_documents(hits: Sequence[tuple[str, str]]) -> str:
    """The documents of one search as Search-o1 shows web pages to the Reason-in-Documents step.

    Adaptation: a corpus document has no URL, site, date or snippet, so each page's JSON is
    ``{"id": rank, "doc_id": ..., "context": text}``, the text cut at ``2 * max_doc_len`` characters as the
    authors cut a page where no snippet matched.

    >>> print(o1_documents([("d1", "Aspirin.")]))
    **Web Page 1:**
    {
      "id": 1,
      "doc_id": "d1",
      "context": "Aspirin."
    }
    <BLANKLINE>
    """
    out = []
    for i, (docid, text) in enumerate(hits, start=1):
        info = {"id": i, "doc_id": docid, "context": text[: 2 * O1_MAX_DOC_LEN]}
        out.append(f"**Web Page {i}:**\n" + json.dumps(info, ensure_ascii=False, indent=2) + "\n")
    return "".join(out)


def o1_prev_reasoning(output: str) -> str:
    """run_search_o1.py's truncated previous steps: lines as "Step n: ...", the first, any holding a search query or
    result, and the last three kept, each run of dropped ones as "...".

    >>> o1_prev_reasoning("a\\n\\nb")
    'Step 1: a\\n\\nStep 2: b'
    >>> o1_prev_reasoning("\\n".join(f"L{i}" for i in range(1, 8)))
    'Step 1: L1\\n\\n...\\n\\nStep 5: L5\\n\\nStep 6: L6\\n\\nStep 7: L7'
    """
    steps = output.replace("\n\n", "\n").split("\n")
    joined = "".join(f"Step {i + 1}: {step}\n\n" for i, step in enumerate(steps))
    prev_steps = joined.split("\n\n")
    if len(prev_steps) <= 5:
        kept = "\n\n".join(prev_steps)
    else:
        kept = ""
        for i, step in enumerate(prev_steps):
            if i == 0 or i >= len(prev_steps) - 4 or BEGIN_SEARCH_QUERY in step or BEGIN_SEARCH_RESULT in step:
                kept += step + "\n\n"
            elif not kept.endswith("\n\n...\n\n"):
                kept += "...\n\n"
    return kept.strip("\n")


def o1_condensed(output: str) -> str:
    """evaluate.py's ``extract_answer(mode="infogen")``: after the last "\\n**Final Information**" with every newline
    removed (else after "\\n**Modified Reasoning Steps**"), else "No helpful information found.".

    >>> o1_condensed("Reading...\\n**Final Information**\\n\\nAspirin\\nblocks COX-1.")
    'Aspirinblocks COX-1.'
    >>> o1_condensed("**Final Information** at the very start")
    'No helpful information found.'
    """
    info, steps = "\n**Final Information**", "\n**Modified Reasoning Steps**"
    if info in output:
        return output[output.rfind(info) + len(info):].replace("\n", "").strip("`").strip()
    if steps in output:
        return output[output.rfind(steps) + len(steps):].strip("`").strip()
    return O1_NOTHING_FOUND


def o1_result_block(analysis: str) -> str:
    """What is appended after a searched query: the condensed documents between the result tokens."""
    return f"\n\n{BEGIN_SEARCH_RESULT}{analysis}{END_SEARCH_RESULT}\n\n"


# --------------------------------------------------------------------------------------------- both

def last_between(text: str, start: str, end: str) -> str | None:
    """The stripped content of the last ``start...end`` pair (Search-o1's ``extract_between``), or None."""
    found = _last_pair(text, start, end)
    return found.strip() if found is not None else None


def _last_pair(text: str, start: str, end: str) -> str | None:
    """The last of ``re.findall(re.escape(start) + "(.*?)" + re.escape(end), text, re.DOTALL)``, unstripped (None:
    none), in linear time and memory (the regex backtracks over every unclosed ``start``; findall lists them all).

    >>> _last_pair("<s>a</s> <s>b</s> <s>c", "<s>", "</s>"), _last_pair("<s>open", "<s>", "</s>")
    ('b', None)
    """
    last = None
    at = text.find(start)
    while at >= 0:
        close = text.find(end, at + len(start))
        if close < 0:
            break
        last = (at + len(start), close)
        at = text.find(start, close + len(end))
    return text[last[0]:last[1]] if last is not None else None


def first_between(text: str, start: str, end: str) -> str | None:
    """The stripped content of the first closed ``start...end`` pair, or None.

    >>> first_between("<answer> A </answer><answer>B</answer>", "<answer>", "</answer>")
    'A'
    """
    found = first_pair(text, start, end)  # re.search(re.escape(start) + "(.*?)" + re.escape(end), ...), linear
    return found.strip() if found is not None else None


def opens_unclosed(text: str, start: str, end: str) -> bool:
    """Whether the last ``start`` in ``text`` has no ``end`` after it (the server stopped at ``end``).

    >>> opens_unclosed("x <search> q", "<search>", "</search>"), opens_unclosed("<search>q</search>", "<search>", "</search>")
    (True, False)
    """
    at = text.rfind(start)
    return at >= 0 and text.find(end, at + len(start)) < 0


@dataclass(frozen=True)
class StyleDefaults:
    """What a style does unless told otherwise (the authors' values)."""

    top_k: int
    max_searches: int
    max_turns: int
    temperature: float
    top_p: float | None
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentStyle:
    """One protocol: its name, the tags that open and close a search, the stop string sent to the server, and
    its defaults. ``max_tokens(model)`` is the authors' per-generation token limit."""

    name: str
    search_tags: tuple[str, str]
    stop: tuple[str, ...]
    defaults: StyleDefaults
    description: str

    def max_tokens(self, model: str) -> int:
        if self.name == "search-o1":
            return 20480 if is_qwq(model) else 8192
        return 1024

    def extra(self, model: str) -> dict[str, float]:
        """Sampling fields outside OpenAI's API: Search-o1's top_k and repetition penalty (1.05 for QwQ, else 1.0),
        under vLLM's names. vLLM applies both; llama.cpp applies ``top_k`` but ignores ``repetition_penalty`` (its
        field is ``repeat_penalty``), so QwQ's 1.05 needs a vLLM server."""
        extra = dict(self.defaults.extra)
        if self.name == "search-o1":
            extra["repetition_penalty"] = 1.05 if is_qwq(model) else 1.0
        return extra


#: The two protocols. Search-R1's stop: infer.py stops on six token-level variants of "</search>" (with a space
#: before, newlines after); a server's string stop at "</search>" ends the turn at the first of them.
STYLES: Mapping[str, AgentStyle] = MappingProxyType({s.name: s for s in (
    AgentStyle("search-r1", R1_SEARCH, (R1_SEARCH[1],),
               StyleDefaults(top_k=3, max_searches=10, max_turns=11, temperature=0.7, top_p=None),
               "Search-R1: <search> query </search>, results as <information>Doc i(Title: ...) ...</information>, "
               "the answer in <answer>...</answer>"),
    AgentStyle("search-o1", (BEGIN_SEARCH_QUERY, END_SEARCH_QUERY), (END_SEARCH_QUERY,),
               StyleDefaults(top_k=10, max_searches=10, max_turns=15, temperature=0.7, top_p=0.8,
                             extra={"top_k": 20}),
               "Search-o1: <|begin_search_query|> ... <|end_search_query|>, the documents condensed by a "
               "Reason-in-Documents call, injected between <|begin_search_result|> and <|end_search_result|>"),
)})


def agent_style(name: str) -> AgentStyle:
    from r2med.registry import Registry

    return Registry("agent style", STYLES).get(name)
