"""Shared pieces of the reranker tests: SciFact with its BM25 top 20, and the ``rerank`` command run in-process."""

from __future__ import annotations

import argparse
import functools
import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from conftest import DATA, shared_path

BM25_TOP20 = DATA / "rerank" / "scifact_bm25_top20.run"
QUERIES = ("3", "36", "212", "261")


def scifact():
    """SciFact in R2MED's layout from ../shared (skips the test when it is not there); loaded once."""
    return _scifact(shared_path("data", "scifact"))


@functools.lru_cache(maxsize=1)
def _scifact(path: Path):
    from r2med.datasets import load_dir

    return load_dir(path, "scifact")


def bm25_top20():
    from r2med.store.runs import read_run

    return read_run(BM25_TOP20)


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_rerank_command(*argv: object) -> Result:
    """``r2med rerank ...`` through ``r2med.cli.rerank.register`` on a parser like cli.py's."""
    from r2med.cli.rerank import register
    from r2med.errors import R2MedError

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="r2med", parents=[common])
    register(parser.add_subparsers(dest="command"), common)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            args = parser.parse_args([str(a) for a in argv])
            args.quiet = getattr(args, "quiet", False)
            code = int(args.func(args) or 0)
        except SystemExit as exc:
            code = int(exc.code or 0)
        except R2MedError as exc:
            print(f"r2med: error: {exc}", file=err)
            code = exc.exit_code
    return Result(code, out.getvalue(), err.getvalue())


def ranked_ids(run, qid: str) -> list[str]:
    return [doc for doc, _ in run.ranked(qid)]


def trec_order(path: Path, qid: str) -> list[str]:
    """Documents of ``qid`` in a TREC run by score, highest first, as trec_eval reads them; the scores must all
    differ (trec_eval breaks ties by document id, which would not be the stored order)."""
    rows = [line.split() for line in Path(path).read_text().splitlines() if line.split()[0] == qid]
    scores = [float(r[4]) for r in rows]
    assert len(set(scores)) == len(scores), f"tied scores in {path} for {qid}"
    return [r[2] for r in sorted(rows, key=lambda r: -float(r[4]))]
