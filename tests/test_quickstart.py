"""The README's quick start, run as written: its length, each `r2med` command of it, and its Python snippet.

The `pip install` lines and the test command run in CI (`.ci/check-install` runs the offline commands again
in a fresh core-only venv). `r2med run` (the 8 datasets from the hub) runs here against a fake hub that serves
a tiny collection under each R2MED name; it must print the paper's numbers beside ours.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import DATA, REPO

README = REPO / "README.md"


def quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("## Quick start\n"):text.index("\n## ", text.index("## Quick start\n") + 1)]


def blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def commands(section: str) -> list[list[str]]:
    """The `r2med ...` lines of the bash block, without their comments, as argument lists."""
    [bash] = blocks(section, "bash")
    return [shlex.split(line, comments=True) for line in bash.splitlines() if line.startswith("r2med ")]


#: the quick start fits one screen: the commands to the report, one Python example, one line of pointers
QUICK_START_LINES = 30


def test_quick_start_is_short():
    lines = quick_start().rstrip("\n").splitlines()
    assert len(lines) <= QUICK_START_LINES, f"the quick start has {len(lines)} lines (budget {QUICK_START_LINES})"


def test_quick_start_ends_with_the_report_and_names_its_extra():
    [bash] = blocks(quick_start(), "bash")
    lines = [line.split("#")[0].strip() for line in bash.splitlines()]
    assert lines[-1] == "r2med report" and lines[-2] == 'pip install -e ".[report]"'



@pytest.fixture
def fake_hub(monkeypatch):
    """The hub serves tests/data/tiny for every repo (recording the calls); HF_HUB_OFFLINE is unset."""
    import huggingface_hub

    calls = []

    def fake(repo_id, filename, *, repo_type, revision, local_dir, token=None, **kw):
        calls.append(repo_id)
        target = Path(local_dir) / filename
        target.write_bytes((DATA / "tiny" / filename).read_bytes())
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    return calls


def test_quick_start_commands_run_as_written(cli, tmp_path, monkeypatch, fake_hub):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("R2MED_HOME", str(tmp_path / "home"))
    sample, offline, hub, leaderboard, report = commands(quick_start())
    assert sample == ["r2med", "datasets", "sample", "r2med-sample"]
    assert cli(*sample[1:]).code == 0
    # the offline run: BM25 on the sample, a real non-zero table, no hub call
    result = cli(*offline[1:])
    assert result.code == 0, result.err
    assert "| scifact-sample |   79.66 | 98.00 |" in result.out and fake_hub == []
    # the hub run: the 8 datasets (here the tiny collection under each name) beside the paper's BM25 numbers
    result = cli(*hub[1:])
    assert result.code == 0, result.err
    assert len(set(fake_hub)) == 8
    lines = result.out.splitlines()
    assert lines[1] == "| dataset          | nDCG@10 |  R@100 | paper nDCG@10 |"
    # tiny: "fever" finds q1's two relevant documents (d1, d4) first, "blood" q2's d2 (grade 2) before d3 (0):
    # nDCG@10 and R@100 are 1 on each of the 8 copies; beside them the paper's BM25 numbers
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[3:]}
    assert list(rows) == ["Biology", "Bioinformatics", "Medical-Sciences", "MedXpertQA-Exam", "MedQA-Diag",
                          "PMC-Treatment", "PMC-Clinical", "IIYi-Clinical", "average"]
    assert rows["Biology"] == ["100.00", "100.00", "19.19"] and rows["IIYi-Clinical"] == ["100.00", "100.00", "12.02"]
    assert rows["average"] == ["100.00", "100.00", "15.13"]  # the paper's BM25 average over the 8 datasets
    # the leaderboard with no argument reads ./results: one BM25 row, the sample's 79.66 and the tiny 100.00s
    assert leaderboard == ["r2med", "leaderboard"]
    result = cli(*leaderboard[1:])
    assert result.code == 0, result.err
    [row] = [line for line in result.out.splitlines() if "| BM25 " in line]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2:4] == ["base retriever/bm25", "results"] and "79.66" in cells and cells.count("100.00") == 8
    # the report with no argument: ./results -> report.html, with the sample's texts and judgements found through
    # the manifests (no --data-dir)
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    assert report == ["r2med", "report"]
    result = cli(*report[1:])
    assert result.code == 0, result.err
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "texts and judgements not shown" not in page
    assert "0-dimensional biomaterials show inductive properties." in page  # query 1 of the sample's query.jsonl
    assert "\u2713 1" in page  # a judged relevant document marked with its grade


def test_quick_start_python_snippet_runs(tmp_path, monkeypatch, cli, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli("datasets", "sample", "r2med-sample").code == 0
    [python] = blocks(quick_start(), "python")
    exec(compile(python, "README.md quick start", "exec"), {})  # noqa: S102 (the README's own snippet)
    out = capsys.readouterr().out
    # vowel counts + 1 as embeddings: nDCG@10 0.0228 on the sample (stored below), printed x100 as the page says
    assert out == "nDCG@10 2.28\n" and "# nDCG@10 2.28" in python
    stored = json.loads((tmp_path / "results" / "base retriever" / "char-counts-v1" / "scifact-sample.json").read_text())
    assert stored["dataset_name"] == "scifact-sample" and stored["test"]["ndcg_at_10"] == 0.0228
