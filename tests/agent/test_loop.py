"""The agent loop (``run_agent``) against the scripted completion server, searching SciFact with BM25.

Every request the server receives is checked against the authors' protocol written out here by hand: the
templated prompt, the stop strings and sampling, the text appended after each search; then the trajectories,
the expansion file, the answer policies, the markers that end a loop early, resuming and the budget.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from completion_server import CompletionServer, answer_for, condensed_for, searches_for, words

from conftest import shared_path
from r2med.agent.loop import AgentConfig, agent_ranking, run_agent
from r2med.agent.search import open_searcher
from r2med.datasets import load_dir
from r2med.datasets.model import Dataset
from r2med.llm.client import BudgetExceeded
from r2med.retrievers.bm25.retriever import BM25Retriever

Q1 = "0-dimensional biomaterials show inductive properties."  # SciFact's first judged query, id "1"
#: The chatml-wrapped Search-R1 prompt of Q1 (infer.py's text; the question gets a "?" as it does not end in one)
R1_FIRST_PROMPT = (
    "<|im_start|>user\n"
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: 0-dimensional biomaterials show inductive properties.?\n"
    "<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def scifact() -> Dataset:
    return load_dir(shared_path("data", "scifact"), "scifact")


@pytest.fixture(scope="module")
def searcher(scifact):
    return open_searcher(BM25Retriever(progress=False), scifact)


@pytest.fixture(scope="module")
def three(scifact) -> Dataset:
    """SciFact's first three judged queries over its full corpus."""
    return subset(scifact, {q: scifact.queries[q] for q in scifact.judged_query_ids[:3]})


def subset(dataset: Dataset, queries: dict[str, str]) -> Dataset:
    return dataclasses.replace(dataset, queries=queries,
                               qrels={q: dataset.qrels[q] for q in queries if q in dataset.qrels})


def config(style: str, server: CompletionServer, **kwargs) -> AgentConfig:
    """An agent of ``style`` on the scripted server; Search-R1 runs infer.py's protocol unless told otherwise (these
    tests check infer.py's requests; ``test_search_r1_eval.py`` checks the evaluation protocol's)."""
    if style == "search-r1":
        kwargs.setdefault("protocol", "search-r1-infer")
    return AgentConfig(style=style, llm_model="test-model", base_url=server.base_url, chat_template="chatml", **kwargs)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def sampling(body: dict) -> dict:
    return {k: v for k, v in body.items() if k != "prompt"}


# --------------------------------------------------------------------------------------------- Search-R1

