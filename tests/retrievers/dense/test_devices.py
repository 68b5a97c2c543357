"""Every device of the machine (issue 36, item 4): ``--device cuda`` is every visible GPU, ``cuda:0,cuda:2`` picks,
one worker process per device writing into the one embedding cache. Without CUDA the worker machinery runs with
CPU stand-ins (``cpu,cpu``: two CPU worker processes): the vectors are one device's, the cache is complete, a worker
killed midway loses only its batch in flight (the rerun encodes exactly the missing texts), and a worker's error
stops the call with that error.

The tests that start worker processes are marked slow: each start imports torch and transformers in two spawned
processes (measured on 2 busy cores: 10-25 s per test)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import device_helpers
from conftest import DATA
from r2med.batching import TextTooLongError
from r2med.errors import MissingResourceError, UsageError
from r2med.hf import resolve_device, resolve_devices
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.devices import MultiDeviceEncoder, WorkerDiedError, WorkerFailedError, deal
from r2med.retrievers.dense.factory import make_encoder, one_device_encoder
from r2med.retrievers.dense.zoo import ModelSpec

TINY_BERT = DATA / "dense" / "tiny-bert"
SPEC = ModelSpec(name="tiny", model=str(TINY_BERT), backend="transformers", pooling="mean")
WORDS = "patient fever acute chronic heart brain blood gene protein drug dose case study".split()
TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + (i * 5) % 23)) for i in range(60)]


def _gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_cuda_is_every_visible_gpu_and_a_list_picks(monkeypatch):
    _gpus(monkeypatch, 3)
    assert resolve_devices("cuda") == ["cuda:0", "cuda:1", "cuda:2"]
    assert resolve_devices(None) == ["cuda:0", "cuda:1", "cuda:2"]  # auto: the best there is, all of it
    assert resolve_devices("cuda:0, CUDA:2") == ["cuda:0", "cuda:2"]
    assert resolve_devices("cuda:1") == ["cuda:1"]
    assert resolve_device("cuda:2,cuda:0") == "cuda:2"  # one device: a list names its first
    _gpus(monkeypatch, 1)
    assert resolve_devices("cuda") == ["cuda"]  # one GPU: as before, no worker process


@pytest.mark.parametrize(("device", "error", "words"), [
    ("cuda:3", MissingResourceError, "device 'cuda:3' was asked for, but torch sees 3 CUDA device(s): cuda:0 to cuda:2"),
    ("cuda:0,cuda:0", UsageError, "device list 'cuda:0,cuda:0' names cuda:0 twice; name each GPU once"),
    ("cpu,cuda:1", UsageError, "device list 'cpu,cuda:1' mixes cpu and cuda; a list names devices of one kind"),
    ("cuda,cuda:1", UsageError, "device list 'cuda,cuda:1': name each device of a list"),
    ("cuda:x", UsageError, "unknown device 'cuda:x'; valid: auto, cpu, cuda, cuda:N, mps"),
    ("cuda:0,", UsageError, "device list 'cuda:0,' has an empty entry"),
])
def test_a_wrong_device_list_is_a_clear_error(monkeypatch, device, error, words):
    _gpus(monkeypatch, 3)
    with pytest.raises(error) as caught:
        resolve_devices(device)
    assert str(caught.value).startswith(words)
    assert caught.value.exit_code == {MissingResourceError: 4, UsageError: 2}[error]


def test_gpus_asked_for_where_there_are_none_is_exit_4(monkeypatch):
    _gpus(monkeypatch, 0)
    with pytest.raises(MissingResourceError) as caught:
        make_encoder(SPEC, device="cuda:0,cuda:1")
    assert caught.value.exit_code == 4
    assert "torch sees no CUDA device; use --device cpu" in str(caught.value)


def test_a_device_list_gives_one_worker_per_device_and_the_same_cache_key():
    pair = make_encoder(SPEC, device="cpu,cpu", batch_tokens=300)
    one = make_encoder(SPEC, device="cpu", batch_tokens=300)
    assert isinstance(pair, MultiDeviceEncoder) and pair.devices == ["cpu", "cpu"] and pair.pids == []  # lazy
    assert pair.cache_key("document") == one.cache_key("document")  # the cache is shared: nothing recomputed
    assert type(make_encoder(SPEC, device="cpu")).__name__ == "TransformersEncoder"


def test_shares_are_dealt_longest_first_back_and_forth():
    lengths = [len(t) for t in TEXTS]
    shares = deal(lengths, 3)
    assert sorted(i for share in shares for i in share) == list(range(60))
    assert [len(s) for s in shares] == [20, 20, 20]
    totals = [sum(lengths[i] for i in share) for share in shares]
    assert max(totals) - min(totals) <= max(lengths)  # dealt back and forth: within one text of each other


def _reference(**options) -> np.ndarray:
    return make_encoder(SPEC, device="cpu", **options).encode(TEXTS, kind="document")


@pytest.fixture(scope="module")
def pair():
    encoder = make_encoder(SPEC, device="cpu,cpu", batch_tokens=300)
    yield encoder
    encoder.close()


@pytest.mark.slow
def test_two_workers_give_the_vectors_of_one_device(pair):
    reference = _reference(batch_tokens=300)
    got = pair.encode(TEXTS, kind="document")
    # other texts share a batch than on one device: float noise only (as token budgets, test_token_batches.py)
    assert np.abs(got - reference).max() <= 1e-6
    assert pair.encoded == [30, 30]
    # one text per batch: the same batches on one device and on two, so the same bits (with the same CPU threads as
    # each worker: the CPU's threads are shared among the workers, and a product's sums follow its threads)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // 2))
    try:
        alone = _reference(batch_tokens=300, batch_size=1)
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(pair.encode(TEXTS, kind="document", batch_size=1), alone)
    assert len(set(pair.pids)) == 2 and os.getpid() not in pair.pids


@pytest.mark.slow
def test_two_workers_fill_the_one_embedding_cache(pair, tmp_path):
    reference = _reference(batch_tokens=300)
    cache = EmbeddingCache(tmp_path, chunk=16, flush_texts=4)
    calls = pair._task
    stored = cache.embed(pair, TEXTS, kind="document")
    assert pair._task - calls == 2  # 4 chunks, 2 per call (one per device): the workers meet twice, not 4 times
    assert np.abs(stored.array() - reference).max() <= 1e-6
    folder = stored.directory
    assert sorted(p.name for p in folder.glob("chunk_*.npy")) == [f"chunk_{i:05d}.npy" for i in range(4)]
    assert not list(folder.glob("*.part*")) and cache.encoded_texts == 60
    again = EmbeddingCache(tmp_path, chunk=16, flush_texts=4)
    again.embed(make_encoder(SPEC, device="cpu", batch_tokens=300), TEXTS, kind="document")
    assert again.encoded_texts == 0  # one device reads what two wrote: the same key


class _KillAfter:
    """The multi-device encoder, whose second worker is killed (SIGKILL) once ``after`` texts came back."""

    def __init__(self, inner: MultiDeviceEncoder, after: int) -> None:
        self.inner, self.after, self.name, self.received, self.killed = inner, after, inner.name, 0, None
        self.chunks_per_call = inner.chunks_per_call  # as the cache sees the multi-device encoder

    def cache_key(self, kind):
        return self.inner.cache_key(kind)

    def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False, on_batch=None, on_vectors=None):
        def relay(rows, vectors):
            self.received += len(rows)
            on_vectors(rows, vectors)
            if self.killed is None and self.received >= self.after:
                self.killed = self.inner.pids[1]
                os.kill(self.killed, signal.SIGKILL)

        return self.inner.encode(texts, kind=kind, instruction=instruction, batch_size=batch_size, on_batch=on_batch,
                                 on_vectors=relay)


def _kept(folder: Path) -> int:
    return sum(len(np.load(p)["rows"]) for p in folder.glob("chunk_*.part*.npz"))


@pytest.mark.slow
def test_a_worker_killed_midway_loses_only_its_batch_and_the_rerun_encodes_the_rest(tmp_path):
    template = make_encoder(SPEC, device="cpu", batch_tokens=300)
    pair = MultiDeviceEncoder(template, ["cpu", "cpu"], build=one_device_encoder,
                              options={"batch_tokens": 300, "batch_size": 2}, setup=device_helpers.slow)
    killer = _KillAfter(pair, after=8)
    cache = EmbeddingCache(tmp_path, chunk=64, flush_texts=4)
    with pytest.raises(WorkerDiedError) as caught:
        cache.embed(killer, TEXTS, kind="document")
    message = str(caught.value)
    assert caught.value.exit_code == 6
    assert f"the encoding worker on cpu (device 2 of 2, process {killer.killed}) was killed by signal 9 (SIGKILL)" in message
    assert "run the command again to encode only the missing texts" in message
    assert pair.pids == []  # the other worker was stopped too
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    kept = _kept(folder)
    assert kept == killer.received and 8 <= kept < 60  # every text handed over is in a verified part
    assert not list(folder.glob("chunk_*.npy"))
    rerun = EmbeddingCache(tmp_path, chunk=64, flush_texts=4)
    stored = rerun.embed(make_encoder(SPEC, device="cpu", batch_tokens=300), TEXTS, kind="document")
    assert rerun.encoded_texts == 60 - kept  # only the missing texts
    assert np.abs(stored.array() - _reference(batch_tokens=300)).max() <= 1e-6


@pytest.mark.slow
def test_an_error_in_a_worker_stops_the_call_with_that_error(tmp_path, caplog):
    template = make_encoder(SPEC, device="cpu")
    pair = MultiDeviceEncoder(template, ["cpu", "cpu"], build=one_device_encoder, options={},
                              setup=device_helpers.failing)
    started = time.monotonic()
    with pytest.raises(WorkerFailedError) as caught:
        EmbeddingCache(tmp_path).embed(pair, TEXTS, kind="document")
    assert time.monotonic() - started < 120  # an answer, not a hang
    assert caught.value.exit_code == 6
    assert "tiny: the encoding worker on cpu (device " in str(caught.value)
    assert "failed: ValueError: boom in a batch of " in str(caught.value)
    assert "Traceback" in caplog.text and "device_helpers.py" in caplog.text  # the worker's traceback, in the log
    assert pair.pids == []


@pytest.mark.slow
def test_a_text_too_long_in_a_worker_is_named_by_its_place_in_the_call(tmp_path):
    texts = ["fever"] * 7 + [" ".join(WORDS * 3)] + ["heart"] * 4  # text 7: 41 tokens, more than the device holds
    template = make_encoder(SPEC, device="cpu")
    pair = MultiDeviceEncoder(template, ["cpu", "cpu"], build=one_device_encoder, options={},
                              setup=device_helpers.small_memory)
    with pytest.raises(TextTooLongError) as caught:
        pair.encode(texts, kind="document")
    assert (caught.value.index, caught.value.tokens, caught.value.exit_code) == (7, 41, 6)


def test_a_device_list_on_the_command_line_is_checked_before_any_work(cli, monkeypatch, tmp_path):
    _gpus(monkeypatch, 0)
    args = ("run", "--retriever", TINY_BERT, "--data-dir", DATA / "tiny", "--output", tmp_path, "--device")
    none = cli(*args, "cuda:0,cuda:1")
    assert none.code == 4 and "device 'cuda:0' was asked for, but torch sees no CUDA device; use --device cpu" in none.err
    mixed = cli(*args, "cpu,mps")
    assert mixed.code in (2, 4)  # mps: absent here (4) or, where present, mixed kinds (2)
    assert not list(tmp_path.rglob("*.json"))  # nothing was run


PARENT = """
import sys
sys.path[:0] = {paths!r}
import device_helpers
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.devices import MultiDeviceEncoder
from r2med.retrievers.dense.factory import make_encoder, one_device_encoder
from r2med.retrievers.dense.zoo import ModelSpec


