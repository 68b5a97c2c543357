"""Find and load datasets: from ``--data-dir`` (one dataset or a directory of them) or the hub cache.

A dataset from the hub cache is used only when its files still have the sha256 recorded when they were
downloaded: a changed or damaged file is downloaded again with a warning (offline: an error saying how).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from r2med.datasets.catalog import catalog, resolve_names
from r2med.datasets.hub import cached_sha256, download
from r2med.datasets.local import is_dataset_dir, load_dir
from r2med.datasets.model import Dataset
from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError
from r2med.settings import Settings, get_settings

logger = logging.getLogger(__name__)


def _canonical_or_none(name: str) -> str | None:
    return catalog().canonical(name) if name in catalog() else None


def local_dataset_dirs(data_dir: Path, names: list[str] | None = None) -> list[tuple[str, Path]]:
    """``(dataset name, directory)`` pairs under ``data_dir``.

    ``data_dir`` is one dataset (it holds ``corpus.jsonl``) or a directory of datasets named after
    them (public names or the authors' old names, any case). Without ``names`` (or with ``all``),
    every dataset directory found is returned, R2MED's in the paper's order first.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise MissingResourceError(f"--data-dir {data_dir}: no such directory")
    want_all = not names or [n.lower() for n in names] == ["all"]
    if is_dataset_dir(data_dir):
        name = _canonical_or_none(data_dir.name) or data_dir.name
        if not want_all and all(_canonical_or_none(n) != name and n != data_dir.name for n in names or []):
            raise MissingResourceError(f"--data-dir {data_dir} holds one dataset ({name}), not {', '.join(names or [])}")
        return [(name, data_dir)]
    found: dict[str, Path] = {}
    for child in sorted(p for p in data_dir.iterdir() if p.is_dir() and is_dataset_dir(p)):
        found.setdefault(_canonical_or_none(child.name) or child.name, child)
    if want_all:
        order = [n for n in catalog().names() if n in found] + sorted(n for n in found if n not in catalog())
        if not order:
            raise MissingResourceError(
                f"--data-dir {data_dir}: no dataset directories inside (each needs corpus.jsonl, query.jsonl, qrels.jsonl)"
            )
        return [(name, found[name]) for name in order]
    pairs = []
    for name in names or []:
        key = _canonical_or_none(name) or name
        if key not in found:
            have = ", ".join(found) or "none"
            raise MissingResourceError(f"--data-dir {data_dir}: no directory for dataset '{name}' (found: {have})")
        pairs.append((key, found[key]))
    return pairs


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
    from r2med.datasets.hub import cache_dir
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

    return [(name, loader(name, path)) for name, path in locate(names, data_dir=data_dir, settings=settings)]