def test_search_r1_requests_trajectories_and_expansions(three, searcher, tmp_path):
    assert list(three.queries) == ["1", "3", "5"] and three.queries["1"] == Q1
    with CompletionServer() as server:  # one query at a time: the requests come in dataset order
        report = run_agent(three, config("search-r1", server, concurrency=1), searcher, out_dir=tmp_path,
                           progress=False)
    bodies = server.requests
    assert len(bodies) == 9 and report.llm_calls == 9 and report.cached_calls == 0  # 2 searches + the answer, each
    assert report.search_calls == 6 and report.searches == 6 and report.repeated_searches == 0
    assert report.stop_reasons == {"answer": 3} and report.complete and report.written == 3 and report.fell_back == 0
    assert report.prompt_tokens == sum(words(b["prompt"]) for b in bodies)

    first, second, third = bodies[:3]
    assert first["prompt"] == R1_FIRST_PROMPT
    for body in bodies:  # infer.py: temperature 0.7, 1024 new tokens, no top_p; one stop string
        assert sampling(body) == {"model": "test-model", "max_tokens": 1024, "stop": ["</search>"], "temperature": 0.7}

    q1, q2 = "0-dimensional biomaterials show", "show inductive properties."
    assert searches_for(Q1 + "?") == [q1, q2]
    turn1 = f"<think> I need to find {q1}. </think>\n<search> {q1} </search>"
    hits = searcher.search([q1], 3)[0]
    assert len(hits) == 3
    passages = "".join(f'Doc {i}(Title: "{did}") {searcher.documents[did]}\n' for i, (did, _) in enumerate(hits, start=1))
    assert passages.startswith(f'Doc 1(Title: "{hits[0][0]}") ')
    assert second["prompt"] == R1_FIRST_PROMPT + "\n\n" + turn1 + "<information>" + passages + "</information>\n\n"
    assert second["prompt"][len(R1_FIRST_PROMPT):].startswith('\n\n<think> I need to find 0-dimensional biomaterials '
                                                              'show. </think>\n<search> 0-dimensional biomaterials show '
                                                              '</search><information>Doc 1(Title: "')
    turn2 = f"<think> I need to find {q2}. </think>\n<search> {q2} </search>"
    hits2 = searcher.search([q2], 3)[0]
    passages2 = "".join(f'Doc {i}(Title: "{did}") {searcher.documents[did]}\n' for i, (did, _) in enumerate(hits2, start=1))
    assert third["prompt"] == second["prompt"] + "\n\n" + turn2 + "<information>" + passages2 + "</information>\n\n"

    # the trajectory: what each turn wrote (the stop tag put back), the searches with the ids BM25 returned
    row = report.trajectories[0]
    answer_turn = f"<think> I know enough. </think>\n<answer> {answer_for(Q1)} </answer>"
    assert row["id"] == "1" and row["question"] == Q1 and row["style"] == "search-r1" and row["llm"] == "test-model"
    assert row["prompt"] == R1_FIRST_PROMPT
    assert [t["text"] for t in row["turns"]] == [turn1, turn2, answer_turn]
    assert [t["finish_reason"] for t in row["turns"]] == ["stop", "stop", "stop"]
    assert [t["prompt_tokens"] for t in row["turns"]] == [words(first["prompt"]), words(second["prompt"]),
                                                           words(third["prompt"])]
    assert row["searches"] == [{"query": q1, "ids": [d for d, _ in hits], "scores": [s for _, s in hits]},
                               {"query": q2, "ids": [d for d, _ in hits2], "scores": [s for _, s in hits2]}]
    assert row["output"] == third["prompt"][len(R1_FIRST_PROMPT):] + answer_turn
    assert row["stop_reason"] == "answer" and row["error"] is None
    assert row["answer"] == answer_for(Q1) == "The evidence on 0-dimensional biomaterials show inductive properties."
    assert [r["answer"] for r in report.trajectories] == [answer_for(three.queries[q]) for q in three.queries]

    # the files: expansions and trajectories in dataset order, the summary with the counts
    assert {p.name for p in tmp_path.iterdir()} == {"agent-cache.jsonl", "query_with_hydoc.jsonl", "trajectories.jsonl",
                                                    "summary.json"}
    rows = jsonl(tmp_path / "query_with_hydoc.jsonl")
    assert rows == [{"id": q, "text": three.queries[q], "hy_doc": answer_for(three.queries[q]), "answer_policy": "fallback",
                     "style": "search-r1", "stop_reason": "answer", "searches": 2, "fell_back": False}
                    for q in ("1", "3", "5")]
    assert jsonl(tmp_path / "trajectories.jsonl") == report.trajectories
    assert len(jsonl(tmp_path / "agent-cache.jsonl")) == 9
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["report"]["llm_calls"] == 9 and summary["report"]["stop_reasons"] == {"answer": 3}
    assert summary["config"]["search_top_k"] == 3 and summary["config"]["chat_template"] == "chatml"
    assert summary["search"]["corpus"] == "scifact" and summary["search"]["source"] == "dataset"
    assert report.run == agent_ranking(report.trajectories, name="search-r1-test-model")
    assert set(report.run["1"]) == {d for d, _ in hits} | {d for d, _ in hits2}


