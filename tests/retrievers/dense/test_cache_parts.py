"""An interrupted encode loses at most a minute or 512 texts (issue 36, item 6): a chunk's finished texts are kept
as verified parts; a rerun encodes only the texts that are missing, and the vectors are those of one run."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from r2med.io.verified import write_verified
from r2med.retrievers.dense.cache import EmbeddingCache, cache_key

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fake_encoder import FakeEncoder  # noqa: E402
from streaming_encoder import FakeClock, StreamingEncoder, texts  # noqa: E402

SRC = HERE.parents[2] / "src"


def _kill_midway(root: Path, n: int, kill_at: int, flush_texts: int, flush_seconds: float, per_batch: float,
                 group: int = 1) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(HERE / "streaming_encoder.py"), str(root), str(n), str(kill_at),
                           str(flush_texts), str(flush_seconds), str(per_batch), str(group)], env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def _stored_rows(root: Path) -> int:
    total = 0
    for part in root.glob("*/chunk_*.part*.npz"):
        with np.load(part) as archive:
            total += len(archive["rows"])
    return total


def _fresh(tmp_path: Path, n: int) -> np.ndarray:
    return EmbeddingCache(tmp_path / "fresh").embed(FakeEncoder(), texts(n), kind="document").array()


def test_a_sigkill_keeps_every_512_texts_and_the_rerun_encodes_only_the_rest(tmp_path):
    # batches of 50: a part is written after 550 texts (>= 512 waiting); killed as the 15th batch starts (700 done)
    _kill_midway(tmp_path / "cache", 2000, kill_at=15, flush_texts=512, flush_seconds=60, per_batch=0)
    assert _stored_rows(tmp_path / "cache") == 550
    again = StreamingEncoder()
    cache = EmbeddingCache(tmp_path / "cache")
    stored = cache.embed(again, texts(2000), kind="document")
    assert again.texts_encoded == 2000 - 550 and cache.encoded_texts == 1450
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 2000))
    assert not list((tmp_path / "cache").glob("*/chunk_*.part*"))  # the finished chunk replaced its parts


def test_a_sigkill_loses_at_most_a_minute_of_encoding(tmp_path):
    # 7 s per batch of 50 (fake clock), parts written after 60 s: at 63 s (9 batches) and 126 s (18 batches);
    # killed as batch 20 starts, 133 s in: 19 batches were finished, 18 are kept, 7 s of work is lost
    _kill_midway(tmp_path / "cache", 2000, kill_at=20, flush_texts=100_000, flush_seconds=60, per_batch=7)
    assert _stored_rows(tmp_path / "cache") == 900
    again = StreamingEncoder()
    stored = EmbeddingCache(tmp_path / "cache").embed(again, texts(2000), kind="document")
    assert again.texts_encoded == 1100
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 2000))


def test_ctrl_c_after_minutes_keeps_everything_finished(tmp_path):
    clock = FakeClock()
    encoder = StreamingEncoder(clock=clock, seconds_per_batch=10, stop_at_batch=21)  # Ctrl-C 200 s in
    cache = EmbeddingCache(tmp_path, flush_texts=100_000, flush_seconds=60, clock=clock)
    with pytest.raises(KeyboardInterrupt):
        cache.embed(encoder, texts(3000), kind="document")
    # at least what was finished 60 s before (14 batches), and in fact all 20 finished batches: written on Ctrl-C
    assert _stored_rows(tmp_path) == 1000
    again = StreamingEncoder()
    stored = EmbeddingCache(tmp_path).embed(again, texts(3000), kind="document")
    assert again.texts_encoded == 2000
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 3000))


def test_several_chunks_per_call_give_the_same_cache_in_fewer_calls(tmp_path):
    encoder = StreamingEncoder(chunks_per_call=2)  # as a multi-device encoder: its workers meet once per call
    cache = EmbeddingCache(tmp_path / "cache")
    stored = cache.embed(encoder, texts(10_000), kind="document")  # 3 chunks of 4,096: calls of chunks 0-1, then 2
    assert (encoder.calls, encoder.texts_encoded, cache.encoded_texts) == (2, 10_000, 10_000)
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 10_000))
    assert sorted(p.name for p in stored.directory.glob("chunk_*")) == [
        f"chunk_{i:05d}.npy{ext}" for i in range(3) for ext in ("", ".sha256")]


def test_several_chunks_per_call_lose_at_most_512_texts_to_a_sigkill(tmp_path):
    # batches of 50 over chunks 0 and 1 in one call; the group's parts are written whenever 512 texts wait (every 11
    # batches), chunk 0 as soon as it is complete (in batch 82); after batch 82 chunk 1 has 4 texts waiting, 554 at
    # batch 93 (written); killed as batch 95 starts: chunk 0 whole, 554 texts of chunk 1 kept, batch 94 lost
    _kill_midway(tmp_path / "cache", 10_000, kill_at=95, flush_texts=512, flush_seconds=60, per_batch=0, group=2)
    (folder,) = (tmp_path / "cache").iterdir()
    assert (folder / "chunk_00000.npy").is_file() and not list(folder.glob("chunk_00000.part*"))
    assert _stored_rows(tmp_path / "cache") == 554
    again = StreamingEncoder(chunks_per_call=2)
    stored = EmbeddingCache(tmp_path / "cache").embed(again, texts(10_000), kind="document")
    assert again.texts_encoded == 10_000 - 4096 - 554
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 10_000))


def test_ctrl_c_in_a_call_of_several_chunks_keeps_every_finished_batch(tmp_path):
    encoder = StreamingEncoder(chunks_per_call=3, stop_at_batch=90)  # 89 batches finished: 4,450 texts
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path).embed(encoder, texts(10_000), kind="document")
    (folder,) = tmp_path.iterdir()
    assert (folder / "chunk_00000.npy").is_file() and _stored_rows(tmp_path) == 4450 - 4096
    again = StreamingEncoder(chunks_per_call=3)
    stored = EmbeddingCache(tmp_path).embed(again, texts(10_000), kind="document")
    assert again.texts_encoded == 10_000 - 4450
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 10_000))


def test_an_encoder_without_on_vectors_is_kept_every_512_texts(tmp_path):
    encoder = FakeEncoder(fail_after_calls=3)  # encode is called per 512 texts; the 4th call is interrupted
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path).embed(encoder, texts(5000), kind="document")
    assert _stored_rows(tmp_path) == 3 * 512
    again = FakeEncoder()
    stored = EmbeddingCache(tmp_path).embed(again, texts(5000), kind="document")
    assert again.texts_encoded == 5000 - 3 * 512
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 5000))


def test_a_damaged_part_is_encoded_again_with_a_warning(tmp_path, caplog):
    encoder = StreamingEncoder(stop_at_batch=25)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path, flush_texts=200).embed(encoder, texts(2000), kind="document")
    parts = sorted(tmp_path.glob("*/chunk_*.part*.npz"))
    assert len(parts) == 6 and _stored_rows(tmp_path) == 1200  # a part per 4 batches (200 texts >= 200 waiting)
    raw = bytearray(parts[1].read_bytes())
    raw[-20] ^= 0xFF
    parts[1].write_bytes(bytes(raw))
    again = StreamingEncoder()
    with caplog.at_level(logging.WARNING):
        stored = EmbeddingCache(tmp_path).embed(again, texts(2000), kind="document")
    assert again.texts_encoded == 2000 - 1200 + 200
    assert "chunk_00000.part0002.npz" in caplog.text and "encoding its texts again" in caplog.text
    np.testing.assert_array_equal(stored.array(), _fresh(tmp_path, 2000))


def test_a_cache_of_whole_4096_chunks_written_before_parts_is_reused(tmp_path):
    """The layout of r2med before parts: manifest + chunk_00000.npy (4,096 texts) + chunk_00001.npy, each with its
    sidecar; read as it is, nothing encoded."""
    encoder, items = FakeEncoder(), texts(5000)
    key, material = cache_key(encoder, items, kind="document", instruction="", dtype="float32")
    folder = tmp_path / key
    folder.mkdir()
    from r2med.io.verified import write_verified_json

    write_verified_json(folder / "manifest.json", {**material, "chunk": 4096}, indent=1)
    vectors = np.stack([encoder.vector(f"document|{t}") for t in items])
    for i, block in enumerate((vectors[:4096], vectors[4096:])):
        write_verified(folder / f"chunk_{i:05d}.npy", lambda h, b=block: np.save(h, b, allow_pickle=False), binary=True)
    counting = FakeEncoder()
    cache = EmbeddingCache(tmp_path)
    stored = cache.embed(counting, items, kind="document")
    assert counting.texts_encoded == 0 and cache.encoded_texts == 0 and stored.chunk == 4096
    np.testing.assert_array_equal(stored.array(), vectors)
    assert json.loads((folder / "manifest.json").read_text())["chunk"] == 4096


KILL_REAL = """
import os, signal, sys
from pathlib import Path
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.hf_encoders import TransformersEncoder
from r2med.retrievers.dense.zoo import ModelSpec
from streaming_encoder import texts

