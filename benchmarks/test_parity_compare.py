"""``stage_parity.py compare`` on two small trees made here (``pytest benchmarks/test_parity_compare.py``).

Two runs of the same commands differ in their roots, the fake servers' ports, wall-clock fields and the order of
appended records; everything else must show, and ``--config-may-differ`` must only soften configuration parts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parity_compare import compare, compare_trees

SET = Path("results") / "base retriever" / "bm25"
EXPANSION = Path("work") / "home" / "expansions" / "sf6" / "hyde" / "fake"


def _write(path: Path, text: str) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text.encode()


def _digest(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def make_tree(root: Path, *, port: int, seconds: float, reverse: bool = False, run: str = "q1 Q0 d1 1 2.5 bm25\n",
              k1: float = 0.9, details: dict | None = None, summary_config: dict | None = None) -> Path:
    """One OUT tree: a result set (run, per-query, result JSON, manifest), an expansion folder and a stdout file."""
    url = f"http://127.0.0.1:{port}/v1"
    _write(root / "servers.json", json.dumps({"chat": [url]}))
    folder = root / SET
    files = {"sf6.run": _write(folder / "sf6.run", run),
             "sf6.per_query.jsonl": _write(folder / "sf6.per_query.jsonl", '{"qid": "q1", "ndcg_at_10": 1.0}\n'),
             "sf6.json": _write(folder / "sf6.json", json.dumps({"dataset_name": "sf6", "evaluation_time":
                                                                f"{round(seconds / 60, 2)} minutes", "test": {}}))}
    config = {"system": "base retriever/bm25", "retriever": {"k1": k1}, "data": str(root / "sf6"), "llm": url}
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    manifest = {"files": {name: _digest(data) for name, data in files.items()}, "system": "base retriever/bm25",
                "config": config, "config_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
                "timings_s": {"total": seconds}, "environment": {"python": "3.x"}, "created": f"T{seconds}",
                "details": details or {"agent": {"llm_calls": 3, "seconds": seconds}}}
    _write(folder / "sf6.manifest.json", json.dumps(manifest, indent=2))
    records = [{"key": key, "text": f"about {key}", "base_url": url, "seconds": seconds, "started_at": f"S{seconds}",
                "finished_at": f"F{seconds}"} for key in ("a", "b")]
    lines = [json.dumps(r) for r in (reversed(records) if reverse else records)]
    _write(root / EXPANSION / "generations.jsonl", "\n".join(lines) + "\n")
    _write(root / EXPANSION / "query_with_hydoc.jsonl", '{"id": "q1", "text": "t", "hy_doc": "about a"}\n')
    summary = {"report": {"written": 1, "seconds": seconds}, "written_at": f"W{seconds}",
               "config": summary_config or {"base_url": url, "concurrency": 4}, "search": None}
    _write(root / EXPANSION / "summary.json", json.dumps(summary))
    _write(root / "stdout" / "expand-hyde.first.txt",
           f"exit 0\nsf6: 6 queries; 140 prompt + 164 completion tokens; {seconds:.1f} s -> {root / EXPANSION}\n")
    return root


@pytest.fixture
def before(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "before", port=40001, seconds=1.5)


def test_two_runs_of_the_same_commands_compare_equal(before: Path, tmp_path: Path) -> None:
    after = make_tree(tmp_path / "after-run", port=40002, seconds=95.25, reverse=True)
    outcome = compare_trees(before, after)
    assert outcome.problems == [] and outcome.notes == []
    assert outcome.same == 8  # run, per-query, result JSON, manifest, 3 expansion files, stdout


def test_a_changed_run_is_a_difference(before: Path, tmp_path: Path) -> None:
    after = make_tree(tmp_path / "after", port=40002, seconds=1.5, run="q1 Q0 d2 1 2.5 bm25\n")
    assert compare_trees(before, after, config_may_differ=True).problems == [f"differs: {SET.as_posix()}/sf6.run"]


def test_a_changed_configuration_fails_unless_it_may_differ(before: Path, tmp_path: Path) -> None:
    after = make_tree(tmp_path / "after", port=40002, seconds=1.5, k1=1.2,
                      summary_config={"base_url": "http://127.0.0.1:40002/v1", "concurrency": 8})
    names = [f"configuration differs: {SET.as_posix()}/sf6.manifest.json",
             f"configuration differs: {EXPANSION.as_posix()}/summary.json"]
    strict = compare_trees(before, after)
    assert strict.problems == names and strict.notes == [] and strict.same == 6
    lenient = compare_trees(before, after, config_may_differ=True)
    assert lenient.problems == [] and lenient.notes == names and lenient.same == 6


def test_details_are_not_configuration(before: Path, tmp_path: Path) -> None:
    after = make_tree(tmp_path / "after", port=40002, seconds=1.5, details={"agent": {"llm_calls": 4, "seconds": 1}})
    outcome = compare_trees(before, after, config_may_differ=True)
    assert outcome.problems == [f"differs: {SET.as_posix()}/sf6.manifest.json"]


def test_a_member_that_does_not_match_its_manifest_is_a_difference(before: Path, tmp_path: Path) -> None:
    after = make_tree(tmp_path / "after", port=40002, seconds=1.5)
    (after / SET / "sf6.per_query.jsonl").write_text('{"qid": "q1", "ndcg_at_10": 1.0}\n\n')
    assert compare_trees(before, after).problems == [f"differs: {SET.as_posix()}/sf6.manifest.json",
                                                     f"differs: {SET.as_posix()}/sf6.per_query.jsonl"]


def test_a_changed_expansion_and_a_new_file(before: Path, tmp_path: Path) -> None:
    after = make_tree(tmp_path / "after", port=40002, seconds=1.5)
    (after / EXPANSION / "query_with_hydoc.jsonl").write_text('{"id": "q1", "text": "t", "hy_doc": "about b"}\n')
    _write(after / EXPANSION / "sf6.manifest.json", "{}")
    new = f"only in {after}: {EXPANSION.as_posix()}/sf6.manifest.json"
    assert compare_trees(before, after).problems == [new, f"differs: {EXPANSION.as_posix()}/query_with_hydoc.jsonl"]
    allowed = compare_trees(before, after, allow_new=("work/home/expansions/*.manifest.json",))
    assert allowed.notes == [new] and allowed.problems == [f"differs: {EXPANSION.as_posix()}/query_with_hydoc.jsonl"]
    assert compare_trees(after, before).problems[0] == f"only in {after}: {EXPANSION.as_posix()}/sf6.manifest.json"


def test_compare_prints_and_exits_1_on_a_difference(before: Path, tmp_path: Path, capsys) -> None:
    after = make_tree(tmp_path / "after", port=40002, seconds=1.5, k1=1.2)
    assert compare(before, after, diff_lines=40) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "7 of 8 files identical (2 .json, 3 .jsonl, 1 .run, 1 .txt, 1 manifest)"
    assert f"configuration differs: {SET.as_posix()}/sf6.manifest.json" in out
    assert '    -   "k1": 0.9' in out and '    +   "k1": 1.2' in out
    assert compare(before, after, config_may_differ=True) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"note: configuration differs: {SET.as_posix()}/sf6.manifest.json"