def test_search_r1_markers_end_the_loop(scifact, searcher, tmp_path):
    queries = {"g": "GARBAGE vitamin B12 levels", "r": "REPEAT vitamin B12 homocysteine levels",
               "n": "NEVER-CLOSE perinatal mortality birth weight", "e": "EMPTY query about anemia",
               "f": "FAIL-ME please about anemia", "ok": Q1}
    with CompletionServer() as server:
        report = run_agent(subset(scifact, queries), config("search-r1", server, stop_on_repeat=True), searcher,
                           out_dir=tmp_path, progress=False)
    rows = {r["id"]: r for r in report.trajectories}
    assert {q: r["stop_reason"] for q, r in rows.items()} == {
        "g": "no-answer", "r": "repeated-search", "n": "length", "e": "empty-search", "f": "error", "ok": "answer"}
    assert [len(rows[q]["searches"]) for q in queries] == [0, 1, 0, 0, 0, 2]
    assert rows["r"]["searches"][0]["query"] == "REPEAT vitamin B12"
    assert [t["text"] for t in rows["r"]["turns"]][1] == "<think> I need to find REPEAT vitamin B12. </think>\n<search> REPEAT vitamin B12 </search>"
    assert rows["n"]["turns"] == [{**rows["n"]["turns"][0], "text": "<search> NEVER-CLOSE perinatal mortality and more",
                                   "finish_reason": "length"}]
    assert rows["e"]["turns"][0]["text"] == "<search>   </search>"
    assert rows["g"]["output"] == "zxq ### ((( no tags at all"
    assert "HTTP 400" in rows["f"]["error"] and "scripted failure" in rows["f"]["error"]
    # a failed request fails its query only: it is not raised, not written, and listed
    assert list(report.failures) == ["f"] and report.stopped is None and not report.complete
    assert report.stop_reasons == {"answer": 1, "empty-search": 1, "error": 1, "length": 1, "no-answer": 1,
                                   "repeated-search": 1}
    written = jsonl(tmp_path / "query_with_hydoc.jsonl")
    assert [r["id"] for r in written] == ["g", "r", "n", "e", "ok"]
    assert {r["id"]: (r["hy_doc"], r["fell_back"]) for r in written} == {
        **{q: (queries[q], True) for q in ("g", "r", "n", "e")}, "ok": (answer_for(Q1), False)}
    assert [r["id"] for r in jsonl(tmp_path / "trajectories.jsonl")] == list(queries)


def test_search_r1_infer_does_not_stop_on_a_repeated_empty_or_cut_query(scifact, searcher, tmp_path):
    """infer.py (94-127): only the end-of-sequence token ends a query; a repeated query is searched again, an empty
    one gets '' as results, a turn cut by max_tokens searches the last <search> of the whole text."""
    queries = {"r": "REPEAT vitamin B12 homocysteine levels", "e": "EMPTY query about anemia",
               "n": "NEVER-CLOSE perinatal mortality birth weight"}
    with CompletionServer() as server:
        report = run_agent(subset(scifact, queries), config("search-r1", server, max_turns=3), searcher,
                           out_dir=tmp_path, progress=False)
    rows = {r["id"]: r for r in report.trajectories}
    assert {q: r["stop_reason"] for q, r in rows.items()} == {"r": "max-turns", "e": "max-turns", "n": "max-turns"}
    assert [s["query"] for s in rows["r"]["searches"]] == ["REPEAT vitamin B12"] * 3
    # "   " is a query to infer.py (119: truthy): searched, every turn
    assert [s["query"] for s in rows["e"]["searches"]] == [""] * 3
    assert rows["e"]["output"].startswith("\n\n<search>   </search><information>Doc 1(Title: ")
    # the cut turn closes no search: the last <search> pair of the whole text is the instruction's " query "
    assert [s["query"] for s in rows["n"]["searches"]] == ["query"] * 3


def test_search_r1_search_limit(three, searcher, tmp_path):
    with CompletionServer() as server:
        report = run_agent(subset(three, {"1": Q1}), config("search-r1", server, max_searches=1), searcher,
                           out_dir=tmp_path, progress=False)
    row = report.trajectories[0]
    assert row["stop_reason"] == "search-limit" and len(row["searches"]) == 1 and len(server.requests) == 2
    assert row["answer"] is None and jsonl(tmp_path / "query_with_hydoc.jsonl")[0]["hy_doc"] == Q1


# --------------------------------------------------------------------------------------------- Search-o1

