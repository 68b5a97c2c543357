"""A stored set of files and its manifest: retiring an old set, writing a ``FileStage``'s product, keeping a stored one.

A set is named by its anchor, ``<folder>/<stem>.json``: its manifest is ``<stem>.manifest.json`` (``r2med.manifest``),
the commit record of the set, written last with the sha256 and size of each of its files. A result set's anchor is
its result JSON; an expansion set's is ``query_with_hydoc.json`` (the manifest ``query_with_hydoc.manifest.json``
beside ``query_with_hydoc.jsonl``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.errors import DamagedFileError
from r2med.io.atomic import recorded_writes, remove_file, write_jsonl_atomic, write_text_atomic
from r2med.manifest import build_manifest, config_sha256, load_manifest, manifest_path, write_manifest
from r2med.stages.base import Product
from r2med.store.result_set import recorded_at, verify_recorded

logger = logging.getLogger(__name__)


def retire(anchor: Path, keep: set[Path]) -> None:
    """Before a new set is written: remove the old set's files the new one will not replace, then its manifest.

    In this order a kill at any point leaves either the old set whole but for files it no longer matches, or no
    manifest at all: never a manifest beside files it does not describe, nor an old artifact beside a new set.
    """
    try:
        manifest = load_manifest(anchor)
        old = set(recorded_at(manifest_path(anchor), manifest)) if manifest is not None else set()
    except DamagedFileError:
        old = set()
    for stale in sorted(old - keep - {manifest_path(anchor)}):
        remove_file(stale)
    remove_file(manifest_path(anchor))


def write_product(anchor: Path, product: Product, *, system: str, dataset: Dataset, config: dict[str, Any],
                  start: float) -> None:
    """Write ``product``'s files beside ``anchor`` atomically, then (a complete product only) their manifest."""
    folder = anchor.parent
    paths = {name: folder / name for name in product.files}
    retire(anchor, set(paths.values()))
    with recorded_writes() as written:
        for name, content in product.files.items():
            if isinstance(content, str):
                write_text_atomic(paths[name], content)
            else:
                write_jsonl_atomic(paths[name], content)
    if product.problem is not None:  # a rerun makes it again: no manifest vouches for it
        return
    members = {path.name: digest for path, digest in written.items()}
    write_manifest(anchor, build_manifest(system=system, dataset=dataset, config=config, details=product.details,
                                          timings={"total": time.perf_counter() - start}, files=members))


def stored_product(anchor: Path, config: dict[str, Any], *, dataset: str) -> dict[str, Any] | None:
    """The manifest details of the set at ``anchor`` when it was made by exactly ``config`` and its files are as
    its manifest records them; None when it is to be made (again): no manifest (never made, unfinished, or made by
    an older r2med), another configuration, an unusable manifest, or a file of the set removed.

    A file of the set that is there but does not match its manifest (edited by hand, or damaged) is not remade over:
    DamagedFileError (exit 5) names it and how to have it made again.
    """
    try:
        manifest = load_manifest(anchor)
        if manifest is None:
            found = sorted(p.name for p in anchor.parent.glob(f"{anchor.stem}.*"))
            if found:
                logger.warning("%s: %s in %s has no manifest (written by an older r2med, or by a run that did not "
                               "finish); making it again", dataset, ", ".join(found), anchor.parent)
            return None
        if manifest["config_sha256"] != config_sha256(config):
            logger.info("%s: %s was made by another configuration; making it again", dataset, manifest_path(anchor))
            return None
        files = recorded_at(manifest_path(anchor), manifest)
    except DamagedFileError as exc:
        logger.warning("%s: %s; making the set again", dataset, exc)
        return None
    missing = sorted(path.name for path in files if not path.exists())
    if missing:
        logger.warning("%s: %s of the set of %s is missing; making it again", dataset, ", ".join(missing),
                       manifest_path(anchor))
        return None
    try:
        verify_recorded(manifest_path(anchor), manifest)
    except DamagedFileError as exc:
        fix = (f"r2med keeps it; to have it made again, delete {Path(exc.path).name} and {manifest_path(anchor).name} "
               f"in {anchor.parent}")
        raise DamagedFileError(exc.path, exc.reason, fix) from None
    return dict(manifest.get("details", {}))
