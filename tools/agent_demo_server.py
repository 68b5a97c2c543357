"""Serve the scripted agent model of docs/agent.md on loopback: ``POST /v1/completions`` (and vLLM's ``/tokenize``).

    python tools/agent_demo_server.py [--port 38301] [--max-model-len N] &

It is the test suite's ``tests/agent/completion_server.py``: deterministic, no model. For each question it
searches the question's first three words, then its last three, then answers ("The evidence on ..."), so the
numbers of docs/agent.md show the mechanics of ``r2med agent``, not a model's quality. Any ``--llm-model`` name is
answered. ``--max-model-len N`` makes it a vLLM with that context (``GET /v1/models`` says it; a prompt + ``max_tokens``
past it gets vLLM's HTTP 400; one token per character). It prints one line, where it listens; stop it with Ctrl-C (or ``kill %1``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "agent"))

from completion_server import CompletionServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=38301, help="port on 127.0.0.1 (default 38301; 0: any free one)")
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="act as a vLLM with this context in tokens (one per character); default: no context said")
    args = parser.parse_args(argv)
    try:
        server = CompletionServer(port=args.port, max_model_len=args.max_model_len)
    except OSError as exc:
        print(f"agent_demo_server: cannot listen on 127.0.0.1:{args.port} ({exc.strerror}); pick another --port",
              file=sys.stderr)
        return 4
    print(f"serving the scripted agent model at {server.base_url} (Ctrl-C stops it)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
