"""Cached embedding chunks are checked when read: a damaged or unconfirmed chunk is encoded again with a warning."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from fake_encoder import FakeEncoder

from r2med.retrievers.dense.cache import EmbeddingCache

TEXTS = [f"text {i} on topic {i % 5}" for i in range(25)]


def _embed(root, caplog, enc=None):
    enc = enc or FakeEncoder()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="r2med"):
        stored = EmbeddingCache(root, chunk=10).embed(enc, TEXTS, kind="document")
        return stored, stored.array(), enc


def _flip(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # a float's byte: the file still loads, with another number
    path.write_bytes(bytes(data))


DAMAGE = {
    "edited": _flip,
    "cut": lambda p: p.write_bytes(p.read_bytes()[:90]),
    "zeroed": lambda p: p.write_bytes(bytes(len(p.read_bytes()))),
    "unconfirmed": lambda p: p.with_name(p.name + ".sha256").unlink(),  # killed between the chunk and its checksum
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_chunk_is_encoded_again(tmp_path, caplog, damage):
    _, reference, _ = _embed(tmp_path / "ref", caplog)
    stored, _, _ = _embed(tmp_path / "c", caplog)
    DAMAGE[damage](stored.chunk_path(1))
    _, array, enc = _embed(tmp_path / "c", caplog)
    assert np.array_equal(array, reference)
    assert enc.texts_encoded == 10  # only the damaged chunk
    assert "chunk_00001.npy" in caplog.text


def test_a_damaged_manifest_starts_the_folder_again(tmp_path, caplog):
    _, reference, _ = _embed(tmp_path / "ref", caplog)
    stored, _, _ = _embed(tmp_path / "c", caplog)
    manifest = stored.directory / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"chunk": 10', '"chunk": 3'))
    _, array, enc = _embed(tmp_path / "c", caplog)
    assert np.array_equal(array, reference) and enc.texts_encoded == 25
    assert "manifest.json" in caplog.text
    json.loads(manifest.read_text())  # rewritten whole


def test_a_chunk_changed_after_the_lookup_is_refused_when_read(tmp_path, caplog):
    from r2med.errors import InvalidInputError

    stored, _, _ = _embed(tmp_path, caplog)
    _flip(stored.chunk_path(2))
    with pytest.raises(InvalidInputError, match=r"chunk_00002\.npy.*does not match"):
        stored.array()


@pytest.mark.parametrize("kill_at", range(1, 8))
def test_a_kill_at_each_write_resumes_to_identical_embeddings(tmp_path, kill_at_write, caplog, kill_at):
    _, reference, _ = _embed(tmp_path / "ref", caplog)
    kill_at_write(kill_at)
    with pytest.raises(KeyboardInterrupt):
        _embed(tmp_path / "c", caplog)
    kill_at_write.disarm()
    _, array, _ = _embed(tmp_path / "c", caplog)
    assert np.array_equal(array, reference)
    files = sorted(p.relative_to(tmp_path / "c") for p in (tmp_path / "c").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "ref") for p in (tmp_path / "ref").rglob("*") if p.is_file())


def test_a_cached_chunk_is_hashed_once_per_retrieval(tmp_path, caplog, monkeypatch):
    from r2med.io import verified

    _, reference, _ = _embed(tmp_path / "c", caplog)
    hashed = []
    digest_file = verified.digest_file
    monkeypatch.setattr(verified, "digest_file", lambda path, *a, **k: hashed.append(path.name) or digest_file(path, *a, **k))
    stored, array, enc = _embed(tmp_path / "c", caplog)  # lookup verifies the 3 chunks, reading them hashes none again
    assert enc.texts_encoded == 0 and np.array_equal(array, reference)
    assert sorted(hashed) == ["chunk_00000.npy", "chunk_00001.npy", "chunk_00002.npy"]
    _flip(stored.chunk_path(2))  # changed after lookup: the read checks it again, and refuses it
    from r2med.errors import DamagedFileError

    with pytest.raises(DamagedFileError, match="chunk_00002.npy"):
        stored.array()
