"""r2med.batching: the token-budget loop the encoders and rerankers share, its out-of-memory retry, and the host
work of the next batch done on a background thread (issue 36, items 1, 2 and 5)."""

from __future__ import annotations

import threading

import pytest

from r2med.batching import TextTooLongError, TokenBudget, longest_first, run_batches, run_in_order

LENGTHS = [5, 40, 12, 40, 3, 9, 22, 7, 30, 1]


def test_batches_hold_at_most_the_budget_in_padded_tokens_longest_first():
    budget = TokenBudget(tokens=80, texts=3)
    batches = [rows for rows, _ in run_batches(LENGTHS, lambda rows: rows, budget, name="t")]
    assert batches == [[1, 3], [8, 6], [2, 5, 7], [0, 4, 9]]  # 2x40, 2x30, 3x12, 3x5 (the cap of 3)
    assert [i for rows in batches for i in rows] == longest_first(LENGTHS)


def test_the_next_batch_is_prepared_on_a_background_thread_with_the_same_results():
    threads: list[str] = []

    def prepare(rows):
        threads.append(threading.current_thread().name)
        return [10 * r for r in rows]

    budget = TokenBudget(tokens=80)
    with_thread = run_in_order(LENGTHS, lambda xs: [x + 1 for x in xs], budget, name="t", prepare=prepare)
    assert with_thread == [10 * r + 1 for r in range(len(LENGTHS))]
    assert threads[0] == threading.current_thread().name and len(threads) > 2
    assert all(name.startswith("r2med-batch") for name in threads[1:])


def test_a_batch_prepared_ahead_is_prepared_again_when_out_of_memory_changes_the_cut():
    torch = pytest.importorskip("torch")
    prepared: list[list[int]] = []

    def prepare(rows):
        prepared.append(rows)
        return rows

    ran: list[list[int]] = []

    def run(rows):
        ran.append(rows)
        if len(rows) * LENGTHS[rows[0]] > 50:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return [LENGTHS[r] for r in rows]

    budget = TokenBudget(tokens=200)
    out = run_in_order(LENGTHS, run, budget, name="t", prepare=prepare)
    # 5 x 40 = 200 tokens ran out of memory, then 2 x 40 (half: 100), then one text of 40 (half: 40) fit
    assert out == LENGTHS and budget.tokens == 40
    assert ran[:3] == [[1, 3, 8, 6, 2], [1, 3], [1]]
    # the batches prepared ahead with the larger budgets (from position 5, then from 2) were never run: after each
    # halving the next batch was prepared again as the new budget cuts it
    # (a preparation cancelled before it started is not called at all)
    assert [5, 7, 0, 4, 9] not in ran and [8, 6, 2] not in ran
    assert all(rows in prepared for rows in ran)
    assert all(len(rows) * LENGTHS[rows[0]] <= 40 or len(rows) == 1 for rows in ran[2:])


def test_one_input_that_does_not_fit_alone_is_exit_6():
    torch = pytest.importorskip("torch")

    def run(rows):
        if max(LENGTHS[r] for r in rows) > 30:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return rows

    with pytest.raises(TextTooLongError) as caught:
        run_in_order(LENGTHS, run, TokenBudget(tokens=1000), name="t", what="pair", device="cuda:0")
    assert caught.value.exit_code == 6 and (caught.value.index, caught.value.tokens) == (1, 40)
    assert str(caught.value).startswith("pair #1 (40 tokens) does not fit in the memory of cuda:0 even alone")


def test_an_error_while_preparing_ahead_reaches_the_caller():
    def prepare(rows):
        if 4 in rows:
            raise ValueError("cannot pad")
        return rows

    with pytest.raises(ValueError, match="cannot pad"):
        run_in_order(LENGTHS, lambda rows: rows, TokenBudget(tokens=80), name="t", prepare=prepare)


def test_other_errors_are_not_retried():
    calls = []

    def run(rows):
        calls.append(rows)
        raise RuntimeError("a CUDA kernel failed")

    with pytest.raises(RuntimeError, match="kernel"):
        run_in_order(LENGTHS, run, TokenBudget(tokens=80), name="t")
    assert len(calls) == 1


@pytest.mark.gpu
def test_on_cuda_batches_are_pinned_and_the_vectors_match_the_cpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import numpy as np

    from conftest import DATA
    from r2med.retrievers.dense.factory import make_encoder
    from r2med.retrievers.dense.zoo import ModelSpec

    spec = ModelSpec(name="tiny", model=str(DATA / "dense" / "tiny-bert"), backend="transformers", pooling="mean")
    texts = [" ".join(["fever"] * (1 + i % 30)) for i in range(200)]
    gpu = make_encoder(spec, device="cuda:0", batch_tokens=512)  # one GPU ("cuda" is every visible one)
    prepared = gpu._prepare(texts, "document", "")
    assert all(t.is_pinned() for t in gpu._inputs(prepared, [0, 1], "document").values())
    got = gpu.encode(texts, kind="document")
    expected = make_encoder(spec, device="cpu").encode(texts, kind="document")
    assert np.abs(got - expected).max() <= 1e-4


