"""The agents' pure string work, as the authors' code does it: worked examples written out by hand.

Search-R1: ``infer.py`` (prompt, ``_passages2string``, ``curr_search_template``); Search-o1: ``run_search_o1.py``
(truncated previous steps, result blocks, limit messages) and ``evaluate.py`` (``extract_answer(mode="infogen")``).
"""

from __future__ import annotations

import json

import pytest

from r2med.agent import styles as st
from r2med.agent.loop import AgentConfig, agent_ranking, answer_of
from r2med.agent.templates import TEMPLATES, template_for_model, templates, wrap
from r2med.errors import UsageError

R1_PROMPT_WHY = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: Does aspirin prevent stroke?\n"
)


# --------------------------------------------------------------------------------------------- Search-R1

def test_r1_prompt_is_infer_py_one_line_with_the_question_stripped_and_a_question_mark():
    assert st.r1_prompt("  Does aspirin prevent stroke \n") == R1_PROMPT_WHY
    assert st.r1_prompt("Does aspirin prevent stroke?") == R1_PROMPT_WHY  # no second "?"
    assert st.r1_prompt("Is it? yes").endswith("Question: Is it? yes?\n")  # only the end counts
    assert st.r1_prompt("Fever.").endswith("Question: Fever.?\n")  # as infer.py: "." is not "?"
    assert R1_PROMPT_WHY.count("\n") == 1  # the source's backslash continuations make one line


def test_r1_passages_and_information_block():
    contents = ['"d1"\nAspirin.', '"d2"\nline a\nline b', '"d3"']
    assert st.r1_passages(contents) == (
        'Doc 1(Title: "d1") Aspirin.\n'
        'Doc 2(Title: "d2") line a\nline b\n'
        'Doc 3(Title: "d3") \n'
    )
    assert st.r1_passages([]) == ""
    assert st.r1_information("<search> q </search>", "P\n") == "\n\n<search> q </search><information>P\n</information>\n\n"


def test_r1_tags_and_extraction():
    assert st.last_between("<search> a </search> x <search>\n b \n</search>", "<search>", "</search>") == "b"
    assert st.last_between("<search> a", "<search>", "</search>") is None
    assert st.last_between("<search>   </search>", "<search>", "</search>") == ""
    assert st.first_between("<answer> A </answer> <answer>B</answer>", "<answer>", "</answer>") == "A"
    assert st.first_between("<answer> A", "<answer>", "</answer>") is None
    assert st.opens_unclosed("<search>a</search> <search> b", "<search>", "</search>")
    assert not st.opens_unclosed("<search>a</search>", "<search>", "</search>")
    assert not st.opens_unclosed("no tag", "<search>", "</search>")


# --------------------------------------------------------------------------------------------- Search-o1

def test_o1_prompt_is_the_multiqa_instruction_then_the_openqa_task():
    prompt = st.o1_prompt("Q?", max_searches=10, model="Qwen/Qwen3-8B")
    assert prompt.startswith("You are a reasoning assistant with the ability to perform web searches to help you answer "
                             "the user's question accurately. You have special tools:\n\n")
    assert "The maximum number of search attempts is limited to 10.\n\n" in prompt
    assert prompt.endswith(
        "- When done searching, continue your reasoning.\n\n"
        "Please answer the following question. You should think step by step to solve it.\n\n"
        "Provide your final answer in the format \\boxed{YOUR_ANSWER}.\n\n"
        "Question:\nQ?\n\n"
    )
    qwq = st.o1_prompt("Q?", max_searches=3, model="Qwen/QwQ-32B")
    assert "limited to 3.\n\n" in qwq
    assert qwq.endswith("- When done searching, continue your reasoning.\n\n"
                        "Please answer the following question. You should provide your final answer in the format "
                        "\\boxed{YOUR_ANSWER}.\n\nQuestion:\nQ?\n\n")
    assert st.o1_prompt(" Q ", max_searches=1, model="m").endswith("Question:\n Q \n\n")  # no strip, no "?"


def test_o1_prev_reasoning_keeps_four_steps_whole():
    assert st.o1_prev_reasoning("a") == "Step 1: a"
    assert st.o1_prev_reasoning("a\nb\n\nc\nd") == "Step 1: a\n\nStep 2: b\n\nStep 3: c\n\nStep 4: d"
    # "\n\n" becomes "\n" once: three newlines leave an empty step, as the authors' code does
    assert st.o1_prev_reasoning("a\n\n\nb") == "Step 1: a\n\nStep 2: \n\nStep 3: b"


