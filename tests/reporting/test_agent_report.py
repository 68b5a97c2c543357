"""Agent systems (``agent/<style>/<llm>/<retriever>``) in the leaderboard, compare and the HTML report: the row's
label, and the per-query drill-down showing the agent's trajectory (escaped), verified before it is shown.

The result set is made by the real pipeline (``run_pipeline`` with an ``AgentSpec``) against the scripted
completion server of ``tests/agent``: per question it searches the first three words, then the last three, then
answers "The evidence on <question>".
"""

from __future__ import annotations

import html as html_lib
import json
import re
import sys
from pathlib import Path

import pytest
from reporting_helpers import run

from r2med.agent.loop import AgentConfig
from r2med.config import AgentSpec, PipelineSpec
from r2med.pipeline import run_pipeline
from r2med.retrievers.registry import RetrieverSpec
from r2med.settings import get_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from completion_server import CompletionServer, searches_for

pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')

R1 = "agent/search-r1/test-model/bm25"
O1 = "agent/search-o1/test-model/bm25"
BM25 = "base retriever/bm25"
GAR = "gar/search-r1/test-model/bm25"

#: markup in the data: a script in a question (and so in a search query the model writes), tags in another
SCRIPT_QUESTION = "Does <script>alert(7)</script> aspirin relieve fever?"
TAG_QUESTION = "Why do moths circle <search>lamps</search> at night?"
QUERIES = {
    "q1": SCRIPT_QUESTION,
    "q2": TAG_QUESTION,
    "q3": "How do bacteria share antibiotic resistance genes?",
}
CORPUS = {
    "d1": "Aspirin relieves fever by inhibiting prostaglandin synthesis.",
    "d2": "Ibuprofen and aspirin both reduce fever in adults.",
    "d3": "Moths circle lamps at night because artificial light breaks their navigation.",
    "d4": "Insects at night orient by keeping the moon at a fixed angle.",
    "d5": "Bacteria share antibiotic resistance genes on plasmids by conjugation.",
    "d6": "Resistance genes move between bacteria through transformation and transduction.",
    "d7": "Red blood cells carry oxygen bound to haemoglobin.",
    "d8": "Paracetamol lowers body temperature.",
}
QRELS = [("q1", "d1", 1), ("q1", "d2", 1), ("q1", "d8", 2), ("q2", "d3", 1), ("q3", "d5", 2), ("q3", "d6", 1)]


