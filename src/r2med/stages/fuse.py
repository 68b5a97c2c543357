"""``Fuse``: the stored runs of earlier stages fused into one (RRF, CombSUM, CombMNZ, interpolation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.store.result_set import StoredSet, stored_input
from r2med.store.results import SystemPath, result_files
from r2med.types import Run


class Fuse:
    """Fuse, per dataset, the runs stored under ``output`` for ``inputs`` (``(system path, drops identical ids)``).

    The inputs' manifests' hashes key the fused result, so a changed input recomputes the fusion. An input is
    read only once every file of its result set matches its manifest (else an error says to rerun it). The
    inputs' own rules already shaped their runs; a query's own id is dropped if any input dropped it.
    Results under ``fusion/<name>/``.
    """

    def __init__(self, name: str, inputs: list[tuple[SystemPath, bool]], *, method: str = "rrf",
                 options: dict[str, Any] | None = None, output: Path, top_k: int = 100) -> None:
        self.where = SystemPath.fusion(name)
        self.inputs = list(inputs)
        self.method = method
        self.options = dict(options or {})
        self.output = Path(output)
        self.top_k = top_k
        self.ignore_identical_ids = any(flag for _, flag in self.inputs)

    def config(self, dataset: Dataset) -> dict[str, Any]:
        hashes = [{"system": str(system), "config_sha256": self._input(system, dataset).manifest.get("config_sha256")}
                  for system, _ in self.inputs]
        return {"fusion": {"method": self.method, **self.options}, "inputs": hashes, "top_k": self.top_k}

    def run(self, dataset: Dataset) -> Run:
        from r2med.fusion import fuse

        runs = [self._input(system, dataset).read_run() for system, _ in self.inputs]
        return fuse(runs, self.method, depth=self.top_k, **self.options)

    def _input(self, system: SystemPath, dataset: Dataset) -> StoredSet:
        """An input's verified result set: an unfinished or damaged input is an error saying to rerun it."""
        return stored_input(result_files(self.output, system, dataset.name), system=str(system))

    def details(self, dataset: Dataset) -> dict[str, Any]:
        return {}

    def artifacts(self, dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
        return {}
