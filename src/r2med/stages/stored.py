"""Reading stored result sets: only through their manifests' checksums (``r2med.io.verified``).

- ``reusable_scores``: the runner's reuse check; a set that does not match (or cannot be read) is recomputed
  with a warning naming the file.
- ``stored_input``/``read_stored_run``: a later stage (fusion, reranking) reading an earlier stage's stored set.
  It cannot remake that set itself, so a damaged or unfinished one is an error (exit 5) that names the file
  and says to run that stage again. Within one pipeline this cannot happen: the earlier stage ran first in the
  same locked directory, and the runner verified (or recomputed) its set. A run file with no manifest beside it
  is a user's plain file and is read as it is.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from r2med.errors import DamagedFileError, MissingResourceError
from r2med.io.digest import Digest
from r2med.io.verified import read_verified
from r2med.manifest import config_sha256, load_manifest, manifest_path, verify_result_set
from r2med.store.results import ResultFiles
from r2med.store.runs import read_run
from r2med.types import Run, Scores

logger = logging.getLogger(__name__)


def reusable_scores(files: ResultFiles, config: dict[str, Any], *, dataset: str) -> Scores | None:
    """The scores of the stored result in ``files`` when it was made by exactly ``config`` and every file of its
    set matches its manifest; otherwise None (with a warning when something stored is damaged)."""
    try:
        manifest = load_manifest(files.result)
        if manifest is None:
            if any(path.exists() for path in (files.run, files.per_query, files.result)):
                logger.info("%s: %s is missing (an interrupted run); recomputing the result", dataset,
                            manifest_path(files.result))
            return None
        if manifest["config_sha256"] != config_sha256(config):
            stored = manifest.get("config")
            stored_format = stored.get("config_format") if isinstance(stored, dict) else None
            if stored_format != config.get("config_format"):
                logger.warning("%s: %s was stored by an older r2med (configuration format %s, now %s); recomputing "
                               "it once", dataset, files.result, stored_format or 1, config.get("config_format"))
            else:
                logger.info("%s: the stored result was made by another configuration; recomputing it", dataset)
            return None
        digests = verify_result_set(files.result, manifest)
        for member in (files.run, files.per_query, files.result):
            if member not in digests:
                raise DamagedFileError(manifest_path(files.result), f"does not record {member.name}")
        test = read_verified(files.result, _test_scores, expected=digests[files.result])
        per_query = read_verified(files.per_query, _per_query, expected=digests[files.per_query])
    except DamagedFileError as exc:
        logger.warning("%s: the stored result is not reused: %s; recomputing it", dataset, exc)
        return None
    return Scores(test, per_query)


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


def stored_input(result_json: Path, *, system: str, dataset: str) -> tuple[dict[str, Any], dict[Path, Digest]]:
    """The manifest and the verified files of another stage's stored result set (for fusion and reranking).

    MissingResourceError when there is no result at all; DamagedFileError (exit 5) naming the file, with the
    fix, when the set is unfinished or does not match its manifest.
    """
    result_json = Path(result_json)
    folder = result_json.parent
    fix = f"run the stage that made {system} again (it writes {folder}), or delete {folder / dataset}.* and run it"
    manifest_file = manifest_path(result_json)
    try:
        manifest = load_manifest(result_json)
        if manifest is None:
            if not any(folder.glob(f"{dataset}.*")):
                raise MissingResourceError(f"no stored result of {system} for {dataset} in {folder}; "
                                           f"run that stage first")
            raise DamagedFileError(manifest_file, f"is missing: the result of {system} on {dataset} is unfinished "
                                                  "(an interrupted run)")
        return manifest, verify_result_set(result_json, manifest)
    except DamagedFileError as exc:
        raise DamagedFileError(exc.path, exc.reason, fix) from None


def read_stored_run(path: Path, *, system: str) -> Run:
    """A run file: verified against its set's manifest when one is beside it (``<stem>.manifest.json``),
    otherwise read as a user's plain file."""
    path = Path(path)
    result_json = path.with_name(f"{path.stem}.json")
    if not manifest_path(result_json).exists():
        return read_run(path)
    _, files = stored_input(result_json, system=system, dataset=path.stem)
    if path not in files:
        raise DamagedFileError(path, f"is not a file of the result set {manifest_path(result_json).name} beside it",
                               f"give the run {path.stem}.run that set records, or move {path.name} elsewhere")
    return read_verified(path, read_run, expected=files[path])
