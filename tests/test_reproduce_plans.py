"""``r2med reproduce --list`` and ``SYSTEM --dry-run``: a plan for every leaderboard row and published folder (93),
known without loading anything (no torch, no network, no dataset)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from r2med.reproduction import plan_for

REPO = Path(__file__).resolve().parents[1]
#: the 8 R2MED datasets need the hub unless --data-dir has them
DATASETS = {"kind": "hub", "detail": "the R2MED datasets (or --data-dir with local copies)"}


def _leaderboard() -> list[dict]:
    return json.loads(resources.files("r2med").joinpath("data/leaderboard.json").read_text(encoding="utf-8"))["rows"]


def test_list_json_has_the_69_leaderboard_rows_then_the_24_other_published_folders(cli):
    result = cli("reproduce", "--list", "--json")
    assert result.code == 0, result.err
    entries = result.json()
    assert len(entries) == 93
    board = _leaderboard()
    assert [(e["rank"], e["system"], e["average"]) for e in entries[:69]] == [
        (r["rank"], r["system"], r["average"]) for r in board]
    rest = entries[69:]
    assert all(e["rank"] is None and not e["on_leaderboard"] for e in rest)
    assert {e["system"] for e in rest} == {
        *(f"gar/{m}/{llm}/{r}" for m in ("lamer", "query2doc") for llm in ("gpt4", "qwen-72b", "qwen-7b")
          for r in ("bge", "bm25", "nv")),
        *(f"gar/hyde/qwen-72b/{r}" for r in ("bge", "bm25", "nv")),
        "reranker/bge-reranker/nv/top_10", "reranker/monobert/nv/top_10", "reranker/rankllama/nv/top_10"}
    assert all(e["plan"] is not None and e["problem"] is None for e in entries)
    # a folder off the leaderboard shows the mean of its published numbers: monoBERT over NV-Embed-v2's top 10
    mono = next(e for e in rest if e["system"] == "reranker/monobert/nv/top_10")
    assert mono["average"] == 26.47 and mono["plan"]["compare"] == "datasets"


def test_the_list_table_names_the_plan_of_each_row(cli):
    result = cli("reproduce", "--list")
    assert result.code == 0, result.err
    lines = [line for line in result.out.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + 93  # the header, then one row each (the separator is |---)
    cells = {c[1]: c for c in ([x.strip() for x in line.split("|")][1:-1] for line in lines[1:])}
    assert cells["gar/hyde/o3-mini/bm25"] == ["4", "gar/hyde/o3-mini/bm25", "41.01", "bm25", "hyde/o3-mini (hub)", "-", "hub"]
    assert cells["reranker/reasonrank-32b/e5/top_100"] == [
        "2", "reranker/reasonrank-32b/e5/top_100", "42.85", "e5", "-",
        "reasonrank-32b top 100 of base retriever/e5", "gpu, llm-server, hub"]
    assert cells["gar/hyde/o3-mini/openai"][-1] == "api-key, hub"
    assert "93 systems: the 69 rows of the public leaderboard" in result.out


def test_every_leaderboard_row_has_a_dry_run_plan(cli):
    for row in _leaderboard():
        result = cli("reproduce", row["system"], "--dry-run", "--json")
        assert result.code == 0, (row["system"], result.err)
        plan = result.json()
        assert plan["system"] == row["system"] and plan["leaderboard"]["average"] == row["average"]
        # compared per dataset exactly when the paper publishes the row's per-dataset numbers
        assert plan["compare"] == ("datasets" if row["published"] else "average"), row["system"]
        assert plan["needs"] and DATASETS in plan["needs"]


def test_base_rows_through_the_zoo():
    bge_reasoner = plan_for("base retriever/reason-embed-qwen3-8b").to_json()
    assert bge_reasoner == {
        "system": "base retriever/reason-embed-qwen3-8b", "kind": "base retriever",
        "leaderboard": {"rank": 1, "name": "BGE-Reasoner-Embed-0928", "average": 43.18},
        "published": False, "compare": "average", "retriever": "reason-embed-qwen3-8b", "expansion": None,
        "answer_policy": None, "reranker": None, "rerank_top_k": None, "first_stage": None, "top_k": 100,
        "needs": [{"kind": "gpu", "detail": "reason-embed-qwen3-8b: hanhainebula/reason-embed-qwen3-8b-0928, 8B"},
                  DATASETS, {"kind": "hub", "detail": "model weights: hanhainebula/reason-embed-qwen3-8b-0928"}]}
    medcpt = plan_for("base retriever/medcpt")
    assert medcpt.retriever == "medcpt-authors" and medcpt.compare == "datasets" and medcpt.leaderboard.average == 9.02
    # MedCPT's towers are 110M each: a small model, not GPU-sized
    assert [n.kind for n in medcpt.needs] == ["model", "hub", "hub"]
    assert [n.to_json() for n in plan_for("base retriever/voyage").needs] == [
        {"kind": "api-key", "detail": "VOYAGE_API_KEY"}, DATASETS]
    assert [n.to_json() for n in plan_for("base retriever/bm25").needs] == [DATASETS]


def test_hyde_rows_through_the_published_expansions():
    plan = plan_for("gar/hyde/o3-mini/openai").to_json()
    assert plan["expansion"] == {
        "spec": "hyde/o3-mini", "source": "hub", "file": "hyde/o3-mini/query_with_hydoc.jsonl",
        "hub_config": "hyde", "hub_split": "o3_mini",
        "searched": ["the dataset directory", "r2med's generated expansions under R2MED_HOME", "the hub"]}
    assert (plan["retriever"], plan["answer_policy"], plan["compare"], plan["leaderboard"]["rank"]) == (
        "openai", "authors", "average", 7)
    assert plan["needs"] == [{"kind": "api-key", "detail": "OPENAI_API_KEY"}, DATASETS,
                             {"kind": "hub", "detail": "the authors' hyde/o3-mini expansions (config hyde, split o3_mini)"}]
    nv = plan_for("gar/hyde/o3-mini/nv")
    assert nv.hub_split == ("hyde", "o3_mini") and [n.kind for n in nv.needs] == ["gpu", "hub", "hub", "hub"]
    # an expansion set the authors did not publish would be generated (an LLM server)
    own = plan_for("gar/hyde/gpt4/bm25")
    assert own.expansion_source == "hub" and own.published and own.compare == "datasets"


def test_agent_and_bm25_rows_through_the_published_agent_expansions():
    for system, split in (("gar/search-r1/qwen-3b-ins/bm25", "qwen_3b_ins"), ("gar/search-o1/qwq-32b/bm25", "qwq_32b")):
        plan = plan_for(system).to_json()
        method, llm = system.split("/")[1:3]
        assert plan["retriever"] == "bm25" and plan["answer_policy"] == "authors" and plan["compare"] == "average"
        assert plan["expansion"]["spec"] == f"{method}/{llm}" and plan["expansion"]["source"] == "hub"
        assert (plan["expansion"]["hub_config"], plan["expansion"]["hub_split"]) == (method, split)
        # BM25 over the published answers: no model, no LLM server, only the hub files
        assert plan["needs"] == [DATASETS, {"kind": "hub", "detail": f"the authors' {method}/{llm} expansions "
                                                                      f"(config {method}, split {split})"}]


def test_row_2_reasonrank_over_e5s_top_100(cli):
    result = cli("reproduce", "reranker/reasonrank-32b/e5/top_100", "--dry-run", "--json")
    assert result.code == 0, result.err
    plan = result.json()
    assert plan["leaderboard"] == {"rank": 2, "name": "E5-mistral-7b-instruct + ReasonRank(32B)", "average": 42.85}
    assert (plan["retriever"], plan["reranker"], plan["rerank_top_k"], plan["top_k"]) == ("e5", "reasonrank-32b", 100, 100)
    assert plan["first_stage"] == {"system": "base retriever/e5", "runs": "r2med", "top_k": 100}
    assert plan["compare"] == "average" and not plan["published"]
    kinds = [n["kind"] for n in plan["needs"]]
    assert kinds == ["gpu", "llm-server", "hub", "hub", "hub"]  # E5 (7B) locally, the reranker on a server
    assert plan["needs"][0] == {"kind": "gpu", "detail": "e5: intfloat/e5-mistral-7b-instruct, 7B"}
    assert plan["needs"][1] == {"kind": "llm-server",
                                "detail": "reasonrank-32b: a server serving liuwenhan/reasonrank-32B on --base-url (GPU-sized)"}
    assert plan["needs"][-1] == {"kind": "hub", "detail": "liuwenhan/reasonrank-32B's tokenizer (or --tokenizer DIR)"}
    # the authors' E5 runs as the first stage: no E5 to run, a checksummed download instead
    authors = cli("reproduce", "reranker/reasonrank-32b/e5/top_100", "--dry-run", "--json", "--first-stage", "authors")
    first = authors.json()
    url = ("https://raw.githubusercontent.com/8421BCD/ReasonRank/06721fd6ef3766c0e00d59a87d2696a0b4b0c17a/runs/"
           "r2med_{dataset}/e5-mistral-7b-instruct_top100.txt")
    assert first["retriever"] is None and first["first_stage"] == {
        "system": "base retriever/e5", "runs": "authors", "top_k": 100, "url": url, "paper_row": "base retriever/e5"}
    assert {"kind": "download", "detail": url} in first["needs"] and all(n["kind"] != "gpu" for n in first["needs"])
    text = cli("reproduce", "reranker/reasonrank-32b/e5/top_100", "--dry-run")
    assert text.code == 0 and "  reranker: reasonrank-32b over the top 100 (only those kept)" in text.out
    assert "  first stage: base retriever/e5, r2med's own run" in text.out


def test_dry_run_errors():
    from r2med.errors import UsageError

    with pytest.raises(UsageError, match="--first-stage is for reranker rows"):
        plan_for("base retriever/bm25", first_stage="runs/")
    with pytest.raises(UsageError, match="are base retriever/e5's first stage, and reranker/monobert/nv/top_10 reranks "
                                         "base retriever/nv"):
        plan_for("reranker/monobert/nv/top_10", first_stage="authors")
    with pytest.raises(UsageError, match="did you mean 'gar/hyde/o3-mini/bm25'"):
        plan_for("gar/hyde/o3-mimi/bm25")


def test_a_dry_run_checks_the_places_it_was_given_as_the_run_does(cli, tmp_path):
    # before: a missing --data-dir and an --output under a file passed the dry run (exit 0) and failed the run
    (tmp_path / "afile").write_text("")
    args = ("reproduce", "base retriever/bm25", "--data-dir", tmp_path / "nosuchdir", "--output", tmp_path / "afile" / "x")
    dry = cli(*args, "--dry-run")
    assert dry.code == 2 and dry.out == ""
    assert dry.err.splitlines() == [
        "r2med: error: 2 problems; nothing was run (fix them all, then run again):",
        f"  - --output {tmp_path / 'afile' / 'x'}: {tmp_path / 'afile'} is a file, so no directory can be made under it; pass a "
        "directory (it is created if missing)",
        f"  - --data-dir {tmp_path / 'nosuchdir'}: no such directory"]
    assert cli(*args).err == dry.err  # the run reports the same, before any work
    unknown = cli("reproduce", "base retriever/bm25", "--tasks", "Biolgy", "--dry-run")
    assert unknown.code == 2 and "Biolgy" in unknown.err


def test_usage_of_list_and_system(cli):
    assert cli("reproduce").code == 2
    both = cli("reproduce", "--list", "base retriever/bm25")
    assert both.code == 2 and "--list shows every system" in both.err


#: run in a fresh interpreter: every leaderboard row's dry run, with sockets blocked and torch watched
_PROBE = r"""
import json, socket, sys
from importlib import resources
calls = []
def refuse(*args, **kwargs):
    calls.append(args)
    raise OSError("network blocked by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from r2med.cli import main
rows = json.loads(resources.files("r2med").joinpath("data/leaderboard.json").read_text())["rows"]
codes = [main([row["system"] and "reproduce", row["system"], "--dry-run", "--json"]) for row in rows]
codes.append(main(["reproduce", "--list", "--json"]))
# (the CLI imports huggingface_hub.utils to silence its bars: an import, no request)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "sentence_transformers",
                                                            "httpx2", "httpx", "datasets", "pytrec_eval"))
print(json.dumps({"codes": codes, "heavy": heavy, "calls": len(calls)}), file=sys.stderr)
"""


def test_a_dry_run_imports_no_torch_and_makes_no_network_call(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "", "R2MED_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", _PROBE], capture_output=True, text=True, env=env, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["codes"] == [0] * 70 and report["calls"] == 0
    assert report["heavy"] == []
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "import time:" in line}
    assert "torch" not in imported and "r2med" in imported
