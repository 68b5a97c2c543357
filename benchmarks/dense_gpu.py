"""Dense encoding at the device's limit: r2med's encoder against a plain sorted loop and sentence-transformers,
on random-weight models in the zoo's shapes (issue 36, item 8).

    python benchmarks/dense_gpu.py                       # on a GPU: the Qwen3-Embedding-8B and BGE-large shapes
    python benchmarks/dense_gpu.py --tiny                # on a CPU, in seconds: the same code on tiny shapes (CI)
    python benchmarks/dense_gpu.py --shape qwen3-8b --texts 2000 --words 200 --peak-tflops 989
    python benchmarks/dense_gpu.py --tiny --compile --devices cpu,cpu   # the --compile and multi-device code on a CPU

No hub, no download: each model is built from its ``transformers`` config class with random weights and saved to
a local directory (``--workdir``, reused), with a BERT WordPiece tokenizer built here (one token per word of a
synthetic vocabulary), and it runs through r2med's ``make_encoder`` with the zoo recipe's settings (pooling,
padding side, EOS, dtype, token budget). It needs torch, transformers and sentence-transformers and nothing else:
r2med is imported from this checkout's ``src``, and of its dependencies this path imports only those the three
bring along (numpy, scipy, tqdm, huggingface_hub; a test runs it with pytrec_eval and msgspec blocked).

For every shape it prints, over the same texts: texts/s, tokens/s (real tokens, padding not counted), achieved
TFLOP/s and model FLOP utilisation (with ``--peak-tflops``, or a known GPU: H100/H200 989, A100 312 bf16 dense) of

- r2med's default (``make_encoder(spec)``, the recipe's ``--batch-tokens``),
- r2med with ``--compile`` (on CUDA by default, on a CPU with ``--compile``; the seconds to compile and warm up are
  printed apart: they are paid once per model and process),
- r2med on several devices (``--devices``; by default every visible GPU when there are two or more): the same
  encoder with one worker process per device, its speed-up over one device and that per device (the scaling
  efficiency; ``--devices cpu,cpu`` runs the code on a CPU, where the workers share the cores: indicative only),
- a plain loop on the same loaded model: tokenized once, sorted by tokens, batches of ``--plain-tokens`` padded
  tokens, padded on the recipe's side, pooled and normalised by hand,
- ``SentenceTransformer.encode`` on the same weights (Transformer + Pooling + Normalize modules),

and the per-text cosine (worst text) and largest absolute difference of r2med's vectors against the other two.
FLOPs per text of n tokens: 2 x (parameters outside the embeddings) x n + 4 x layers x attention width x n^2 / 2
(attention's two products over a causal or a full mask count alike here: half the n x n scores, as the useful
work of a causal decoder; an encoder's full mask does twice that, so its utilisation is understated).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: shape -> (zoo recipe, config class name, config keywords, tiny config keywords)
SHAPES = {
    "qwen3-8b": ("qwen3-embedding-8b", "Qwen3Config", {
        "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960, "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6}, {
        "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 1024}),
    "bge-large": ("bge", "BertConfig", {
        "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
        "max_position_embeddings": 512}, {
        "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "max_position_embeddings": 512}),
}
PEAKS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # bf16 dense TFLOP/s
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_tokenizer(folder: Path, vocab_size: int, padding_side: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + [f"w{i}" for i in range(vocab_size - len(SPECIALS))])}
    backend = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]", eos_token="[SEP]",
                                        model_max_length=512, padding_side=padding_side)
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_model(shape: str, folder: Path, *, tiny: bool, device: str, dtype: str) -> None:
    """Random weights in ``shape``'s config, saved to ``folder`` (kept: a second run loads it)."""
    import torch
    import transformers

    recipe, config_name, full, small = SHAPES[shape]
    if (folder / "config.json").is_file():
        return
    from r2med.retrievers.dense.zoo import get_model

    spec = get_model(recipe)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = 30522
    build_tokenizer(folder, vocab, spec.padding_side or "right")
    config = getattr(transformers, config_name)(vocab_size=vocab, pad_token_id=0, **(small if tiny else full))
    model_class = {"Qwen3Config": transformers.Qwen3Model, "BertConfig": transformers.BertModel}[config_name]
    print(f"building {shape} ({'tiny' if tiny else 'full'} shape) with random weights in {folder}", flush=True)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = model_class(config)
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(folder)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def synthetic_texts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(30000)}" for _ in range(rng.randint(words // 2, words * 3 // 2)))
            for _ in range(n)]