def test_search_o1_requests_reason_in_documents_and_answer(three, searcher, tmp_path):
    with CompletionServer() as server:
        report = run_agent(three, config("search-o1", server, concurrency=1), searcher, out_dir=tmp_path,
                           progress=False)
    bodies = server.requests
    assert len(bodies) == 15 and report.llm_calls == 15  # per query: 2 x (search turn + Reason-in-Documents) + answer
    assert report.search_calls == 6 and report.stop_reasons == {"answer": 3}
    main = [b for b in bodies if "**Task Instruction:**" not in b["prompt"]]
    condense = [b for b in bodies if "**Task Instruction:**" in b["prompt"]]
    assert len(main) == 9 and len(condense) == 6

    first = bodies[0]["prompt"]
    assert first.startswith("<|im_start|>user\nYou are a reasoning assistant with the ability to perform web searches "
                            "to help you answer the user's question accurately. You have special tools:\n\n")
    assert "The maximum number of search attempts is limited to 10.\n\n" in first
    assert first.endswith("Provide your final answer in the format \\boxed{YOUR_ANSWER}.\n\n"
                          f"Question:\n{Q1}\n\n<|im_end|>\n<|im_start|>assistant\n")
    for body in main:  # run_search_o1.py's main sampling for a non-QwQ model
        assert sampling(body) == {"model": "test-model", "max_tokens": 8192, "stop": ["<|end_search_query|>"],
                                  "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.0}
    for body in condense:  # the Reason-in-Documents call: no stop string, the authors' fixed sampling
        assert sampling(body) == {"model": "test-model", "max_tokens": 8192, "temperature": 0.7, "top_p": 0.8,
                                  "top_k": 20, "repetition_penalty": 1.05}

    q1, q2 = searches_for(Q1)
    turn1 = f"I should look this up.\n<|begin_search_query|>{q1}<|end_search_query|>"
    hits = searcher.search([q1], 10)[0]
    assert len(hits) == 10
    reason = bodies[1]["prompt"]
    assert reason.startswith("<|im_start|>user\n**Task Instruction:**\n\n") and reason.endswith(
        f'based on the current search query "{q1}" and previous reasoning steps.\n<|im_end|>\n<|im_start|>assistant\n')
    assert ("- **Previous Reasoning Steps:**  \nStep 1: I should look this up.\n\n"
            f"Step 2: <|begin_search_query|>{q1}<|end_search_query|>\n\n"
            f"- **Current Search Query:**  \n{q1}\n\n- **Searched Web Pages:**  \n"
            f'**Web Page 1:**\n{{\n  "id": 1,\n  "doc_id": "{hits[0][0]}",\n  "context": ') in reason
    assert f'**Web Page 10:**\n{{\n  "id": 10,\n  "doc_id": "{hits[9][0]}"' in reason
    assert Q1 not in reason  # the authors' Reason-in-Documents prompt does not show the question

    # the condensed documents go back between the result tokens, without inner newlines
    block = "\n\n<|begin_search_result|>" + condensed_for(q1) + "<|end_search_result|>\n\n"
    assert bodies[2]["prompt"] == first + turn1 + block
    turn2 = f"I should look this up.\n<|begin_search_query|>{q2}<|end_search_query|>"
    second_reason = bodies[3]["prompt"]
    assert ("- **Previous Reasoning Steps:**  \nStep 1: I should look this up.\n\n"
            f"Step 2: <|begin_search_query|>{q1}<|end_search_query|>\n\n"
            f"Step 3: <|begin_search_result|>{condensed_for(q1)}<|end_search_result|>\n\n"
            "Step 4: I should look this up.\n\n"
            f"Step 5: <|begin_search_query|>{q2}<|end_search_query|>\n\n"
            f"- **Current Search Query:**  \n{q2}\n\n") in second_reason
    block2 = "\n\n<|begin_search_result|>" + condensed_for(q2) + "<|end_search_result|>\n\n"
    assert bodies[4]["prompt"] == first + turn1 + block + turn2 + block2

    row = report.trajectories[0]
    final = f"Now I can answer.</think>\n\n{answer_for(Q1)}"
    assert [t["text"] for t in row["turns"]] == [turn1, turn2, final]
    assert row["output"] == turn1 + block + turn2 + block2 + final
    assert [s["query"] for s in row["searches"]] == [q1, q2]
    assert row["searches"][0]["ids"] == [d for d, _ in hits] and row["searches"][0]["condensed"] == condensed_for(q1)
    assert row["searches"][0]["reason_in_documents"]["text"] == f"Page 1 is relevant.\n**Final Information**\n\n{condensed_for(q1)}"
    assert row["stop_reason"] == "answer" and row["answer"] == answer_for(Q1)
    assert report.prompt_tokens == sum(words(b["prompt"]) for b in bodies)  # Reason-in-Documents calls included
    rows = jsonl(tmp_path / "query_with_hydoc.jsonl")
    assert [(r["id"], r["hy_doc"], r["style"], r["searches"]) for r in rows] == [
        (q, answer_for(three.queries[q]), "search-o1", 2) for q in ("1", "3", "5")]


def test_search_o1_repeated_query_message_until_max_turns(scifact, searcher, tmp_path):
    question = "REPEAT vitamin B12 homocysteine levels"
    with CompletionServer() as server:
        report = run_agent(subset(scifact, {"r": question}), config("search-o1", server), searcher, out_dir=tmp_path,
                           progress=False)
    row = report.trajectories[0]
    repeat = "\n<|begin_search_result|>\nYou have searched this query. Please refer to previous results.\n<|end_search_result|>\n"
    assert row["stop_reason"] == "max-turns" and len(row["turns"]) == 15 and len(row["searches"]) == 1
    assert len(server.requests) == 16 and report.search_calls == 1  # 15 turns + 1 Reason-in-Documents
    turn = "I should look this up.\n<|begin_search_query|>REPEAT vitamin B12<|end_search_query|>"
    first_block = "\n\n<|begin_search_result|>" + condensed_for("REPEAT vitamin B12") + "<|end_search_result|>\n\n"
    assert row["output"] == turn + first_block + (turn + repeat) * 14
    assert [t.get("note") for t in row["turns"]] == [None] + ["repeated query message"] * 14
    # run_search_o1.py keeps the output at the turn limit (683-685, 701); R2MED's cut: no "</think>", the whole text
    expected = row["output"].strip()
    assert row["answer"] == expected
    written = jsonl(tmp_path / "query_with_hydoc.jsonl")
    assert [(r["hy_doc"], r["fell_back"], r["stop_reason"]) for r in written] == [(expected, False, "max-turns")]


def test_search_o1_search_limit_message(three, searcher, tmp_path):
    with CompletionServer() as server:
        report = run_agent(subset(three, {"1": Q1}), config("search-o1", server, max_searches=1), searcher,
                           out_dir=tmp_path, progress=False)
    row = report.trajectories[0]
    q1, q2 = searches_for(Q1)
    limit = "\n<|begin_search_result|>\nThe maximum search limit is exceeded. You are not allowed to search.\n<|end_search_result|>\n"
    assert "The maximum number of search attempts is limited to 1.\n\n" in row["prompt"]
    assert [s["query"] for s in row["searches"]] == [q1]
    assert row["output"] == (f"I should look this up.\n<|begin_search_query|>{q1}<|end_search_query|>"
                             f"\n\n<|begin_search_result|>{condensed_for(q1)}<|end_search_result|>\n\n"
                             f"I should look this up.\n<|begin_search_query|>{q2}<|end_search_query|>" + limit
                             + f"Now I can answer.</think>\n\n{answer_for(Q1)}")
    assert row["turns"][1]["note"] == "search limit message"
    assert row["stop_reason"] == "answer" and row["answer"] == answer_for(Q1) and len(server.requests) == 4


def test_search_o1_markers(scifact, searcher, tmp_path):
    queries = {"g": "GARBAGE vitamin B12 levels", "n": "NEVER-CLOSE perinatal mortality birth weight",
               "e": "EMPTY query about anemia", "f": "FAIL-ME please about anemia"}
    with CompletionServer() as server:
        report = run_agent(subset(scifact, queries), config("search-o1", server, policy="authors"), searcher,
                           out_dir=tmp_path, progress=False)
    rows = {r["id"]: r for r in report.trajectories}
    # a text without a search query is the model's final answer in Search-o1's loop
    assert {q: r["stop_reason"] for q, r in rows.items()} == {"g": "answer", "n": "length", "e": "empty-search",
                                                              "f": "error"}
    assert rows["g"]["answer"] == "zxq ### ((( no tags at all"  # no "</think>" with a non-thinking template
    assert rows["n"]["turns"][0]["text"] == "<|begin_search_query|>NEVER-CLOSE perinatal mortality and more"
    assert rows["e"]["turns"][0]["text"] == "<|begin_search_query|> <|end_search_query|>"
    written = {r["id"]: r["hy_doc"] for r in jsonl(tmp_path / "query_with_hydoc.jsonl")}
    assert written == {"g": "zxq ### ((( no tags at all",
                       "n": "<|begin_search_query|>NEVER-CLOSE perinatal mortality and more",
                       "e": "<|begin_search_query|> <|end_search_query|>"}
    assert list(report.failures) == ["f"]


# --------------------------------------------------------------------------------------------- answer policies

def test_answer_policies(scifact, searcher, tmp_path):
    queries = {"g": "GARBAGE vitamin B12 levels", "ok": Q1}
    dataset = subset(scifact, queries)
    outputs = {}
    for policy in ("fallback", "authors", "error"):
        with CompletionServer() as server:
            report = run_agent(dataset, config("search-r1", server, policy=policy), searcher,
                               out_dir=tmp_path / policy, progress=False)
        outputs[policy] = (jsonl(tmp_path / policy / "query_with_hydoc.jsonl"), report)
    rows, report = outputs["fallback"]
    assert [(r["id"], r["hy_doc"], r["fell_back"], r["answer_policy"]) for r in rows] == [
        ("g", queries["g"], True, "fallback"), ("ok", answer_for(Q1), False, "fallback")]
    assert report.fell_back == 1 and report.complete
    rows, report = outputs["authors"]
    assert [(r["id"], r["hy_doc"], r["fell_back"], r["answer_policy"]) for r in rows] == [
        ("g", "zxq ### ((( no tags at all", False, "authors"), ("ok", answer_for(Q1), False, "authors")]
    assert report.fell_back == 0
    rows, report = outputs["error"]
    assert [(r["id"], r["hy_doc"], r["answer_policy"]) for r in rows] == [("ok", answer_for(Q1), "error")]
    assert report.failures == {"g": "no answer (no-answer: the model stopped without a search and without an answer)"}
    assert report.written == 1 and not report.complete and report.stopped is None


def test_authors_policy_writes_the_output_of_an_empty_search(scifact, searcher, tmp_path):
    with CompletionServer() as server:
        report = run_agent(subset(scifact, {"e": "EMPTY query about anemia"}),
                           config("search-r1", server, policy="authors", stop_on_repeat=True), searcher,
                           out_dir=tmp_path, progress=False)
    assert jsonl(tmp_path / "query_with_hydoc.jsonl")[0]["hy_doc"] == "<search>   </search>"
    assert report.fell_back == 0


# --------------------------------------------------------------------------------------------- resuming, budget

def test_a_rerun_replays_the_cache_and_writes_the_same_files(three, searcher, tmp_path):
    with CompletionServer() as server:
        first = run_agent(three, config("search-o1", server, concurrency=1), searcher, out_dir=tmp_path, progress=False)
    files = {name: (tmp_path / name).read_bytes() for name in ("query_with_hydoc.jsonl", "trajectories.jsonl",
                                                                "agent-cache.jsonl")}
    with CompletionServer() as again:
        second = run_agent(three, config("search-o1", again, concurrency=1), searcher, out_dir=tmp_path,
                           progress=False)
    assert again.requests == [] and second.llm_calls == 0 and second.cached_calls == first.llm_calls == 15
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
    assert second.trajectories == first.trajectories and second.run == first.run

    # a kill while the last response was written: only that request is sent again
    cache = tmp_path / "agent-cache.jsonl"
    lines = cache.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])
    cache.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    with CompletionServer() as torn:
        third = run_agent(three, config("search-o1", torn, concurrency=1), searcher, out_dir=tmp_path, progress=False)
    assert len(torn.requests) == 1 and third.llm_calls == 1 and third.cached_calls == 14
    assert torn.requests[0]["prompt"] == server.requests[-1]["prompt"]
    assert json.loads(cache.read_bytes().splitlines()[-1])["key"] == last["key"]
    assert len(cache.read_bytes().splitlines()) == 15
    assert (tmp_path / "query_with_hydoc.jsonl").read_bytes() == files["query_with_hydoc.jsonl"]
    assert [r["answer"] for r in third.trajectories] == [r["answer"] for r in first.trajectories]


