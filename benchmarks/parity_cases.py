"""The inputs and the command list of ``stage_parity.py``: data folders, pipeline files and r2med commands.

Everything here is fixed text or a byte copy of ``../shared``, so two runs (with two r2meds) get the same
inputs; the fake servers' URLs are the only values that change from run to run (``compare`` replaces them).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "tools"))

#: the folder (beside OUT) holding a second copy of MiniLM: a model in another folder is another system
#: (``system_name`` hashes its resolved path), so its path must be the same for the before and the after run
MODEL_COPY = "parity-minilm"


@dataclass(frozen=True)
class Command:
    """One r2med command line. ``home``: its R2MED_HOME under ``work/``; ``again``: run it a second time,
    which must reuse every stored result and send no request to a fake server."""

    name: str
    args: tuple[str, ...]
    home: str = "home"
    again: bool = True


def _subset(source: Path, out: Path, **options: object) -> Path:
    from make_subset import make_subset

    if not out.exists():
        make_subset(source, out, **options)
    return out


def _link(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        link = folder / name
        if not link.exists():
            link.symlink_to(source / name)
    return folder


def _model_copy(minilm: Path, out: Path) -> Path:
    copy = out.parent / MODEL_COPY / "model"
    if not copy.is_dir():
        shutil.copytree(minilm, copy.with_name("model.partial"), dirs_exist_ok=True)
        copy.with_name("model.partial").rename(copy)
    return copy


def layout(out: Path, minilm: Path) -> dict[str, Path]:
    """The data directories and pipeline files the commands read, made under ``out`` (``work``, ``pipelines``)."""
    work = out / "work"
    scifact = SHARED / "data" / "scifact"
    biology = _link(scifact, work / "data" / "reproduce" / "Biology")
    demo = work / "data" / "gar" / "Biology-demo"
    if not demo.exists():
        shutil.copytree(SHARED / "samples" / "Biology-demo", demo)
    gar_scifact = _link(scifact, work / "data" / "gar-scifact" / "scifact")
    (gar_scifact / "query2doc" / "echo").mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in (scifact / "query.jsonl").read_text().splitlines() if line.strip()]
    with (gar_scifact / "query2doc" / "echo" / "query_with_hydoc.jsonl").open("w") as handle:
        for row in rows:  # an expansion every query has: its words in reverse order
            handle.write(json.dumps({"id": row["id"], "text": row["text"],
                                     "hy_doc": " ".join(reversed(row["text"].split()))}) + "\n")
    reference = work / "data" / "reference.json"
    reference.write_text(json.dumps({"Biology": {"ndcg_at_10": 0.67075}}))
    pipelines = out / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    return {"scifact": scifact, "biology": biology.parent, "demo": demo, "reference": reference,
            "gar-scifact": gar_scifact,
            # six judged SciFact queries over the full corpus (docs/expand.md's sf6): expansions
            "sf6": _subset(scifact, work / "data" / "sf6"),
            # twenty under an R2MED name (docs/agent.md's data/Biology): the agent
            "agent": _subset(scifact, pipelines / "data" / "Biology", queries=20).parent,
            # twelve judged queries over their documents and 100 others: two MiniLMs encode it in seconds
            "sf12": _subset(scifact, work / "data" / "sf12", queries=12, docs="100"),
            "pipelines": pipelines, "minilm": minilm, "minilm-copy": _model_copy(minilm, out)}


# docs/pipelines.md's file, as written (it runs on `r2med datasets sample r2med-sample` beside it)
DOCS_PIPELINE = """\
[pipeline]
name = "bm25-both"
data_dir = "r2med-sample"
output = "results"
top_k = 100

[[retriever]]
name = "bm25"
bm25_variant = "r2med"

[[retriever]]
name = "bm25"
bm25_variant = "lucene"

[fusion]
method = "rrf"
k = 60
"""

# docs/agent.md's file, as written but for the fake server's URL and one query at a time (as the agent commands;
# data/Biology beside it: the 20-query subset)
DOCS_AGENT = """\
[pipeline]
data_dir = "data"
output = "results-toml"

[agent]
style = "search-o1"
llm_model = "test-model"
base_url = "{completions}"
chat_template = "chatml"
search_with = "bm25"
search_top_k = 5
max_searches = 4
concurrency = 1
"""

# per-retriever options: two MiniLMs (the model and its copy) with their own query instruction and batch size
DENSE_PIPELINE = """\
[pipeline]
name = "minilm-two-instructions"
data_dir = "{sf12}"
output = "{results}"
top_k = 50

[[retriever]]
name = "{minilm}"
query_instruction = "query: "
batch_size = 16

[[retriever]]
name = "{minilm_copy}"
query_instruction = "Represent this question for searching relevant passages: "
doc_instruction = "passage: "

[fusion]
method = "combsum"
norm = "minmax"
"""

# GAR with r2med expand's output, then a listwise reranker, every option from the file
GAR_RERANK_PIPELINE = """\
[pipeline]
data_dir = "{sf6}"
output = "{results}"

[expansion]
spec = "hyde/fake"
answer_policy = "fallback"

[[retriever]]
name = "bm25"
bm25_variant = "lucene"
k1 = 1.2
b = 0.75

