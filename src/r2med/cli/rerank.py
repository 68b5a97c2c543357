"""``r2med rerank``: rerank a first stage's top k with a cross-encoder, RankLLaMA or a listwise LLM.

Thin: parses, builds the reranker (``r2med.rerankers.registry.make_reranker``), finds the first-stage
runs (``FirstStage``), calls ``rerank_results`` and prints a summary. ``add_reranker_options`` and
``reranker_options`` are shared with ``r2med run --reranker``; ``rerank_after_run`` is what ``run``
calls after retrieval. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from r2med.cli.args import csv_list as _csv
from r2med.cli.args import pct as _pct
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


def reranker_options(args: argparse.Namespace, *, cache_dir: Path | None, progress: bool, device: str | None,
                     batch_size: int | None) -> Any:
    """``RerankerOptions`` from parsed arguments (``add_reranker_options``); the API key is read from ``--api-key-env``."""
    from r2med.rerankers.registry import RerankerOptions
    from r2med.settings import get_secret

    api_key = None
    if args.api_key_env:
        api_key = get_secret(args.api_key_env)
        if api_key is None:
            raise UsageError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    return RerankerOptions(
        cache_dir=cache_dir, progress=progress, device=device, dtype=args.dtype, batch_size=batch_size,
        max_length=args.max_length, base_model=args.base_model, llm_model=args.llm_model, llm_name=args.llm_name,
        base_url=args.base_url, api_key=api_key, window=args.window, stride=args.stride, direction=args.direction,
        max_words=args.max_words, temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
        seed=args.seed, concurrency=args.concurrency, with_scores=args.with_scores,
        reasoning_style=args.reasoning_style, on_error=args.on_error, timeout=args.timeout,
        max_retries=args.max_retries,
    )


def register(subparsers: argparse._SubParsersAction, common_parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``rerank`` to ``subparsers`` (with ``common_parent``'s -q/-v) and return its parser."""
    rr = subparsers.add_parser(
        "rerank", parents=[common_parent],
        help="rerank a first stage's top k (bge-reranker-v2-m3, monobert, rankllama, listwise LLM, any cross-encoder)",
        description="Rerank each query's top k of a first-stage run, evaluate, and write "
                    "<output>/reranker/<reranker>/<system>/top_<k>/<Dataset>.json|.run|.per_query.jsonl. "
                    "Scores and LLM responses are cached under R2MED_HOME, so a rerun costs nothing.",
    )
    rr.add_argument("--run", required=True, metavar="RUN_OR_SYSTEM",
                    help="the first stage: a system name ('bm25', 'nv') or path ('gar/hyde/gpt4/nv') under --output, "
                         "a directory of <Dataset>.run / .jsonl files, or one run file (then one dataset in --tasks)")
    rr.add_argument("--reranker", required=True, metavar="NAME|PATH",
                    help="bge-reranker-v2-m3, monobert, rankllama, listwise (with --llm-model), "
                         "or a local cross-encoder directory / hub id")
    rr.add_argument("--top-k", type=_positive, default=100, help="documents reranked per query (10 or 100 in the paper; default 100)")
    rr.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    rr.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    rr.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    rr.add_argument("--system", default=None, metavar="NAME",
                    help="name of the first stage in the results path (default: from --run)")
    rr.add_argument("--batch-size", type=_positive, default=None, help="pointwise: pairs per batch (default 32; 8 for RankLLaMA)")
    rr.add_argument("--device", default=None, help="pointwise: cpu, cuda, cuda:N or mps (default: the best available)")
    rr.add_argument("--identical-ids", choices=["drop", "keep"], default="keep",
                    help="drop documents whose id equals the query id before scoring (default keep, as the official reranker numbers)")
    rr.add_argument("--no-cache", action="store_true", help="neither reuse nor save scores, LLM responses or stored results")
    rr.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    add_reranker_options(rr)
    rr.set_defaults(func=cmd_rerank)
    return rr


