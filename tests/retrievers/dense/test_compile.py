"""``--compile`` (issue 36, item 3): the forward pass under torch.compile, checked against eager on the first batch.

On a CPU torch.compile's inductor builds C++ kernels with gcc. The real compile is slow (a tiny BERT: 7-30 s on 2
busy cores, most of it inductor's first start) and marked so; the checks around it (a compiled function that gives
other vectors, one that fails) use a stand-in for ``torch.compile`` and take a second.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import DATA
from r2med.errors import UsageError
from r2med.retrievers.dense import compiled
from r2med.retrievers.dense.compiled import TOLERANCE, CompileFailedError, CompileMismatchError, check_compiled
from r2med.retrievers.dense.factory import make_encoder
from r2med.retrievers.dense.zoo import ModelSpec

TINY_BERT = DATA / "dense" / "tiny-bert"
SPEC = ModelSpec(name="tiny", model=str(TINY_BERT), backend="transformers", pooling="mean")
WORDS = "patient fever acute chronic heart brain blood gene protein drug dose case study".split()
TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + (i * 5) % 23)) for i in range(30)]


@pytest.mark.slow
def test_compiled_vectors_are_eagers_within_float32_noise():
    eager = make_encoder(SPEC, device="cpu", batch_tokens=200).encode(TEXTS, kind="document")
    encoder = make_encoder(SPEC, device="cpu", batch_tokens=200, compile=True)
    got = encoder.encode(TEXTS, kind="document")
    tower = encoder._tower("document")
    assert isinstance(tower.compiled, torch._dynamo.eval_frame.OptimizedModule) and tower.checked
    assert np.abs(got - eager).max() <= 1e-6  # measured: 6e-8
    # the batches after the first (other shapes: dynamic) ran compiled too, and a second call reuses the graph
    assert np.abs(encoder.encode(TEXTS[:5], kind="document") - eager[:5]).max() <= 1e-6


class _Shifted:
    """A 'compiled' model that adds 0.5 to every hidden state: what a wrong graph could do."""

    def __init__(self, model) -> None:
        self.model = model

    def __call__(self, **inputs):
        output = self.model(**inputs)
        output.last_hidden_state = output.last_hidden_state + 0.5
        return output


def test_a_compiled_model_with_other_vectors_stops_the_run_naming_both_numbers(monkeypatch):
    monkeypatch.setattr(compiled, "compile_model", _Shifted)
    texts = TEXTS[:6]
    encoder = make_encoder(SPEC, device="cpu", batch_tokens=10_000, compile=True)  # one batch: all six texts
    with pytest.raises(CompileMismatchError) as caught:
        encoder.encode(texts, kind="document")
    # worked out: mean pooling of hidden + 0.5 is the eager mean + 0.5; the vectors are then normalised
    model, tokenizer = encoder._tower("document").model, encoder._tower("document").tokenizer
    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        mean = ((hidden * mask).sum(1) / mask.sum(1)).double().numpy()
    cosines = (mean * (mean + 0.5)).sum(1) / (np.linalg.norm(mean, axis=1) * np.linalg.norm(mean + 0.5, axis=1))
    worst = int(np.argmin(cosines))
    order = sorted(range(6), key=lambda i: -len(tokenizer(texts[i])["input_ids"]))  # the batch: longest first
    message = str(caught.value)
    assert caught.value.exit_code == 6
    assert message.startswith(f"tiny: --compile changed the vectors of the first batch beyond float32 noise: text "
                              f"{order.index(worst) + 1} of 6 has cosine {cosines[worst]:.6f} between its compiled and "
                              f"eager vectors (1 - cosine = {1 - cosines[worst]:.1e}, at most 1.0e-06 allowed)")
    assert message.endswith("run without --compile (eager is the reference)")


def test_compiled_noise_within_the_dtypes_tolerance_passes():
    rng = np.random.default_rng(0)
    eager = rng.normal(size=(4, 64))
    for dtype, tolerance in TOLERANCE.items():
        noise = rng.normal(size=eager.shape) * np.sqrt(tolerance / 2)  # |eager|^2 ~ 64: 1 - cosine ~ tolerance / 4
        assert check_compiled("m", dtype, eager, eager + noise) >= 1 - tolerance
        with pytest.raises(CompileMismatchError):
            check_compiled("m", dtype, eager, eager + 3 * noise)  # 9 times that: beyond
        with pytest.raises(CompileMismatchError):  # the same direction, 1.5 x sqrt(2 x tolerance) longer
            check_compiled("m", dtype, eager, eager * (1 + 1.5 * np.sqrt(2 * tolerance)))


def test_a_compile_that_fails_is_a_clear_error(monkeypatch):
    def broken(model):
        def run(**inputs):
            raise RuntimeError("CppCompileError: C++ compile error\nCommand: g++ ... (No such file or directory)")
        return run

    monkeypatch.setattr(compiled, "compile_model", broken)
    encoder = make_encoder(SPEC, device="cpu", compile=True)
    with pytest.raises(CompileFailedError) as caught:
        encoder.encode(TEXTS[:3], kind="document")
    assert caught.value.exit_code == 6
    assert str(caught.value) == (
        "tiny: torch.compile failed on cpu (RuntimeError: CppCompileError: C++ compile error); on a CPU inductor "
        "builds C++ kernels with the system's compiler: install gcc or clang (or set CXX); run without --compile "
        "(what is encoded is kept)")


@pytest.mark.slow
def test_inductor_without_a_working_cxx_compiler_is_a_clear_error(monkeypatch):
    import torch._inductor.config as inductor

    torch._dynamo.reset()
    monkeypatch.setattr(inductor.cpp, "cxx", ("/nonexistent/g++",))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    encoder = make_encoder(SPEC, device="cpu", compile=True)
    try:
        with pytest.raises(CompileFailedError) as caught:
            encoder.encode(TEXTS[:3], kind="document")
    finally:
        torch._dynamo.reset()
    assert caught.value.exit_code == 6
    assert str(caught.value).startswith("tiny: torch.compile failed on cpu (InductorError: InvalidCxxCompiler: No "
                                        "working C++ compiler found in torch._inductor.config.cpp.cxx: "
                                        "('/nonexistent/g++',)); on a CPU inductor builds C++ kernels with the system's "
                                        "compiler: install gcc or clang (or set CXX)")


def test_out_of_memory_under_compile_still_halves_the_batch(monkeypatch):
    class SmallMemory:
        def __init__(self, model):
            self.model, self.seen = model, []

        def __call__(self, **inputs):
            self.seen.append(inputs["input_ids"].numel())
            if inputs["input_ids"].numel() > 120:
                raise torch.OutOfMemoryError("CUDA out of memory (a test double)")
            return self.model(**inputs)

    monkeypatch.setattr(compiled, "compile_model", SmallMemory)
    eager = make_encoder(SPEC, device="cpu", batch_tokens=1000).encode(TEXTS, kind="document")
    encoder = make_encoder(SPEC, device="cpu", batch_tokens=1000, compile=True)
    got = encoder.encode(TEXTS, kind="document")
    assert np.abs(got - eager).max() <= 1e-6
    assert encoder.budget.tokens < 1000 and max(encoder._tower("document").compiled.seen) > 120


def test_compile_on_a_backend_that_cannot_is_a_usage_error():
    spec = ModelSpec(name="st-tiny", model=str(TINY_BERT), backend="sentence-transformers")
    with pytest.raises(UsageError) as caught:
        make_encoder(spec, device="cpu", compile=True)
    assert caught.value.exit_code == 2
    assert str(caught.value) == ("--compile applies to models on the transformers backend; 'st-tiny' runs on "
                                 "sentence-transformers: run it without --compile")


def test_the_compile_flag_reaches_the_encoder(cli, monkeypatch, tmp_path, isolated_home):
    monkeypatch.setattr(compiled, "compile_model", _Shifted)
    args = ("run", "--retriever", TINY_BERT, "--data-dir", DATA / "tiny", "--device", "cpu", "--output", tmp_path)
    result = cli(*args, "--compile")
    assert result.code == 6
    assert "--compile changed the vectors of the first batch beyond float32 noise" in result.err
    assert cli(*args).code == 0  # without it: eager, never the stand-in


@pytest.mark.gpu
def test_compiled_on_cuda_is_eager_within_float32_noise():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    eager = make_encoder(SPEC, device="cuda:0", batch_tokens=200).encode(TEXTS, kind="document")
    encoder = make_encoder(SPEC, device="cuda:0", batch_tokens=200, compile=True)
    got = encoder.encode(TEXTS, kind="document")  # the check against eager on the first batch passed
    assert encoder._tower("document").checked
    assert np.abs(got - eager).max() <= 1e-5