def test_o1_prev_reasoning_of_five_steps_drops_the_second():
    # five steps: the first and the last three are kept, the one between becomes "..."
    assert st.o1_prev_reasoning("a\nb\nc\nd\ne") == "Step 1: a\n\n...\n\nStep 3: c\n\nStep 4: d\n\nStep 5: e"


def test_o1_prev_reasoning_keeps_search_steps_and_collapses_each_dropped_run():
    lines = [f"L{i}" for i in range(1, 13)]
    lines[6] = "L7 <|begin_search_query|>q<|end_search_query|>"
    lines[11] = "<|begin_search_query|>q2<|end_search_query|>"
    # the authors' own example (agent_facts.md, O1.c)
    assert st.o1_prev_reasoning("\n".join(lines)) == (
        "Step 1: L1\n\n...\n\nStep 7: L7 <|begin_search_query|>q<|end_search_query|>\n\n...\n\n"
        "Step 10: L10\n\nStep 11: L11\n\nStep 12: <|begin_search_query|>q2<|end_search_query|>"
    )
    # a result step is kept too; two dropped runs around it
    output = "r1\nr2\nr3\n<|begin_search_result|>facts<|end_search_result|>\nr5\nr6\nx\ny\nz"
    assert st.o1_prev_reasoning(output) == (
        "Step 1: r1\n\n...\n\nStep 4: <|begin_search_result|>facts<|end_search_result|>\n\n...\n\n"
        "Step 7: x\n\nStep 8: y\n\nStep 9: z"
    )


def test_o1_condensed_extract_answer_infogen():
    assert st.o1_condensed("Reading.\n**Final Information**\n\nAspirin\nblocks\nCOX-1.\n") == "AspirinblocksCOX-1."
    # the marker needs a newline before it
    assert st.o1_condensed("**Final Information**\n\nAspirin.") == "No helpful information found."
    assert st.o1_condensed("nothing marked here") == "No helpful information found."
    # the last marker wins; backticks and spaces around are stripped
    assert st.o1_condensed("a\n**Final Information**\nold\n**Final Information**\n```\nnew fact\n```\n") == "new fact"
    # "Modified Reasoning Steps": the text after it, newlines kept
    assert st.o1_condensed("x\n**Modified Reasoning Steps**\nStep 1: a\nStep 2: b\n") == "Step 1: a\nStep 2: b"
    # both: Final Information first
    assert st.o1_condensed("x\n**Modified Reasoning Steps**\nA\n**Final Information**\nB\nC") == "BC"


def test_o1_documents_blocks_and_messages():
    text = "é" + "x" * 7000
    documents = st.o1_documents([("d1", "Aspirin."), ("d2", text)])
    first, second = documents.split("**Web Page 2:**\n")
    assert first == '**Web Page 1:**\n{\n  "id": 1,\n  "doc_id": "d1",\n  "context": "Aspirin."\n}\n'
    page = json.loads(second)
    assert page == {"id": 2, "doc_id": "d2", "context": text[:6000]}  # cut at 2 * max_doc_len
    assert '"context": "éxx' in second  # ensure_ascii=False
    assert st.o1_result_block("B") == "\n\n<|begin_search_result|>B<|end_search_result|>\n\n"
    assert st.O1_LIMIT_MESSAGE == ("\n<|begin_search_result|>\nThe maximum search limit is exceeded. "
                                   "You are not allowed to search.\n<|end_search_result|>\n")
    assert st.O1_REPEAT_MESSAGE == ("\n<|begin_search_result|>\nYou have searched this query. "
                                    "Please refer to previous results.\n<|end_search_result|>\n")


def test_o1_reason_in_documents_prompt_has_two_spaces_after_each_input_header():
    prompt = st.O1_REASON_IN_DOCUMENTS.format(prev_reasoning="P", search_query="Q", document="D")
    assert prompt.startswith("**Task Instruction:**\n\nYou are tasked with reading and analyzing web pages")
    assert ("**Inputs:**\n- **Previous Reasoning Steps:**  \nP\n\n- **Current Search Query:**  \nQ\n\n"
            "- **Searched Web Pages:**  \nD\n\nNow you should analyze each web page and find helpful information based "
            'on the current search query "Q" and previous reasoning steps.\n') in prompt
    assert prompt.endswith("previous reasoning steps.\n")


# --------------------------------------------------------------------------------------------- styles, templates

