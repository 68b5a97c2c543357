"""``search-r1-eval`` against Search-R1's evaluation rules, rebuilt here from the authors' code (commit a14dc3a).

The reference below is ``search_r1/llm_agent/generation.py`` ``run_llm_loop`` written out for one query as plain
string and list code: the model's full (greedy) text cut after its first ``</search>`` else ``</answer>``
(61-66); its first ``<search>``/``<answer>`` pair is its action (422-429); an answer ends, a search appends
``\\n\\n<information>{passages.strip()}</information>\\n\\n`` (391), anything else the invalid-action message
(396-398); each observation keeps its first 500 tokens (87-89) and each prompt is the last 4096 tokens of
everything so far (107-112); 4 turns and one final turn without search (234, 278-298); the answer is the last
``<answer>`` pair (qa_em.py 73-82; of the model's turns, see ``r2med.agent.outputs``). The tokenizer is the scripted
server's: one token per character, so every cut is worked out on the strings.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from completion_server import CompletionServer

from conftest import shared_path
from r2med.agent.loop import AgentConfig, run_agent
from r2med.agent.search import open_searcher
from r2med.datasets import load_dir
from r2med.retrievers.bm25.retriever import BM25Retriever

INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: {question}\n"
)
INVALID = ("\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
           "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
           "Let me try again.\n")
MAX_OBS, MAX_PROMPT, MAX_TURNS = 500, 4096, 4


@pytest.fixture(scope="module")
def scifact():
    return load_dir(shared_path("data", "scifact"), "scifact")


@pytest.fixture(scope="module")
def searcher(scifact):
    return open_searcher(BM25Retriever(progress=False), scifact)


def reference(question: str, server: CompletionServer, searcher) -> tuple[list[str], str | None, list[str]]:
    """The prompts Search-R1's evaluation sends for ``question``, its answer, and the observations (as tokens)."""
    q = question.strip()
    q = q if q.endswith("?") else q + "?"
    prompt = "<|im_start|>user\n" + INSTRUCTION.format(question=q) + "<|im_end|>\n<|im_start|>assistant\n"
    rolling = list(prompt)  # token ids: one per character
    responses: list[str] = []
    prompts, observations, turns = [], [], []
    for step in range(MAX_TURNS + 1):
        prompts.append("".join(rolling[-MAX_PROMPT:]))
        text, _ = server.intended(prompts[-1])  # the greedy model's whole text
        if "</search>" in text:
            text = text.split("</search>")[0] + "</search>"
        elif "</answer>" in text:
            text = text.split("</answer>")[0] + "</answer>"
        match = re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL)
        rolling += list(text)
        responses += list(text)
        turns.append(text)
        if step == MAX_TURNS or (match and match.group(1) == "answer"):
            break
        if match:
            query = match.group(2).strip()
            passages = ""
            if query:  # r2med: an empty query searches nothing
                for i, (docid, _) in enumerate(searcher.search([query], 3)[0]):
                    contents = f'"{docid}"\n{searcher.documents[docid]}'
                    lines = contents.split("\n")
                    passages += f"Doc {i + 1}(Title: {lines[0]}) {chr(10).join(lines[1:])}\n"
            obs = f"\n\n<information>{passages.strip()}</information>\n\n"
        else:
            obs = INVALID
        obs = list(obs)[:MAX_OBS]
        observations.append("".join(obs))
        rolling += obs
        responses += obs
    # qa_em.py's rule on the model's turns (r2med: not the prompt's two example pairs, see answer rules)
    answers = re.findall(r"<answer>(.*?)</answer>", "".join(turns), re.DOTALL)
    return prompts, (answers[-1].strip() if answers else None), observations


def run_one(scifact, searcher, tmp_path, question: str):
    dataset = dataclasses.replace(scifact, queries={"q": question}, qrels={})
    with CompletionServer() as server:
        config = AgentConfig(style="search-r1", llm_model="test-model", base_url=server.base_url,
                             chat_template="chatml", concurrency=1)
        report = run_agent(dataset, config, searcher, out_dir=tmp_path, progress=False)
        expected = reference(question, server, searcher)
    return report, server, expected


def test_search_r1_eval_answers_as_the_authors_loop(scifact, searcher, tmp_path):
    question = "0-dimensional biomaterials show inductive properties."
    report, server, (prompts, answer, observations) = run_one(scifact, searcher, tmp_path, question)
    row = report.trajectories[0]
    assert [b["prompt"] for b in server.requests] == prompts and len(prompts) == 3
    # greedy, 500 new tokens, the server stops at </search> (the same text as the authors' cut after it)
    assert {k: v for k, v in server.requests[0].items() if k != "prompt"} == {
        "model": "test-model", "max_tokens": 500, "temperature": 0.0, "top_p": 1.0, "stop": ["</search>"]}
    assert [len(o) for o in observations] == [500, 500]  # three SciFact abstracts: cut to their first 500 tokens
    assert not observations[0].endswith("</information>\n\n")
    assert row["stop_reason"] == "answer" and row["answer"] == answer
    assert answer == "The evidence on 0-dimensional biomaterials show inductive properties."
    assert [t.get("observation_cut", 0) > 0 for t in row["turns"][:2]] == [True, True]
    assert report.protocol == "search-r1-eval"


def test_an_invalid_action_is_retried_until_the_final_turn(scifact, searcher, tmp_path):
    report, server, (prompts, answer, observations) = run_one(scifact, searcher, tmp_path, "GARBAGE about anemia")
    row = report.trajectories[0]
    assert len(prompts) == 5 and [b["prompt"] for b in server.requests] == prompts  # 4 turns + the final one
    assert observations == [INVALID] * 4
    assert prompts[1] == prompts[0] + "zxq ### ((( no tags at all" + INVALID
    assert row["stop_reason"] == "max-turns" and row["answer"] is None is answer
    assert [t.get("note") for t in row["turns"]] == ["invalid action"] * 4 + [None]


def test_a_context_past_4096_tokens_keeps_its_last_tokens(scifact, searcher, tmp_path):
    question = "REPEAT vitamin B12 " + "homocysteine levels in elderly patients " * 60
    report, server, (prompts, answer, _) = run_one(scifact, searcher, tmp_path, question)
    row = report.trajectories[0]
    sent = [b["prompt"] for b in server.requests]
    assert sent == prompts and [len(p) for p in prompts] == [3034, 3623, MAX_PROMPT, MAX_PROMPT]
    # the third prompt is the last 4096 of 3623 + 89 (the turn) + 500 (its observation cut) = 4212 tokens
    assert len(row["turns"][1]["text"]) == 89 and row["turns"][1]["observation_cut"] > 0
    assert [t.get("context_cut") for t in row["turns"]] == [None, None, 4212 - MAX_PROMPT, 705]
    # the cut drops the instruction and the question, as the authors' does: the scripted model answers without it
    assert "Answer the given question." not in prompts[-1] and "Question: REPEAT" not in prompts[-1]
    assert row["stop_reason"] == "answer" and row["answer"] == answer == "The evidence on"


def test_a_repeated_or_empty_query_does_not_stop_a_query_by_default(scifact, searcher, tmp_path):
    for question, stop in (("REPEAT vitamin B12 levels", "max-turns"), ("EMPTY query about anemia", "max-turns")):
        report, server, (prompts, _, _) = run_one(scifact, searcher, tmp_path / question[:5], question)
        assert report.trajectories[0]["stop_reason"] == stop and len(server.requests) == 5
        assert [b["prompt"] for b in server.requests] == prompts
