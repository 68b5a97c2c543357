"""``r2med serve``: Search-R1's retrieval API (``POST /retrieve``) over any r2med retriever and corpus.

Thin: loads the corpus (a dataset's, or a knowledge corpus), builds the retriever, opens a searcher over it
(the index or embeddings from the caches when they hold them) and serves until Ctrl-C or SIGTERM (exit 0).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med.cli.args import number_type, positive_int

#: the defaults of r2med.agent.server (not imported here: ``r2med --help`` imports no HTTP server)
DEFAULT_HOST, DEFAULT_PORT, DEFAULT_TOP_K = "127.0.0.1", 8000, 3
MAX_TOP_K, MAX_QUERIES, MAX_BODY = 1000, 1024, 1 << 20
MAX_RESPONSE, BODY_TIMEOUT, MAX_SEARCHES, MAX_CONNECTIONS = 32 << 20, 30.0, 4, 512


def _seconds(text: str) -> float:
    """A number of seconds above 0."""
    value = number_type(float, "a number of seconds")(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text}")
    return value


def _port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = number_type(int, "a port number")(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected 0..65535 (0: any free port), got {value}")
    return value


def load_serve_corpus(args: argparse.Namespace, settings):
    """``(corpus, source)``: the knowledge corpus of ``--knowledge-dir``, or the one dataset ``--task`` /
    ``--data-dir`` name (its corpus; source "dataset")."""
    from r2med.errors import UsageError

    if args.knowledge_dir is not None:
        from r2med.datasets.local import load_corpus

        if args.task or args.data_dir is not None:
            raise UsageError("--knowledge-dir names the corpus to serve; drop --task and --data-dir")
        return load_corpus(args.knowledge_dir), str(args.knowledge_dir)
    if args.task is None and args.data_dir is None:
        raise UsageError("name the corpus to serve: --task DATASET (from the hub cache, or under --data-dir DIR) or "
                         "--knowledge-dir DIR (a directory holding corpus.jsonl)")
    from r2med.datasets import load_dataset, locate

    found = locate([args.task] if args.task else None, data_dir=args.data_dir, settings=settings)
    if len(found) != 1:
        names = ", ".join(name for name, _ in found)
        raise UsageError(f"--data-dir {args.data_dir} holds {len(found)} datasets ({names}); name the one to serve "
                         "with --task")
    name, path = found[0]
    return load_dataset(name, path=path, settings=settings), "dataset"


def flag_sets() -> list:
    """The retriever families' options (defaults for ``--retriever``; ``NAME:key=value`` sets them inline)."""
    from r2med.cli.flags import retriever_flags

    return [flags for flags in retriever_flags() if flags.cls.__name__ != "RetrieverOptions"]


