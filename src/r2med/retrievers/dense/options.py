"""The options of the dense retrievers (zoo models, model directories, hub ids, ``openai:`` endpoints and Python
models), declared once (``r2med.options``)."""

from __future__ import annotations

from dataclasses import dataclass

from r2med.options import option


@dataclass(frozen=True, kw_only=True)
class DenseOptions:
    """Where and how texts are encoded, and the instructions prepended to them (default: the zoo's)."""

    device: str | None = option(None, "cpu, cuda (every visible GPU, one worker process each), cuda:N, a list "
                                "cuda:0,cuda:2, or mps (default: the best available)", keyed=False)
    batch_size: int | None = option(None, "most texts per encoding batch (default: local models as many as "
                                    "--batch-tokens holds, NV-Embed and APIs the model's)", minimum=1, keyed=False)
    batch_tokens: int | None = option(None, "local models: padded tokens per encoding batch, texts sorted by token "
                                      "count (default: the model's, sized for an 80 GB GPU; at most 8192 on a CPU)",
                                      minimum=1, keyed=False)
    compile: bool = option(False, "local models on the transformers backend: run the forward pass under "
                           "torch.compile (dynamic shapes), checked against eager on the first batch; pays off on long "
                           "encodes", keyed=False)
    query_instruction: str | None = option(None, "instruction prepended to every query (overrides the zoo's)")
    doc_instruction: str | None = option(None, "instruction prepended to every document (overrides the zoo's)")
    # the same flags, defaults and words as an LLM's (r2med.llm.endpoint): one --timeout for every server a command calls
    timeout: float = option(300.0, "deadline of each request attempt in seconds: connecting, sending and the whole "
                            "answer", minimum=0.001, keyed=False)
    max_retries: int = option(5, "retries per request", minimum=0, keyed=False)
    # the same flag as an LLM's (one --concurrency for every server a command calls), a smaller default for the APIs
    concurrency: int = option(4, "requests in flight at once (API and openai: models; a server with N copies of the "
                              "model needs N or more)", minimum=1, keyed=False)
