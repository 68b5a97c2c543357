"""The pointwise score cache: model + (query, document) text -> score, so that a rerun is free.

One append-only JSONL file per scorer under ``<R2MED_HOME>/rerank-scores/<scorer key>.jsonl``:
a first line ``{"scorer": {...what the key was made of...}}`` and then ``{"k": pair key, "s": score}``
lines, written a batch at a time (flushed and fsynced). The scorer key hashes the model id, its
weights' fingerprint (hub commit or local directory digest), the max length, the input template,
the dtype and the format version; the pair key hashes the exact query and document texts. Never a
name alone. A torn last line (a killed run) is ignored and cut off before the next write.

After each batch the sha256 and size of the file so far go to ``<scorer key>.jsonl.sha256``; the file is
read through the verified reader (``r2med.io.verified.read_log``), so an edited, cut or zeroed part is
found: the cache is then started again with a warning (the pairs are scored again), never used. Lines after
the checksummed part come from a run killed between a batch and its checksum and are read line by line; a
line there that is not a score record is an error naming it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from r2med.errors import DamagedFileError, InvalidInputError
from r2med.io.atomic import naming, remove_file
from r2med.io.jsonsafe import loads
from r2med.io.verified import LogSeal, read_log, sidecar

logger = logging.getLogger(__name__)

FORMAT = "r2med-rerank-scores/1"


def scorer_key(material: Mapping[str, Any]) -> str:
    """32 hex digits naming a scorer: sha256 over its material (sorted JSON) and the format version.

    >>> a = scorer_key({"model": "m", "max_length": 512})
    >>> len(a), a == scorer_key({"max_length": 512, "model": "m"}), a == scorer_key({"model": "m", "max_length": 256})
    (32, True, False)
    """
    payload = json.dumps({"format": FORMAT, **material}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def pair_key(query: str, document: str) -> str:
    """sha256 hex over the two texts, length-prefixed so the boundary counts.

    >>> pair_key("ab", "c") != pair_key("a", "bc")
    True
    """
    digest = hashlib.sha256()
    for text in (query, document):
        raw = text.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


class ScoreCache:
    """Scores of one scorer, read at open and appended in batches.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> cache = ScoreCache.open(root, {"model": "m"})
    >>> cache.put_many({pair_key("q", "d"): 1.5})
    >>> ScoreCache.open(root, {"model": "m"}).get(pair_key("q", "d"))
    1.5
    """

    def __init__(self, path: Path, material: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.material = dict(material)
        self._scores: dict[str, float] = {}
        self._good_end = 0
        self._seal = LogSeal()
        self._restart = False  # the file was damaged: it is written anew at the next batch
        self.hits = 0
        self.misses = 0
        if self.path.exists():
            self._load()

    @classmethod
    def open(cls, root: Path, material: Mapping[str, Any]) -> ScoreCache:
        """The cache of the scorer described by ``material`` under ``root``."""
        return cls(Path(root) / f"{scorer_key(material)}.jsonl", material)

    def _load(self) -> None:
        try:
            log = read_log(self.path)
        except DamagedFileError as exc:
            logger.warning("%s; its scores are not used, the pairs are scored again", exc)
            self._restart = True
            return
        if log.tail.strip():  # every record ends in a newline; what follows the last one is torn
            logger.warning("%s:%d: ignoring a torn last line (an interrupted run)", self.path, len(log.lines) + 1)
        for number, _, raw in log.lines:
            if not raw.strip():
                continue
            try:
                row = loads(raw)
            except ValueError:  # malformed, or past Python's limits (JSONLimitError)
                row = None
            score = _score(row)
            if score is not None:
                self._scores[str(row["k"])] = score
            elif not (isinstance(row, dict) and "scorer" in row and number == 1):
                raise InvalidInputError(
                    f"{self.path}:{number}: not a score record (expected {{\"k\": ..., \"s\": <number>}}); delete the file to rescore"
                )
        self._good_end = len(log.data) - len(log.tail)
        self._seal = LogSeal(log.data[: self._good_end])

    def __len__(self) -> int:
        return len(self._scores)

    def __contains__(self, key: object) -> bool:
        return key in self._scores

    def get(self, key: str) -> float | None:
        """The stored score of a pair key, or None; counts hits and misses."""
        score = self._scores.get(key)
        if score is None:
            self.misses += 1
        else:
            self.hits += 1
        return score

    def put_many(self, scores: Mapping[str, float] | Iterable[tuple[str, float]]) -> None:
        """Store scores: appended as one write, flushed and fsynced before returning."""
        items = list(scores.items() if isinstance(scores, Mapping) else scores)
        if not items:
            return
        body = "".join(json.dumps({"k": key, "s": float(score)}) + "\n" for key, score in items)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._restart:  # the checksum goes first: a kill in between leaves an unchecked file, read line by line
            remove_file(sidecar(self.path))
        with naming(self.path), self.path.open("r+b" if self.path.exists() else "w+b") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size > self._good_end:
                if self._restart:
                    logger.warning("%s: writing the damaged cache anew", self.path)
                else:
                    logger.warning("%s: cutting off %d bytes of a torn last line", self.path, size - self._good_end)
                handle.truncate(self._good_end)
                handle.seek(self._good_end)
            written = b""
            if self._good_end == 0:
                written = (json.dumps({"scorer": self.material}, sort_keys=True) + "\n").encode("utf-8")
                handle.write(written)
            self._write(handle, body)
            self._good_end = handle.tell()
        self._restart = False
        self._seal.extend(written + body.encode("utf-8"))
        self._seal.write(self.path)
        self._scores.update((key, float(score)) for key, score in items)

    @staticmethod
    def _write(handle: IO[bytes], body: str) -> None:
        handle.write(body.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


def _score(row: Any) -> float | None:
    """The score of a record ``{"k": key, "s": finite number}``, else None."""
    if not (isinstance(row, dict) and "k" in row and "s" in row):
        return None
    value = row["s"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
