"""The cached BM25 index is checked when it is read: any damage (cut, zeroed, edited counts or ids, a kill between
its two files) rebuilds it with a warning, never a traceback and never other numbers."""

from __future__ import annotations

import io
import json
import logging

import numpy as np
import pytest

from conftest import DATA
from r2med.datasets import load_dir
from r2med.errors import InvalidInputError
from r2med.retrievers.bm25 import BM25Index
from r2med.retrievers.bm25.retriever import BM25Retriever, index_key


@pytest.fixture
def tiny():
    return load_dir(DATA / "tiny", "tiny")


def _retrieve(tiny, cache, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="r2med"):
        return BM25Retriever(cache_dir=cache, progress=False, workers=1).retrieve(tiny, top_k=3)


def _edit_npz(path, key, change):
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name].copy() for name in data.files}
    change(arrays[key])
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


DAMAGE = {
    "cut": lambda folder: (folder / "index.npz").write_bytes((folder / "index.npz").read_bytes()[:100]),
    "zeroed": lambda folder: (folder / "index.npz").write_bytes(bytes(len((folder / "index.npz").read_bytes()))),
    "empty": lambda folder: (folder / "index.npz").write_bytes(b""),
    "counts": lambda folder: _edit_npz(folder / "index.npz", "counts", lambda a: a.__setitem__(0, a[0] + 5)),
    "ids": lambda folder: (folder / "index.json").write_text(
        (folder / "index.json").read_text().replace('"d1"', '"d9"')),
    "meta-cut": lambda folder: (folder / "index.json").write_text((folder / "index.json").read_text()[:50]),
    "no-arrays": lambda folder: (folder / "index.npz").unlink(),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_index_is_rebuilt_with_a_warning(tiny, tmp_path, caplog, damage):
    reference = _retrieve(tiny, None, caplog)
    first = _retrieve(tiny, tmp_path, caplog)
    assert first == reference and caplog.text == ""
    folder = tmp_path / index_key(tiny)
    saved = {p.name: p.read_bytes() for p in folder.iterdir()}
    DAMAGE[damage](folder)
    again = _retrieve(tiny, tmp_path, caplog)
    assert again == reference  # the same numbers, not the edited counts or ids
    assert "rebuilding" in caplog.text and str(folder) in caplog.text
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == saved  # rebuilt as it was
    assert _retrieve(tiny, tmp_path, caplog) == reference and caplog.text == ""  # and then reused quietly


def test_load_of_a_damaged_index_is_an_error_naming_the_file(tmp_path):
    BM25Index.build([["a", "b"], ["b"]], doc_ids=["x", "y"]).save(tmp_path)
    DAMAGE["counts"](tmp_path)
    with pytest.raises(InvalidInputError, match=r"index\.npz.*does not match"):
        BM25Index.load(tmp_path)
    BM25Index.build([["a", "b"], ["b"]], doc_ids=["d1", "y"]).save(tmp_path)
    DAMAGE["ids"](tmp_path)
    with pytest.raises(InvalidInputError, match=r"index\.json"):
        BM25Index.load(tmp_path)


@pytest.mark.parametrize("kill_at", [1, 2])
def test_a_kill_at_each_write_of_the_index_is_repaired_by_the_next_run(tiny, tmp_path, kill_at_write, caplog, kill_at):
    reference = _retrieve(tiny, tmp_path / "ref", caplog)
    kill_at_write(kill_at)
    with pytest.raises(KeyboardInterrupt):
        _retrieve(tiny, tmp_path / "c", caplog)
    kill_at_write.disarm()
    assert _retrieve(tiny, tmp_path / "c", caplog) == reference
    folder = index_key(tiny)
    assert {p.name: p.read_bytes() for p in (tmp_path / "c" / folder).iterdir()} == {
        p.name: p.read_bytes() for p in (tmp_path / "ref" / folder).iterdir()}


def test_the_index_records_the_checksum_of_its_arrays(tmp_path):
    BM25Index.build([["a"]], doc_ids=["x"]).save(tmp_path)
    meta = json.loads((tmp_path / "index.json").read_text())
    import hashlib

    data = (tmp_path / "index.npz").read_bytes()
    assert meta["arrays"] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


# ------------------------------------------------------------------ the save runs in a thread while the search runs


def test_a_save_that_fails_is_a_warning_and_the_run_is_kept(tiny, tmp_path, caplog, monkeypatch):
    """A full disk under R2MED_HOME: the search's run is returned (the index is only a cache), the warning names the
    folder and the error, nothing half-written is left, and the next run builds and saves the index."""
    import errno

    from r2med.retrievers.bm25 import persist

    reference = _retrieve(tiny, None, caplog)
    real = persist.np.savez

    def full_disk(handle, **arrays):
        handle.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(persist.np, "savez", full_disk)
    run = _retrieve(tiny, tmp_path, caplog)
    folder = tmp_path / index_key(tiny)
    assert run == reference
    assert "could not save the BM25 index" in caplog.text and str(folder) in caplog.text
    assert "No space left on device" in caplog.text
    assert list(folder.iterdir()) == []  # the temporary file was removed, no index.json marks anything complete
    monkeypatch.setattr(persist.np, "savez", real)
    assert _retrieve(tiny, tmp_path, caplog) == reference and caplog.text == ""
    assert sorted(p.name for p in folder.iterdir()) == ["index.json", "index.npz"]


def test_a_search_that_fails_waits_for_the_save_and_raises_its_own_error(tiny, tmp_path, caplog, monkeypatch):
    """The search's error is what the caller gets; the save it overlapped finished, and the next run reuses it."""
    import threading

    started, release = threading.Event(), threading.Event()
    real_save = BM25Index.save

    def slow_save(self, directory):
        started.set()
        assert release.wait(10)
        return real_save(self, directory)

    def failing_search(self, qids, tokens, k):
        assert started.wait(10)  # the save is under way
        release.set()
        raise InvalidInputError("search failed")

    monkeypatch.setattr(BM25Index, "save", slow_save)
    monkeypatch.setattr(BM25Index, "search_run", failing_search)
    with pytest.raises(InvalidInputError, match="search failed"):
        _retrieve(tiny, tmp_path, caplog)
    folder = tmp_path / index_key(tiny)
    assert sorted(p.name for p in folder.iterdir()) == ["index.json", "index.npz"]  # the save was waited for
    monkeypatch.undo()
    reference = _retrieve(tiny, None, caplog)
    with caplog.at_level(logging.INFO, logger="r2med"):
        assert BM25Retriever(cache_dir=tmp_path, progress=False, workers=1).retrieve(tiny, top_k=3) == reference
    assert "reusing the BM25 index" in caplog.text
