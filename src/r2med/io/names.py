"""Names that become one component of a path: the ONE check every such name goes through.

System names, reranker and LLM names, GAR method names, fused names, ``--system`` and dataset names each
become one folder (or the stem of a file name) under ``--output`` or R2MED_HOME. A name that is empty,
``.`` or ``..``, or holds ``/`` or ``\\`` would write somewhere else (``--name ../../x``), so every one of
them is checked here before it is joined to a path. The rules, all cheap and the same on every platform
(results directories travel between machines):

- not empty, not ``.`` or ``..``, no ``/`` or ``\\``;
- no control characters (NUL, newlines, tabs, DEL, C1 controls, line separators) and no text that is
  not valid Unicode (a non-UTF-8 file name read with ``surrogateescape``);
- no leading or trailing whitespace, no trailing ``.`` (Windows drops both, so two names would meet);
- no leading ``-`` (a name is printed in hints such as ``r2med run --retriever NAME``, where it would
  read as an option);
- not a Windows device name (``CON``, ``PRN``, ``AUX``, ``NUL``, ``COM1``-``COM9``, ``LPT1``-``LPT9``,
  with or without an extension, any case);
- at most :data:`MAX_NAME_BYTES` bytes in UTF-8 (the usual file-name limit).

Dataset names (:func:`check_dataset_name`) also become file-name stems beside each other
(``<Dataset>.json``, ``.run``, ``.per_query.jsonl``, ``.manifest.json``, ``.windows.jsonl``), so they may
not end in a :data:`RESERVED_SUFFIXES` suffix (any case): a dataset ``x.manifest`` would write its result
to ``x.manifest.json``, the manifest of dataset ``x``. They are limited to :data:`MAX_DATASET_NAME_BYTES`
so that the longest file name made from them, with its temporary-file prefix, still fits.

>>> check_name("bm25+minilm", what="--name")
'bm25+minilm'
>>> check_name("../../x", what="--name")
Traceback (most recent call last):
...
r2med.errors.UsageError: --name '../../x' cannot be used as a folder or file name: it contains '/'; use a plain name such as 'bm25+minilm' (letters, digits, '.', '_', '+', '-')
>>> name_problem("x.Manifest", dataset=True)
"it ends in '.manifest', the suffix of r2med's own files beside a result"
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from r2med.errors import R2MedError, UsageError

#: what r2med writes beside ``<Dataset>.json`` as ``<Dataset><suffix>.json(l)``; a dataset name may not end so
RESERVED_SUFFIXES = (".manifest", ".per_query", ".windows")
#: the usual limit of one file name (ext4, APFS, NTFS count 255 bytes or UTF-16 units)
MAX_NAME_BYTES = 255
#: dataset names: 255 less the longest file made from one (``.<Dataset>.per_query.jsonl.XXXXXXXX.tmp``, 30 more)
MAX_DATASET_NAME_BYTES = 200

_WINDOWS_DEVICE = re.compile(r"(?i)(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?")
_CONTROL = ("Cc", "Zl", "Zp", "Cs")
DEFAULT_FIX = "use a plain name such as 'bm25+minilm' (letters, digits, '.', '_', '+', '-')"


def name_problem(name: Any, *, dataset: bool = False) -> str | None:
    """What makes ``name`` unusable as one path component (``None`` when it is fine).

    >>> [name_problem(n) for n in ("bge-reranker", "", "..", "-x", "nul.txt", "x.")]  # doctest: +NORMALIZE_WHITESPACE
    [None, 'it is empty', "it is '..', which names a folder above", "it starts with '-'",
     'it is a reserved device name on Windows', "it ends with '.'"]
    >>> name_problem("é" * 128)
    'it is 256 bytes long in UTF-8; the limit is 255'
    """
    if not isinstance(name, str):
        return f"it is {type(name).__name__}, not a string"
    if not name or not name.strip():
        return "it is empty" if not name else "it is only whitespace"
    if name in (".", ".."):
        return f"it is {name!r}, which names {'this folder' if name == '.' else 'a folder above'}"
    for separator in ("/", "\\"):
        if separator in name:
            return f"it contains {separator!r}"
    for char in name:
        if unicodedata.category(char) in _CONTROL:
            if unicodedata.category(char) == "Cs":
                return "it is not valid Unicode (a file name that is not UTF-8?)"
            return f"it contains the control character {char!r}"
    if name != name.strip():
        return "it starts or ends with whitespace"
    if name.startswith("-"):
        return "it starts with '-'"
    if name.endswith("."):
        return "it ends with '.'"
    if _WINDOWS_DEVICE.fullmatch(name):
        return "it is a reserved device name on Windows"
    size = len(name.encode("utf-8"))
    limit = MAX_DATASET_NAME_BYTES if dataset else MAX_NAME_BYTES
    if size > limit:
        return f"it is {size} bytes long in UTF-8; the limit is {limit}"
    if dataset:
        lowered = name.lower()
        for suffix in RESERVED_SUFFIXES:
            if lowered.endswith(suffix):
                return f"it ends in {suffix!r}, the suffix of r2med's own files beside a result"
    return None


def check_name(
    name: Any, *, what: str, fix: str = DEFAULT_FIX, error: type[R2MedError] = UsageError, dataset: bool = False
) -> str:
    """``name`` if it is usable as one path component, else ``error`` naming ``what`` (a flag or file key),
    the value, the problem and ``fix``. ``dataset`` adds the dataset-name rules."""
    problem = name_problem(name, dataset=dataset)
    if problem is not None:
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise error(f"{what} {shown} cannot be used as a folder or file name: {problem}; {fix}")
    return name


def check_dataset_name(name: Any, *, what: str, fix: str, error: type[R2MedError] = UsageError) -> str:
    """:func:`check_name` with the dataset-name rules (reserved suffixes, :data:`MAX_DATASET_NAME_BYTES`)."""
    return check_name(name, what=what, fix=fix, error=error, dataset=True)
