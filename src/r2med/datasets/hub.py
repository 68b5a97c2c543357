"""Download R2MED datasets from the Hugging Face hub at their pinned revisions, into R2MED_HOME.

Layout of the cache: ``<R2MED_HOME>/datasets/<Name>/<revision>/{corpus,query,qrels}.jsonl`` plus
``r2med-files.json`` recording each file's sha256, written last (atomically): a directory without
it is an interrupted download and is fetched again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from r2med.datasets.catalog import DATASET_FILES, DatasetSpec
from r2med.errors import MissingResourceError, ProviderError
from r2med.hf import hub_unreachable, is_network_error, require_hub, unreachable_error
from r2med.io.atomic import write_text_atomic
from r2med.io.readers import file_sha256
from r2med.settings import ENV_HF_OFFLINE, Settings

logger = logging.getLogger(__name__)

MANIFEST = "r2med-files.json"

#: How to go on without the hub, in the one-line error of an unreachable hub.
OFFLINE_WAY = (f"set {ENV_HF_OFFLINE}=1 and use the datasets already downloaded ('r2med datasets list' shows them) "
               "or --data-dir DIR")


def cache_dir(spec: DatasetSpec, settings: Settings) -> Path:
    """Where ``spec``'s files live (or will live) in the cache."""
    return settings.datasets_dir / spec.name / spec.revision


def is_cached(spec: DatasetSpec, settings: Settings) -> bool:
    """True when a complete download of ``spec`` at its pinned revision is in the cache."""
    folder = cache_dir(spec, settings)
    return (folder / MANIFEST).is_file() and all((folder / name).is_file() for name in DATASET_FILES)


def _how_to_get(spec: DatasetSpec, settings: Settings) -> str:
    return (
        f"{spec.name} is not in the cache ({cache_dir(spec, settings)}). Either run "
        f"'r2med datasets download {spec.name}' on a machine with internet access (with {ENV_HF_OFFLINE} unset) "
        f"and copy {settings.datasets_dir} over, or download the files of https://huggingface.co/datasets/{spec.repo} "
        f"(revision {spec.revision[:12]}) and pass their parent directory with --data-dir"
    )


def offline_error(spec: DatasetSpec, settings: Settings) -> MissingResourceError:
    """What a dataset not in the cache is while ``HF_HUB_OFFLINE`` is set (exit 4): how to get it."""
    return MissingResourceError(f"{ENV_HF_OFFLINE} is set, so nothing can be downloaded. {_how_to_get(spec, settings)}")


def download(spec: DatasetSpec, settings: Settings, *, force: bool = False) -> Path:
    """Fetch ``spec``'s three files at the pinned revision (no-op when cached); returns the directory.

    Raises MissingResourceError (exit 4) when offline or the hub cannot be reached (``HubUnreachableError``,
    at the first failed connection), ProviderError (exit 6) for other hub failures.
    """
    folder = cache_dir(spec, settings)
    if is_cached(spec, settings) and not force:
        return folder
    if settings.hf_offline:
        raise offline_error(spec, settings)
    require_hub(f"download {spec.name}", OFFLINE_WAY)
    folder.mkdir(parents=True, exist_ok=True)
    digests = {}
    for name in DATASET_FILES:
        digests[name] = file_sha256(fetch_file(spec, name, folder, settings))
    manifest = {"repo": spec.repo, "revision": spec.revision, "sha256": digests}
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return folder


def _hub_errors() -> tuple:
    """(offline, unreachable, missing file/repo/revision, other HTTP) exception classes of huggingface_hub."""
    from huggingface_hub import errors

    return (
        errors.OfflineModeIsEnabled,
        errors.LocalEntryNotFoundError,
        (errors.RepositoryNotFoundError, errors.RevisionNotFoundError, errors.EntryNotFoundError),
        errors.HfHubHTTPError,
    )


def _unreachable(exc: BaseException, what: str, offline: str) -> MissingResourceError:
    """A connection failure of huggingface_hub (after the probe said the hub was there) as the one-line error."""
    reason = hub_unreachable() or f"{type(exc).__name__}: {exc}".splitlines()[0]
    return unreachable_error(reason, what, offline)


