"""The Agent stage end to end: ``run_pipeline`` with an ``AgentSpec``, ``r2med agent``, the expansion file it leaves
for ``r2med run --expansion``, the leaderboard row, the ``[agent]`` table of a pipeline spec, knowledge corpora.

The dataset is a small SciFact subset in R2MED's layout named ``Biology`` (a catalog name, so the leaderboard
shows it): five judged queries, one of them answered without any search (GARBAGE), their judged documents
and 200 others.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from completion_server import CompletionServer, answer_for

from conftest import shared_path
from r2med.agent.loop import AgentConfig, agent_ranking
from r2med.config import AgentSpec, PipelineSpec, load_spec, parse_spec
from r2med.errors import IncompleteResultError, InvalidInputError, MissingResourceError
from r2med.pipeline import run_pipeline
from r2med.retrievers.registry import RetrieverSpec
from r2med.store.runs import read_run

SYSTEM = "agent/search-r1/test-model/bm25"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def biology_source(tmp_path_factory) -> Path:
    """SciFact's first five judged queries ("13" made to stop without a search), their judged documents and 200
    others, in R2MED's layout under a folder named Biology."""
    scifact = shared_path("data", "scifact")
    folder = tmp_path_factory.mktemp("data") / "Biology"
    folder.mkdir()
    qrels = _rows(scifact / "qrels.jsonl")
    qids: list[str] = []
    for row in qrels:
        if row["q_id"] not in qids:
            qids.append(row["q_id"])
    qids = qids[:5]
    assert qids == ["1", "3", "5", "13", "36"]
    queries = [q for q in _rows(scifact / "query.jsonl") if q["id"] in qids]
    for query in queries:
        if query["id"] == "13":
            query["text"] = "GARBAGE " + query["text"]
    judged = {r["p_id"] for r in qrels if r["q_id"] in qids}
    corpus = _rows(scifact / "corpus.jsonl")
    _write(folder / "corpus.jsonl", [d for d in corpus if d["id"] in judged] + [d for d in corpus if d["id"] not in judged][:200])
    _write(folder / "query.jsonl", queries)
    _write(folder / "qrels.jsonl", [r for r in qrels if r["q_id"] in qids])
    return folder


@pytest.fixture
def biology(biology_source, tmp_path) -> Path:
    folder = tmp_path / "data" / "Biology"
    shutil.copytree(biology_source, folder)
    return folder


def _agent(server: CompletionServer, **kwargs) -> AgentConfig:
    return AgentConfig(protocol="search-r1-infer", llm_model="test-model", base_url=server.base_url, chat_template="chatml",
                       **kwargs)


