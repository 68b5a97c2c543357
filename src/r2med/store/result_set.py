"""Result sets: which files make one, how a stored one is verified, and how it is read. Every reader of a stored
result goes through this module.

A result set is what a stage stores for one dataset in its system's folder (:class:`ResultFiles`): the scored
members ``<Dataset>.json`` (the official result record), ``<Dataset>.run`` (TREC run) and
``<Dataset>.per_query.jsonl`` (unrounded per-query values), the stage's artifacts (``<Dataset>.<name>.jsonl``, e.g.
an agent's trajectories) and ``<Dataset>.manifest.json`` (:mod:`r2med.manifest`), the set's commit record:
written last, it records the sha256 and size of every other file. The order of those writes is the stage runner's
(:mod:`r2med.stages.runner`).

A set is verified when its manifest can be used, records every scored member, names only files of its own folder,
and the files checked match their checksums (:mod:`r2med.io.verified`); a verified file is read only if it does not
change while it is read. Each use reads at one strictness:

- reuse (:func:`reusable_scores`, the runner): every file is checked; a set that is unfinished, of another
  configuration or damaged is not reused, but recomputed (with a warning naming the file when something is damaged).
- input (:func:`stored_input`, :func:`read_stored_run`: fusion, reranking, ``r2med fuse`` and ``r2med expand
  --first-stage`` read an earlier stage's set): every file is checked. The later stage cannot remake the set, so a
  missing one is MissingResourceError (exit 4) and an unfinished or damaged one DamagedFileError (exit 5) naming the
  file and saying to run that stage again. A run file without a manifest beside it is a user's own, read as it is.
- show (:func:`read_result_file`: the reports, ``r2med evaluate --run``): the file read and the scored members are
  checked, so that a damaged artifact does not hide the numbers (and is never shown itself). Files without a
  manifest beside them (the official results/ tree, a user's runs) are read as they are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from r2med.errors import DamagedFileError, MissingResourceError
from r2med.io.digest import Digest
from r2med.io.verified import read_verified, verify_file
from r2med.manifest import config_sha256, load_manifest, manifest_path
from r2med.store.runs import read_run
from r2med.types import Run, Scores

T = TypeVar("T")
logger = logging.getLogger(__name__)

RESULT_SUFFIX = ".json"
RUN_SUFFIX = ".run"
PER_QUERY_SUFFIX = ".per_query.jsonl"


@dataclass(frozen=True)
class ResultFiles:
    """The scored members of one (system, dataset) result set; the names of its other files.

    >>> files = ResultFiles.of(Path("out"), "Biology")
    >>> [p.name for p in (*files.scored, files.manifest, files.artifact("trajectories"))]
    ['Biology.json', 'Biology.run', 'Biology.per_query.jsonl', 'Biology.manifest.json', 'Biology.trajectories.jsonl']
    >>> ResultFiles.of_result(Path("out/Biology.json")) == files, files.dataset
    (True, 'Biology')
    """

    result: Path
    run: Path
    per_query: Path

    @classmethod
    def of(cls, folder: Path, dataset: str) -> ResultFiles:
        """The files of ``dataset``'s set in a system's folder."""
        folder = Path(folder)
        return cls(folder / f"{dataset}{RESULT_SUFFIX}", folder / f"{dataset}{RUN_SUFFIX}",
                   folder / f"{dataset}{PER_QUERY_SUFFIX}")

    @classmethod
    def of_result(cls, result_json: Path) -> ResultFiles:
        """The set of a result JSON ``<dir>/<Dataset>.json``."""
        result_json = Path(result_json)
        return cls.of(result_json.parent, result_json.name.removesuffix(RESULT_SUFFIX))

    @property
    def dataset(self) -> str:
        return self.result.name.removesuffix(RESULT_SUFFIX)

    @property
    def scored(self) -> tuple[Path, Path, Path]:
        """The files that are its numbers: the result JSON, the run and the per-query values."""
        return self.result, self.run, self.per_query

    @property
    def manifest(self) -> Path:
        return manifest_path(self.result)

    def artifact(self, name: str) -> Path:
        """A stage's artifact ``<Dataset>.<name>.jsonl`` (an agent's ``trajectories``, a listwise reranker's
        ``windows``)."""
        return self.result.with_name(f"{self.dataset}.{name}.jsonl")


def set_of(path: Path) -> ResultFiles | None:
    """The set whose manifest is beside ``path`` (a run, per-query, result or artifact file), else None.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "Biology.manifest.json").write_text("{}")
    >>> set_of(folder / "Biology.per_query.jsonl") == ResultFiles.of(folder, "Biology"), set_of(folder / "Other.run")
    (True, None)
    """
    path = Path(path)
    parts = path.name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        files = ResultFiles.of(path.parent, ".".join(parts[:cut]))
        if files.manifest.is_file():
            return files
    return None


def recorded_files(files: ResultFiles, manifest: dict[str, Any]) -> dict[Path, Digest]:
    """``path -> Digest`` of every file the manifest of ``files`` records (DamagedFileError if it records none)."""
    return recorded_at(files.manifest, manifest)


def recorded_at(path: Path, manifest: dict[str, Any]) -> dict[Path, Digest]:
    """``path -> Digest`` of every file the manifest at ``path`` records (any set: a result set, an expansion set)."""
    raw = manifest.get("files")
    if raw is None:
        raise DamagedFileError(path, "has no checksums of its files (an older r2med wrote it), so they cannot be verified")
    if not isinstance(raw, dict) or not raw:
        raise DamagedFileError(path, "'files' is not a non-empty object of checksums")
    recorded = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
            raise DamagedFileError(path, f"'files' names {name!r}, not a file of this directory")
        try:
            recorded[path.with_name(name)] = Digest.from_json(entry)
        except ValueError as exc:
            raise DamagedFileError(path, f"does not match: the checksum of {name} is malformed ({exc})") from exc
    return recorded


@dataclass(frozen=True)
class StoredSet:
    """A stored result set whose checked files matched its manifest; ``fix``: what to do when it cannot be read."""

    files: ResultFiles
    manifest: dict[str, Any]
    digests: dict[Path, Digest]
    fix: str = ""

    def read(self, path: Path, parse: Callable[[Path], T]) -> T:
        """``parse(path)`` for a file of this set, once it matches its checksum (DamagedFileError otherwise)."""
        path = Path(path)
        if path not in self.digests:
            names = ", ".join(sorted(p.name for p in self.digests))
            raise DamagedFileError(path, f"is not a file of the result set {self.files.manifest.name} beside it",
                                   f"use the files that set records ({names}), or move {path.name} elsewhere")
        try:
            return read_verified(path, parse, expected=self.digests[path])
        except DamagedFileError as exc:
            raise DamagedFileError(exc.path, exc.reason, self.fix) from None

    def read_run(self) -> Run:
        return self.read(self.files.run, read_run)


def verified_set(files: ResultFiles, manifest: dict[str, Any], *, only: Iterable[Path] | None = None,
                 fix: str = "") -> StoredSet:
    """The set of ``files`` once its manifest records the scored members and the files checked match it: every
    file it records, or the scored members and ``only``. The error names the file and the manifest, e.g.
    ``.../Biology.run: does not match the checksum r2med recorded: ... (Biology.manifest.json)``."""
    try:
        digests = recorded_files(files, manifest)
        for member in files.scored:
            if member not in digests:
                raise DamagedFileError(files.manifest, f"does not record {member.name}")
        checked = digests if only is None else dict.fromkeys((*files.scored, *map(Path, only)))
        for member in checked:
            if member in digests:
                try:
                    verify_file(member, digests[member])
                except DamagedFileError as exc:
                    raise DamagedFileError(member, f"{exc.reason} ({files.manifest.name})") from None
    except DamagedFileError as exc:
        raise DamagedFileError(exc.path, exc.reason, fix) from None
    return StoredSet(files, manifest, digests, fix)


def verify_recorded(path: Path, manifest: dict[str, Any]) -> dict[Path, Digest]:
    """Every file the manifest at ``path`` records, checked against it (DamagedFileError naming the file)."""
    digests = recorded_at(path, manifest)
    for member, digest in digests.items():
        try:
            verify_file(member, digest)
        except DamagedFileError as exc:
            raise DamagedFileError(member, f"{exc.reason} ({path.name})") from None
    return digests


# ------------------------------------------------------------------ reuse: the runner


def reusable_scores(files: ResultFiles, config: dict[str, Any], *, dataset: str) -> Scores | None:
    """The scores of the stored result in ``files`` when it was made by exactly ``config`` and every file of its
    set matches its manifest; otherwise None (with a warning when something stored is damaged)."""
    try:
        manifest = load_manifest(files.result)
        if manifest is None:
            if any(path.exists() for path in files.scored):
                logger.info("%s: %s is missing (an interrupted run); recomputing the result", dataset, files.manifest)
            return None
        if manifest["config_sha256"] != config_sha256(config):
            recorded = manifest.get("config")
            stored_format = recorded.get("config_format") if isinstance(recorded, dict) else None
            if stored_format != config.get("config_format"):
                logger.warning("%s: %s was stored by an older r2med (configuration format %s, now %s); recomputing "
                               "it once", dataset, files.result, stored_format or 1, config.get("config_format"))
            else:
                logger.info("%s: the stored result was made by another configuration; recomputing it", dataset)
            return None
        stored = verified_set(files, manifest)
        return Scores(stored.read(files.result, _test_scores), stored.read(files.per_query, _per_query))
    except DamagedFileError as exc:
        logger.warning("%s: the stored result is not reused: %s; recomputing it", dataset, exc)
        return None


def _test_scores(path: Path) -> dict[str, float]:
    record = json.loads(path.read_text(encoding="utf-8"))
    test = record["test"]
    if not isinstance(test, dict) or not all(isinstance(v, (int, float)) for v in test.values()):
        raise ValueError("'test' is not an object of numbers")
    return dict(test)


def _per_query(path: Path) -> dict[str, dict[str, float]]:
    rows = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                rows[str(row.pop("qid"))] = row
    return rows


# ------------------------------------------------------------------ input: a later stage (fusion, reranking)


def stored_input(files: ResultFiles, *, system: str) -> StoredSet:
    """Another stage's stored result set, every file verified (for fusion and reranking).

    MissingResourceError when there is no result at all; DamagedFileError (exit 5) naming the file, with the
    fix, when the set is unfinished or does not match its manifest (or, later, cannot be read back).
    """
    folder, dataset = files.result.parent, files.dataset
    fix = f"run the stage that made {system} again (it writes {folder}), or delete {folder / dataset}.* and run it"
    try:
        manifest = load_manifest(files.result)
    except DamagedFileError as exc:
        raise DamagedFileError(exc.path, exc.reason, fix) from None
    if manifest is None:
        if not any(folder.glob(f"{dataset}.*")):
            raise MissingResourceError(f"no stored result of {system} for {dataset} in {folder}; run that stage first")
        raise DamagedFileError(files.manifest, f"is missing: the result of {system} on {dataset} is unfinished "
                                               "(an interrupted run)", fix)
    return verified_set(files, manifest, fix=fix)


def read_stored_run(path: Path, *, system: str) -> Run:
    """A run file: read from its result set, verified as an input (:func:`stored_input`), when a manifest is beside
    it (``<stem>.manifest.json``); otherwise a user's plain file, read as it is."""
    path = Path(path)
    files = ResultFiles.of(path.parent, path.stem)
    if not files.manifest.exists():
        return read_run(path)
    return stored_input(files, system=system).read(path, read_run)


# ------------------------------------------------------------------ show: the reports


def read_result_file(path: Path, parse: Callable[[Path], T]) -> T:
    """``parse(path)`` for a file of a stored result: verified against its set's manifest when one is beside it
    (``path`` and the set's scored members), read as it is otherwise (official result files, a user's runs).

    An artifact of the set (trajectories, window logs) is checked when it is the file read: a damaged artifact
    does not hide the numbers, and is never shown itself. Reuse, fusion and reranking take a set only whole."""
    files = set_of(path)
    manifest = load_manifest(files.result) if files is not None else None
    if files is None or manifest is None:  # no manifest, or removed in the meantime
        return parse(path)
    return verified_set(files, manifest, only=(Path(path),)).read(path, parse)
