"""Regenerate the tiny random models under tests/data/dense (run from the repository root).

    python tests/data/dense/make_tiny_models.py

- ``tiny-bert/``: a 2-layer BERT (hidden 32) with a small WordPiece vocabulary, for CLS/mean pooling;
- ``tiny-decoder/``: a 2-layer Qwen2 (hidden 32) with a small byte-level BPE (EOS ``<|endoftext|>``),
  for last-token pooling, left padding and BMRetriever's EOS recipe.

The tokenizers are built with the ``tokenizers`` library and saved in the classic files (tokenizer.json
plus vocab.txt or vocab.json/merges.txt) so transformers 4.x and 5.x load them alike.

Weights are random (``torch.manual_seed(0)``): the tests compare the encoders with hand-written
computations on the same weights, never with fixed numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

WORDS = (
    "a", "an", "the", "of", "and", "or", "to", "in", "on", "with", "for", "is", "are", "was", "were",
    "be", "by", "as", "at", "it", "this", "that", "what", "which", "who", "how", "why", "patient",
    "patients", "case", "cases", "clinical", "diagnosis", "treatment", "disease", "drug", "dose",
    "gene", "genes", "protein", "cell", "cells", "blood", "heart", "brain", "fever", "pain", "acute",
    "chronic", "study", "trial", "passage", "query", "document", "retrieve", "relevant", "represent",
    "given", "post", "exam", "answer", "help", "similar", "biology", "medical", "science", "year",
    "old", "man", "woman", "presents", "history",
)


def _save_tokenizer(backend, out: Path, tokenizer_class: str, **special: str) -> None:
    """Save a ``tokenizers`` pipeline as a transformers tokenizer that 4.x and 5.x both load."""
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=64, **special).save_pretrained(out)
    backend.model.save(str(out))  # vocab.txt (WordPiece) or vocab.json + merges.txt (BPE)
    settings = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    settings["tokenizer_class"] = tokenizer_class
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def make_bert(out: Path) -> None:
    import torch
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from transformers import BertConfig, BertModel

    out.mkdir(parents=True, exist_ok=True)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s", "##ed", "##ing", ":", ".", ",", "?", "-"]
    backend = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    backend.decoder = decoders.WordPiece()
    special = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    special["mask_token"] = "[MASK]"
    _save_tokenizer(backend, out, "BertTokenizer", **special)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(out)


def make_decoder(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Config, Qwen2Model

    out.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([" ".join(WORDS)] * 4 + WORDS, trainer)
    _save_tokenizer(backend, out, "Qwen2Tokenizer", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=backend.get_vocab_size(),
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        eos_token_id=backend.token_to_id("<|endoftext|>"),
    )
    Qwen2Model(config).eval().save_pretrained(out)


if __name__ == "__main__":
    make_bert(HERE / "tiny-bert")
    make_decoder(HERE / "tiny-decoder")
    for weights in HERE.glob("*/model.safetensors"):
        weights.chmod(0o644)
