"""A dataset of the hub cache is used only while its files have the sha256 recorded at download."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from conftest import DATA
from r2med.datasets import get_spec, load_dataset
from r2med.datasets.hub import cache_dir, download
from r2med.errors import DamagedFileError
from r2med.settings import get_settings


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    calls = []

    def fake(repo_id, filename, *, repo_type, revision, local_dir, token=None, **kw):
        calls.append(filename)
        target = Path(local_dir) / filename
        target.write_bytes((DATA / "tiny" / filename).read_bytes())
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    return calls


@pytest.mark.parametrize("edit", [
    lambda t: t.replace("aspirin reduces fever", "aspirin raises fever"),  # still a valid corpus: other numbers
    lambda t: t[: len(t) // 2],  # cut in mid-line
])
def test_a_changed_cached_file_is_refused_offline_and_downloaded_again_online(fake_hub, monkeypatch, cli, caplog, edit):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    spec = get_spec("Biology")
    folder = download(spec, get_settings())
    corpus = folder / "corpus.jsonl"
    corpus.write_text(edit(corpus.read_text()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DamagedFileError, match=r"corpus\.jsonl: does not match the sha256 recorded when it was "
                                                r"downloaded .*r2med datasets download Biology --force"):
        load_dataset("Biology")
    result = cli("run", "--tasks", "Biology", "--output", folder.parent / "out", "--no-cache")
    assert result.code == 5 and "corpus.jsonl" in result.err and "Traceback" not in result.err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with caplog.at_level(logging.WARNING, logger="r2med"):
        dataset = load_dataset("Biology")
    assert "downloading it again" in caplog.text and fake_hub.count("corpus.jsonl") == 2
    assert corpus.read_bytes() == (DATA / "tiny" / "corpus.jsonl").read_bytes()
    assert dataset.corpus["d1"] == "aspirin reduces fever and pain"
    assert folder == cache_dir(spec, get_settings())