def cmd_serve(args: argparse.Namespace) -> int:
    from r2med.agent.search import open_searcher
    from r2med.agent.server import RetrievalServer, check_options
    from r2med.io.dirs import usable_cache_dir
    from r2med.retrievers.registry import RetrieverSpec, make_retriever
    from r2med.settings import get_settings

    settings = get_settings()
    options = {"port": args.port, "default_top_k": args.top_k, "max_top_k": args.max_top_k, "max_body": args.max_body,
               "max_queries": args.max_queries, "max_response": args.max_response, "body_timeout": args.body_timeout,
               "max_searches": args.max_searches, "max_connections": args.max_connections}
    check_options(**options)  # before the corpus is indexed: a mistake fails in a second, not after minutes
    from r2med.agent.server import require_extra

    require_extra()  # the serve extra, before the corpus is indexed too
    corpus, source = load_serve_corpus(args, settings)
    from r2med.cli.flags import given

    values = given(args, flag_sets())
    spec = RetrieverSpec.parse(args.retriever, given=values, identical_ids=values.get("identical_ids"))
    cache_dir = None if args.no_cache else usable_cache_dir(settings.home)
    searcher = open_searcher(make_retriever(spec, cache_dir=cache_dir, progress=not args.quiet), corpus, source=source)
    server = RetrievalServer(searcher, host=args.host, **options)
    url = server.bind()
    if not args.quiet:
        print(f"r2med: serving {searcher.retriever} over {searcher.corpus} ({len(searcher.documents)} documents) "
              f"at {url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the way a server is meant to stop
        pass
    if not args.quiet:  # nothing else stops it here: no other thread calls stop()
        print("r2med: stopped serving", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``serve`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    sv = sub.add_parser("serve", parents=[common],
                        help="Search-R1's retrieval API (POST /retrieve) over any retriever and corpus",
                        description="Serve Search-R1's retrieval API over an r2med retriever: POST /retrieve with "
                                    '{"queries": [...], "topk": k, "return_scores": true} answers the top k documents '
                                    "of each query; GET /health says what is served. Runs until Ctrl-C or SIGTERM.")
    where = sv.add_argument_group("corpus (one of)")
    where.add_argument("--task", default=None, metavar="DATASET",
                       help="serve this dataset's corpus (an R2MED name: from the hub cache, or under --data-dir)")
    where.add_argument("--data-dir", type=Path, default=None,
                       help="one dataset directory (then --task may be left out) or a directory of them")
    where.add_argument("--knowledge-dir", type=Path, default=None, metavar="DIR",
                       help="serve this corpus: a directory with corpus.jsonl (R2MED or BEIR rows) or that file")
    sv.add_argument("--retriever", default="bm25", metavar="NAME|PATH",
                    help="bm25, a dense model of the zoo (r2med models list), a local model directory, a hub id or "
                         "openai:<model> (default bm25): anything r2med run --retriever takes")
    from r2med.cli.flags import add

    add(sv, flag_sets())
    http = sv.add_argument_group("server")
    http.add_argument("--host", default=DEFAULT_HOST,
                      help=f"address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0: every "
                           "interface, with a warning: there is no authentication)")
    http.add_argument("--port", type=_port, default=DEFAULT_PORT,
                      help=f"port (default {DEFAULT_PORT}, Search-R1's; 0: any free port, printed at start)")
    http.add_argument("--top-k", type=positive_int, default=DEFAULT_TOP_K,
                      help=f"documents per query when a request gives no topk (default {DEFAULT_TOP_K}, "
                           "Search-R1's --topk)")
    http.add_argument("--max-top-k", type=positive_int, default=MAX_TOP_K,
                      help=f"the largest topk a request may ask for (default {MAX_TOP_K})")
    http.add_argument("--max-queries", type=positive_int, default=MAX_QUERIES,
                      help=f"queries per request (default {MAX_QUERIES}; more: HTTP 413)")
    http.add_argument("--max-body", type=positive_int, default=MAX_BODY, metavar="BYTES",
                      help=f"request body size (default {MAX_BODY}, 1 MiB; larger: HTTP 413)")
    http.add_argument("--max-response", type=positive_int, default=MAX_RESPONSE, metavar="BYTES",
                      help=f"the most bytes one answer may take, checked before searching: queries x the topk longest "
                           f"documents (default {MAX_RESPONSE}, 32 MiB; more: HTTP 413)")
    http.add_argument("--body-timeout", type=_seconds, default=BODY_TIMEOUT, metavar="SECONDS",
                      help=f"seconds a request body may take to arrive after its headers (default {BODY_TIMEOUT:g}; "
                           "then HTTP 408); also how long an idle keep-alive connection stays open")
    http.add_argument("--max-searches", type=positive_int, default=MAX_SEARCHES,
                      help=f"searches running at once in worker threads (default {MAX_SEARCHES}; more wait)")
    http.add_argument("--max-connections", type=positive_int, default=MAX_CONNECTIONS,
                      help=f"connections at once (default {MAX_CONNECTIONS}; past them HTTP 503)")
    sv.add_argument("--no-cache", action="store_true", help="neither reuse nor save indexes and embeddings under R2MED_HOME")
    sv.set_defaults(func=cmd_serve)
