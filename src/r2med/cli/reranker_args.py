"""The reranker options shared by ``r2med rerank`` and ``r2med run --reranker``: flags and ``RerankerOptions``."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from r2med.cli.args import positive_int as _positive
from r2med.errors import UsageError

_STYLES = ("auto", "plain", "think", "huatuo", "sky-t1", "search-r1")


def _temperature(text: str) -> float | None:
    """A float, or ``none`` to send no temperature (the server's default; OpenAI's reasoning models refuse one)."""
    if text.strip().lower() in ("none", "default", "server"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None


def add_reranker_options(parser: argparse.ArgumentParser) -> None:
    """The options every reranker reads (model, LLM endpoint, window, sampling), shared by ``rerank`` and ``run``."""
    group = parser.add_argument_group("reranker")
    group.add_argument("--max-length", type=_positive, default=None,
                       help="pointwise: tokens per (query, document) pair (default: as the authors ran the model)")
    group.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                       help="pointwise: weights on CUDA (default float32; float16 for RankLLaMA); float32 elsewhere")
    group.add_argument("--base-model", default=None, metavar="NAME|PATH",
                       help="rankllama: the base model the LoRA adapter goes on (default meta-llama/Llama-2-7b-hf)")
    group.add_argument("--truncate", action="store_true",
                       help="keep only the reranked top k per query, as the official reranker runs did "
                            "(default: the rest follow in first-stage order)")
    llm = parser.add_argument_group("listwise reranker (an OpenAI-compatible chat server)")
    llm.add_argument("--llm-model", default=None, metavar="MODEL", help="model id the server knows (sent as 'model')")
    llm.add_argument("--llm-name", default=None, metavar="NAME",
                     help="name of the LLM in the results folder (default: a safe form of --llm-model)")
    llm.add_argument("--base-url", default=None, metavar="URL",
                     help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL)")
    llm.add_argument("--api-key-env", default=None, metavar="NAME",
                     help="environment variable holding the API key (default OPENAI_API_KEY; local servers need none)")
    llm.add_argument("--window", type=_positive, default=20, help="passages per window (default 20)")
    llm.add_argument("--stride", type=_positive, default=10, help="step between windows (default 10)")
    llm.add_argument("--direction", choices=["back_to_front", "front_to_back"], default="back_to_front",
                     help="where the windows start (default back_to_front, as RankGPT)")
    llm.add_argument("--max-words", type=_positive, default=300, help="words kept per passage in the prompt (default 300)")
    llm.add_argument("--with-scores", action="store_true",
                     help="show each passage's first-stage score in the prompt (InsertRank)")
    llm.add_argument("--temperature", type=_temperature, default=0.0,
                     help="sampling temperature (default 0, as RankGPT; 'none' sends none, for models that refuse one)")
    llm.add_argument("--top-p", type=float, default=None)
    llm.add_argument("--max-tokens", type=_positive, default=None, help="completion tokens per window (reasoning models need many)")
    llm.add_argument("--seed", type=int, default=None)
    llm.add_argument("--concurrency", type=_positive, default=8, help="queries reranked side by side (default 8)")
    llm.add_argument("--reasoning-style", choices=_STYLES, default="auto",
                     help="how a reasoning model's trace is marked (default: detected from the tags)")
    llm.add_argument("--on-error", choices=["raise", "keep"], default="raise",
                     help="a window that fails after retries: raise = exit 6 once the other queries are done "
                          "(rerun to resume), keep = the window keeps its order")
    llm.add_argument("--timeout", type=float, default=300.0, help="seconds per request attempt (default 300)")
    llm.add_argument("--max-retries", type=int, default=5, help="retries per request (default 5)")


def reranker_options(args: argparse.Namespace, *, batch_size: int | None) -> Any:
    """``RerankerOptions`` from parsed arguments (``add_reranker_options``, ``--device``); the API key is read from
    ``--api-key-env``; the pipeline sets the cache and progress."""
    from r2med.rerankers.registry import RerankerOptions
    from r2med.settings import get_secret

    api_key = None
    if args.api_key_env:
        api_key = get_secret(args.api_key_env)
        if api_key is None:
            raise UsageError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    given = {f.name: getattr(args, f.name) for f in fields(RerankerOptions) if hasattr(args, f.name)}
    return RerankerOptions(**{**given, "batch_size": batch_size, "api_key": api_key})
