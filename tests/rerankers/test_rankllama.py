"""RankLLaMA's wiring on CPU with a tiny model built here: a randomly initialised 2-layer Llama (hidden 32) with a
one-logit sequence-classification head, a word-level tokenizer that adds <s> before each part of a pair as Llama's
does, and a random LoRA adapter (which also carries its own head, as RankLLaMA's does), all saved to tmp.

The scores must equal a direct forward pass of the unmerged peft model, one pair at a time and unpadded: that
proves the adapter is applied and merged right, the input format ("query: ..." / "document: ..."), the
truncation and that right padding in batches changes nothing.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft", reason="RankLLaMA needs peft (pip install 'r2med[rerank]')")
tokenizers = pytest.importorskip("tokenizers")

QUERIES = ["what causes fever", "what causes fever", "how do vaccines work"]
DOCUMENTS = [
    "fever is caused by infection",
    "vaccines train the immune system " * 12,  # long: truncated at max_length
    "vaccines train the immune system",
]
MAX_LENGTH = 24


@pytest.fixture(scope="module")
def tiny_rankllama(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-rankllama")
    base_dir, adapter_dir = root / "base", root / "adapter"
    words = sorted({w for text in QUERIES + DOCUMENTS + ["query: document:"] for w in text.replace(":", " :").split()})
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(base_dir)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, num_labels=1,
    )
    torch.manual_seed(0)
    transformers.LlamaForSequenceClassification(config).save_pretrained(base_dir)
    base = transformers.AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=1)
    lora = peft.LoraConfig(
        task_type=peft.TaskType.SEQ_CLS, r=4, lora_alpha=8, init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    model = peft.get_peft_model(base, lora)
    head = model.base_model.model.score.modules_to_save["default"]
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=torch.Generator().manual_seed(1)))
    model.save_pretrained(adapter_dir)
    return base_dir, adapter_dir, tokenizer


def reference_scores(base_dir, adapter_dir, *, adapter: bool = True) -> list[float]:
    """One pair at a time, unpadded, through the unmerged peft model (or the base model alone)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(base_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(base_dir, num_labels=1)
    model.config.pad_token_id = 0
    if adapter:
        model = peft.PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    out = []
    with torch.no_grad():
        for query, document in zip(QUERIES, DOCUMENTS):
            encoded = tokenizer(f"query: {query}", f"document: {document}", truncation="longest_first",
                                max_length=MAX_LENGTH, return_tensors="pt")
            encoded.pop("token_type_ids", None)
            out.append(model(**encoded).logits[0][0].item())
    return out


def test_input_format(tiny_rankllama):
    _, _, tokenizer = tiny_rankllama
    ids = tokenizer("query: what causes fever", "document: fever")["input_ids"]
    words = ["<s>", "query", ":", "what", "causes", "fever", "<s>", "document", ":", "fever"]
    assert ids == tokenizer.convert_tokens_to_ids(words)  # <s> before each part, as Llama-2's tokenizer


def test_scores_equal_a_direct_forward_pass(tiny_rankllama):
    from r2med.rerankers.rankllama import RankLlamaScorer

    base_dir, adapter_dir, _ = tiny_rankllama
    scorer = RankLlamaScorer(str(adapter_dir), max_length=MAX_LENGTH, device="cpu")
    assert scorer.describe()["base_model"] == str(base_dir)  # read from the adapter's config
    got = scorer.score(QUERIES, DOCUMENTS)  # one batch, right-padded
    expected = reference_scores(base_dir, adapter_dir)
    assert got == pytest.approx(expected, abs=1e-5)
    assert got != pytest.approx(reference_scores(base_dir, adapter_dir, adapter=False), abs=1e-3)  # the adapter counts
    tokenizer, model = scorer.load()
    assert (tokenizer.padding_side, tokenizer.pad_token, model.config.pad_token_id) == ("right", "<unk>", 0)
    assert not isinstance(model, peft.PeftModel)  # merged


def test_reranks_by_score_through_the_cache(tiny_rankllama, tmp_path):
    from r2med.rerankers.pointwise import PointwiseReranker
    from r2med.rerankers.rankllama import RankLlamaScorer
    from r2med.types import Run

    base_dir, adapter_dir, _ = tiny_rankllama
    expected = reference_scores(base_dir, adapter_dir)
    queries = {"q": QUERIES[0]}
    corpus = {"d0": DOCUMENTS[0], "d1": DOCUMENTS[1]}
    run = Run({"q": {"d0": 2.0, "d1": 1.0}})
    scorer = RankLlamaScorer(str(adapter_dir), str(base_dir), max_length=MAX_LENGTH, device="cpu")
    out = PointwiseReranker("rankllama", scorer, batch_size=2, cache_dir=tmp_path, progress=False).rerank(queries, corpus, run)
    order = ["d0", "d1"] if expected[0] >= expected[1] else ["d1", "d0"]
    assert [d for d, _ in out.ranked("q")] == order


def test_registry_builds_rankllama_without_loading(isolated_home):
    from r2med.options import Runtime
    from r2med.rerankers.options import RankLlamaOptions
    from r2med.rerankers.registry import make_reranker

    reranker = make_reranker("llama", RankLlamaOptions(device="cpu"), Runtime(isolated_home))
    assert reranker.name == "rankllama"
    scorer = reranker.scorer
    assert (scorer.adapter, scorer.base_model, scorer.max_length) == (
        "castorini/rankllama-v1-7b-lora-passage", "meta-llama/Llama-2-7b-hf", 1024)
    assert scorer.dtype == "float32" and scorer._model is None  # float16 is for CUDA only; nothing loaded yet