def _write_dataset(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in CORPUS.items()))
    (folder / "query.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in QUERIES.items()))
    (folder / "qrels.jsonl").write_text("".join(json.dumps({"q_id": q, "p_id": d, "score": s}) + "\n"
                                                for q, d, s in QRELS))
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Search-R1 and Search-o1 agents, BM25, and BM25 with the Search-R1 agent's answers, on one "Biology" set."""
    root = tmp_path_factory.mktemp("agent-report")
    data = _write_dataset(root / "data" / "Biology")
    out = root / "results"
    home = root / "home"
    settings = get_settings({"R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    scores = {}
    with CompletionServer() as server:
        for style in ("search-r1", "search-o1"):
            config = AgentConfig(style=style, llm_model="test-model", base_url=server.base_url, chat_template="chatml")
            spec = PipelineSpec(agent=AgentSpec(config), data_dir=data, output=out, cache=False)
            for system, results in run_pipeline(spec, settings=settings, progress=False).items():
                scores[system] = results[0].scores
    for spec in (PipelineSpec(retrievers=(RetrieverSpec("bm25"),), data_dir=data, output=out, cache=False),
                 PipelineSpec(retrievers=(RetrieverSpec("bm25"),), expansion="search-r1/test-model", data_dir=data,
                              output=out, cache=False)):
        for system, results in run_pipeline(spec, settings=settings, progress=False).items():
            scores[system] = results[0].scores
    assert set(scores) == {R1, O1, BM25, GAR}
    return {"out": out, "data": data.parent, "home": home, "scores": scores}


def _report(built, tmp_path, *args: object) -> str:
    path = tmp_path / "report.html"
    result = run("report", built["out"], "-o", path, "--data-dir", built["data"], "--n-resamples", 200, *args)
    assert result.code == 0, result.err
    return path.read_text(encoding="utf-8")


def _trajectory(built, system: str, qid: str) -> dict:
    folder = built["out"].joinpath(*system.split("/"))
    rows = [json.loads(line) for line in (folder / "Biology.trajectories.jsonl").read_text().splitlines()]
    return next(r for r in rows if r["id"] == qid)


def _system_block(page: str, qid: str, system: str) -> str:
    """The drill-down of one system for one query (from its heading to the next system's or query's)."""
    query = page[page.index(f"<summary>{qid} &middot;"):]
    query = query[: query.index('<details class="query">')] if '<details class="query">' in query else query
    start = query.index(f"<h4>{system} (")
    rest = query[start + 1:]
    end = rest.find("<h4>")
    return query[start: start + 1 + end] if end >= 0 else query[start:]


def test_the_leaderboard_lists_the_agent_rows_with_their_ndcg(built):
    result = run("leaderboard", built["out"], "--format", "json")
    assert result.code == 0, result.err
    rows = {r["system"]: r for r in result.json()["rows"]}
    assert set(rows) == {R1, O1, BM25, GAR}
    assert rows[R1]["name"] == "Search-R1 (test-model) agent ranking, searching BM25"
    assert rows[O1]["name"] == "Search-o1 (test-model) agent ranking, searching BM25"
    assert rows[GAR]["name"] == "Search-R1 (test-model) + BM25"  # a GAR run of the agent's answers: another row
    for system in (R1, O1):
        assert rows[system]["values"]["Biology"] == pytest.approx(built["scores"][system].aggregate["ndcg_at_10"],
                                                                  abs=5e-6)
        assert rows[system]["coverage"] == 1
    stored = json.loads(built["out"].joinpath(*R1.split("/"), "Biology.json").read_text())["test"]["ndcg_at_10"]
    assert rows[R1]["values"]["Biology"] == stored
    md = run("leaderboard", built["out"]).out
    line = next(x for x in md.splitlines() if "| Search-R1 (test-model) agent ranking, searching BM25 |" in x)
    assert re.search(rf"\|\s+{100 * stored:.2f}\s+\|", line) and f"| {R1} |" in line
    assert 0 < stored < 1


def test_compare_takes_an_agent_system(built):
    result = run("compare", "--results", built["out"], R1, BM25, "--n-resamples", 200, "--format", "json")
    assert result.code == 0, result.err
    [biology] = [d for d in result.json()["datasets"] if d["dataset"] == "Biology"]
    assert biology["test"]["n"] == 3 and biology["only_a"] == biology["only_b"] == 0
    assert biology["mean_a"] == pytest.approx(built["scores"][R1].aggregate["ndcg_at_10"])
    assert biology["mean_b"] == pytest.approx(built["scores"][BM25].aggregate["ndcg_at_10"])


def test_the_report_shows_the_agent_trajectory_escaped(built, tmp_path):
    page = _report(built, tmp_path, "--a", R1, "--b", O1)
    # no markup from the data: not the question's script, not the protocol's tags
    assert "<script" not in page.lower() and "<search>" not in page and "<|begin_search_query|>" not in page
    assert "Search-R1 (test-model) agent ranking, searching BM25" in page
    block = _system_block(page, "q1", R1)
    row = _trajectory(built, R1, "q1")
    first, second = searches_for(SCRIPT_QUESTION)
    assert [s["query"] for s in row["searches"]] == [first, second] and "<script>" in first
    escaped = html_lib.escape(first, quote=True).replace("&#x27;", "&#39;")
    assert f'<code class="search-query">{escaped}</code>' in block  # the search query, as text
    assert f"&lt;search&gt; {escaped} &lt;/search&gt;" in block  # the turn's text that asked for it
    assert "&lt;answer&gt;" in block and row["answer"] in html_lib.unescape(block)
    assert "stop reason: <b>answer</b>" in block
    for search in row["searches"]:  # each search's returned ids and scores
        for docid, score in zip(search["ids"], search["scores"]):
            assert re.search(rf"<td>{docid}</td><td class=\"\w+\">[^<]*</td><td class=\"num\">{score:.4f}</td>", block)
    assert "d1</td><td class=\"rel\">" in block  # judged relevant, marked as in the ranking
    # the question with tags is shown as text in the prompt of q2
    assert "&lt;search&gt;lamps&lt;/search&gt;" in _system_block(page, "q2", R1)
    tokens = sum(t["prompt_tokens"] for t in row["turns"]), sum(t["completion_tokens"] for t in row["turns"])
    assert f"{tokens[0]} prompt + {tokens[1]} completion tokens" in block


def test_search_o1_shows_its_condensed_documents(built, tmp_path):
    page = _report(built, tmp_path, "--a", O1, "--b", BM25)
    block = _system_block(page, "q3", O1)
    row = _trajectory(built, O1, "q3")
    assert len(row["searches"]) == 2
    for search in row["searches"]:
        assert f'<code class="search-query">{search["query"]}</code>' in block
        assert f'<div class="expansion">{search["condensed"]}</div>' in block
        used = search["reason_in_documents"]
        assert f"{used['prompt_tokens']} prompt + {used['completion_tokens']} completion tokens" in block
    # BM25 has no trajectory and says nothing about one
    assert "trajectory" not in _system_block(page, "q3", BM25)


def test_a_gar_run_of_the_agents_answers_shows_them_as_its_expansion(built, tmp_path, monkeypatch):
    monkeypatch.setenv("R2MED_HOME", str(built["home"]))  # where r2med agent wrote its expansion file
    page = _report(built, tmp_path, "--a", GAR, "--b", R1)
    answer = _trajectory(built, R1, "q3")["answer"]
    assert f'<summary>expansion used</summary><div class="expansion">{answer}</div>' in _system_block(page, "q3", GAR)


@pytest.fixture
def damaged(built, tmp_path):
    """A copy of the results whose Search-R1 trajectories file is changed after its manifest was written."""
    import shutil

    out = tmp_path / "results"
    shutil.copytree(built["out"], out)
    path = out.joinpath(*R1.split("/"), "Biology.trajectories.jsonl")
    text = path.read_text()
    path.write_text(text.replace("The evidence on", "FORGED evidence on"))
    return {**built, "out": out, "path": path}


def test_a_tampered_trajectories_file_is_named_not_shown(damaged, tmp_path):
    page = _report(damaged, tmp_path, "--a", R1, "--b", O1)
    assert "FORGED" not in page and "agent trajectory: search-r1" not in page
    notice = "trajectory not shown: " + str(damaged["path"]) + ": does not match the checksum r2med recorded"
    assert html_lib.escape(notice, quote=True).replace("&#x27;", "&#39;") in page
    assert "agent trajectory: search-o1" in page  # the other system's is intact
    # the numbers do not depend on the trajectories: the row is still on the leaderboard
    rows = {r["system"]: r for r in run("leaderboard", damaged["out"], "--format", "json").json()["rows"]}
    assert rows[R1]["values"]["Biology"] == pytest.approx(damaged["scores"][R1].aggregate["ndcg_at_10"], abs=5e-6)


def test_a_missing_trajectories_file_is_named(damaged, tmp_path):
    damaged["path"].unlink()
    page = _report(damaged, tmp_path, "--a", R1, "--b", O1)
    assert "agent trajectory: search-r1" not in page
    assert html_lib.escape(f"trajectory not shown: {damaged['path']}: is missing", quote=True) in page


def test_a_damaged_run_still_hides_the_row(damaged):
    """Only artifacts are left to their reader: a scored file of the set (run, per-query values) that does not match
    its manifest still keeps the system off the leaderboard."""
    run_file = damaged["path"].with_name("Biology.run")
    run_file.write_text(run_file.read_text().replace(" 1 ", " 2 ", 1))
    refused = run("leaderboard", damaged["out"])
    assert refused.code == 5 and "Biology.run: does not match" in refused.err
