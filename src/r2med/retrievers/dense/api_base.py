"""The machinery API encoders share: preparing texts, batching, concurrency, parsing answers.

``EmbeddingAPI`` implements the ``Encoder`` protocol once; ``api.OpenAIEmbeddings`` and
``api.VoyageEmbeddings`` only say how a request looks. See ``api`` for the behaviour.
"""

from __future__ import annotations

import base64
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, ClassVar, Literal

import numpy as np

from r2med.errors import InvalidInputError, ProviderError, UsageError
from r2med.http import (
    BadAnswer,
    Counters,
    JsonClient,
    RetryPolicy,
    check_base_url,
    resolve_key,
    safe_url,
    url_host,
)
from r2med.io.progress import Reporter, progress_bar
from r2med.retrievers.dense.api_text import (
    TokenCounter,
    r2med_text,
    split_batches,
    token_counter,
)
from r2med.retrievers.dense.base import Kind, kind_label, kind_unit

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
VOYAGE_BASE_URL = "https://api.voyageai.com/v1"
Preprocess = Literal["plain", "r2med"]
_STATS = ("requests", "retries", "waited_s", "tokens", "texts", "batches", "truncated")


class EmbeddingAPI(ABC):
    """What OpenAI-compatible and Voyage encoders share; subclasses say how a request looks."""

    provider: ClassVar[str]
    uses_tiktoken: ClassVar[bool] = False

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key_env: str,
        dimensions: int | None,
        batch_size: int,
        max_batch_tokens: int | None,
        max_concurrency: int,
        max_retries: int,
        timeout: float,
        max_input_tokens: int,
        backoff_base: float,
        backoff_max: float,
        preprocess: Preprocess,
        name: str | None,
    ) -> None:
        if not model:
            raise UsageError(f"{self.provider}: the model name is empty")
        for option, value, least in (
            ("batch_size", batch_size, 1), ("max_concurrency", max_concurrency, 1),
            ("max_retries", max_retries, 0), ("max_input_tokens", max_input_tokens, 1),
        ):
            if not isinstance(value, int) or value < least:
                raise UsageError(f"{self.provider}: {option} must be an integer >= {least}, got {value!r}")
        if dimensions is not None and (not isinstance(dimensions, int) or dimensions < 1):
            raise UsageError(f"{self.provider}: dimensions must be a positive integer or None, got {dimensions!r}")
        if preprocess not in ("plain", "r2med"):
            raise UsageError(f"{self.provider}: preprocess must be 'plain' or 'r2med', got {preprocess!r}")
        if not (timeout > 0 and backoff_base >= 0 and backoff_max >= 0):
            raise UsageError(f"{self.provider}: timeout must be > 0 and backoff_base/backoff_max >= 0")
        base_url = check_base_url(base_url, provider=self.provider)
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_concurrency = max_concurrency
        self.max_input_tokens = max_input_tokens
        self.preprocess = preprocess
        self.name = name or f"{self.provider}/{model}"
        secret = resolve_key(base_url, provider=self.provider, env=api_key_env)
        self._tokens: TokenCounter = token_counter(model, use_tiktoken=self.uses_tiktoken)
        self._counters = Counters(*_STATS)
        self._warned_truncation = False
        self._dim: int | None = dimensions
        self._http = JsonClient(
            base_url, label=self.provider, secret=secret, timeout=timeout,
            policy=RetryPolicy(max_retries=max_retries, base_delay=backoff_base, max_delay=backoff_max),
            stats=self._counters, key_hint=api_key_env,
        )

    # -- the Encoder protocol ------------------------------------------------------------------

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
        on_batch: Reporter | None = None,
    ) -> np.ndarray:
        """Embed ``instruction + text`` for each text; ``(len(texts), dim)`` float32, unit rows.

        ``progress`` shows this call's own bar; ``on_batch(n)`` is called as each request of ``n`` texts is answered
        (the embedding cache's bar).

        With no texts the result has 0 rows and ``dimensions`` columns (or the width seen in an
        earlier call, else 0), since no request is made.
        """
        if kind not in ("query", "document"):
            raise UsageError(f"{self.name}: kind must be 'query' or 'document', got {kind!r}")
        if isinstance(texts, str):
            raise UsageError(f"{self.name}: encode takes a list of texts, not a single str")
        size = batch_size or self.batch_size
        if size < 1:
            raise UsageError(f"{self.name}: batch_size must be at least 1, got {size}")
        prepared, costs = self._prepare(texts, instruction)
        if not prepared:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        batches = split_batches(costs, max_count=size, max_tokens=self.max_batch_tokens)
        parts = self._run(batches, prepared, kind, progress, on_batch)
        widths = {part.shape[1] for part in parts}
        if len(widths) != 1 or (self._dim is not None and widths != {self._dim}):
            seen = sorted(widths | ({self._dim} if self._dim else set()))
            raise ProviderError(f"{self.name}: the server returned embeddings of different widths {seen}")
        matrix = np.concatenate(parts).astype(np.float32, copy=False)
        self._dim = matrix.shape[1]
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        self._counters.add("texts", len(prepared))
        return matrix

    def cache_key(self, kind: Kind) -> dict[str, Any]:
        """Everything besides text and instruction that decides the vectors (never the key)."""
        return {
            "provider": self.provider,
            "host": url_host(self.base_url),
            "model": self.model,
            "dimensions": self.dimensions,
            "max_input_tokens": self.max_input_tokens,
            "tokenizer": self._tokens.name,
            "preprocess": self.preprocess,
            "normalize": True,
            "dtype": "float32",
        }

    @property
    def stats(self) -> dict[str, float]:
        """Counters since construction: requests, retries, waited_s, tokens, texts, batches, truncated."""
        return self._counters.snapshot()

    def __repr__(self) -> str:
        dims = f", dimensions={self.dimensions}" if self.dimensions else ""
        return f"{type(self).__name__}(model={self.model!r}, base_url={safe_url(self.base_url)!r}{dims})"

    # -- internals -----------------------------------------------------------------------------

    @abstractmethod
    def _payload(self, inputs: list[str], kind: Kind) -> dict[str, Any]:
        """The provider's JSON request body for one batch."""

    def _prepare(self, texts: Sequence[str], instruction: str) -> tuple[list[str], list[int]]:
        """Instruction + text, cut to ``max_input_tokens``, preprocessed; with each text's token cost."""
        prepared: list[str] = []
        costs: list[int] = []
        truncated: list[int] = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInputError(f"{self.name}: text {i} is a {type(text).__name__}, not a str")
            full = instruction + text
            cost = self._tokens.count(full)
            if cost > self.max_input_tokens:
                full = self._tokens.truncate(full, self.max_input_tokens)
                cost = self.max_input_tokens
                truncated.append(i)
            if self.preprocess == "r2med":
                full = r2med_text(full)
                cost = self._tokens.count(full)
            prepared.append(full or " ")  # OpenAI rejects empty strings
            costs.append(max(cost, 1))
        if truncated:
            self._counters.add("truncated", len(truncated))
            level = logging.DEBUG if self._warned_truncation else logging.WARNING
            self._warned_truncation = True
            logger.log(
                level,
                "%s: %d of %d texts were longer than %d tokens (counted by %s) and were truncated, first at position %d%s",
                self.name, len(truncated), len(prepared), self.max_input_tokens, self._tokens.name, truncated[0],
                "" if level == logging.DEBUG else "; further truncations are counted in stats['truncated']",
            )
        return prepared, costs

    def _run(self, batches: list[range], prepared: list[str], kind: Kind, progress: bool,
             on_batch: Reporter | None) -> list[np.ndarray]:
        parts: list[np.ndarray | None] = [None] * len(batches)
        abort = threading.Event()
        with progress_bar(len(prepared), desc=f"{self.name} {kind_label(kind)}", unit=kind_unit(kind), enabled=progress) as bar:

            def answered(j: int) -> None:
                bar.update(len(batches[j]))
                if on_batch is not None:
                    on_batch(len(batches[j]))

            if self.max_concurrency == 1 or len(batches) == 1:
                for j, span in enumerate(batches):
                    parts[j] = self._embed_batch([prepared[i] for i in span], kind, abort)
                    answered(j)
                return parts  # type: ignore[return-value]
            pool = ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches)), thread_name_prefix="r2med-embed")
            try:
                futures = {
                    pool.submit(self._embed_batch, [prepared[i] for i in span], kind, abort): j
                    for j, span in enumerate(batches)
                }
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for future in done:
                        parts[futures[future]] = future.result()  # raises the first failure
                        answered(futures[future])
            except BaseException:
                abort.set()  # in-flight batches stop before their next attempt
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        return parts  # type: ignore[return-value]

    def _embed_batch(self, inputs: list[str], kind: Kind, abort: threading.Event) -> np.ndarray:
        return self._http.post("embeddings", self._payload(inputs, kind), abort=abort,
                               parse=lambda answer, attempts: self._read_answer(answer, len(inputs)))

    def _read_answer(self, answer: dict[str, Any], n: int) -> np.ndarray:
        """The ``n`` vectors of one batch's answer (``BadAnswer``, retried, when they do not fit), its tokens counted."""
        vectors = self._vectors(answer, n)
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        tokens = usage.get("total_tokens") or usage.get("prompt_tokens") or 0
        self._counters.add("tokens", int(tokens) if isinstance(tokens, (int, float)) else 0)
        self._counters.add("batches")
        return vectors

    def _vectors(self, answer: dict[str, Any], n: int) -> np.ndarray:
        """The answer's embeddings as an ``(n, dim)`` array ordered by their ``index``."""
        data = answer.get("data")
        if not isinstance(data, list) or len(data) != n:
            got = len(data) if isinstance(data, list) else "no"
            raise BadAnswer(f"the server returned {got} embeddings for {n} inputs")
        rows: list[np.ndarray | None] = [None] * n
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < n or rows[index] is not None:
                raise BadAnswer(f"the server returned a bad or repeated index {index!r} for {n} inputs")
            embedding = item.get("embedding")
            try:
                if isinstance(embedding, str):  # encoding_format "base64": little-endian float32
                    vector = np.frombuffer(base64.b64decode(embedding), dtype="<f4").astype(np.float32)
                else:
                    vector = np.asarray(embedding, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise BadAnswer(f"embedding {index} is not a list of numbers ({exc})") from None
            if vector.ndim != 1 or vector.size == 0 or not np.all(np.isfinite(vector)):
                raise BadAnswer(f"embedding {index} is empty, nested or not finite")
            rows[index] = vector
        if len({row.shape for row in rows if row is not None}) != 1:
            raise BadAnswer("the server returned embeddings of different widths in one batch")
        return np.stack(rows)  # type: ignore[arg-type]
