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
from r2med.datasets.readers import file_sha256
from r2med.errors import MissingResourceError, ProviderError
from r2med.settings import ENV_HF_OFFLINE, Settings
from r2med.store.atomic import write_text_atomic

logger = logging.getLogger(__name__)

MANIFEST = "r2med-files.json"


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


def download(spec: DatasetSpec, settings: Settings, *, force: bool = False) -> Path:
    """Fetch ``spec``'s three files at the pinned revision (no-op when cached); returns the directory.

    Raises MissingResourceError (exit 4) when offline or the hub cannot be reached, ProviderError
    (exit 6) for other hub failures.
    """
    folder = cache_dir(spec, settings)
    if is_cached(spec, settings) and not force:
        return folder
    if settings.hf_offline:
        raise MissingResourceError(f"{ENV_HF_OFFLINE} is set, so nothing can be downloaded. {_how_to_get(spec, settings)}")
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingResourceError(f"huggingface_hub is not importable ({exc}); reinstall r2med") from exc
    folder.mkdir(parents=True, exist_ok=True)
    digests = {}
    for name in DATASET_FILES:
        logger.info("downloading %s/%s@%s", spec.repo, name, spec.revision[:12])
        try:
            path = hf_hub_download(
                repo_id=spec.repo, filename=name, repo_type="dataset", revision=spec.revision,
                local_dir=str(folder), token=settings.hf_token,
            )
        except (OfflineModeIsEnabled, LocalEntryNotFoundError) as exc:
            raise MissingResourceError(f"the hub cannot be reached ({type(exc).__name__}). {_how_to_get(spec, settings)}") from exc
        except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as exc:
            raise MissingResourceError(f"{spec.repo}@{spec.revision[:12]} has no {name} ({type(exc).__name__}): {exc}") from exc
        except HfHubHTTPError as exc:
            raise ProviderError(f"the hub failed while downloading {spec.repo}/{name}: {exc}") from exc
        except OSError as exc:  # connection refused, DNS failure, disk full
            raise MissingResourceError(f"downloading {spec.repo}/{name} failed ({exc}). {_how_to_get(spec, settings)}") from exc
        digests[name] = file_sha256(Path(path))
    manifest = {"repo": spec.repo, "revision": spec.revision, "sha256": digests}
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return folder


def cached_sha256(spec: DatasetSpec, settings: Settings) -> dict[str, str]:
    """The sha256 per file recorded when ``spec`` was downloaded."""
    manifest = json.loads((cache_dir(spec, settings) / MANIFEST).read_text(encoding="utf-8"))
    return dict(manifest["sha256"])