class Killed(TransformersEncoder):
    batches = 0
    def _encode_rows(self, prepared, rows, kind, instruction, inputs=None):
        Killed.batches += 1
        if Killed.batches == 6:
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._encode_rows(prepared, rows, kind, instruction, inputs)

spec = ModelSpec(name="tiny", model=sys.argv[2], backend="transformers", pooling="mean")
EmbeddingCache(Path(sys.argv[1]), flush_texts=64).embed(Killed(spec, device="cpu", batch_tokens=400), texts(300),
                                                        kind="document")
"""


def test_a_sigkill_of_a_real_encoder_and_its_rerun(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from conftest import DATA
    from r2med.retrievers.dense.factory import make_encoder
    from r2med.retrievers.dense.zoo import ModelSpec

    model = DATA / "dense" / "tiny-bert"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", KILL_REAL, str(tmp_path / "cache"), str(model)], env=env,
                          capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    kept = _stored_rows(tmp_path / "cache")
    assert kept >= 64  # five batches finished, at least one part of 64 or more written
    spec = ModelSpec(name="tiny", model=str(model), backend="transformers", pooling="mean")
    cache = EmbeddingCache(tmp_path / "cache")
    resumed = cache.embed(make_encoder(spec, device="cpu", batch_tokens=400), texts(300), kind="document").array()
    assert cache.encoded_texts == 300 - kept
    fresh = EmbeddingCache(tmp_path / "fresh").embed(make_encoder(spec, device="cpu"), texts(300), kind="document")
    assert np.abs(resumed - fresh.array()).max() <= 1e-6
