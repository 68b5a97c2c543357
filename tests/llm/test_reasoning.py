"""Reasoning-output parsing: every trace format, cut-off traces, empty answers, reasoning_content, the official cut."""

from __future__ import annotations

import pytest

from r2med.errors import ProviderError, UsageError
from r2med.llm.reasoning import (
    POLICIES,
    STYLES,
    ParsedOutput,
    authors_answer,
    choose_answer,
    detect_style,
    split_reasoning,
    style_for_llm,
)

HUATUO = "## Thinking\n\nFever, rash, Koplik spots.\n\n## Final Response\n\nMeasles (rubeola) is the likely diagnosis.\n"
SKY = ("<|begin_of_thought|>\n\nStep 1: light.\n\nStep 2: heat.\n\n<|end_of_thought|>\n\n"
       "<|begin_of_solution|>\n\nInsects use light to navigate.\n\n<|end_of_solution|>")
SEARCH_R1 = ("<think>I need facts.</think>\n<search> insects light </search>\n\n<information>Doc 1 ...</information>\n\n"
             "<think>Enough.</think>\n<answer> Transverse orientation. </answer>")


def test_constants():
    assert STYLES == ("plain", "think", "huatuo", "sky-t1", "search-r1")
    assert POLICIES == ("fallback", "authors", "error")


