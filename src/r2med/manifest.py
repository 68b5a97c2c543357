"""Manifests: what produced a result, written beside it as ``<Dataset>.manifest.json``.

A manifest records the r2med version, Python and the versions of the packages that shape the numbers,
the dataset (revision and file hashes), the stage's full resolved configuration and its hash, the
models (ids, revisions, pooling, instructions), prompt hashes, timings, LLM requests and tokens, and
the hardware. Secrets never enter it: any configuration key that looks like a credential is dropped.

The configuration hash is also what lets a pipeline resume: a stored result whose manifest has the
same ``config_sha256`` was made by the same configuration on the same data, so it is reused.

A manifest is the commit record of its result set: it is written last and records the sha256 and size of every
file of the set (``"files"``: the run, the per-query values, the result JSON, the stage's artifacts). Which files
make a set, and how a stored one is verified and read: :mod:`r2med.store.result_set`.

>>> config_sha256({"b": 1, "a": [1, 2]}) == config_sha256({"a": [1, 2], "b": 1})
True
>>> scrub({"model": "m", "api_key": "sk-...", "nested": {"HF_TOKEN": "x", "k": 1}})
{'model': 'm', 'nested': {'k': 1}}
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

from r2med.errors import DamagedFileError
from r2med.io.atomic import write_text_atomic
from r2med.io.digest import Digest

MANIFEST_SUFFIX = ".manifest.json"
#: packages whose versions can change numbers (reported when installed)
PACKAGES = (
    "numpy", "scipy", "pytrec-eval-terrier", "huggingface_hub", "torch", "transformers", "sentence-transformers",
    "peft", "openai", "tqdm",
)
#: a key that names a credential: an API key (not the NAME of its variable), a token (not a count of tokens), ...
_SECRET = re.compile(r"(api[_-]?key(?![_-]env)|(?:^|[_-])token$|secret|password|authorization|credential)",
                     re.IGNORECASE)


def scrub(value: Any) -> Any:
    """A copy of ``value`` without any mapping key that names a credential.

    Counts and limits of tokens are kept (they change results and key them):

    >>> scrub({"api_key": "sk-1", "hf_token": "x", "max_tokens": 512, "prompt_tokens": 9, "api_key_env": "KEY"})
    {'max_tokens': 512, 'prompt_tokens': 9, 'api_key_env': 'KEY'}
    """
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET.search(str(k))}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def canonical_json(value: Any) -> str:
    return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_sha256(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``config`` (secrets dropped first)."""
    return hashlib.sha256(canonical_json(scrub(config)).encode("utf-8")).hexdigest()


def package_versions() -> dict[str, str]:
    """The installed version of each package of ``PACKAGES`` (those not installed are left out)."""
    found = _metadata_files({_normalise(name) for name in PACKAGES})
    versions = {}
    for name in PACKAGES:
        version = installed_version(name, found)
        if version is not None:
            versions[name] = version
    return versions


_VERSION_LINE = re.compile(r"^Version:[ \t]*(\S[^\r\n]*?)[ \t]*\r?$", re.MULTILINE)
_ZIPPED = object()  # a zip archive on sys.path: ask importlib.metadata, which reads them


def _normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them.

    >>> _normalise("Sentence_Transformers"), _normalise("pytrec.eval-terrier")
    ('sentence-transformers', 'pytrec-eval-terrier')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_files(wanted: set[str]) -> dict[str, Any]:
    """For each distribution of ``wanted`` (normalised names) installed on ``sys.path``: its metadata file (the first
    ``<name>-<version>.dist-info`` or ``<name>[-...].egg-info`` of its name along ``sys.path``, as importlib.metadata
    finds it), or ``_ZIPPED`` for all of them when a zip archive on ``sys.path`` could hold one."""
    found: dict[str, Any] = {}
    for entry in sys.path:
        folder = entry or "."
        try:
            children = os.listdir(folder)
        except OSError:  # a missing folder, or a zip archive
            if os.path.isfile(folder):
                return dict.fromkeys(wanted, _ZIPPED)
            continue
        for child in children:
            stem, _, suffix = child.rpartition(".")
            if suffix not in ("dist-info", "egg-info"):
                continue
            name = _normalise(stem.partition("-")[0])
            if name in wanted and name not in found:
                path = os.path.join(folder, child)
                found[name] = (os.path.join(path, "METADATA" if suffix == "dist-info" else "PKG-INFO")
                               if os.path.isdir(path) else path)  # an egg-info may be the PKG-INFO file itself
    return found


