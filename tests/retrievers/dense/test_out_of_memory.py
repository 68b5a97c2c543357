"""Out of memory is not the end (issue 36, item 5): a batch that runs out of memory is tried again with half the
token budget, every finished batch kept, the budget that worked said once; a text that does not fit alone stops
the run with exit 6, naming the text and its token count. The device's memory is a test double: the model raises
torch's own OutOfMemoryError when a batch holds more padded tokens than it allows."""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import DATA
from r2med.batching import TextTooLongError
from r2med.datasets.model import Dataset
from r2med.errors import ProviderError
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.factory import make_encoder
from r2med.retrievers.dense.retriever import DenseRetriever
from r2med.retrievers.dense.zoo import ModelSpec
from r2med.types import Qrels

TINY_BERT = DATA / "dense" / "tiny-bert"
WORDS = "patient fever acute chronic heart brain blood gene protein drug dose case study".split()
TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + (i * 5) % 23)) for i in range(60)]


class SmallMemory(torch.nn.Module):
    """The model on a device that holds ``limit`` padded tokens per forward pass (input ids beyond it: OOM)."""

    def __init__(self, model, limit: int) -> None:
        super().__init__()
        self.model, self.limit, self.seen = model, limit, []

    def forward(self, **inputs):
        tokens = inputs["input_ids"].numel()
        self.seen.append(tokens)
        if tokens > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {tokens} tokens' worth")
        return self.model(**inputs)


def _encoder(limit: int | None, **options):
    spec = ModelSpec(name="tiny", model=str(TINY_BERT), backend="transformers", pooling="mean")
    encoder = make_encoder(spec, device="cpu", **options)
    if limit is not None:
        tower = encoder._tower("document")
        tower.model = SmallMemory(tower.model, limit)
    return encoder


def test_a_batch_out_of_memory_is_halved_until_it_fits_with_the_same_vectors(caplog):
    expected = _encoder(None, batch_tokens=1000).encode(TEXTS, kind="document")
    encoder = _encoder(130, batch_tokens=1000)
    with caplog.at_level(logging.WARNING):
        got = encoder.encode(TEXTS, kind="document")
    assert np.abs(got - expected).max() <= 1e-6
    # 1000 -> at most 500 -> 250 -> 125 padded tokens: the first that fits is kept for the rest of the texts
    assert encoder.budget.tokens <= 130 and encoder._tower("document").model.seen[:1] == [max(encoder._tower("document").model.seen)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"{encoder.budget.tokens:,} tokens per batch worked" in warnings[0]
    assert f"--batch-tokens {encoder.budget.tokens}" in warnings[0]
    # the halved budget holds for the next call: no out-of-memory again
    seen = encoder._tower("document").model.seen
    before = len(seen)
    encoder.encode(TEXTS, kind="document")
    assert max(seen[before:]) <= 130


def test_finished_chunks_are_kept_when_a_later_batch_runs_out_of_memory(tmp_path):
    encoder = _encoder(130, batch_tokens=1000)
    cache = EmbeddingCache(tmp_path, flush_texts=8)
    stored = cache.embed(encoder, TEXTS, kind="document")
    assert cache.encoded_texts == len(TEXTS)
    expected = _encoder(None).encode(TEXTS, kind="document")
    assert np.abs(stored.array() - expected).max() <= 1e-6


def test_a_text_that_does_not_fit_alone_is_exit_6_naming_it():
    encoder = _encoder(12, batch_tokens=1000)  # the longest texts have 25 tokens
    with pytest.raises(TextTooLongError) as caught:
        encoder.encode(TEXTS, kind="document")
    error = caught.value
    assert isinstance(error, ProviderError) and error.exit_code == 6
    longest = max(range(len(TEXTS)), key=lambda i: len(TEXTS[i].split()))
    assert error.index == longest and error.tokens == len(TEXTS[longest].split()) + 2  # [CLS] ... [SEP]
    assert str(error).startswith(f"text #{longest} ({error.tokens:,} tokens) does not fit in the memory of cpu")


def test_the_dense_retriever_names_the_document_by_its_id(tmp_path):
    ids = [f"PMC{i:04d}" for i in range(len(TEXTS))]
    dataset = Dataset(name="x", doc_ids=ids, doc_texts=TEXTS, queries={"q1": "fever"}, qrels=Qrels({"q1": {ids[0]: 1}}))
    retriever = DenseRetriever(name="tiny", encoder=_encoder(12, batch_tokens=1000), instructions=lambda n: ("", ""),
                               cache=EmbeddingCache(tmp_path, chunk=16), progress=False)
    with pytest.raises(TextTooLongError) as caught:
        retriever.retrieve(dataset, top_k=3)
    longest = max(range(len(TEXTS)), key=lambda i: len(TEXTS[i].split()))
    message = str(caught.value)
    assert message.startswith(f"document '{ids[longest]}' ({caught.value.tokens:,} tokens) does not fit in the memory "
                              "of cpu even alone"), message