def test_a_spent_budget_stops_the_run_after_writing_what_finished(scifact, searcher, tmp_path):
    # one query at a time: "g" needs one request, "ok" three; two requests reach the end of "g" and the first
    # turn of "ok"
    queries = {"g": "GARBAGE vitamin B12 levels", "ok": Q1, "later": "A deficiency of vitamin B12 increases blood"}
    dataset = subset(scifact, queries)
    with CompletionServer() as server, pytest.raises(BudgetExceeded, match="request budget of 2 spent") as caught:
        run_agent(dataset, config("search-r1", server, concurrency=1, max_requests=2), searcher, out_dir=tmp_path,
                  progress=False)
    assert caught.value.exit_code == 6 and len(server.requests) == 2
    rows = {r["id"]: r for r in jsonl(tmp_path / "trajectories.jsonl")}
    assert {q: r["stop_reason"] for q, r in rows.items()} == {"g": "no-answer", "ok": "budget", "later": "budget"}
    assert len(rows["ok"]["turns"]) == 1 and rows["later"]["turns"] == []
    assert [r["id"] for r in jsonl(tmp_path / "query_with_hydoc.jsonl")] == ["g"]
    summary = json.loads((tmp_path / "summary.json").read_text())["report"]
    assert summary["failures"] == {"ok": "the request or token budget ran out", "later": "the request or token budget ran out"}
    assert summary["stopped"].startswith("request budget of 2 spent")
    # rerun without a budget: the two finished requests come from the cache
    with CompletionServer() as server:
        report = run_agent(dataset, config("search-r1", server, concurrency=1), searcher, out_dir=tmp_path,
                           progress=False)
    assert len(server.requests) == 5 and report.cached_calls == 2 and report.complete
    assert [r["id"] for r in jsonl(tmp_path / "query_with_hydoc.jsonl")] == ["g", "ok", "later"]