def installed_version(name: str, found: dict[str, Any] | None = None) -> str | None:
    """``importlib.metadata.version(name)``, or None when ``name`` is not installed.

    Read from the ``Version:`` line of the distribution's metadata header, found by one look at each ``sys.path``
    folder (``found``: what :func:`_metadata_files` found). Importing ``importlib.metadata`` (its email parser,
    which it runs over the whole file, license texts included) would cost every command that writes a result 15 ms
    and 1 ms a package.

    >>> from importlib import metadata
    >>> installed_version("numpy") == metadata.version("numpy"), installed_version("no-such-package-r2med")
    (True, None)
    """
    key = _normalise(name)
    path = (found if found is not None else _metadata_files({key})).get(key)
    text = None
    if isinstance(path, str):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            text = None
    if text is not None:
        match = _VERSION_LINE.search(text.split("\n\n", 1)[0])  # the header ends at the first blank line
        if match:
            return match.group(1)
    if path is None:
        return None
    from importlib import metadata  # a zipped or unusual install: importlib.metadata's own answer

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def hardware() -> dict[str, Any]:
    """CPU and, when torch is already loaded (never imported here), the GPUs it sees."""
    info: dict[str, Any] = {"machine": platform.machine(), "processor": platform.processor() or None}
    try:
        info["cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        info["cpus"] = os.cpu_count()
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:  # noqa: BLE001 - a broken CUDA setup must not lose a finished result
            info["gpus"] = "unknown"
    return info


def environment() -> dict[str, Any]:
    from r2med import __version__

    return {
        "r2med": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "hardware": hardware(),
    }


def build_manifest(
    *,
    system: str,
    dataset: Any,
    config: dict[str, Any],
    timings: dict[str, float],
    details: dict[str, Any] | None = None,
    files: dict[str, Digest] | None = None,
) -> dict[str, Any]:
    """The manifest of one (system, dataset) result; ``dataset`` is an :class:`r2med.datasets.Dataset`.

    ``files``: the digest of every file of the result set, by file name (in the manifest's directory).
    """
    config = scrub(_jsonable(config))
    return {
        "files": {name: digest.to_json() for name, digest in sorted((files or {}).items())},
        "system": system,
        "dataset": {
            "name": dataset.name,
            "revision": dataset.revision,
            "source": dataset.source,
            # absolute, so that a later command (r2med report) finds the texts and judgements from any directory
            "directory": os.path.abspath(dataset.source) if dataset.source else None,
            "sha256": dict(dataset.sha256),
            "documents": len(dataset.doc_ids),
            "queries": len(dataset.queries),
        },
        "config": config,
        "config_sha256": config_sha256(config),
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "details": scrub(_jsonable(details or {})),
        "environment": environment(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def manifest_path(result_json: Path) -> Path:
    """``<dir>/<Dataset>.json`` -> ``<dir>/<Dataset>.manifest.json``."""
    result_json = Path(result_json)
    return result_json.with_name(result_json.name[: -len(".json")] + MANIFEST_SUFFIX)


def write_manifest(result_json: Path, manifest: dict[str, Any]) -> Path:
    return write_text_atomic(manifest_path(result_json), json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_manifest(result_json: Path) -> dict[str, Any] | None:
    """The manifest beside a result JSON, or None when absent or unreadable."""
    try:
        return load_manifest(result_json)
    except DamagedFileError:
        return None


def load_manifest(result_json: Path) -> dict[str, Any] | None:
    """The manifest beside a result JSON; None when there is none; DamagedFileError when it cannot be used.

    Usable: a JSON object whose ``config_sha256`` is the hash of its ``config`` (an edit of either shows).
    """
    path = manifest_path(result_json)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DamagedFileError(path, f"cannot be read ({exc})") from exc
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise DamagedFileError(path, f"is not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        raise DamagedFileError(path, "is not a manifest (a JSON object with a 'config')")
    if manifest.get("config_sha256") != config_sha256(manifest["config"]):
        raise DamagedFileError(path, "does not match: its config_sha256 is not the hash of its config (edited or damaged)")
    return manifest