def test_the_agent_stage_stores_its_ranking_and_leaves_expansions_for_run(cli, biology, tmp_path, isolated_home):
    out = tmp_path / "results"
    with CompletionServer() as server:
        stages = run_pipeline(PipelineSpec(agent=AgentSpec(_agent(server)), data_dir=biology, output=out),
                              progress=False, client=None)
    assert list(stages) == [SYSTEM]
    (result,) = stages[SYSTEM]
    assert len(server.requests) == 4 * 3 + 1  # four queries search twice and answer; GARBAGE stops at once
    folder = out / "agent" / "search-r1" / "test-model" / "bm25"
    assert {p.name for p in folder.iterdir()} == {"Biology.json", "Biology.run", "Biology.per_query.jsonl",
                                                  "Biology.manifest.json", "Biology.trajectories.jsonl"}
    manifest = json.loads((folder / "Biology.manifest.json").read_text())
    assert "Biology.trajectories.jsonl" in manifest["files"] and manifest["system"] == SYSTEM
    assert manifest["config"]["judged_all"] is True and manifest["config"]["agent"]["style"] == "search-r1"
    assert manifest["details"]["agent"]["stop_reasons"] == {"answer": 4, "no-answer": 1}

    trajectories = _rows(folder / "Biology.trajectories.jsonl")
    assert [t["id"] for t in trajectories] == ["1", "3", "5", "13", "36"]
    stored = read_run(folder / "Biology.run")
    assert {q: list(stored.get(q, {})) for q in stored} == {
        q: list(docs) for q, docs in agent_ranking(trajectories).items() if docs}
    for qid, docs in agent_ranking(trajectories).items():
        assert stored.get(qid, {}) == pytest.approx(docs, rel=1e-6)
    # RRF by hand for query "1": BM25's top 3 of its two searches (disjoint), each id 1 / (60 + rank); ties in
    # trec_eval's order (docid descending)
    assert [s["ids"] for s in trajectories[0]["searches"]] == [["803312", "4983", "581832"], ["515489", "994800", "825728"]]
    expected = [("803312", 1 / 61), ("515489", 1 / 61), ("994800", 1 / 62), ("4983", 1 / 62), ("825728", 1 / 63),
                ("581832", 1 / 63)]
    assert [d for d, _ in stored.ranked("1")] == [d for d, _ in expected]
    assert [s for _, s in stored.ranked("1")] == pytest.approx([s for _, s in expected], rel=1e-6)

    # "13" never searched: no ranking, but it is judged, so it counts as 0 (judged_all)
    assert trajectories[3]["searches"] == [] and "13" not in stored
    assert result.scores.n_queries == 5 and result.scores.per_query["13"]["ndcg_at_10"] == 0.0
    assert len(_rows(folder / "Biology.per_query.jsonl")) == 5
    ndcg = json.loads((folder / "Biology.json").read_text())["test"]["ndcg_at_10"]
    assert ndcg == round(sum(v["ndcg_at_10"] for v in result.scores.per_query.values()) / 5, 5)

    expansions = isolated_home / "expansions" / "Biology" / "search-r1" / "test-model"
    assert {p.name for p in expansions.iterdir()} == {"agent-cache.jsonl", "query_with_hydoc.jsonl",
                                                      "trajectories.jsonl", "summary.json"}
    rows = _rows(expansions / "query_with_hydoc.jsonl")
    texts = {q["id"]: q["text"] for q in _rows(biology / "query.jsonl")}
    assert [(r["id"], r["hy_doc"]) for r in rows] == [
        (q, texts[q] if q == "13" else answer_for(texts[q])) for q in ("1", "3", "5", "13", "36")]

    # the same spec again: the stored result is reused, no request is sent
    with CompletionServer() as again:
        (reused,) = run_pipeline(PipelineSpec(agent=AgentSpec(_agent(again)), data_dir=biology, output=out),
                                 progress=False)[SYSTEM]
    assert again.requests == [] and reused.reused and reused.scores.aggregate["ndcg_at_10"] == ndcg

    # r2med run searches with the agent's answers
    ran = cli("run", "--expansion", "search-r1/test-model", "--data-dir", biology, "--output", out, "-q")
    assert ran.code == 0, ran.err
    gar = out / "gar" / "search-r1" / "test-model" / "bm25"
    assert (gar / "Biology.json").is_file()
    gar_manifest = json.loads((gar / "Biology.manifest.json").read_text())
    used = gar_manifest["config"]["expansion"]
    assert used["file"] == str(expansions / "query_with_hydoc.jsonl") and (used["method"], used["llm"]) == (
        "search-r1", "test-model")
    assert used["sha256"] == hashlib.sha256((expansions / "query_with_hydoc.jsonl").read_bytes()).hexdigest()

    board = cli("leaderboard", out, "--format", "json")
    assert board.code == 0, board.err
    systems = {row["system"]: row for row in board.json()["rows"]}
    assert systems[SYSTEM]["values"]["Biology"] == ndcg and systems[SYSTEM]["coverage"] == 1
    assert "gar/search-r1/test-model/bm25" in systems


def test_a_failed_query_makes_the_stage_incomplete_after_its_files_are_written(cli, biology, tmp_path, isolated_home):
    queries = _rows(biology / "query.jsonl")
    queries[1]["text"] = "FAIL-ME " + queries[1]["text"]  # query "3"
    _write(biology / "query.jsonl", queries)
    out = tmp_path / "results"
    expansions = isolated_home / "expansions" / "Biology" / "search-r1" / "test-model" / "query_with_hydoc.jsonl"
    with CompletionServer() as server, pytest.raises(IncompleteResultError, match=r"1 of 5 queries failed") as caught:
        run_pipeline(PipelineSpec(agent=AgentSpec(_agent(server)), data_dir=biology, output=out), progress=False)
    assert caught.value.exit_code == 6 and "'3'" in str(caught.value)
    assert [r["id"] for r in _rows(expansions)] == ["1", "5", "13", "36"]
    assert not (out / "agent" / "search-r1" / "test-model" / "bm25" / "Biology.json").exists()

    with CompletionServer() as server:
        result = cli("agent", "--protocol", "search-r1-infer", "--llm-model", "test-model", "--base-url", server.base_url,
                     "--chat-template", "chatml", "--data-dir", biology, "--output", out, "-q")
    assert result.code == 6, result.err
    assert "1 of 5 queries failed" in result.err
    assert len(server.requests) == 1  # only the failed query's request: the others come from the cache
    assert [r["id"] for r in _rows(expansions)] == ["1", "5", "13", "36"]
    assert not (out / "agent" / "search-r1" / "test-model" / "bm25" / "Biology.json").exists()