def _printer(args: argparse.Namespace) -> Callable[[Any], None]:
    def show(result: Any) -> None:
        if not args.json and not args.quiet:
            how = "stored result reused" if getattr(result, "reused", False) else f"{result.seconds:.1f} s"
            print(f"{result.dataset}: nDCG@10 {_pct(result.scores.rounded()['ndcg_at_10'])} "
                  f"({result.scores.n_queries} queries, {how}) -> {result.files.result}", file=sys.stderr)
    return show


def cmd_rerank(args: argparse.Namespace) -> int:
    from r2med.datasets import load_dataset, locate
    from r2med.pipeline import summarise
    from r2med.reporting.tables import markdown_table
    from r2med.rerankers.registry import make_reranker
    from r2med.rerankers.stage import FirstStage, rerank_results
    from r2med.settings import get_settings

    settings = get_settings()
    quiet = getattr(args, "quiet", False)
    options = reranker_options(args, cache_dir=None if args.no_cache else settings.home,
                               progress=not (quiet or args.json), device=args.device, batch_size=args.batch_size)
    first = FirstStage.resolve(args.run, output=args.output, system=args.system)
    targets = locate(args.tasks, data_dir=args.data_dir, settings=settings)
    if first.file is not None and len(targets) != 1:
        raise UsageError(f"--run {args.run} is one run file; name its dataset with --tasks (got {len(targets)} datasets)")
    for name, _ in targets:  # fail before any work when a first-stage run is missing
        first.path_for(name)
    reranker = make_reranker(args.reranker, options)
    loaders = [lambda name=name, path=path: load_dataset(name, path=path, settings=settings) for name, path in targets]
    results = rerank_results(reranker, loaders, first, output=args.output, top_k=args.top_k, truncate=args.truncate,
                             ignore_identical_ids=args.identical_ids == "drop", resume=not args.no_cache,
                             on_result=_printer(args))
    table = summarise(results)
    if args.json:
        print(json.dumps(table, indent=2, ensure_ascii=False))
        return 0
    rows = [[name, _pct(row["ndcg_at_10"]), _pct(row["recall_at_100"])] for name, row in table.items()]
    print(f"{reranker.name} on {first.system}, top {args.top_k} -> "
          f"{Path(args.output) / 'reranker' / reranker.name / first.system / f'top_{args.top_k}'}")
    print(markdown_table(["dataset", "nDCG@10", "R@100"], rows, align_right=[False, True, True]))
    return 0


def rerank_after_run(args: argparse.Namespace, system: str, loaders: Sequence[Callable[[], Any]], *,
                     on_result: Callable[[Any], None] | None = None) -> list:
    """For ``r2med run --reranker NAME --rerank-top-k K``: rerank the runs a stage just wrote.

    ``system`` is the stage's system name or path (``bm25``, ``base retriever/bm25``, ``gar/hyde/gpt4/nv``,
    as the keys of ``run_pipeline``'s result); its runs are read from ``<args.output>/<path>/<Dataset>.run``.
    ``args`` needs ``add_reranker_options``'s flags, ``reranker``, ``rerank_top_k``, ``output``, and may have
    ``device``, ``no_cache``, ``rerank_batch_size``, ``quiet``, ``json``.
    """
    from r2med.rerankers.registry import make_reranker
    from r2med.rerankers.stage import FirstStage, rerank_results
    from r2med.settings import get_settings

    quiet = getattr(args, "quiet", False)
    no_cache = getattr(args, "no_cache", False)
    options = reranker_options(args, cache_dir=None if no_cache else get_settings().home,
                               progress=not (quiet or getattr(args, "json", False)), device=getattr(args, "device", None),
                               batch_size=getattr(args, "rerank_batch_size", None))
    reranker = make_reranker(args.reranker, options)
    first = FirstStage.resolve(system, output=args.output)
    return rerank_results(reranker, loaders, first, output=args.output, top_k=args.rerank_top_k, truncate=args.truncate,
                          resume=not no_cache, on_result=on_result)
