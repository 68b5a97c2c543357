"""First-stage run files from outside r2med, checksummed: a local file is pinned, a URL is downloaded once.

``r2med reproduce --first-stage`` takes stored runs made elsewhere (the authors' published E5 top 100 of
ReasonRank's repository, a run file of one's own). Reranking numbers are only worth comparing while those runs are
the ones first used, so r2med records each file's sha256 and size and refuses a changed file on reuse:

- a local file: its digest is recorded under ``<R2MED_HOME>/first-stage/pins/`` (keyed by its resolved path) the
  first time it is used; a later use of a file at that path with other bytes is an ``InvalidInputError`` (exit 5)
  naming both digests, unless ``force`` (then the new digest is recorded);
- a URL (``{dataset}`` in it stands for each dataset's name): downloaded through ``r2med.http.download`` into
  ``<R2MED_HOME>/first-stage/downloads/<sha256 of the URL, 16 hex>/<Dataset>.txt`` with a sidecar checksum
  (``r2med.io.verified``); a cached file that no longer matches it is refused, unless ``force`` (downloaded again).
  With ``expected`` (the digest r2med knows for a published file) a download with other bytes is refused too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError
from r2med.io.atomic import write_text_atomic
from r2med.io.digest import Digest, digest_file
from r2med.io.verified import read_sidecar, verify_file, write_verified

ROOT = "first-stage"


@dataclass(frozen=True)
class Pinned:
    """One dataset's first-stage file: where it came from (``source``, a path or URL), where it is, its digest and
    whether it was recorded (or downloaded) just now."""

    dataset: str
    source: str
    path: Path
    digest: Digest
    new: bool

    def to_json(self) -> dict[str, object]:
        return {"dataset": self.dataset, "source": self.source, "path": str(self.path), **self.digest.to_json(),
                "recorded_now": self.new}


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def pin_local(dataset: str, path: Path, home: Path, *, force: bool = False) -> Pinned:
    """Record (or check) the digest of the local first-stage file ``path`` of ``dataset``."""
    path = Path(path)
    if not path.is_file():
        raise MissingResourceError(f"first stage {path}: no such file")
    source = str(path.resolve())
    digest = digest_file(path)
    record = Path(home) / ROOT / "pins" / f"{_key(source)}.json"
    known = None
    if record.is_file():
        try:
            raw = json.loads(record.read_text(encoding="utf-8"))
            known = Digest.from_json(raw["digest"]) if raw.get("source") == source else None
        except (OSError, ValueError, KeyError, TypeError):
            known = None  # an unreadable record is recorded again
    if known is not None and known != digest and not force:
        raise InvalidInputError(
            f"first stage {path} changed since r2med first used it (sha256 {known.sha256[:12]}..., {known.size} bytes "
            f"recorded; now {digest.sha256[:12]}..., {digest.size} bytes): reranking it would not reproduce what was "
            "reranked before; restore the file, or pass --force to use the new one (its checksum is recorded instead)")
    if known != digest:
        write_text_atomic(record, json.dumps({"source": source, "dataset": dataset, "digest": digest.to_json()},
                                             sort_keys=True) + "\n")
    return Pinned(dataset, source, path, digest, known != digest)


def fetch_url(dataset: str, url: str, home: Path, *, template: str | None = None, expected: Digest | None = None,
              force: bool = False, get: Callable[[str], bytes] | None = None) -> Pinned:
    """``dataset``'s first-stage file from ``url``: the cached download when it still matches its checksum, else
    downloaded (``get``: ``r2med.http.download.download``). ``template``: the URL as given (``{dataset}`` in it);
    the files of one template share a folder, so it is a directory of ``<Dataset>.txt`` runs."""
    folder = Path(home) / ROOT / "downloads" / _key(template or url)
    target = folder / f"{dataset}.txt"
    if target.is_file() and not force:
        recorded = read_sidecar(target)
        if recorded is None:
            raise InvalidInputError(f"{target}: a download of {url} without its checksum (interrupted?); pass --force "
                                    "to download it again")
        try:
            verify_file(target, recorded)
        except DamagedFileError as exc:
            raise InvalidInputError(f"the download of {url} changed since r2med fetched it: {exc.reason}; pass --force "
                                    "to download it again") from None
        _check_expected(url, recorded, expected)
        return Pinned(dataset, url, target, recorded, False)
    if get is None:
        from r2med.http.download import download as get
    body = get(url)
    digest = Digest.of(body)
    _check_expected(url, digest, expected)
    write_verified(target, lambda handle: handle.write(body), binary=True)
    return Pinned(dataset, url, target, digest, True)


def _check_expected(url: str, digest: Digest, expected: Digest | None) -> None:
    if expected is not None and digest != expected:
        raise InvalidInputError(
            f"{url} is not the file r2med knows (sha256 {digest.sha256[:12]}..., {digest.size} bytes; expected "
            f"{expected.sha256[:12]}..., {expected.size} bytes): it changed where it is published; pass the file you "
            "mean to rerank as a path or URL of your own")