def test_r2med_agent_searches_a_knowledge_corpus(cli, biology, tmp_path, isolated_home):
    kb = tmp_path / "kb"
    kb.mkdir()
    docs = {"k1": "Biomaterials with inductive properties.", "k2": "Genomes project rare variants penetrance.",
            "k3": "PrP positivity in the UK.", "k4": "Vitamin B12 and homocysteine."}
    _write(kb / "corpus.jsonl", [{"id": k, "text": v} for k, v in docs.items()])
    out = tmp_path / "results"
    with CompletionServer() as server:
        result = cli("agent", "--protocol", "search-r1-infer", "--llm-model", "test-model", "--base-url", server.base_url,
                     "--chat-template", "chatml", "--data-dir", biology, "--output", out, "--knowledge-dir", kb,
                     "--json")
    assert result.code == 0, result.err
    data = result.json()
    # another agent than the one over the dataset's corpus: its own folders (the LLM name gets the corpus's)
    assert data["system"] == "agent/search-r1/test-model-kb/bm25" and set(data["scores"]) == {"Biology", "average"}
    assert data["agent"]["Biology"]["stop_reasons"] == {"answer": 4, "no-answer": 1}
    assert (isolated_home / "expansions" / "Biology" / "search-r1" / "test-model-kb" / "query_with_hydoc.jsonl").is_file()
    folder = out / "agent" / "search-r1" / "test-model-kb" / "bm25"
    trajectories = _rows(folder / "Biology.trajectories.jsonl")
    ids = {d for t in trajectories for s in t["searches"] for d in s["ids"]}
    assert ids and ids <= set(docs)
    assert trajectories[0]["searches"][0]["ids"][0] == "k1"
    manifest = json.loads((folder / "Biology.manifest.json").read_text())
    assert manifest["config"]["search"]["corpus"] == "kb" and manifest["config"]["search"]["source"] == str(kb)
    assert set(manifest["config"]["search"]["sha256"]) == {"corpus.jsonl"}
    # none of the knowledge documents is judged: every query counts 0
    assert json.loads((folder / "Biology.json").read_text())["test"]["ndcg_at_10"] == 0.0


def test_knowledge_corpus_errors(cli, biology, tmp_path):
    from r2med.datasets.local import load_corpus

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MissingResourceError, match="no corpus.jsonl there") as missing:
        load_corpus(empty)
    assert missing.value.exit_code == 4
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "corpus.jsonl").write_text('{"id": "k1", "text": "a"}\n{"id": "k2"}\n')
    with pytest.raises(InvalidInputError) as invalid:
        load_corpus(bad)
    assert invalid.value.exit_code == 5
    assert invalid.value.problems == [f"{bad / 'corpus.jsonl'}:2: missing field 'text'; every document needs one"]
    for folder, code, message in ((empty, 4, "no corpus.jsonl there"), (bad, 5, "corpus.jsonl:2: missing field 'text'")):
        result = cli("agent", "--style", "search-r1", "--llm-model", "test-model", "--base-url", "http://127.0.0.1:9/v1",
                     "--chat-template", "chatml", "--data-dir", biology, "--output", tmp_path / "out",
                     "--knowledge-dir", folder)
        assert result.code == code and message in result.err, result.err


# --------------------------------------------------------------------------------------------- [agent] in a spec

def test_an_agent_table_in_a_pipeline_spec(tmp_path):
    raw = {"pipeline": {"data_dir": "data", "output": "out", "top_k": 50},
           "agent": {"style": "search-o1", "llm_model": "Qwen/Qwen3-8B", "base_url": "http://localhost:8000/v1",
                     "llm_name": "qwen3", "search_with": "bm25", "search_top_k": 5, "max_searches": 3,
                     "policy": "authors", "knowledge_dir": "kb", "temperature": 0.6, "max_requests": 100}}
    spec = parse_spec(raw, base=tmp_path)
    assert spec.retrievers == () and spec.top_k == 50 and spec.data_dir == tmp_path / "data"
    assert spec.agent == AgentSpec(
        AgentConfig(style="search-o1", llm_model="Qwen/Qwen3-8B", base_url="http://localhost:8000/v1", llm_name="qwen3",
                    search_top_k=5, max_searches=3, policy="authors", temperature=0.6, max_requests=100),
        RetrieverSpec("bm25"), tmp_path / "kb")
    assert spec.agent.config.resolved().chat_template == "chatml"
    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nstyle = "search-r1"\nllm_model = "m"\nbase_url = "http://x/v1"\nchat_template = "raw"\n')
    loaded = load_spec(path)
    assert loaded.agent is not None and loaded.agent.search_with == RetrieverSpec("bm25")
    assert loaded.agent.knowledge_dir is None and loaded.agent.config.chat_template == "raw"


@pytest.mark.parametrize("raw, message", [
    ({"agent": {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1", "stlye": "x"}},
     r"\[agent\]: unknown key\(s\) stlye \(did you mean style\?\); valid: "),
    ({"agent": {"style": "search-r1", "base_url": "http://x/v1"}}, r"\[agent\]: needs llm_model"),
    ({"agent": {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1"}, "retriever": [{"name": "bm25"}]},
     r"an \[agent\] table is the first stage; remove the \[\[retriever\]\] tables"),
    ({"agent": {"style": "search-r3", "llm_model": "m", "base_url": "http://x/v1"}}, r"\[agent\].*style"),
    ({"agent": {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1", "max_turns": 0}},
     r"\[agent\].*max_turns"),
    ({"agent": {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1", "search_top_k": "3"}},
     r"\[agent\].*search_top_k"),
    ({"agent": {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1"}, "expansion": {"spec": "hyde/x"}},
     r"an agent stage takes no --expansion"),
])
def test_agent_table_errors(raw, message, tmp_path):
    with pytest.raises(InvalidInputError, match=message):
        parse_spec(raw, base=tmp_path)
