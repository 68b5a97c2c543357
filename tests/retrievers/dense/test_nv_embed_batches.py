"""NV-Embed-v2's backend (its remote code's ``encode(texts, instruction=, max_length=)``) goes through the same
batching as every local backend: its texts have no token counts here, so they are cut by the text cap in
length order, and each text gets the vector the model gives it alone, in input order (issue 36: every local
backend). The model is a double with NV-Embed's ``encode`` and ``config``: nothing of the hub is needed."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from r2med.retrievers.dense.factory import make_encoder  # noqa: E402
from r2med.retrievers.dense.zoo import get_model  # noqa: E402

TEXTS = ["a", "a longer text here", "mid text", "x" * 40, "", "two words", "the longest text of them all, by far"]


class FakeNVEmbed:
    """``encode`` as NV-Embed's remote code: a tensor of one row per text; a row depends on its text only."""

    config = SimpleNamespace(hidden_size=3)

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def encode(self, texts, instruction="", max_length=4096):
        import torch

        self.batches.append(list(texts))
        return torch.tensor([[len(t) + 1.0, float(sum(map(ord, instruction + t)) % 97), float(max_length)]
                             for t in texts])


def encoder(batch_size: int):
    nv = make_encoder(replace(get_model("nv"), normalize=False), device="cpu", batch_size=batch_size)
    nv._model = FakeNVEmbed()  # loaded: NV-Embed's weights and remote code are not needed for the batching
    return nv


def test_each_text_gets_its_own_vector_in_input_order_whatever_the_batches():
    alone = np.vstack([encoder(1).encode([t], kind="document") for t in TEXTS])
    nv = encoder(3)
    together = nv.encode(TEXTS, kind="document")
    assert np.array_equal(together, alone)
    assert together[:, 0].tolist() == [len(t) + 1.0 for t in TEXTS]  # row i is text i's
    assert together[:, 2].tolist() == [4096.0] * len(TEXTS)  # the recipe's max length (PROTOCOL.md: nv, max 4096)
    assert [len(b) for b in nv._model.batches] == [3, 3, 1]  # the text cap, longest first
    assert nv._model.batches[0][:2] == ["x" * 40, TEXTS[-1]] and nv._model.batches[-1] == [""]


def test_the_query_instruction_reaches_the_model_and_normalising_is_the_recipes():
    nv = make_encoder(get_model("nv"), device="cpu", batch_size=2)
    nv._model = FakeNVEmbed()
    got = nv.encode(TEXTS[:3], kind="query", instruction="Instruct: x\nQuery: ")
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)  # the recipe normalises
    assert got.shape == (3, 3)