[reranker]
name = "listwise"
llm_model = "test/llm"
base_url = "{listwise}"
window = 6
stride = 3
top_k = 12
"""


def _pipeline(paths: dict[str, Path], name: str, text: str) -> str:
    path = paths["pipelines"] / name
    path.write_text(text)
    return str(path)


def commands(paths: dict[str, Path], out: Path, urls: dict[str, str]) -> list[Command]:
    """Every command, in order (a later one may read what an earlier one wrote)."""
    scifact, res, minilm = str(paths["scifact"]), str(out / "results"), str(paths["minilm"])
    listwise = ("--reranker", "listwise", "--llm-model", "test/llm", "--base-url", urls["listwise"], "--window", "10",
                "--stride", "5")
    sf6 = str(paths["sf6"])
    expand = ("expand", "--llm-model", "fake-llm", "--llm-name", "fake", "--base-url", urls["chat"], "--data-dir", sf6,
              "--prompt-dataset", "Biology", "--concurrency", "4")
    # one query at a time: in parallel, whether a query's search is answered from the run's search cache depends on
    # when another query searched the same text, which changes the counts the manifest and summary.json record
    agent = ("agent", "--llm-model", "test-model", "--chat-template", "chatml", "--base-url", urls["completions"],
             "--concurrency", "1", "--data-dir", str(paths["agent"]), "--output", res)
    values = {"results": res, "sf6": sf6, "sf12": str(paths["sf12"]), "minilm": minilm,
              "minilm_copy": str(paths["minilm-copy"]), **urls}
    return [
        Command("bm25", ("run", "--retriever", "bm25", "--data-dir", scifact, "--output", res)),
        Command("bm25-lucene", ("run", "--retriever", "bm25", "--bm25-variant", "lucene", "--data-dir", scifact,
                                "--output", res)),
        Command("pipeline-rrf", ("run", "--retriever", "bm25", "--retriever", minilm, "--fuse", "rrf", "--name",
                                 "bm25+minilm", "--data-dir", scifact, "--output", res)),
        Command("gar-bm25", ("run", "--retriever", "bm25", "--expansion", "hyde/qwen-7b", "--data-dir",
                             str(paths["demo"]), "--output", res)),
        Command("gar-minilm", ("run", "--retriever", minilm, "--expansion", "hyde/qwen-7b", "--data-dir",
                               str(paths["demo"]), "--output", res)),
        Command("gar-scifact-q2d", ("run", "--retriever", "bm25", "--expansion", "query2doc/echo", "--data-dir",
                                    str(paths["gar-scifact"]), "--output", res)),
        Command("gar-scifact-q2d-spaced", ("run", "--retriever", "bm25", "--expansion", "query2doc/echo",
                                           "--bm25-composition", "query2doc-spaced", "--data-dir",
                                           str(paths["gar-scifact"]), "--output", res)),
        Command("rerank-listwise", ("rerank", "--run", "bm25", "--top-k", "20", *listwise, "--data-dir", scifact,
                                    "--output", res)),
        Command("run-then-rerank", ("run", "--retriever", "bm25", "--bm25-variant", "lucene", "--rerank-top-k", "10",
                                    "--truncate", *listwise, "--data-dir", scifact, "--output", res)),
        Command("reproduce", ("reproduce", "base retriever/bm25", "--data-dir", str(paths["biology"]), "--output",
                              str(out / "reproduce"), "--reference", str(paths["reference"]))),
        # r2med expand against the fake chat server, then GAR with what it wrote
        Command("expand-hyde", (*expand, "--method", "hyde")),
        Command("expand-query2doc", (*expand, "--method", "query2doc", "--temperature", "0.2", "--max-tokens", "64")),
        Command("sf6-bm25", ("run", "--retriever", "bm25", "--data-dir", sf6, "--output", res)),
        Command("expand-lamer", (*expand, "--method", "lamer", "--first-stage", str(out / "results" / "base retriever"
                                                                                    / "bm25"))),
        Command("gar-hyde-fake", ("run", "--retriever", "bm25", "--expansion", "hyde/fake", "--data-dir", sf6,
                                  "--output", res)),
        Command("gar-query2doc-fake", ("run", "--retriever", "bm25", "--expansion", "query2doc/fake", "--data-dir",
                                       sf6, "--output", res)),
        Command("gar-lamer-fake", ("run", "--retriever", "bm25", "--bm25-variant", "lucene", "--expansion",
                                   "lamer/fake", "--data-dir", sf6, "--output", res)),
        # r2med agent against the scripted completion server, then GAR with its answers
        Command("agent-search-r1", (*agent, "--style", "search-r1")),
        Command("agent-search-o1", (*agent, "--style", "search-o1")),
        Command("gar-search-r1", ("run", "--retriever", "bm25", "--expansion", "search-r1/test-model", "--data-dir",
                                  str(paths["agent"]), "--output", res)),
        Command("gar-search-o1", ("run", "--retriever", "bm25", "--expansion", "search-o1/test-model", "--data-dir",
                                  str(paths["agent"]), "--output", res)),
        # pipeline files: the docs' own, and per-retriever / per-component options
        Command("sample", ("datasets", "sample", str(paths["pipelines"] / "r2med-sample")), again=False),
        Command("toml-docs-pipeline", ("run", "--config", _pipeline(paths, "pipeline.toml", DOCS_PIPELINE))),
        Command("toml-docs-agent", ("run", "--config", _pipeline(paths, "agent.toml", DOCS_AGENT.format(**values))),
                home="home-toml"),
        Command("toml-dense", ("run", "--config", _pipeline(paths, "dense.toml", DENSE_PIPELINE.format(**values)))),
        Command("toml-gar-rerank", ("run", "--config", _pipeline(paths, "gar-rerank.toml",
                                                                 GAR_RERANK_PIPELINE.format(**values)))),
    ]