def test_no_answer_written_leaves_no_stale_expansion_file(scifact, searcher, tmp_path):
    dataset = subset(scifact, {"g": "GARBAGE vitamin B12 levels"})
    with CompletionServer() as server:
        run_agent(dataset, config("search-r1", server), searcher, out_dir=tmp_path, progress=False)
    assert jsonl(tmp_path / "query_with_hydoc.jsonl")[0]["hy_doc"] == "GARBAGE vitamin B12 levels"
    with CompletionServer() as server:  # the same responses; now an unanswered query is a failure
        report = run_agent(dataset, config("search-r1", server, policy="error"), searcher, out_dir=tmp_path,
                           progress=False)
    assert server.requests == [] and report.written == 0 and list(report.failures) == ["g"]
    assert not (tmp_path / "query_with_hydoc.jsonl").exists()  # not the fallback rows of the earlier run


def test_a_knowledge_corpus_is_searched_instead(three, tmp_path):
    from r2med.datasets.local import load_corpus

    folder = tmp_path / "kb"
    folder.mkdir()
    docs = {"k1": "Biomaterials with inductive properties.", "k2": "Genomes project rare variants penetrance.",
            "k3": "PrP positivity in the UK.", "k4": "Unrelated text about trains."}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                                 for k, v in docs.items()))
    knowledge = load_corpus(folder)
    assert knowledge.name == "kb" and knowledge.source == str(folder) and knowledge.queries == {}
    searcher = open_searcher(BM25Retriever(progress=False), knowledge, source=knowledge.source)
    with CompletionServer() as server:
        report = run_agent(three, config("search-r1", server, concurrency=1), searcher, out_dir=tmp_path / "out",
                           progress=False)
    ids = {d for row in report.trajectories for s in row["searches"] for d in s["ids"]}
    assert ids and ids <= set(docs)
    assert report.trajectories[0]["searches"][0]["ids"][0] == "k1"
    assert '<information>Doc 1(Title: "k1") Biomaterials with inductive properties.\nDoc 2(Title: "' in server.requests[1]["prompt"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["search"]["corpus"] == "kb" and summary["search"]["source"] == str(folder)


def test_a_search_that_raises_ends_that_query_only(tmp_path):
    """A failure inside one query (here its search) is recorded as its error; the other queries finish."""

    from r2med.agent.loop import AgentConfig, run_agent
    from r2med.agent.search import CorpusSearcher
    from r2med.datasets.model import Dataset

    def search(texts, k):
        if "boom" in texts[0]:
            raise RuntimeError("index went away")
        return [[("d1", 1.0)] for _ in texts]

    import threading

    searcher = CorpusSearcher("toy", "toy", "dataset", {"d1": "Aspirin."}, {"retriever": "toy"}, search, threading.Lock())
    dataset = Dataset("toy", ["d1"], ["Aspirin."], {"a": "boom goes the index", "b": "what helps against a fever"}, {})
    with CompletionServer() as server:
        config = AgentConfig(protocol="search-r1-infer", llm_model="test-model", base_url=server.base_url,
                             chat_template="chatml")
        report = run_agent(dataset, config, searcher, out_dir=tmp_path, progress=False)
    rows = {row["id"]: row for row in report.trajectories}
    assert rows["a"]["stop_reason"] == "error" and rows["a"]["error"] == "RuntimeError: index went away"
    assert rows["b"]["stop_reason"] == "answer"
    assert list(report.failures) == ["a"] and report.written == 1
