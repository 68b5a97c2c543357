"""Saving and loading a BM25 index: ``index.npz`` (arrays, no pickle) + ``index.json`` (the rest).

Both files are written to a temporary name in the target directory and moved into
place with :func:`os.replace`, so a reader never sees a half-written file. The JSON
file is written last and names the format version; it is what marks the index as
complete. It records the sha256 and size of ``index.npz`` and carries the checksum of
its own content (``self_sha256``): ``load_index`` reads both through the verified reader
(``r2med.io.verified``), so a cut, zeroed or edited file (counts, document ids) is a
``DamagedFileError``, never other numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError
from r2med.io.atomic import write_atomic_digest
from r2med.io.digest import Digest
from r2med.io.verified import read_verified, read_verified_json, write_verified_json
from r2med.retrievers.bm25.sparse import CsrMatrix

__all__ = ["FORMAT", "FORMAT_VERSION", "load_index", "save_index"]

FORMAT = "r2med-bm25-index"
FORMAT_VERSION = 1
_ARRAYS = "index.npz"
_META = "index.json"


def save_index(
    directory: str | Path,
    *,
    params: dict[str, Any],
    vocabulary: list[str],
    doc_ids: list[str] | None,
    counts: CsrMatrix | Any,
) -> Path:
    """Write the term counts and metadata of an index into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {
        "indptr": np.asarray(counts.indptr, dtype=np.int64),
        "indices": np.asarray(counts.indices, dtype=np.int32 if counts.shape[1] < 2**31 else np.int64),
        "counts": np.asarray(counts.data, dtype=np.int32),
        "shape": np.asarray(counts.shape, dtype=np.int64),
    }
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "params": params,
        "n_docs": int(counts.shape[0]),
        "vocabulary": vocabulary,
        "doc_ids": doc_ids,
    }
    arrays_digest = write_atomic_digest(directory / _ARRAYS, lambda h: np.savez(h, **arrays), binary=True)
    write_verified_json(directory / _META, {**meta, "arrays": arrays_digest.to_json()})
    return directory


def load_index(directory: str | Path) -> tuple[dict[str, Any], CsrMatrix]:
    """Read what :func:`save_index` wrote: the metadata dict and the CSR count matrix.

    DamagedFileError (an InvalidInputError) when either file does not match its checksum or cannot be read.
    """
    directory = Path(directory)
    meta_path, arrays_path = directory / _META, directory / _ARRAYS
    if not meta_path.is_file() or not arrays_path.is_file():
        raise MissingResourceError(
            f"no BM25 index in {directory}: expected {_META} and {_ARRAYS}; build one and save it there"
        )

    def check_format(meta: dict[str, Any]) -> None:
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise InvalidInputError(
                f"{meta_path}: format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
                f"{FORMAT!r} version {FORMAT_VERSION}; rebuild the index with this version of r2med"
            )

    meta = read_verified_json(meta_path, precheck=check_format)
    try:
        expected = Digest.from_json(meta.pop("arrays", None))
    except ValueError as exc:
        raise DamagedFileError(meta_path, f"does not record the checksum of {_ARRAYS} ({exc})") from exc

    def read_arrays(path: Path) -> tuple[tuple[int, ...], CsrMatrix]:
        with np.load(path, allow_pickle=False) as data:
            shape = tuple(int(x) for x in data["shape"])
            try:
                return shape, CsrMatrix(data["counts"], data["indices"], data["indptr"], (shape[0], shape[1]))
            except (ValueError, IndexError) as exc:  # arrays that make no CSR matrix of that shape
                raise DamagedFileError(path, f"does not hold a count matrix ({exc})") from exc

    shape, counts = read_verified(arrays_path, read_arrays, expected=expected)
    if shape != (meta["n_docs"], len(meta["vocabulary"])):
        raise InvalidInputError(
            f"{arrays_path}: matrix shape {shape} does not match {meta_path} "
            f"({meta['n_docs']} documents, {len(meta['vocabulary'])} terms); rebuild the index"
        )
    return meta, counts