@pytest.mark.parametrize(("name", "method", "style"), [
    ("r1-qwen-32b", None, "think"),
    ("r1-llama-70b", None, "think"),
    ("deepseek-r1", None, "think"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", None, "think"),
    ("deepseek-reasoner", None, "think"),
    ("qwq-32b", None, "think"),
    ("Qwen/QwQ-32B", None, "think"),
    ("qwen3-32b", None, "think"),
    ("qwen3-32b-no-thinking", None, "plain"),      # the authors' non-thinking Qwen3 run
    ("Qwen3-30B-A3B-Instruct-2507", None, "plain"),  # Qwen3 instruct models do not think
    ("huatuo-o1-70b", None, "huatuo"),
    ("FreedomIntelligence/HuatuoGPT-o1-8B", None, "huatuo"),
    ("sky-32b", None, "sky-t1"),
    ("NovaSky-AI/Sky-T1-32B-Preview", None, "sky-t1"),
    ("qwen-7b-ins", "search-r1", "search-r1"),
    ("qwen-3b-ins", "Search-R1", "search-r1"),
    ("qwen-7b-ins", "hyde", "plain"),
    ("PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo", None, "search-r1"),  # "r1" must not win
    ("gpt4", None, "plain"),
    ("o3-mini", None, "plain"),
    ("qwen-72b", None, "plain"),
    ("llama-70b", None, "plain"),
    ("m1-7b", None, "plain"),
    ("gpt-4o-2024-11-20", None, "plain"),  # no "r1" token inside digits
])
def test_style_for_llm(name, method, style):
    assert style_for_llm(name, method) == style
    assert style_for_llm(name.upper(), method) == style


# ---- think -------------------------------------------------------------------------------------------------------


def test_think_with_both_tags():
    p = split_reasoning("<think>\nLight is warm.\n</think>\n\nInsects follow light.\n", style="think")
    assert p == ParsedOutput("<think>\nLight is warm.\n</think>\n\nInsects follow light.\n",
                             "Light is warm.", "Insects follow light.", False, "think")


def test_think_opened_by_chat_template():
    # R1 distills and QwQ: the template opens <think>, so the output only closes it.
    p = split_reasoning("Okay, the user asks...\n</think>\n\nThe answer.", style="auto")
    assert (p.style, p.reasoning, p.answer, p.truncated) == ("think", "Okay, the user asks...", "The answer.", False)


def test_think_multiple_closing_tags_first_one_ends_trace():
    p = split_reasoning("a</think>b</think>c")
    assert (p.reasoning, p.answer) == ("a", "b</think>c")
    assert authors_answer("a</think> b</think>c ", style="think") == "b</think>c"


def test_think_empty_answer_is_not_truncated():
    p = split_reasoning("<think>long thought</think>\n\n  ")
    assert (p.answer, p.truncated) == ("", False)
    assert choose_answer(p, fallback="the query") == ("the query", True)
    # the official code keeps the (empty) stripped remainder
    assert authors_answer(p.raw, style="think") == ""


def test_think_unclosed_is_truncated():
    for text in ("<think>I am still thinking", "I am still thinking (template opened <think>)"):
        p = split_reasoning(text, style="think")
        assert p.truncated and p.answer == ""
        assert p.reasoning.startswith("I am still thinking")
        # the official code used the whole text, unstripped
        assert authors_answer(text + "  ", style="think") == text + "  "
    # auto can only see a trace by its tags: an untagged text is a plain answer
    assert split_reasoning("<think>cut").truncated
    assert split_reasoning("cut").style == "plain"


def test_reasoning_content_from_server():
    p = split_reasoning("\n\n</think>\n\nThe answer. ", reasoning_content="  The trace. ")
    assert p == ParsedOutput("\n\n</think>\n\nThe answer. ", "The trace.", "The answer.", False, "think")
    p = split_reasoning("Plain answer", reasoning_content="")
    assert (p.reasoning, p.answer, p.truncated) == ("", "Plain answer", False)
    # trace only: the server cut the answer; empty answer, the fallback policy steps in
    p = split_reasoning("", reasoning_content="thinking...", style="think")
    assert (p.answer, p.truncated) == ("", False)
    assert choose_answer(p, fallback="q") == ("q", True)
    # another style still parses its own tags in the content
    p = split_reasoning("<answer> X </answer>", reasoning_content="T", style="search-r1")
    assert (p.reasoning, p.answer, p.style) == ("T", "X", "search-r1")


# ---- HuatuoGPT-o1 ------------------------------------------------------------------------------------------------


def test_huatuo_headings():
    p = split_reasoning(HUATUO, style="huatuo")
    assert p.reasoning == "Fever, rash, Koplik spots."
    assert p.answer == "Measles (rubeola) is the likely diagnosis."
    assert not p.truncated
    assert split_reasoning(HUATUO).style == "huatuo"  # detected
    assert authors_answer(HUATUO, style="huatuo") == "Measles (rubeola) is the likely diagnosis."


@pytest.mark.parametrize("text", [
    "Thinking\nx\nFinal Response: Measles.",
    "## Thinking\nx\n## Final Response:\nMeasles.",
    "**Thinking**\nx\n**Final Response:**\n\nMeasles.",
    "**Thinking**\nx\n**Final Response**\n\nMeasles.",
    "## Thinking\nx\nFinal Response\nMeasles.",
])
def test_huatuo_variants(text):
    p = split_reasoning(text, style="huatuo")
    assert (p.reasoning, p.answer, p.truncated) == ("x", "Measles.", False)


def test_huatuo_authors_keep_colon_and_first_match():
    # official: re.search(r"Final Response\s*(.*)") then strip -> the colon stays
    assert authors_answer("Thinking\nx\nFinal Response: Measles. ", style="huatuo") == ": Measles."
    assert authors_answer("Final Response A Final Response B", style="huatuo") == "A Final Response B"


def test_huatuo_without_final_response_is_truncated():
    text = "## Thinking\n\nThe patient presents with"
    p = split_reasoning(text, style="huatuo")
    assert (p.reasoning, p.answer, p.truncated) == ("The patient presents with", "", True)
    assert authors_answer(text, style="huatuo") == text


# ---- Sky-T1 ------------------------------------------------------------------------------------------------------


def test_sky_t1():
    p = split_reasoning(SKY, style="sky-t1")
    assert p.reasoning == "Step 1: light.\n\nStep 2: heat."
    assert p.answer == "Insects use light to navigate."
    assert not p.truncated
    assert split_reasoning(SKY).style == "sky-t1"
    assert authors_answer(SKY, style="sky-t1") == "Insects use light to navigate."


def test_sky_t1_begin_without_end_is_truncated():
    text = "<|begin_of_thought|>\nsteps\n<|end_of_thought|>\n<|begin_of_solution|>\nInsects use"
    p = split_reasoning(text, style="sky-t1")
    assert (p.reasoning, p.answer, p.truncated) == ("steps", "", True)
    assert authors_answer(text, style="sky-t1") == text
    thought_only = "<|begin_of_thought|>\nstep 1, step 2"
    p = split_reasoning(thought_only)
    assert (p.style, p.reasoning, p.truncated) == ("sky-t1", "step 1, step 2", True)


def test_sky_t1_empty_solution():
    p = split_reasoning("<|begin_of_solution|> \n <|end_of_solution|>", style="sky-t1")
    assert (p.answer, p.truncated) == ("", False)


# ---- Search-R1 ---------------------------------------------------------------------------------------------------


def test_search_r1():
    p = split_reasoning(SEARCH_R1)
    assert p.style == "search-r1"
    assert p.answer == "Transverse orientation."
    assert p.reasoning.startswith("<think>I need facts.</think>") and p.reasoning.endswith("<think>Enough.</think>")
    assert not p.truncated
    assert authors_answer(SEARCH_R1, style="search-r1") == "Transverse orientation."
    # the first closed answer wins, in both
    two = "<answer> A </answer> <answer> B </answer>"
    assert split_reasoning(two, style="search-r1").answer == authors_answer(two, style="search-r1") == "A"


def test_search_r1_unclosed_answer_is_truncated():
    text = "<think>x</think>\n<search> q </search>\n<answer> Transverse"
    p = split_reasoning(text, style="search-r1")
    assert (p.answer, p.truncated) == ("", True)
    assert authors_answer(text, style="search-r1") == text


# ---- plain, errors, policies -------------------------------------------------------------------------------------


def test_plain():
    p = split_reasoning("  A passage.\n", style="plain")
    assert p == ParsedOutput("  A passage.\n", "", "A passage.", False, "plain")
    assert authors_answer("  A passage.\n", style="plain") == "  A passage.\n"  # official: hy_doc unchanged
    assert detect_style("Just a passage about Final answers") == "plain"


def test_unknown_style():
    with pytest.raises(UsageError, match="unknown reasoning style 'r1'.*plain, think, huatuo, sky-t1, search-r1"):
        split_reasoning("x", style="r1")
    with pytest.raises(UsageError):
        authors_answer("x", style="deepseek")


def test_choose_answer_policies():
    ok = split_reasoning("<think>t</think> answer ")
    cut = split_reasoning("<think>still going")
    assert choose_answer(ok, fallback="q") == ("answer", False)
    assert choose_answer(cut, fallback="q") == ("q", True)
    assert choose_answer(ok, fallback="q", policy="authors") == ("answer", False)
    assert choose_answer(cut, fallback="q", policy="authors") == ("<think>still going", False)
    assert choose_answer(ok, fallback="q", policy="error") == ("answer", False)
    with pytest.raises(ProviderError, match="cut off before its answer.*max_tokens") as err:
        choose_answer(cut, fallback="q", policy="error")
    assert err.value.exit_code == 6
    with pytest.raises(ProviderError, match="answer after the reasoning trace is empty"):
        choose_answer(split_reasoning("<think>t</think>"), fallback="q", policy="error")
    with pytest.raises(UsageError, match="unknown answer policy 'strict'; valid: fallback, authors, error"):
        choose_answer(ok, fallback="q", policy="strict")
