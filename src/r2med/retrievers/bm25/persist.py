"""Saving and loading a BM25 index: ``index.npz`` (arrays, no pickle) + ``index.json`` (the rest).

Both files are written to a temporary name in the target directory and moved into
place with :func:`os.replace`, so a reader never sees a half-written file. The JSON
file is written last and names the format version; it is what marks the index as
complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from r2med.errors import InvalidInputError, MissingResourceError
from r2med.io.atomic import write_atomic

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
    counts: sp.csr_matrix,
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
    write_atomic(directory / _ARRAYS, lambda h: np.savez(h, **arrays), binary=True)
    payload = json.dumps(meta, ensure_ascii=False).encode("utf-8")
    write_atomic(directory / _META, lambda h: h.write(payload), binary=True)
    return directory


def load_index(directory: str | Path) -> tuple[dict[str, Any], sp.csr_matrix]:
    """Read what :func:`save_index` wrote: the metadata dict and the CSR count matrix."""
    directory = Path(directory)
    meta_path, arrays_path = directory / _META, directory / _ARRAYS
    if not meta_path.is_file() or not arrays_path.is_file():
        raise MissingResourceError(
            f"no BM25 index in {directory}: expected {_META} and {_ARRAYS}; build one and save it there"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{meta_path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise InvalidInputError(
            f"{meta_path}: format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
            f"{FORMAT!r} version {FORMAT_VERSION}; rebuild the index with this version of r2med"
        )
    with np.load(arrays_path, allow_pickle=False) as data:
        shape = tuple(int(x) for x in data["shape"])
        counts = sp.csr_matrix((data["counts"], data["indices"], data["indptr"]), shape=shape)
    if shape != (meta["n_docs"], len(meta["vocabulary"])):
        raise InvalidInputError(
            f"{arrays_path}: matrix shape {shape} does not match {meta_path} "
            f"({meta['n_docs']} documents, {len(meta['vocabulary'])} terms); rebuild the index"
        )
    counts.has_sorted_indices = True
    return meta, counts
