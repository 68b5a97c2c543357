"""Encoders backed by embedding APIs: OpenAI and any OpenAI-compatible server, and Voyage AI.

``OpenAIEmbeddings`` speaks ``POST {base_url}/embeddings`` as OpenAI, vLLM, TEI and Infinity do;
``VoyageEmbeddings`` speaks Voyage's variant, which adds ``input_type`` ("query"/"document", taken
from ``kind``). Both implement ``Encoder``:

* the instruction is prepended to each text (empty: none), as the benchmark does;
* texts longer than ``max_input_tokens`` are cut before sending (see ``api_text``), counted in
  ``stats["truncated"]`` and reported once per encoder in the log;
* texts go in batches bounded by count (``batch_size``) and by estimated tokens
  (``max_batch_tokens``), at most ``max_concurrency`` requests at a time; rows come back in input
  order whatever order the batches finish in, and within a batch by the answer's ``index``;
* 429, 5xx, timeouts, refused and dropped connections and answers that do not fit are retried with
  backoff, by the client stack chat and completions use too (see ``r2med.http``);
* vectors are float32 and L2-normalised here, although both providers already return unit
  vectors: a server that does not (some TEI/Infinity setups) must not change cosine scores;
* the key is read from the environment variable named by ``api_key_env`` (through
  ``r2med.settings``) and appears in no repr, log line, error or cache key.

``stats`` counts requests, retries, seconds waited before retries, tokens billed (from the
answers' ``usage``), texts, batches and truncated texts over the encoder's lifetime.
"""

from __future__ import annotations

from typing import Any, ClassVar

from r2med.retrievers.dense.api_base import (
    OPENAI_BASE_URL,
    VOYAGE_BASE_URL,
    EmbeddingAPI,
    Preprocess,
)
from r2med.retrievers.dense.base import Kind
from r2med.settings import get_settings

__all__ = ["OPENAI_BASE_URL", "VOYAGE_BASE_URL", "EmbeddingAPI", "OpenAIEmbeddings", "VoyageEmbeddings"]


class OpenAIEmbeddings(EmbeddingAPI):
    """OpenAI's embeddings API, or any OpenAI-compatible server (vLLM, TEI, Infinity, a proxy).

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` if set, else https://api.openai.com/v1. The key
    comes from ``$OPENAI_API_KEY`` (or the variable named by ``api_key_env``); a local server
    (localhost, a private address, a one-word host name) may run without one. ``dimensions``
    asks the text-embedding-3 models for shorter vectors. Token counts use ``tiktoken`` when it is
    installed and knows the model, else 3 characters per token. ``preprocess="r2med"`` sends
    texts as the official code did (see ``api_text.r2med_text``).
    """

    provider: ClassVar[str] = "openai"
    uses_tiktoken: ClassVar[bool] = True

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 128,
        max_batch_tokens: int | None = 300_000,
        max_concurrency: int = 4,
        max_retries: int = 6,
        timeout: float = 60,
        max_input_tokens: int = 8191,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        preprocess: Preprocess = "plain",
        name: str | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url or get_settings().openai_base_url or OPENAI_BASE_URL,
            api_key_env=api_key_env, dimensions=dimensions, batch_size=batch_size,
            max_batch_tokens=max_batch_tokens, max_concurrency=max_concurrency, max_retries=max_retries,
            timeout=timeout, max_input_tokens=max_input_tokens, backoff_base=backoff_base,
            backoff_max=backoff_max, preprocess=preprocess, name=name,
        )

    def _payload(self, inputs: list[str], kind: Kind) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": inputs, "encoding_format": "float"}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        return payload


class VoyageEmbeddings(EmbeddingAPI):
    """Voyage AI's embeddings API; ``input_type`` is "query" or "document" from ``kind``.

    ``use_input_type=False`` sends no ``input_type`` (Voyage then adds no prompt of its own).
    ``dimensions`` becomes ``output_dimension`` (voyage-3-large, voyage-3.5, voyage-code-3). The
    key comes from ``$VOYAGE_API_KEY``. Token counts are estimated at 3 characters per token;
    Voyage also truncates over-long texts itself.
    """

    provider: ClassVar[str] = "voyage"

    def __init__(
        self,
        model: str = "voyage-3",
        *,
        base_url: str = VOYAGE_BASE_URL,
        api_key_env: str = "VOYAGE_API_KEY",
        dimensions: int | None = None,
        use_input_type: bool = True,
        batch_size: int = 128,
        max_batch_tokens: int | None = 120_000,
        max_concurrency: int = 4,
        max_retries: int = 6,
        timeout: float = 60,
        max_input_tokens: int = 32_000,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        preprocess: Preprocess = "plain",
        name: str | None = None,
    ) -> None:
        self.use_input_type = use_input_type
        super().__init__(
            model, base_url=base_url, api_key_env=api_key_env, dimensions=dimensions, batch_size=batch_size,
            max_batch_tokens=max_batch_tokens, max_concurrency=max_concurrency, max_retries=max_retries,
            timeout=timeout, max_input_tokens=max_input_tokens, backoff_base=backoff_base,
            backoff_max=backoff_max, preprocess=preprocess, name=name,
        )

    def _payload(self, inputs: list[str], kind: Kind) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": inputs}
        if self.use_input_type:
            payload["input_type"] = kind
        if self.dimensions is not None:
            payload["output_dimension"] = self.dimensions
        return payload

    def cache_key(self, kind: Kind) -> dict[str, Any]:
        return {**super().cache_key(kind), "input_type": kind if self.use_input_type else None}
