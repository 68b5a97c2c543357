"""``Fuse``: the stored runs of earlier stages fused into one (RRF, CombSUM, CombMNZ, interpolation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.io.digest import Digest
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
        hashes = []
        for system, _ in self.inputs:
            manifest, _ = self._input(system, dataset)
            hashes.append({"system": str(system), "config_sha256": manifest.get("config_sha256")})
        return {"fusion": {"method": self.method, **self.options}, "inputs": hashes, "top_k": self.top_k}

    def run(self, dataset: Dataset) -> Run:
        from r2med.fusion import fuse
        from r2med.io.verified import read_verified
        from r2med.store.runs import read_run

        runs = []
        for system, _ in self.inputs:
            _, files = self._input(system, dataset)
            path = result_files(self.output, system, dataset.name).run
            runs.append(read_verified(path, read_run, expected=files[path]))
        return fuse(runs, self.method, depth=self.top_k, **self.options)

    def _input(self, system: SystemPath, dataset: Dataset) -> tuple[dict[str, Any], dict[Path, Digest]]:
        """An input's manifest and verified files: an unfinished or damaged input is an error saying to rerun it."""
        from r2med.errors import DamagedFileError
        from r2med.stages.stored import stored_input

        where = result_files(self.output, system, dataset.name)
        manifest, files = stored_input(where.result, system=str(system), dataset=dataset.name)
        if where.run not in files:
            raise DamagedFileError(where.run, f"is not recorded in {where.result.stem}.manifest.json",
                                   f"run the stage that made {system} again")
        return manifest, files

    def details(self, dataset: Dataset) -> dict[str, Any]:
        return {}

    def artifacts(self, dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
        return {}