class Announce:
    def __init__(self, inner):
        self.inner, self.name, self.told = inner, inner.name, False
        self.chunks_per_call = inner.chunks_per_call

    def cache_key(self, kind):
        return self.inner.cache_key(kind)

    def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False, on_batch=None, on_vectors=None):
        def relay(rows, vectors):
            on_vectors(rows, vectors)
            if not self.told:
                print(*self.inner.pids, flush=True)
                self.told = True
        return self.inner.encode(texts, kind=kind, on_vectors=relay, on_batch=on_batch)


if __name__ == "__main__":
    spec = ModelSpec(name="tiny", model={model!r}, backend="transformers", pooling="mean")
    pair = MultiDeviceEncoder(make_encoder(spec, device="cpu", batch_tokens=300), ["cpu", "cpu"],
                              build=one_device_encoder, options={{"batch_tokens": 300, "batch_size": 2}},
                              setup=device_helpers.slow)
    EmbeddingCache({root!r}, chunk=64, flush_texts=4).embed(Announce(pair), {texts!r}, kind="document")
    print("finished", flush=True)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return any(line.split()[1:2] == ["Z"] for line in handle if line.startswith("State:"))
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see the workers exit")
def test_the_parent_killed_midway_stops_its_workers_and_the_rerun_encodes_the_rest(tmp_path):
    import subprocess
    import sys

    root = tmp_path / "cache"
    script = tmp_path / "parent.py"
    here = str(Path(__file__).resolve().parent)
    script.write_text(PARENT.format(paths=[here, str(Path(here).parents[1]), *sys.path], model=str(TINY_BERT),
                                    root=str(root), texts=TEXTS))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2, "the parent did not start two workers"
        deadline = time.monotonic() + 60
        while not list(root.rglob("chunk_*.part*.npz")) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(parent.pid, signal.SIGKILL)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in workers)  # orphaned workers see their parent gone and exit
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    kept = _kept(folder)
    assert 4 <= kept < 60 and not list(folder.glob("chunk_*.npy"))
    rerun = EmbeddingCache(root, chunk=64, flush_texts=4)
    stored = rerun.embed(make_encoder(SPEC, device="cpu", batch_tokens=300), TEXTS, kind="document")
    assert rerun.encoded_texts == 60 - kept
    assert np.abs(stored.array() - _reference(batch_tokens=300)).max() <= 1e-6


@pytest.mark.gpu
def test_every_visible_gpu_gives_the_vectors_of_one():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices or more")
    every = make_encoder(SPEC, device="cuda", batch_tokens=300)
    assert isinstance(every, MultiDeviceEncoder) and every.devices == [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    try:
        got = every.encode(TEXTS, kind="document")
        assert min(every.encoded) > 0  # every GPU had a share
    finally:
        every.close()
    one = make_encoder(SPEC, device="cuda:0", batch_tokens=300).encode(TEXTS, kind="document")
    assert np.abs(got - one).max() <= 1e-5  # float32 on GPUs: other batches, float noise only
