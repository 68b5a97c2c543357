"""Find and load datasets: from ``--data-dir`` (one dataset or a directory of them) or the hub cache.

A dataset from the hub cache is used only when its files still have the sha256 recorded when they were
downloaded: a changed or damaged file is downloaded again with a warning (offline: an error saying how).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from r2med.datasets.catalog import catalog, resolve_names
from r2med.datasets.local import find_layout, has_dataset_files, is_dataset_dir, load_dir, missing_files
from r2med.datasets.model import Dataset
from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError
from r2med.io.names import check_dataset_name
from r2med.settings import Settings, get_settings

logger = logging.getLogger(__name__)


def _canonical_or_none(name: str) -> str | None:
    return catalog().canonical(name) if name in catalog() else None


_FIX = "rename the directory"


def local_dataset_dirs(data_dir: Path, names: list[str] | None = None) -> list[tuple[str, Path]]:
    """``(dataset name, directory)`` pairs under ``data_dir``.

    ``data_dir`` is one dataset (it holds ``corpus.jsonl``) or a directory of datasets named after
    them (public names or the authors' old names, any case). Without ``names`` (or with ``all``),
    every dataset directory found is returned, R2MED's in the paper's order first.

    Each name becomes the stem of the result files (``<Dataset>.json``), so it must be a usable file name
    (``r2med.io.names``: no reserved suffix such as ``.manifest``). Two directories of the selected
    datasets that hold the same dataset (``Biology``, ``biology``, ``Stack-Biology``) or names that differ
    only in case are an error listing them: one would silently be dropped, or overwrite the other's results.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise MissingResourceError(f"--data-dir {data_dir}: no such directory")
    want_all = not names or [n.lower() for n in names] == ["all"]
    if is_dataset_dir(data_dir):
        folder = data_dir.name or Path(os.path.abspath(data_dir)).name  # "." names the directory it stands for
        name = _canonical_or_none(folder) or folder
        if not want_all and all(_canonical_or_none(n) != name and n != folder for n in names or []):
            raise MissingResourceError(f"--data-dir {data_dir} holds one dataset ({name}), not {', '.join(names or [])}")
        check_dataset_name(name, what=f"--data-dir {data_dir}: the dataset directory", fix=_FIX,
                           error=InvalidInputError)
        return [(name, data_dir)]
    found: dict[str, list[Path]] = {}
    incomplete: dict[str, Path] = {}
    for child in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        key = _canonical_or_none(child.name) or child.name
        if is_dataset_dir(child):
            found.setdefault(key, []).append(child)
        elif has_dataset_files(child):
            incomplete.setdefault(key, child)
    if not found and has_dataset_files(data_dir):
        find_layout(data_dir)  # one dataset directory missing its corpus: say which file is missing where
    if want_all:
        order = [n for n in catalog().names() if n in found] + sorted(n for n in found if n not in catalog())
        if not order:
            broken = "; ".join(missing_files(path) for path in incomplete.values())
            raise MissingResourceError(
                f"--data-dir {data_dir}: no dataset directories inside (each needs corpus.jsonl, query.jsonl, qrels.jsonl)"
                + (f"; {broken}" if broken else "")
            )
        for path in incomplete.values():
            logger.warning("skipped %s", missing_files(path))
    else:
        order = []
        for name in names or []:
            key = _canonical_or_none(name) or name
            if key not in found and key in incomplete:
                find_layout(incomplete[key])  # raises, naming the missing file
            if key not in found:
                have = ", ".join(found) or "none"
                raise MissingResourceError(f"--data-dir {data_dir}: no directory for dataset '{name}' (found: {have})")
            order.append(key)
    _check_selected(data_dir, {name: found[name] for name in order})
    return [(name, found[name][0]) for name in order]


def _check_selected(data_dir: Path, selected: dict[str, list[Path]]) -> None:
    """InvalidInputError when a selected dataset has several directories, two names differ only in case, or a
    name cannot be a result file's stem."""
    for name, folders in selected.items():
        if len(folders) > 1:
            listed = ", ".join(repr(f.name) for f in folders)
            raise InvalidInputError(f"--data-dir {data_dir}: the directories {listed} all hold dataset {name!r}; "
                                    "keep one of them (move or rename the others)")
    by_case: dict[str, list[str]] = {}
    for name in selected:
        by_case.setdefault(name.casefold(), []).append(name)
    for same in by_case.values():
        if len(same) > 1:
            listed = ", ".join(repr(selected[n][0].name) for n in sorted(same))
            raise InvalidInputError(f"--data-dir {data_dir}: the directories {listed} all hold dataset names that "
                                    "differ only in case; their result files would overwrite each other on a "
                                    "case-insensitive file system; rename one of them")
    for name, folders in selected.items():
        check_dataset_name(name, what=f"--data-dir {data_dir}: the dataset directory", fix=_FIX, error=InvalidInputError)


def load_datasets(
    names: list[str] | None = None, *, data_dir: Path | None = None, settings: Settings | None = None
) -> list[Dataset]:
    """Load datasets by name from ``data_dir`` or, without it, from the hub cache (downloading if allowed)."""
    return [load_dataset(name, path=path, settings=settings) for name, path in locate(names, data_dir=data_dir, settings=settings)]


def locate(
    names: list[str] | None = None, *, data_dir: Path | None = None, settings: Settings | None = None
) -> list[tuple[str, Path | None]]:
    """Names and directories to load; a ``None`` directory means the hub (not fetched yet)."""
    if data_dir is not None:
        return list(local_dataset_dirs(Path(data_dir), names))
    return [(spec.name, None) for spec in resolve_names(names)]


def load_dataset(name: str, *, path: Path | None = None, settings: Settings | None = None) -> Dataset:
    """Load one dataset from ``path``, or from the hub cache when ``path`` is None (downloads if allowed)."""
    if path is not None:
        return load_dir(path, name)
    from r2med.datasets.hub import download  # the hub client: not for a dataset directory

    settings = settings or get_settings()
    spec = catalog().get(name)
    folder = download(spec, settings)
    try:
        dataset = _load_cached(spec.name, folder, settings)
    except DamagedFileError as exc:
        if settings.hf_offline:
            raise
        logger.warning("%s; downloading it again", exc)
        folder = download(spec, settings, force=True)
        dataset = _load_cached(spec.name, folder, settings)
    return replace(dataset, revision=spec.revision)


def _load_cached(name: str, folder: Path, settings: Settings) -> Dataset:
    """A dataset of the hub cache, checked against the sha256 of its files recorded at download."""
    from r2med.datasets.hub import cache_dir, cached_sha256
    from r2med.io.readers import file_sha256

    spec = catalog().get(name)
    fix = f"download it again: r2med datasets download {name} --force"
    try:
        recorded = cached_sha256(spec, settings)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DamagedFileError(cache_dir(spec, settings), f"its download record cannot be read ({exc})", fix) from exc
    def check(actual: dict[str, str]) -> None:
        for file, sha in sorted(recorded.items()):
            if actual.get(file) != sha:
                raise DamagedFileError(folder / file, "does not match the sha256 recorded when it was downloaded "
                                                      "(changed or damaged)", fix)

    try:
        dataset = load_dir(folder, name)
    except InvalidInputError:
        check({file: file_sha256(folder / file) for file in recorded if (folder / file).is_file()})
        raise  # the files are as downloaded: the problem is theirs, not damage
    check(dict(dataset.sha256))
    return dataset


def dataset_loaders(
    names: list[str] | None = None, *, data_dir: Path | None = None, settings: Settings | None = None, keep: bool = False
) -> list[tuple[str, Callable[[], Dataset]]]:
    """``(name, loader)`` for every dataset :func:`locate` finds; a loader reads its dataset when called.

    Loading late lets a bad dataset fail after the earlier ones were done; with ``keep`` a dataset read once
    stays in memory for the next stage of a pipeline.
    """
    return loaders_for(locate(names, data_dir=data_dir, settings=settings), settings=settings, keep=keep)


def loaders_for(
    located: list[tuple[str, Path | None]], *, settings: Settings | None = None, keep: bool = False
) -> list[tuple[str, Callable[[], Dataset]]]:
    """``(name, loader)`` for datasets :func:`locate` found (``r2med.planning`` locates them before any work)."""
    loaded: dict[str, Dataset] = {}

    def loader(name: str, path: Path | None) -> Callable[[], Dataset]:
        def load() -> Dataset:
            if name in loaded:
                return loaded[name]
            dataset = load_dataset(name, path=path, settings=settings)
            if keep:
                loaded[name] = dataset
            return dataset
        return load

    return [(name, loader(name, path)) for name, path in located]
