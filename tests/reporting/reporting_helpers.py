"""Helpers of the reporting tests: a parser built from the commands' ``register``, and the official
repository's results/ tree laid out from the package data."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from conftest import DATA
from r2med.cli import compare as compare_cmd
from r2med.cli import leaderboard as leaderboard_cmd
from r2med.cli import report as report_cmd
from r2med.errors import R2MedError

REPORTING = DATA / "reporting"

#: PROTOCOL.md, "Evaluation": average nDCG@10 of the base retrievers as published (MedCPT: the paper's 7.87).
PROTOCOL_AVERAGES = {
    "bm25": 15.13, "contriever": 11.76, "medcpt": 7.87, "inst-l": 16.21, "bge": 17.02, "inst-xl": 18.13,
    "bmr-410m": 18.10, "bmr-2b": 24.69, "e5": 24.92, "voyage": 27.34, "openai": 28.57, "bmr-7b": 30.18,
    "sfr": 30.65, "grit": 31.12, "nv": 31.43,
}


#: How the official repository's results/ tree names each dataset file (seen in github.com/R2MED/R2MED).
OFFICIAL_FILE_NAMES = {
    "Biology": "Stack-Biology", "Bioinformatics": "Stack-Bioinformatics", "Medical-Sciences": "Stack-Medical",
    "MedXpertQA-Exam": "MedXpertQA-Exam", "MedQA-Diag": "MedQA-Diag", "PMC-Treatment": "PMC-Treat",
    "PMC-Clinical": "PMCPatients", "IIYi-Clinical": "IIYiPatients-EN",
}
#: The official tree's reranker folders: reranker/<short>/top_<k>/ (no retriever level).
OFFICIAL_RERANKER_DIRS = {"bge-reranker": "bge", "monobert": "mono", "rankllama": "llama"}


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true")
    parser = argparse.ArgumentParser(prog="r2med")
    sub = parser.add_subparsers(dest="command")
    for module in (leaderboard_cmd, compare_cmd, report_cmd):
        module.register(sub, common)
    return parser


def run(*argv: object) -> Result:
    """Parse and run like r2med.cli.main: R2MedError -> its exit code, argparse errors -> 2."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            args = build_parser().parse_args([str(a) for a in argv])
            code = int(args.func(args) or 0)
        except R2MedError as exc:
            print(f"r2med: error: {exc}", file=err)
            code = exc.exit_code
        except SystemExit as exc:
            code = int(exc.code or 0)
    return Result(code, out.getvalue(), err.getvalue())


def package_results() -> dict:
    text = resources.files("r2med").joinpath("data/official_results.json").read_text(encoding="utf-8")
    return json.loads(text)["results"]


def write_official_tree(root: Path) -> Path:
    """Lay out every published number as the official repository's results/ tree does: old dataset
    names, metric keys as published (both styles), rerankers under reranker/<short>/top_10, and a
    BEIR_NFCorpus.json (not an R2MED dataset) beside some systems."""
    for path, datasets in package_results().items():
        parts = path.split("/")
        if parts[0] == "reranker":
            parts = ["reranker", OFFICIAL_RERANKER_DIRS[parts[1]], parts[3]]
        folder = root.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        for dataset, metrics in datasets.items():
            name = OFFICIAL_FILE_NAMES[dataset]
            record = {"dataset_name": name, "evaluation_time": "0.21 minutes", "model_name": parts[-1], "test": metrics}
            (folder / f"{name}.json").write_text(json.dumps(record, indent=2, sort_keys=True))
        if parts[0] == "base retriever":
            beir = {"dataset_name": "BEIR_NFCorpus", "model_name": parts[-1], "test": {"ndcg_at_10": 0.99}}
            (folder / "BEIR_NFCorpus.json").write_text(json.dumps(beir))
    return root