def fetch_file(spec: DatasetSpec, filename: str, folder: Path, settings: Settings, *, offline_way: str = OFFLINE_WAY) -> Path:
    """Download one file of ``spec``'s repo at the pinned revision into ``folder`` (same relative path).

    Raises MissingResourceError (exit 4) when offline, unreachable (``HubUnreachableError`` before any request,
    ``offline_way`` saying how to go on without the hub) or the file does not exist at the revision,
    ProviderError (exit 6) for other hub failures.
    """
    if settings.hf_offline:
        raise MissingResourceError(
            f"{ENV_HF_OFFLINE} is set, so {spec.repo}/{filename} cannot be downloaded. {_how_to_get(spec, settings)}"
        )
    require_hub(f"download {spec.repo}/{filename}", offline_way)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingResourceError(f"huggingface_hub is not importable ({exc}); reinstall r2med") from exc
    offline, unreachable, missing, http = _hub_errors()
    logger.info("downloading %s/%s@%s", spec.repo, filename, spec.revision[:12])
    try:
        path = hf_hub_download(
            repo_id=spec.repo, filename=filename, repo_type="dataset", revision=spec.revision,
            local_dir=str(folder), token=settings.hf_token,
        )
    except (offline, unreachable) as exc:
        if is_network_error(exc):
            raise _unreachable(exc, f"download {spec.repo}/{filename}", offline_way) from None
        raise MissingResourceError(f"the hub cannot be reached ({type(exc).__name__}). {_how_to_get(spec, settings)}") from exc
    except missing as exc:
        raise MissingResourceError(f"{spec.repo}@{spec.revision[:12]} has no {filename} ({type(exc).__name__}): {exc}") from exc
    except http as exc:
        raise ProviderError(f"the hub failed while downloading {spec.repo}/{filename}: {exc}") from exc
    except OSError as exc:  # connection refused, DNS failure, disk full
        if is_network_error(exc):
            raise _unreachable(exc, f"download {spec.repo}/{filename}", offline_way) from None
        raise MissingResourceError(f"downloading {spec.repo}/{filename} failed ({exc}). {_how_to_get(spec, settings)}") from exc
    except Exception as exc:  # the HTTP client's own connection errors (httpx, requests) are no OSError
        if is_network_error(exc):
            raise _unreachable(exc, f"download {spec.repo}/{filename}", offline_way) from None
        raise
    return Path(path)


def list_files(spec: DatasetSpec, settings: Settings, *, offline_way: str = OFFLINE_WAY) -> list[str]:
    """Every file path in ``spec``'s hub repo at the pinned revision (needs the network; ``offline_way``: how to go on
    without it, in the ``HubUnreachableError`` raised before any request when the hub cannot be reached)."""
    if settings.hf_offline:
        raise MissingResourceError(f"{ENV_HF_OFFLINE} is set, so the files of {spec.repo} cannot be listed")
    require_hub(f"list the files of {spec.repo}", offline_way)
    from huggingface_hub import HfApi

    offline_error, unreachable, missing, http = _hub_errors()
    what = f"list the files of {spec.repo}"
    try:
        return sorted(
            HfApi(token=settings.hf_token).list_repo_files(spec.repo, repo_type="dataset", revision=spec.revision)
        )
    except (offline_error, unreachable, OSError) as exc:
        if is_network_error(exc):
            raise _unreachable(exc, what, offline_way) from None
        raise MissingResourceError(f"the hub cannot be reached to list {spec.repo} ({type(exc).__name__}: {exc})") from exc
    except missing as exc:
        raise MissingResourceError(f"{spec.repo}@{spec.revision[:12]} not found ({type(exc).__name__}): {exc}") from exc
    except http as exc:
        raise ProviderError(f"the hub failed while listing {spec.repo}: {exc}") from exc
    except Exception as exc:  # the HTTP client's own connection errors (httpx, requests) are no OSError
        if is_network_error(exc):
            raise _unreachable(exc, what, offline_way) from None
        raise


def cached_sha256(spec: DatasetSpec, settings: Settings) -> dict[str, str]:
    """The sha256 per file recorded when ``spec`` was downloaded."""
    manifest = json.loads((cache_dir(spec, settings) / MANIFEST).read_text(encoding="utf-8"))
    return dict(manifest["sha256"])
