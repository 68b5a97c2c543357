"""Hub download: offline behaviour, the cache layout and manifest, and cache reuse (no network)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import DATA
from r2med.datasets import get_spec, load_dataset
from r2med.datasets.hub import MANIFEST, cache_dir, download, is_cached
from r2med.errors import MissingResourceError
from r2med.settings import get_settings


def test_download_all_offline_with_empty_cache_exits_4(cli, isolated_home):
    result = cli("datasets", "download", "all")
    assert result.code == 4
    assert "HF_HUB_OFFLINE is set" in result.err
    assert "--data-dir" in result.err and "r2med datasets download Biology" in result.err
    assert "Traceback" not in result.err
    assert list(isolated_home.rglob("*.jsonl")) == []


def test_stats_without_data_offline_exits_4(cli):
    result = cli("datasets", "stats", "PMC-Treat")
    assert result.code == 4 and "PMC-Treatment is not in the cache" in result.err


@pytest.fixture
def fake_hub(monkeypatch):
    """Replace hf_hub_download by a local copy of tests/data/tiny, recording every call."""
    import huggingface_hub

    calls = []

    def fake(repo_id, filename, *, repo_type, revision, local_dir, token=None, **kw):
        calls.append((repo_id, filename, repo_type, revision))
        target = Path(local_dir) / filename
        target.write_bytes((DATA / "tiny" / filename).read_bytes())
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    return calls


def test_download_records_hashes_and_is_reused(fake_hub, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    settings = get_settings()
    spec = get_spec("Biology")
    folder = download(spec, settings)
    assert folder == settings.home / "datasets" / "Biology" / spec.revision
    assert [c[1] for c in fake_hub] == ["corpus.jsonl", "query.jsonl", "qrels.jsonl"]
    assert {c[3] for c in fake_hub} == {spec.revision} and {c[2] for c in fake_hub} == {"dataset"}
    manifest = json.loads((folder / MANIFEST).read_text())
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        assert manifest["sha256"][name] == hashlib.sha256((DATA / "tiny" / name).read_bytes()).hexdigest()
    assert is_cached(spec, settings)
    download(spec, settings)
    assert len(fake_hub) == 3  # cached: no second call
    # once cached, loading works offline too and carries the revision and hashes
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ds = load_dataset("stack-biology")
    assert ds.name == "Biology" and ds.revision == spec.revision
    assert ds.sha256["corpus.jsonl"] == manifest["sha256"]["corpus.jsonl"]


def test_interrupted_download_is_not_taken_as_cached(fake_hub, monkeypatch):
    settings = get_settings()
    spec = get_spec("Bioinformatics")
    folder = cache_dir(spec, settings)
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("partial")
    assert not is_cached(spec, settings)
    with pytest.raises(MissingResourceError):
        download(spec, settings)  # still offline
    monkeypatch.delenv("HF_HUB_OFFLINE")
    download(spec, get_settings())
    assert (folder / "corpus.jsonl").read_text() == (DATA / "tiny" / "corpus.jsonl").read_text()


def test_unreachable_hub_exits_4(monkeypatch, cli):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def unreachable(*a, **k):
        raise LocalEntryNotFoundError("cannot reach the hub")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    result = cli("datasets", "download", "MedQA-Diag")
    assert result.code == 4 and "the hub cannot be reached" in result.err