# -- finish: a batch's results taken to the host once the next batch is launched (issue 36, item 2) -------------

def _logged_run(log: list, fail_at: int | None = None, error: BaseException | None = None):
    def run(rows):
        log.append(("run", tuple(rows)))
        if fail_at is not None and len([e for e in log if e[0] == "run"]) == fail_at:
            raise error  # type: ignore[misc]
        return [10 * r for r in rows]
    return run


def _finish(log: list):
    def finish(result):
        log.append(("finish", tuple(r // 10 for r in result)))
        return [r + 1 for r in result]
    return finish


def test_a_batch_is_finished_once_the_next_one_is_launched_with_the_same_results():
    log: list = []
    budget = TokenBudget(tokens=80, texts=3)
    got = list(run_batches(LENGTHS, _logged_run(log), budget, name="t", finish=_finish(log)))
    plain = list(run_batches(LENGTHS, lambda rows: [10 * r + 1 for r in rows], TokenBudget(tokens=80, texts=3),
                             name="t"))
    assert got == plain
    assert log == [("run", (1, 3)), ("run", (8, 6)), ("finish", (1, 3)), ("run", (2, 5, 7)), ("finish", (8, 6)),
                   ("run", (0, 4, 9)), ("finish", (2, 5, 7)), ("finish", (0, 4, 9))]


def test_out_of_memory_in_the_next_batch_keeps_the_launched_one():
    torch = pytest.importorskip("torch")
    log: list = []
    run = _logged_run(log, fail_at=2, error=torch.OutOfMemoryError("CUDA out of memory"))
    got = dict((tuple(rows), out) for rows, out in run_batches(LENGTHS, run, TokenBudget(tokens=80, texts=3),
                                                               name="t", finish=_finish(log)))
    assert log[:4] == [("run", (1, 3)), ("run", (8, 6)), ("finish", (1, 3)), ("run", (8,))]
    assert sorted(i for rows in got for i in rows) == list(range(len(LENGTHS)))
    assert all(out == [10 * r + 1 for r in rows] for rows, out in got.items())


@pytest.mark.parametrize("error", [RuntimeError("kernel"), KeyboardInterrupt()], ids=["error", "interrupt"])
def test_an_error_or_an_interrupt_in_the_next_batch_still_gives_the_launched_one_first(error):
    log: list = []
    batches = run_batches(LENGTHS, _logged_run(log, fail_at=3, error=error), TokenBudget(tokens=80, texts=3),
                          name="t", finish=_finish(log))
    received = []
    with pytest.raises(type(error)):
        for rows, out in batches:
            received.append(rows)
    assert received == [[1, 3], [8, 6]]  # the second was launched before the third failed: kept, not lost


def test_an_interrupt_while_the_next_batch_is_prepared_still_gives_the_launched_one():
    log: list = []
    calls = []

    def prepare(rows):
        calls.append(rows)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return rows

    batches = run_batches(LENGTHS, _logged_run(log), TokenBudget(tokens=80, texts=3), name="t", prepare=prepare,
                          finish=_finish(log))
    received = []
    with pytest.raises(KeyboardInterrupt):
        for rows, _ in batches:
            received.append(rows)
    assert received == [[1, 3], [8, 6]]


def test_launched_vectors_on_a_cpu_are_the_tensors_values():
    torch = pytest.importorskip("torch")
    from r2med.batching import Launched, finished

    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert finished(Launched(tensor)).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert finished([1, 2]) == [1, 2]


@pytest.mark.gpu
def test_launched_vectors_on_cuda_are_copied_to_pinned_memory_without_blocking():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from r2med.batching import Launched

    # on every GPU, with cuda:0 current: the event must wait on the tensor's own device's stream; the device is
    # kept busy first, so a result read without waiting for the copy would read stale memory
    for index in range(torch.cuda.device_count()):
        device = f"cuda:{index}"
        tensor = torch.randn(4096, 1024, device=device)
        expected = tensor.cpu().numpy()
        with torch.cuda.device(0):
            with torch.cuda.device(device):
                torch.cuda._sleep(10 ** 9)
            launched = Launched(tensor)
        assert launched._host.is_pinned()
        assert (launched.result() == expected).all()


def test_launched_vectors_on_another_device_come_to_the_host():
    torch = pytest.importorskip("torch")
    from r2med.batching import Launched

    class Elsewhere:  # a tensor of a device that is neither the CPU nor CUDA (MPS): only .cpu() reads it
        device = torch.device("meta")

        def cpu(self):
            return torch.ones(2, 2)

    assert Launched(Elsewhere()).result().tolist() == [[1.0, 1.0], [1.0, 1.0]]
