"""Set-up functions for the encoding workers of ``MultiDeviceEncoder`` in the tests (``setup=``): each runs in a
worker process after its encoder is made, and changes the model of the document tower. Module level, so that the
workers (spawned processes) can import them; torch is imported inside, so that collecting this module needs none."""

from __future__ import annotations

import time


def _wrap(encoder, before) -> None:
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model, self.config = model, model.config

        def forward(self, **inputs):
            before(inputs)
            return self.model(**inputs)

    tower = encoder._tower("document")
    tower.model = Wrapped(tower.model)


def slow(encoder) -> None:
    """Every batch takes 0.1 s more: a kill lands while the worker is encoding."""
    _wrap(encoder, lambda inputs: time.sleep(0.1))


def failing(encoder) -> None:
    """Every batch fails as a model's bug would."""
    def fail(inputs):
        raise ValueError(f"boom in a batch of {inputs['input_ids'].shape[0]} texts")

    _wrap(encoder, fail)


def small_memory(encoder) -> None:
    """A device that holds 40 padded tokens per batch: a longer text does not fit even alone."""
    import torch

    def check(inputs):
        if inputs["input_ids"].numel() > 40:
            raise torch.OutOfMemoryError("CUDA out of memory (a test double)")

    _wrap(encoder, check)


def nv_embed_double(encoder) -> None:
    """NV-Embed's model replaced by the tests' double (``test_nv_embed_batches.FakeNVEmbed``): its weights and remote
    code are not needed for the batching."""
    from test_nv_embed_batches import FakeNVEmbed

    encoder._model = FakeNVEmbed()
