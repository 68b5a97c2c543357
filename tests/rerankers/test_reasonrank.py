"""ReasonRank as its authors ran it (8421BCD/ReasonRank at 06721fd): the prompt byte for byte, the windows, the answer
rules, the sampling, and the reranker end to end against a scripted server.

The expected values are worked out here from the authors' code (file:line in each test), not read back from r2med.
The tokenizer is built in the test: a byte-level BPE without merges (one token per UTF-8 byte, as Qwen's byte-level
BPE before merges), so "cut to N tokens" is "cut to N bytes", and a cut inside a character decodes to U+FFFD, as a
cut inside a multi-byte character does with the real tokenizer; its chat template is Qwen2.5's layout.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from reasonrank_server import ReasonRankServer, Reply
from rerank_helpers import BM25_TOP20, QUERIES, bm25_top20, ranked_ids, run_rerank_command, scifact

from conftest import shared_path
from r2med.errors import ProviderError
from r2med.llm.cache import ResponseCache
from r2med.llm.client import BudgetExceeded, ChatClient
from r2med.llm.requests import Budget, SamplingParams
from r2med.rerankers.listwise import ListwiseReranker
from r2med.rerankers.reasonrank import ReasonRankPrompt, reasonrank_permutation, sampling_defaults
from r2med.rerankers.windows import sliding_windows
from r2med.types import Run

pytest.importorskip("ftfy", reason="ftfy (the llm extra) is needed for ReasonRank's prompt")

QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Gemma's layout without its leading <bos>: llama.cpp's /v1/completions adds one to every prompt
GEMMA_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}{% set sys = m['content'] %}"
                  "{% else %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
                  "{% if sys is defined %}{{ sys }}\n\n{% endif %}{{ m['content'] }}<end_of_turn>\n{% endif %}{% endfor %}"
                  "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")

# listwise_prompt_r1.toml:3 and :1, typed from the authors' file
SYSTEM_REASONING = (
    "You are RankLLM, an intelligent assistant that can rank passages based on their relevance to the query. Given a "
    "query and a passage list, you first thinks about the reasoning process in the mind and then provides the answer "
    "(i.e., the reranked passage list). The reasoning process and answer are enclosed within <think> </think> and "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.")
SYSTEM_PLAIN = "You are RankLLM, an intelligent assistant that can rank passages based on their relevance to the query."


def byte_tokenizer(template: str = QWEN_TEMPLATE, bos: str | None = None):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    out = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos)
    out.chat_template = template
    return out


@pytest.fixture
def tokenizer_dir(tmp_path) -> Path:
    path = tmp_path / "tokenizer"
    byte_tokenizer().save_pretrained(path)
    return path


# the fixed inputs: the query holds [3] and curly quotes (not repaired alone: only the whole prompt goes through
# ftfy, rerank/rank_listwise_os_llm.py:194 and :216); the passages hold [3], mojibake, curly quotes, and two run past
# the 40-token budget of the test, one of them inside "ç" (2 bytes)
QUERY = "  Which drug [3] treats \u201cfever\u201d?  "
PASSAGES = [
    "  Aspirin [3] reduces fever.  ",
    "The patient\u00e2\u20ac\u2122s temperature fell.",  # "patient’s" read as cp1252: ftfy repairs it, then uncurls
    "\u201cCurly\u201d \u2018quotes\u2019 [12]",
    "Paracetamol is safe at normal doses but toxic in overdose [2].",
    "Na\u00c3\u00afve patients: 300 mg of ibuprofen; a\u00e7a\u00ed bowls",  # "Naïve" as mojibake
]
# utils.py:89-109: strip, fix_text, the first 40 tokens (bytes), [n] -> (n); the last two are cut at 40 bytes:
# "Paracetamol is safe at normal doses but " is 40 bytes (its space kept: nothing strips after the cut);
# "Naïve patients: 300 mg of ibuprofen; a" is 39 bytes, the 40th is the first byte of "ç"
SHOWN = [
    "Aspirin (3) reduces fever.",
    "The patient's temperature fell.",
    "\"Curly\" 'quotes' (12)",
    "Paracetamol is safe at normal doses but ",
    "Na\u00efve patients: 300 mg of ibuprofen; a\ufffd",
]
QUERY_SHOWN = "Which drug (3) treats \u201cfever\u201d?"  # rankllm.py:529-530, then .strip()


def expected_user(mode: str) -> str:
    """utils.py:61-63 (prefix), rank_listwise_os_llm.py:207-213 (a blank line, [i] lines), utils.py:72-80 (post)."""
    prefix = ("I will provide you with 5 passages, each indicated by a numerical identifier []. Rank the passages "
              f"based on their relevance to the search query: {QUERY_SHOWN}.\n")
    lines = "".join(f"[{i}] {text}\n" for i, text in enumerate(SHOWN, start=1))
    head = (f"Search Query: {QUERY_SHOWN}.\nRank the 5 passages above based on their relevance to the search query. "
            "All the passages should be included and listed using identifiers, in descending order of relevance. ")
    post = {"rank_GPT_reasoning": head + "The format of the answer should be [] > [], e.g., [2] > [1].",
            "rank_GPT_qwen3": head + "The final ranked list should be enclosed within <answer> </answer> tags, i.e., "
                              "<answer> ranked list here </answer>. The format of ranked list should be [] > [], e.g., "
                              "[2] > [1]. Only respond with the ranking results, do not say any word or explain."}[mode]
    return prefix + "\n" + lines + post


@pytest.mark.parametrize(("mode", "system"), [("rank_GPT_reasoning", SYSTEM_REASONING), ("rank_GPT_qwen3", SYSTEM_PLAIN)])
def test_the_prompt_is_the_authors_byte_for_byte(mode, system):
    prompt = ReasonRankPrompt(tokenizer=byte_tokenizer(), mode=mode, doc_maxlen=40)
    user = expected_user(mode)
    # the authors' messages (rank_listwise_os_llm.py:199-214): curly quotes of the query still there
    assert prompt.messages(QUERY, PASSAGES) == [{"role": "system", "content": system}, {"role": "user", "content": user}]
    # the chat template (add_generation_prompt=True), then ftfy on the whole (:215-216): the query's quotes straight
    rendered = f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    expected = rendered.replace("\u201cfever\u201d", '"fever"')
    assert prompt.prompt(QUERY, PASSAGES) == expected
    params = SamplingParams(temperature=0.0, max_tokens=3172)
    text = prompt.job("m", QUERY, PASSAGES, None, params)
    assert (text.prompt, text.extra) == (expected, sampling_defaults(mode)[1])
    chat = ReasonRankPrompt(tokenizer=byte_tokenizer(), mode=mode, doc_maxlen=40, request_as="chat")
    job = chat.job("m", QUERY, PASSAGES, None, params)
    assert job.prompt is None
    assert job.messages == [{"role": "system", "content": system},
                            {"role": "user", "content": user.replace("\u201cfever\u201d", '"fever"')}]


def test_a_passage_under_the_budget_is_the_tokenizers_round_trip():
    """512 tokens (the R2MED DOC_MAXLEN, index_and_topics.py:250-257): nothing of these passages is cut."""
    prompt = ReasonRankPrompt(tokenizer=byte_tokenizer())
    assert [prompt.passage(p) for p in PASSAGES[3:]] == [
        "Paracetamol is safe at normal doses but toxic in overdose (2).",
        "Na\u00efve patients: 300 mg of ibuprofen; a\u00e7a\u00ed bowls"]


def test_a_tokenizer_without_chat_template_is_refused():
    from r2med.errors import UsageError

    bare = byte_tokenizer(template="")
    bare.chat_template = None
    with pytest.raises(UsageError, match="no chat template"):
        ReasonRankPrompt(tokenizer=bare).prompt("q", ["p"])


def authors_windows(n: int, window: int = 20, step: int = 10) -> list[tuple[int, int]]:
    """rerank/reranker.py:56-58 and rerank/rankllm.py:312-329, transcribed: rank_end = min(100, n), window = min(20, n)."""
    rank_start, rank_end, window = 0, min(100, n), min(window, n)
    end, start, out = rank_end, rank_end - window, []
    while end > rank_start and start + step != rank_start:
        start = max(start, rank_start)
        out.append((start, end))
        end, start = end - step, start - step
    return out


def test_the_windows_are_the_authors():
    assert sliding_windows(100) == authors_windows(100) == [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60),
                                                            (30, 50), (20, 40), (10, 30), (0, 20)]
    for n in range(2, 101):
        assert sliding_windows(n) == authors_windows(n), n


def test_a_query_of_100_candidates_is_ranked_window_by_window_from_the_back(tmp_path):
    """Nine windows; each answer moves its last passage to the front. The server sees the windows in the authors'
    order, each built on the order the previous one left."""
    dataset = scifact()
    docs = list(dataset.corpus)[:100]
    run = Run({"3": {d: float(100 - i) for i, d in enumerate(docs)}})
    last_first = lambda query, n, body: "<think>ok</think> <answer>" + " > ".join(
        f"[{i}]" for i in [n, *range(1, n)]) + "</answer>"
    with ReasonRankServer(last_first) as server:
        client = ChatClient("liuwenhan/reasonrank-7B", server.base_url, max_retries=0)
        ranker = ListwiseReranker(client, progress=False, prompt=ReasonRankPrompt(tokenizer=byte_tokenizer()),
                                  params=SamplingParams(temperature=0.0, max_tokens=3172))
        out = ranker.rerank(dataset.queries, dataset.corpus, run, top_k=100)
    assert len(server.requests) == 9 and all(r.path == "/v1/completions" for r in server.requests)
    # simulate by hand: window (s, e) puts order[e-1] first
    order = list(range(100))
    seen = []
    for s, e in [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50), (20, 40), (10, 30), (0, 20)]:
        seen.append(order[s])  # the first passage the window shows
        order[s:e] = [order[e - 1], *order[s:e - 1]]
    shown_first = [r.passages[0].split("] ", 1)[1] for r in server.requests]
    prompt = ReasonRankPrompt(tokenizer=byte_tokenizer())
    assert shown_first == [prompt.passage(dataset.corpus[docs[i]]) for i in seen]
    assert ranked_ids(out, "3") == [docs[i] for i in order]
    scores = [s for _, s in out.ranked("3")]
    assert all(a > b for a, b in itertools.pairwise(scores))  # strictly decreasing


@pytest.mark.parametrize(("text", "n", "order", "source", "repairs"), [
    # listwise_prompt_r1.toml:5 on the lower-cased text (rankllm.py:458-461): the answer between the tags
    ("<think>I compare [1] and [2].</think>\n<answer>[2] > [3] > [1]</answer>", 3, (1, 2, 0), "answer-tags", ((), (), ())),
    ("<THINK>x</THINK> <ANSWER>[2] > [1]</ANSWER>", 2, (1, 0), "answer-tags", ((), (), ())),
    # no </think>: the pattern fails; the text after the last <answer> (:462-464): 3, 1, then 2 appended
    ("<think>maybe [1] > [2] <answer>[3] > [1]</answer>", 3, (2, 0, 1), "after-answer-tag", ((), (), (2,))),
    # cut off by the token limit: no tags at all; the authors read every number of the text (:465-466): 4, 2, 1, 3
    ("<think>Passage [4] mentions aspirin; passage 2 is off topic", 4, (3, 1, 0, 2), "whole-text", ((), (), (1, 3))),
    # repeats and gaps (:476-481, :518-522): 2, 2, 5, 0, 1 -> 2, 1, then 3 appended; 5 and 0 are not in the window
    ("<think>x</think><answer>[2] > [2] > [5] > [0] > [1]</answer>", 3, (1, 0, 2), "answer-tags", ((2,), (5, 0), (3,))),
    # two-digit identifiers; a draft in the trace does not count
    ("<think>[1] > [10]?</think> <answer>[10] > [2]</answer>", 10, (9, 1, 0, 2, 3, 4, 5, 6, 7, 8), "answer-tags",
     ((), (), (1, 3, 4, 5, 6, 7, 8, 9))),
    ("", 3, (0, 1, 2), "whole-text", ((), (), (1, 2, 3))),
])
def test_answers_are_read_by_the_authors_rules(text, n, order, source, repairs):
    report = reasonrank_permutation(text, n)
    assert (report.order, report.source, (report.duplicates, report.out_of_range, report.missing)) == (order, source, repairs)


def test_a_trace_returned_apart_is_read_with_its_answer():
    prompt = ReasonRankPrompt(tokenizer=byte_tokenizer(), request_as="chat")
    report, trace, answer = prompt.parse("<answer>[2] > [1]</answer>", "passage [1] is close", 2)
    assert (report.order, trace, answer) == ((1, 0), "passage [1] is close", "[2] > [1]")


def test_sampling_is_the_authors():
    """rank_listwise_os_llm.py:118-130 with --reasoning_maxlen 3072 (run_rank_llm.sh:65, :88)."""
    assert sampling_defaults("rank_GPT_reasoning") == ({"temperature": 0.0, "max_tokens": 3172},
                                                       {"repetition_penalty": 1.0})
    assert sampling_defaults("rank_GPT_qwen3") == ({"temperature": 0.6, "top_p": 0.95, "max_tokens": 3172},
                                                   {"top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0})


def reverse_answer(query, n, body):
    return "<think>thinking about [1]</think>\n<answer>" + " > ".join(f"[{i}]" for i in range(n, 0, -1)) + "</answer>"


@pytest.mark.parametrize(("name", "wire"), [
    ("reasonrank-7b", {"temperature": 0.0, "max_tokens": 3172, "repetition_penalty": 1.0}),
    ("reasonrank-8b", {"temperature": 0.6, "top_p": 0.95, "max_tokens": 3172, "top_k": 20, "min_p": 0.0,
                       "repetition_penalty": 1.0}),
])
def test_rerank_command_sends_the_authors_requests_and_prints_the_cost(name, wire, tokenizer_dir, tmp_path, isolated_home):
    with ReasonRankServer(reverse_answer) as server:
        result = run_rerank_command(
            "rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", name, "--tokenizer", tokenizer_dir,
            "--base-url", server.base_url, "--top-k", "20", "--tasks", "scifact",
            "--data-dir", shared_path("data", "scifact"), "--output", tmp_path)
        assert result.code == 0, result.err
        bodies = [r.body for r in server.requests]
    model = {"reasonrank-7b": "liuwenhan/reasonrank-7B", "reasonrank-8b": "liuwenhan/reasonrank-8B"}[name]
    assert len(bodies) == 4 and all(r.path == "/v1/completions" for r in server.requests)
    assert all(set(b) == {"model", "prompt", *wire} and b["model"] == model for b in bodies)
    assert all({k: b[k] for k in wire} == wire for b in bodies)
    where = tmp_path / "reranker" / name / "bm25" / "top_20"
    run = bm25_top20()
    reranked = {}
    for line in (where / "scifact.run").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        reranked.setdefault(qid, []).append((doc, float(score)))
    for qid in QUERIES:
        assert [d for d, _ in reranked[qid]] == ranked_ids(run, qid)[::-1]  # every window answered "reverse"
    # the cost: one window of 20 per query, billed 10 * 20 prompt + 5 completion tokens by the server
    assert ("scifact: cost per query: 200 prompt + 5 completion tokens (4 queries, 4 windows, 0 from the cache; "
            "this run sent 4 requests, 800 + 20 tokens)") in result.err
    assert (isolated_home / "rerank" / "reasonrank" / f"{model.replace('/', '__')}.jsonl").is_file()
    log = [json.loads(line) for line in (where / "scifact.windows.jsonl").read_text().splitlines()]
    assert [e["reasoning"] for e in log] == ["thinking about [1]"] * 4 and all(e["source"] == "answer-tags" for e in log)


def test_chat_mode_sends_the_messages(tokenizer_dir, tmp_path):
    with ReasonRankServer(lambda q, n, body: Reply("<answer>[2] > [1]</answer>", reasoning="[1] or [2]")) as server:
        result = run_rerank_command(
            "rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", "reasonrank-32b", "--tokenizer",
            tokenizer_dir, "--request-as", "chat", "--base-url", server.base_url, "--top-k", "20", "--tasks", "scifact",
            "--data-dir", shared_path("data", "scifact"), "--output", tmp_path, "--json")
        assert result.code == 0, result.err
    dataset, run = scifact(), bm25_top20()
    first = next(r for r in server.requests if r.query == dataset.queries["3"])
    assert first.path == "/v1/chat/completions" and [m["role"] for m in first.body["messages"]] == ["system", "user"]
    assert first.body["messages"][0]["content"] == SYSTEM_REASONING
    prompt = ReasonRankPrompt(tokenizer=byte_tokenizer())
    block = "".join(f"[{i}] {prompt.passage(dataset.corpus[d])}\n" for i, d in enumerate(ranked_ids(run, "3"), 1))
    assert f".\n\n{block}Search Query: " in first.body["messages"][1]["content"]  # BM25's order, passages kept whole
    out = tmp_path / "reranker" / "reasonrank-32b" / "bm25" / "top_20" / "scifact.run"
    order = [line.split()[2] for line in out.read_text().splitlines() if line.startswith("3 ")]
    assert order == [ranked_ids(run, "3")[i] for i in [1, 0, *range(2, 20)]]


def test_max_requests_stops_keeps_the_finished_windows_and_the_rerun_resumes(tokenizer_dir, tmp_path, isolated_home):
    """--max-requests 5 over 12 windows (window 10, step 5 over the top 20 of 4 queries): 5 requests, exit 6; the
    rerun sends exactly the 7 others and gives the result of an uninterrupted run."""
    argv = ["rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", "reasonrank-7b", "--tokenizer",
            tokenizer_dir, "--top-k", "20", "--window", "10", "--stride", "5", "--concurrency", "2", "--tasks",
            "scifact", "--data-dir", shared_path("data", "scifact")]
    with ReasonRankServer(reverse_answer) as server:
        stopped = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "a",
                                     "--max-requests", "5")
        assert stopped.code == 6, stopped.err
        assert "request budget of 5 spent" in stopped.err and "rerun to resume" in stopped.err
        first = [r.body["prompt"] for r in server.requests]
        cache = isolated_home / "rerank" / "reasonrank" / "liuwenhan__reasonrank-7B.jsonl"
        assert len(first) == 5 and len(ResponseCache(cache)) == 5
        resumed = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "a")
        assert resumed.code == 0, resumed.err
        second = [r.body["prompt"] for r in server.requests[5:]]
        assert len(second) == 7 and not set(first) & set(second)
        assert "4 queries, 12 windows, 5 from the cache; this run sent 7 requests" in resumed.err
    with ReasonRankServer(reverse_answer) as server:  # the reference: one uninterrupted run, a fresh cache
        ref = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "b", "--no-cache")
        assert ref.code == 0, ref.err
    path = Path("reranker") / "reasonrank-7b" / "bm25" / "top_20" / "scifact.run"
    assert (tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes()


def test_the_budget_error_names_the_cache(tmp_path):
    dataset, run = scifact(), bm25_top20()
    with ReasonRankServer(reverse_answer) as server:
        client = ChatClient("m", server.base_url, max_retries=0, budget=Budget(max_requests=1))
        ranker = ListwiseReranker(client, progress=False, prompt=ReasonRankPrompt(tokenizer=byte_tokenizer()),
                                  cache=ResponseCache(tmp_path / "c.jsonl"), concurrency=1)
        with pytest.raises(BudgetExceeded, match=r"c\.jsonl: rerun to resume") as caught:
            ranker.rerank(dataset.queries, dataset.corpus, run, top_k=20)
    assert isinstance(caught.value, ProviderError) and caught.value.pending == 3
    assert len(ResponseCache(tmp_path / "c.jsonl")) == 1


def test_reasonrank_needs_a_server():
    from r2med.errors import UsageError
    from r2med.rerankers.registry import make_reranker

    with pytest.raises(UsageError, match=r"pass --base-url, e.g. http://localhost:8000/v1 after 'vllm serve "
                                         r"liuwenhan/reasonrank-32B'"):
        make_reranker("reasonrank-32b")


def test_the_registry_rows_are_the_authors_models():
    """run_rank_llm.sh:11 and :57 (rank_GPT_reasoning), :80 and :93 (rank_GPT_qwen3); folder = the registry name."""
    from r2med.rerankers.registry import KINDS, reranker_registry, resolve_reranker

    rows = {n: resolve_reranker(n) for n in ("reasonrank-7b", "reasonrank-32b", "reasonrank-8b")}
    assert {n: (s.kind, s.model, s.prompt_mode, s.folder) for n, s in rows.items()} == {
        "reasonrank-7b": ("reasonrank", "liuwenhan/reasonrank-7B", "rank_GPT_reasoning", "reasonrank-7b"),
        "reasonrank-32b": ("reasonrank", "liuwenhan/reasonrank-32B", "rank_GPT_reasoning", "reasonrank-32b"),
        "reasonrank-8b": ("reasonrank", "liuwenhan/reasonrank-8B", "rank_GPT_qwen3", "reasonrank-8b"),
    }
    assert KINDS["reasonrank"].options.__name__ == "ReasonRankOptions"
    assert set(rows) <= set(reranker_registry().names())


def test_run_takes_the_rerankers_budget():
    from r2med.cli import build_parser
    from r2med.cli.run import build_spec

    args = build_parser().parse_args(["run", "--retriever", "bm25", "--reranker", "reasonrank-7b",
                                      "--max-requests", "3"])
    options = build_spec(args).reranker.options
    assert (type(options).__name__, options.max_requests) == ("ReasonRankOptions", 3)