def model_flops(config, lengths: list[int]) -> float:
    """FLOPs of the texts (see the module docstring)."""
    h, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    inter = config.intermediate_size
    gated = 3 if getattr(config, "model_type", "") != "bert" else 2
    per_layer = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h + gated * h * inter
    params = layers * per_layer
    width = heads * head_dim
    return float(sum(2 * params * n + 2 * layers * width * n * n for n in lengths))


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def plain_loop(model, tokenizer, texts, *, max_length, pooling, side, budget, device):
    """Tokenize once, sort by tokens, batches of ``budget`` padded tokens, pad on ``side``, pool, normalise."""
    import torch

    ids = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    tokenizer.padding_side = side
    out = [None] * len(texts)
    start = 0
    while start < len(order):
        take = max(1, budget // len(ids[order[start]]))
        rows = order[start:start + take]
        batch = tokenizer.pad({"input_ids": [ids[i] for i in rows]}, padding=True, return_tensors="pt").to(device)
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state
            if pooling == "cls":
                vectors = hidden[:, 0]
            else:  # last real token
                if side == "left":
                    vectors = hidden[:, -1]
                else:
                    last = batch["attention_mask"].sum(dim=1) - 1
                    vectors = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
            vectors = torch.nn.functional.normalize(vectors.float(), dim=-1).cpu().numpy()
        for row, vector in zip(rows, vectors):
            out[row] = vector
        start += len(rows)
    import numpy as np

    return np.stack(out)


def sentence_transformers_model(folder: Path, pooling: str, max_length: int, device: str, dtype: str):
    import torch
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers 6 moved the modules
        from sentence_transformers.sentence_transformer import modules as st_modules
    except ImportError:
        from sentence_transformers import models as st_modules
    extra = {"dtype": getattr(torch, dtype)} if dtype != "float32" else {}
    try:
        transformer = st_modules.Transformer(str(folder), max_seq_length=max_length, model_kwargs=extra)
    except TypeError:  # before model_kwargs
        transformer = st_modules.Transformer(str(folder), max_seq_length=max_length, model_args=extra)
    width = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    mode = {"cls": "cls", "last": "lasttoken", "mean": "mean"}[pooling]
    pool = st_modules.Pooling(width(), pooling_mode=mode)
    return SentenceTransformer(modules=[transformer, pool, st_modules.Normalize()], device=device)


def compare(a, b) -> tuple[float, float]:
    import numpy as np

    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    cos = (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    return float(cos.min()), float(np.abs(a64 - b64).max())


def run_shape(shape: str, args, device: str, peak: float | None) -> None:
    import torch

    from r2med.retrievers.dense.factory import make_encoder
    from r2med.retrievers.dense.zoo import get_model

    recipe = SHAPES[shape][0]
    spec = get_model(recipe)
    dtype = args.dtype or (spec.dtype if device.startswith("cuda") else "float32")
    folder = Path(args.workdir) / f"{shape}{'-tiny' if args.tiny else ''}"
    build_model(shape, folder, tiny=args.tiny, device=device, dtype=dtype)
    spec = replace(spec, name=f"{recipe}-shape", model=str(folder), revision=None, document_model=None)
    texts = synthetic_texts(args.texts, args.words)
    encoder = make_encoder(spec, device=device, dtype=dtype, batch_tokens=args.batch_tokens)
    tower = encoder._tower("document")
    max_length = encoder.max_length("document")
    lengths = [len(ids) for ids in tower.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
    flops = model_flops(tower.model.config, lengths)
    tokens = sum(lengths)
    print(f"\n{shape}: recipe {recipe}, {dtype} on {device}, {len(texts):,} texts, {tokens:,} tokens "
          f"({tokens / len(texts):.0f} per text), r2med budget {encoder.budget.tokens:,} tokens per batch")
    rows = []

    def measure(label, fn):
        out, seconds = timed(fn, device)
        rate = flops / seconds / 1e12
        mfu = f"{100 * rate / peak:.1f}%" if peak else "n/a"
        rows.append((label, len(texts) / seconds, tokens / seconds, rate, mfu))
        return out

    encoder.encode(texts[:32], kind="document")  # warm-up (kernels, allocator)
    ours = measure("r2med default", lambda: encoder.encode(texts, kind="document"))
    extra = []  # (label, vectors) compared with r2med's default below
    if args.compile:
        fast = make_encoder(spec, device=device, dtype=dtype, batch_tokens=args.batch_tokens, compile=True)
        _, warm = timed(lambda: fast.encode(texts[:32], kind="document"), device)  # compiles, checks against eager
        label = "r2med --compile"
        extra.append((label, measure(label, lambda: fast.encode(texts, kind="document"))))
        print(f"--compile: {warm:.1f} s to compile, check against eager and warm up (once per model and process)")
        del fast
    devices = args.devices
    if devices is None and device.startswith("cuda") and torch.cuda.device_count() > 1:
        devices = ",".join(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    if devices:
        many = make_encoder(spec, device=devices, dtype=dtype, batch_tokens=args.batch_tokens)
        _, warm = timed(lambda: many.encode(texts[: 32 * len(many.devices)], kind="document"), device)
        label = f"r2med on {len(many.devices)} devices ({devices})"
        extra.append((label, measure(label, lambda: many.encode(texts, kind="document"))))
        speedup = rows[-1][2] / rows[0][2]
        print(f"{len(many.devices)} devices: {speedup:.2f}x the tokens/s of one ({speedup / len(many.devices):.0%} per "
              f"device); {warm:.1f} s to start the workers and load the model on each")
        many.close()
    side = spec.padding_side or "right"
    plain = measure(f"plain sorted loop ({args.plain_tokens:,} tokens, {side} padding)", lambda: plain_loop(
        tower.model, tower.tokenizer, texts, max_length=max_length, pooling=spec.pooling, side=side,
        budget=args.plain_tokens, device=device))
    st_model = sentence_transformers_model(folder, spec.pooling, max_length, device, dtype)
    st_model.encode(texts[:32], batch_size=args.st_batch_size)
    st = measure(f"SentenceTransformer.encode (batch {args.st_batch_size})", lambda: st_model.encode(
        texts, batch_size=args.st_batch_size, normalize_embeddings=True, convert_to_numpy=True))
    del st_model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    print(f"{'method':<58} {'texts/s':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6}")
    for label, per_text, per_token, rate, mfu in rows:
        print(f"{label:<58} {per_text:>9,.1f} {per_token:>10,.0f} {rate:>8.3f} {mfu:>6}")
    for label, other in (("plain loop", plain), ("sentence-transformers", st)):
        cosine, diff = compare(ours, other)
        print(f"r2med vs {label}: worst per-text cosine {cosine:.6f}, largest difference {diff:.3g}")
    for label, other in extra:
        cosine, diff = compare(ours, other)
        print(f"{label} vs r2med default: worst per-text cosine {cosine:.6f}, largest difference {diff:.3g}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, few texts: runs on a CPU in seconds")
    parser.add_argument("--texts", type=int, default=None, help="texts to encode (default 2000; 64 with --tiny)")
    parser.add_argument("--words", type=int, default=None, help="mean words per text, one token each (default 200; "
                        "40 with --tiny)")
    parser.add_argument("--device", default=None, help="the one device of the single-device rows (default: cuda:0 "
                        "when there is CUDA, else cpu)")
    parser.add_argument("--dtype", default=None, help="default: the recipe's on CUDA, float32 elsewhere")
    parser.add_argument("--batch-tokens", type=int, default=None, help="r2med's budget (default: the recipe's)")
    parser.add_argument("--plain-tokens", type=int, default=32768, help="the plain loop's padded tokens per batch")
    parser.add_argument("--st-batch-size", type=int, default=64)
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's peak, for utilisation "
                        "(default: known GPUs' bf16 dense peak; none on a CPU)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also measure r2med --compile (default: on CUDA yes, on a CPU no)")
    parser.add_argument("--devices", default=None, help="also measure r2med on these devices, one worker each "
                        "(default: every visible GPU when there are two or more; cpu,cpu: two CPU workers)")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "r2med-dense-gpu"),
                        help="where the random models are saved (reused)")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")  # one device: "cuda" is every GPU
    if args.compile is None:
        args.compile = device.startswith("cuda")
    args.texts = args.texts or (64 if args.tiny else 2000)
    args.words = args.words or (40 if args.tiny else 200)
    peak = args.peak_tflops
    if peak is None and device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        peak = next((value for key, value in PEAKS.items() if key in name), None)
        print(f"device: {name}" + (f", peak {peak:g} TFLOP/s (bf16 dense)" if peak else ", peak unknown"))
    for shape in (SHAPES if args.shape == "all" else [args.shape]):
        run_shape(shape, args, device, peak)


if __name__ == "__main__":
    main()
