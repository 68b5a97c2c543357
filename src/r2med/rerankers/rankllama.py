"""RankLLaMA: a pointwise LLM reranker (a LoRA adapter on Llama-2 with a one-logit classification head).

As its model card and the R2MED authors ran it: the base model is loaded with
``AutoModelForSequenceClassification(num_labels=1)``, the adapter (``castorini/rankllama-v1-7b-lora-passage``)
is applied with peft and merged, and a pair is tokenized as the text pair
``("query: {query}", "document: {document}")`` (Llama's tokenizer puts ``<s>`` before each part),
truncated ``longest_first`` to ``max_length`` (1024 in the authors' code). The score is the head's logit
at the last token. Batches are right-padded with the ``<unk>`` token (Tevatron's ``pad_token_id = 0``),
so padding never moves a real token or its position; the head reads the last non-pad token.

R2MED's documents have no title; a title, where a corpus has one, is part of the document text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from r2med.batching import TokenBudget, device_budget, run_in_order
from r2med.errors import UsageError
from r2med.hf import (
    adapter_kwargs,
    check_model_exists,
    dtype_kwargs,
    effective_dtype,
    hub_kwargs,
    load_error,
    model_fingerprint,
    require,
    resolve_device,
)

logger = logging.getLogger(__name__)

#: Padded tokens per batch on a GPU (at most ``batching.CPU_BATCH_TOKENS`` elsewhere): a 7B model in float16, as
#: the dense 7-8B recipes (docs/dense.md)
BATCH_TOKENS = 32768

QUERY_TEMPLATE = "query: {query}"
DOCUMENT_TEMPLATE = "document: {document}"


def rankllama_texts(query: str, document: str) -> tuple[str, str]:
    """The text pair RankLLaMA reads.

    >>> rankllama_texts("what is a llama?", "The llama is a camelid.")
    ('query: what is a llama?', 'document: The llama is a camelid.')
    """
    return QUERY_TEMPLATE.format(query=query), DOCUMENT_TEMPLATE.format(document=document)


class RankLlamaScorer:
    """A ``PairScorer`` for a peft LoRA adapter on a sequence-classification base model.

    ``base_model`` None reads it from the adapter's ``adapter_config.json``. ``dtype`` is used on
    CUDA only (default float16 there, as the authors ran it; float32 elsewhere).
    """

    def __init__(
        self,
        adapter: str,
        base_model: str | None = None,
        *,
        max_length: int = 1024,
        device: str | None = None,
        dtype: str | None = "float16",
        revision: str | None = None,
        base_revision: str | None = None,
        batch_tokens: int | None = None,
    ) -> None:
        if max_length < 8:
            raise UsageError(f"max length must be at least 8 tokens, got {max_length}")
        check_model_exists(adapter, revision)  # before torch is imported: an unreachable hub fails at once
        if base_model is not None:
            check_model_exists(base_model, base_revision)
        require("torch", "rerank")
        require("transformers", "rerank")
        require("peft", "rerank", "RankLLaMA (a LoRA adapter)")
        self.adapter = adapter
        self.base_model = base_model
        self.max_length = max_length
        self.revision = revision
        self.base_revision = base_revision
        self.device = resolve_device(device)
        self.dtype = effective_dtype(dtype, self.device)
        self._tokenizer: Any = None
        self._model: Any = None
        #: pairs per model batch: padded tokens (and a cap on pairs, set by the reranker), halved on out-of-memory
        self.token_budget = TokenBudget(tokens=device_budget(BATCH_TOKENS, self.device, batch_tokens))

    def _base(self) -> str:
        if self.base_model is None:
            peft = require("peft", "rerank")
            try:
                config = peft.PeftConfig.from_pretrained(self.adapter, **hub_kwargs(self.revision, self.adapter))
            except (OSError, ValueError) as exc:
                raise load_error(self.adapter, exc) from exc
            if not config.base_model_name_or_path:
                raise UsageError(f"adapter {self.adapter} does not name its base model; pass it (--base-model)")
            self.base_model = config.base_model_name_or_path
        return self.base_model

    def describe(self) -> dict[str, Any]:
        base = self._base()
        return {
            "kind": "rankllama",
            "adapter": self.adapter,
            "adapter_weights": model_fingerprint(self.adapter, self.revision),
            "base_model": base,
            "base_weights": model_fingerprint(base, self.base_revision),
            "max_length": self.max_length,
            "dtype": self.dtype,
            "input": [QUERY_TEMPLATE, DOCUMENT_TEMPLATE, "text pair, longest_first, right padding, last-token logit"],
        }

    def load(self) -> tuple[Any, Any]:
        """``(tokenizer, merged model)``, loaded once."""
        if self._model is None:
            transformers = require("transformers", "rerank")
            peft = require("peft", "rerank")
            base = self._base()
            check_model_exists(base, self.base_revision)  # the base named by the adapter: cached, or the hub there
            logger.info("loading RankLLaMA %s on %s (%s) on %s, %s", self.adapter, base, self.device, self.dtype, self.max_length)
            try:
                base_hub = hub_kwargs(self.base_revision, base)
                tokenizer = transformers.AutoTokenizer.from_pretrained(base, **base_hub)
                model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    base, num_labels=1, **base_hub, **adapter_kwargs(base_hub), **dtype_kwargs(self.dtype)
                )
                model = peft.PeftModel.from_pretrained(model, self.adapter, **hub_kwargs(self.revision, self.adapter))
            except OSError as exc:
                raise load_error(self.adapter, exc) from exc
            model = model.merge_and_unload()
            _set_padding(tokenizer, model)
            model.to(self.device).eval()
            self._tokenizer, self._model = tokenizer, model
        return self._tokenizer, self._model

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]:
        """The head's logits of the pairs: tokenized once, unpadded, then in token-budget batches
        (``r2med.batching``), each right-padded to its own longest pair."""
        torch = require("torch", "rerank")
        tokenizer, model = self.load()
        pairs = [rankllama_texts(q, d) for q, d in zip(queries, documents)]
        features = dict(tokenizer([q for q, _ in pairs], [d for _, d in pairs], max_length=self.max_length,
                                  truncation="longest_first"))
        features.pop("token_type_ids", None)

        def prepare(rows: list[int]) -> dict[str, Any]:  # on a background thread, while the batch before runs
            batch = tokenizer.pad({key: [values[i] for i in rows] for key, values in features.items()},
                                  padding=True, return_tensors="pt")
            return {k: v.pin_memory() if self.device.startswith("cuda") else v for k, v in batch.items()}

        def run(batch: dict[str, Any]) -> list[float]:
            with torch.inference_mode():
                logits = model(**{k: v.to(self.device, non_blocking=True) for k, v in batch.items()}).logits
            return logits[:, 0].float().cpu().tolist()

        values = run_in_order([len(ids) for ids in features["input_ids"]], run, self.token_budget,
                              name=self.adapter, device=self.device, what="pair", prepare=prepare)
        return [float(x) for x in values]


def _set_padding(tokenizer: Any, model: Any) -> None:
    """Right padding with ``<unk>`` (Llama-2 has no pad token), and the head told which id is padding."""
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        filler = tokenizer.unk_token or tokenizer.eos_token
        if filler is None:
            raise UsageError("the RankLLaMA tokenizer has no pad, unk or eos token to pad batches with")
        tokenizer.pad_token = filler
    model.config.pad_token_id = tokenizer.pad_token_id
