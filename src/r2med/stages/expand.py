"""``Expand``: GAR expansions (HyDE, Query2doc, LameR) of each dataset's queries by an LLM, as a file stage.

Per dataset the stage plans every request (``r2med.expansion.generate.plan_expansions``), sends the ones the
generations cache (``generations.jsonl``, append-only: a paid answer is never lost nor requested again) has no
answer for, and hands the runner (``run_file_stage``) the official ``query_with_hydoc.jsonl`` and ``summary.json``;
the runner writes them atomically with their manifest, ``query_with_hydoc.manifest.json``, which records the
configuration (method, model, sampling, style, policy, prompt, the sha256 of every request) and the dataset's files.
By default the folder is ``$R2MED_HOME/expansions/<Dataset>/<method>/<llm>/``, where ``r2med run --expansion
<method>/<llm>`` finds the file. A query whose generation failed has no row, and the file then has no manifest: a
rerun makes it again, requesting just those.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.errors import IncompleteResultError
from r2med.expansion.generate import (
    SUMMARY_FILE,
    ExpansionConfig,
    ExpansionPlan,
    ExpansionReport,
    expansion_paths,
    generate_expansions,
    plan_expansions,
    summary_text,
)
from r2med.llm.client import ChatClient
from r2med.settings import Settings, get_settings
from r2med.stages.base import Product
from r2med.stages.runner import run_file_stage
from r2med.store.expansions import EXPANSION_FILE, expansion_dir, llm_dir_name
from r2med.types import Run


class Expand:
    """Expand each dataset's queries with ``config``'s LLM. ``out_dir``: one folder for the files instead of the
    default one (``subfolders``: one folder per dataset under it); ``first_stage``: dataset name -> the first-stage
    run (LameR); ``client``: the chat client (default: one for ``config``)."""

    anchor = EXPANSION_FILE[: -len(".jsonl")]

    def __init__(self, config: ExpansionConfig, *, out_dir: Path | None = None, subfolders: bool = False,
                 first_stage: Callable[[str], Run] | None = None, client: ChatClient | None = None,
                 settings: Settings | None = None, progress: bool = True) -> None:
        self.expansion = config
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.subfolders = subfolders
        self.first_stage = first_stage
        self.client = client
        self.settings = settings or get_settings()
        self.progress = progress
        self.method = config.method.strip().lower()
        self.llm = llm_dir_name(config.name)
        self.name = f"expand/{self.method}/{self.llm}"
        self._plans: dict[str, ExpansionPlan] = {}

    def folder(self, dataset: Dataset) -> Path:
        if self.out_dir is None:
            return expansion_dir(self.settings, dataset.name, self.method, self.llm)
        return self.out_dir / dataset.name if self.subfolders else self.out_dir

    def _plan(self, dataset: Dataset) -> ExpansionPlan:
        if dataset.name not in self._plans:
            run = self.first_stage(dataset.name) if self.first_stage is not None else None
            self._plans[dataset.name] = plan_expansions(dataset, self.expansion, run)
        return self._plans[dataset.name]

    def config(self, dataset: Dataset) -> dict[str, Any]:
        return self._plan(dataset).key()

    def produce(self, dataset: Dataset) -> Product:
        plan = self._plan(dataset)
        self._plans.pop(dataset.name)
        rows, report, stopped = generate_expansions(plan, out_dir=self.folder(dataset), client=self.client,
                                                    progress=self.progress)
        files: dict[str, list[dict[str, Any]] | str] = {EXPANSION_FILE: rows} if rows else {}
        files[SUMMARY_FILE] = summary_text(plan, report)
        if stopped is not None:
            stopped.report = report
        return Product(files, details={"expansion": report.manifest_counts()}, outcome=report,
                       problem=report.problem(), halt=stopped)

    def reused(self, dataset: Dataset, details: dict[str, Any]) -> ExpansionReport:
        self._plans.pop(dataset.name, None)
        return ExpansionReport.stored(details["expansion"], expansion_paths(self.folder(dataset)))


def expand_dataset(dataset: Dataset, config: ExpansionConfig, *, out_dir: Path, client: ChatClient | None = None,
                   first_stage: Run | None = None, progress: bool = True) -> ExpansionReport:
    """Expand ``dataset``'s queries into ``out_dir`` through the runner (as ``r2med expand --output DIR`` does for one
    dataset) and return the report: failed queries are listed in it, and their file has no manifest (a rerun makes
    it again). When the client's budget runs out, what finished is written and ``BudgetExceeded`` (with ``.report``)
    is raised. A stored file made by the same configuration is kept (``report.reused``)."""
    reports: list[ExpansionReport] = []
    stage = Expand(config, out_dir=out_dir, first_stage=None if first_stage is None else (lambda _: first_stage),
                   client=client, progress=progress)
    try:
        run_file_stage(stage, [dataset], on_result=lambda result: reports.append(result.outcome))
    except IncompleteResultError:
        pass  # the report lists the failed queries
    return reports[0]
