"""A BM25 run imports only what it uses: no reporting beyond its result table, no LLM client, no agent loop, no dense
or reranking model code, no HTTP client (issue 26: every command pays its imports on every run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: what ``r2med run --retriever bm25`` may import from these packages (their option declarations: the flags)
ALLOWED = {
    "r2med.reporting": {"r2med.reporting", "r2med.reporting.tables", "r2med.reporting.official"},
    "r2med.retrievers.dense": {"r2med.retrievers.dense", "r2med.retrievers.dense.options"},
    "r2med.rerankers": {"r2med.rerankers", "r2med.rerankers.base", "r2med.rerankers.options", "r2med.rerankers.registry",
                        "r2med.rerankers.permutation", "r2med.rerankers.prompts", "r2med.rerankers.windows"},
    "r2med.agent": {"r2med.agent", "r2med.agent.config", "r2med.agent.outputs", "r2med.agent.protocols",
                    "r2med.agent.styles", "r2med.agent.templates"},
    "r2med.llm": {"r2med.llm", "r2med.llm.endpoint", "r2med.llm.reasoning", "r2med.llm.requests"},
}
#: never imported by a BM25 run
FORBIDDEN = ("r2med.http", "r2med.expansion.generate", "r2med.stages.expand", "httpx", "httpx2", "httpcore", "torch",
             "transformers", "sentence_transformers", "jinja2", "matplotlib", "ftfy")


def violations(modules: set[str], forbidden: tuple[str, ...] = FORBIDDEN) -> list[str]:
    """The modules of ``modules`` a BM25 run must not import.

    >>> violations({"r2med.reporting.tables", "r2med.reporting.leaderboard", "httpx._client", "httpxtra", "numpy"})
    ['httpx._client', 'r2med.reporting.leaderboard']
    """
    extra = {m for package, allowed in ALLOWED.items() for m in modules
             if m.split(".")[: package.count(".") + 1] == package.split(".") and m not in allowed}
    return sorted(extra | {m for m in modules for name in forbidden if m == name or m.startswith(name + ".")})

_RUN = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["r2med", *sys.argv[2:]]
try:
    runpy.run_module("r2med.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
with open(out, "w") as handle:
    json.dump({"code": code, "modules": sorted(sys.modules)}, handle)
"""


def write_dataset(folder: Path) -> Path:
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": f"d{i}", "text": text}) + "\n"
        for i, text in enumerate(["aspirin lowers fever", "statins lower cholesterol", "fever in children"])))
    (folder / "query.jsonl").write_text(json.dumps({"id": "q1", "text": "fever treatment"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "d0", "score": 1}) + "\n")
    return folder


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["plain", "quiet"])
def test_a_bm25_run_imports_no_reporting_llm_dense_or_http(tmp_path, quiet):
    data = write_dataset(tmp_path / "tiny")
    record = tmp_path / "modules.json"
    env = {**os.environ, "R2MED_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(record), "run", *quiet, "--retriever", "bm25", "--data-dir", str(data),
         "--output", str(tmp_path / "results")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    result = json.loads(record.read_text())
    assert result["code"] in (0, None), done.stderr
    assert list((tmp_path / "results").rglob("tiny.run")), "the run was not written"
    modules = set(result["modules"])
    assert "r2med.retrievers.bm25.index" in modules  # it did run BM25
    assert violations(modules) == []


def test_the_check_sees_forbidden_imports():
    assert violations({"r2med.reporting.tables", "r2med.reporting.leaderboard", "r2med.llm.client", "r2med.agent.loop",
                       "r2med.retrievers.dense.st_encoders", "r2med.rerankers.cross_encoder", "httpx._client", "httpxtra",
                       "tqdm.auto", "numpy"}) == [
        "httpx._client", "r2med.agent.loop", "r2med.llm.client", "r2med.reporting.leaderboard",
        "r2med.rerankers.cross_encoder", "r2med.retrievers.dense.st_encoders"]


def test_the_quick_start_run_imports_no_scipy(tmp_path):
    """``r2med run --data-dir r2med-sample`` scores its 574 documents with NumPy's kernel
    (``r2med.retrievers.bm25.sparse``): SciPy's import would cost a third of the quick start's time."""
    env = {**os.environ, "R2MED_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    sample = tmp_path / "r2med-sample"
    subprocess.run([sys.executable, "-m", "r2med.cli", "datasets", "sample", str(sample)], env=env,
                   capture_output=True, text=True, timeout=120, check=True)
    record = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(record), "run", "--data-dir", str(sample), "--output", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    result = json.loads(record.read_text())
    assert result["code"] in (0, None), done.stderr
    assert "| scifact-sample |   79.66 | 98.00 |" in done.stdout  # the README's numbers
    modules = set(result["modules"])
    assert "r2med.retrievers.bm25.sparse" in modules
    assert [m for m in modules if m == "scipy" or m.startswith("scipy.")] == []
    assert violations(modules) == []