def test_style_registry_and_per_model_limits():
    assert set(st.STYLES) == {"search-r1", "search-o1"}
    assert st.agent_style("Search-R1").name == "search-r1"
    with pytest.raises(UsageError, match=r"unknown agent style 'search-r2'; did you mean 'search-r1'\? "
                                         r"Valid: search-o1, search-r1"):
        st.agent_style("search-r2")
    r1, o1 = st.agent_style("search-r1"), st.agent_style("search-o1")
    assert r1.stop == ("</search>",) and o1.stop == ("<|end_search_query|>",)
    assert (r1.max_tokens("x"), r1.extra("x")) == (1024, {})
    assert (o1.max_tokens("Qwen3-8B"), o1.extra("Qwen3-8B")) == (8192, {"top_k": 20, "repetition_penalty": 1.0})
    assert (o1.max_tokens("Qwen/QwQ-32B"), o1.extra("Qwen/QwQ-32B")) == (20480, {"top_k": 20, "repetition_penalty": 1.05})
    assert (r1.defaults.top_k, r1.defaults.max_turns, o1.defaults.top_k, o1.defaults.max_turns) == (3, 11, 10, 15)


@pytest.mark.parametrize("model, template", [
    ("Qwen/QwQ-32B", "qwq"),
    ("qwq-32b-preview", None),  # not QwQ-32B's template (issue 23)
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5"),
    ("qwen_2.5-14b", "qwen2.5"),
    ("PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-em-ppo", "qwen2.5"),
    ("my-search-r1-7b", "qwen2.5"),
    ("Qwen/Qwen3-8B", "chatml"),
    ("google/gemma-3-27b-it", "gemma"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
    ("Meta-Llama-3-8B", "llama3"),
    ("mistralai/Mistral-7B-Instruct", None),
    ("gpt-4o", None),
])
def test_template_for_model(model, template):
    assert template_for_model(model) == template


def test_templates_wrap_one_user_turn():
    assert set(TEMPLATES) == {"qwen2.5", "qwq", "chatml", "gemma", "llama3", "raw"}
    assert wrap("chatml", "Hi") == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert wrap("qwq", "Hi") == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert wrap("qwen2.5", "Hi") == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                                     "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert wrap("gemma", "Hi") == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert wrap("llama3", "Hi") == ("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert wrap("raw", "Hi") == "Hi"
    with pytest.raises(UsageError, match="did you mean 'chatml'"):
        templates().get("chatm")


# --------------------------------------------------------------------------------------------- config, answers

def test_agent_config_resolves_the_authors_defaults():
    model = "PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-em-ppo"
    # search-r1 without a protocol: Search-R1's evaluation (evaluate.sh: 500 tokens, greedy, max_turns 4, topk 3)
    r1 = AgentConfig(style="search-r1", llm_model=model, base_url="http://x/v1").resolved()
    assert (r1.protocol, r1.chat_template, r1.search_top_k, r1.max_searches, r1.max_turns, r1.max_tokens,
            r1.temperature, r1.top_p) == ("search-r1-eval", "qwen2.5", 3, 4, 4, 500, 0.0, 1.0)
    infer = AgentConfig(protocol="search-r1-infer", llm_model=model, base_url="http://x/v1").resolved()
    assert (infer.style, infer.search_top_k, infer.max_searches, infer.max_turns, infer.max_tokens, infer.temperature,
            infer.top_p) == ("search-r1", 3, 10, 11, 1024, 0.7, None)
    o1 = AgentConfig(style="search-o1", llm_model="Qwen/QwQ-32B", base_url="http://x/v1").resolved()
    assert (o1.protocol, o1.chat_template, o1.search_top_k, o1.max_searches, o1.max_turns, o1.max_tokens,
            o1.temperature, o1.top_p) == ("search-o1", "qwq", 10, 10, 15, 20480, 0.7, 0.8)
    # individual options override the protocol's values
    greedy = AgentConfig(protocol="search-r1-eval", llm_model="m", base_url="http://x/v1", chat_template="raw",
                         temperature=0.7, max_tokens=64, max_turns=2).resolved()
    assert (greedy.temperature, greedy.max_tokens, greedy.max_turns, greedy.max_searches) == (0.7, 64, 2, 2)
    # more searches than the turn limit allows: one turn more than searches (protocols with a search limit)
    assert AgentConfig(protocol="search-r1-infer", llm_model="m", base_url="http://x/v1", chat_template="raw", max_searches=20).resolved().max_turns == 21
    assert AgentConfig(style="search-r1", llm_model="m", base_url="http://x/v1", chat_template="raw", max_searches=0).resolved().max_searches == 0
    # llm_name names the model's template when the id does not
    assert AgentConfig(style="search-o1", llm_model="/models/ckpt", base_url="http://x/v1", llm_name="qwen3-8b").resolved().chat_template == "chatml"
    key = AgentConfig(style="search-o1", llm_model="Qwen/Qwen3-8B", base_url="http://x/v1", concurrency=3, max_requests=9).key()
    assert "base_url" not in key and "concurrency" not in key and "max_requests" not in key
    assert key["extra"] == {"top_k": 20, "repetition_penalty": 1.0}
    assert (key["protocol"], key["stop_on_repeat"]) == ("search-o1", False)
    eval_key = AgentConfig(style="search-r1", llm_model="m", base_url="http://x/v1", chat_template="raw").key()
    assert eval_key["protocol_settings"] == {"protocol": "search-r1-eval", "final_turn": True, "max_obs_tokens": 500,
                                             "max_context_tokens": 4096, "answer_rule": "r1-eval"}


@pytest.mark.parametrize("kwargs, message", [
    ({"style": "search-x"}, "unknown agent style"),
    ({"policy": "maybe"}, "unknown answer policy 'maybe'; valid: fallback, authors, error"),
    ({"max_searches": -1}, "max-searches must be at least 0, got -1"),
    ({"max_turns": 0}, "max-turns must be at least 1, got 0"),
    ({"search_top_k": 0}, "search-top-k must be at least 1, got 0"),
    ({"chat_template": "chatmll"}, "unknown chat template 'chatmll'"),
    ({"protocol": "search-r2"}, "unknown agent protocol 'search-r2'"),
    ({"protocol": "search-o1"}, "protocol 'search-o1' runs style 'search-o1', not 'search-r1'"),
])
def test_agent_config_errors(kwargs, message):
    values = {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1", **kwargs}
    with pytest.raises(UsageError, match=message):
        AgentConfig(**values)


def test_a_model_without_a_known_template_needs_one():
    with pytest.raises(UsageError, match=r"no chat template is known for 'gpt-4o'; pass --chat-template"):
        AgentConfig(style="search-r1", llm_model="gpt-4o", base_url="http://x/v1").resolved()


def test_answer_of():
    # r1-first (R2MED's src/base.py for qwen-*-ins): the first <answer> pair of the output
    answered = {"stop_reason": "answer", "turns": [{}], "output": "x <answer> A </answer> <answer>B</answer>"}
    assert answer_of("r1-first", answered) == "A"
    assert answer_of("r1-first", {**answered, "output": "no tags"}) is None
    assert answer_of("r1-first", {**answered, "stop_reason": "error"}) is None
    assert answer_of("r1-first", {**answered, "turns": []}) is None
    # r1-eval (qa_em.py extract_solution): the last pair, of the model's turns only (not the prompt's two)
    turns = {"stop_reason": "max-turns", "output": "", "turns": [{"text": "<answer> A </answer>"}, {"text": "x <answer>B</answer>"}]}
    assert answer_of("r1-eval", turns) == "B"
    assert answer_of("r1-eval", {**turns, "turns": [{"text": "no answer"}]}) is None
    # o1 (R2MED's cut for thinking models): after the first </think>, else the whole output, at any ending
    o1 = {"stop_reason": "max-turns", "turns": [{}], "output": "a</think>b</think>\n Final. "}
    assert answer_of("o1", o1) == "b</think>\n Final."
    assert answer_of("o1", {**o1, "output": " thinking, no close "}) == "thinking, no close"
    assert answer_of("o1", {**o1, "output": "  "}) is None


def test_agent_ranking_is_rrf_over_the_searches():
    rows = [{"id": "q", "searches": [{"ids": ["a", "b", "c"]}, {"ids": ["c", "d"]}, {"ids": []}]},
            {"id": "none", "searches": []}]
    run = agent_ranking(rows)
    assert run["q"] == pytest.approx({"c": 1 / 63 + 1 / 61, "a": 1 / 61, "b": 1 / 62, "d": 1 / 62})
    assert list(run["q"])[:2] == ["c", "a"]
    assert run["none"] == {}
    assert list(agent_ranking(rows, top_k=2)["q"]) == ["c", "a"]


def test_template_names_llama_search_r1_and_qwq_preview():
    from r2med.agent.templates import template_for_model

    # Search-R1's Llama-3.2 checkpoints are Llama 3 models, not Qwen2.5 ones
    assert template_for_model("PeterJinGo/SearchR1-nq_hotpotqa_train-llama3.2-3b-em-ppo") == "llama3"
    assert template_for_model("PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-3b-em-ppo") == "qwen2.5"
    # QwQ-32B-Preview's generation prompt opens no thinking block: it must not get QwQ-32B's template
    assert template_for_model("Qwen/QwQ-32B-Preview") is None and template_for_model("Qwen/QwQ-32B") == "qwq"
