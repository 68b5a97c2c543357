"""Encoders on sentence-transformers (plain models, Instructor, ReasonIR).

The instruction goes in as ``prompt=``: sentence-transformers prepends it to every text, which is
the same input as prepending it by hand, and it also knows the prompt's length, so a pooling
layer with ``include_prompt=False`` can leave the prompt tokens out of the mean. That is how the
authors ran Instructor (``set_pooling_include_prompt(False)``) and how ReasonIR's card runs it;
``ModelSpec.prompt_in_pooling=False`` turns it on. An empty instruction is passed as ``prompt=""``
so a model's configured default prompt is never applied behind the spec's back.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from r2med.hf import adapter_kwargs, dtype_kwargs, hub_kwargs, load_error, require
from r2med.retrievers.dense.base import Kind
from r2med.retrievers.dense.encoders import BaseEncoder, Prepared

logger = logging.getLogger(__name__)


class SentenceTransformerEncoder(BaseEncoder):
    """``SentenceTransformer(path, device=..., trust_remote_code=...)`` with per-kind max length."""

    def __init__(self, spec, **options) -> None:
        super().__init__(spec, **options)
        require("sentence_transformers")
        self._models: dict[str, Any] = {}

    def _model(self, kind: Kind) -> Any:
        model_id = self.spec.model_for(kind)
        if model_id not in self._models:
            st = require("sentence_transformers")
            hub = hub_kwargs(self.spec.revision_for(kind), model_id)
            kwargs: dict[str, Any] = {"device": self.device, "trust_remote_code": self.trust_remote_code, **hub}
            model_kwargs = {**adapter_kwargs(hub), **(dtype_kwargs(self.dtype) if self.dtype != "float32" else {})}
            if model_kwargs:
                kwargs["model_kwargs"] = model_kwargs
            logger.info("loading %s (sentence-transformers) on %s, %s", model_id, self.device, self.dtype)
            try:
                model = st.SentenceTransformer(model_id, **kwargs)
            except OSError as exc:
                raise load_error(model_id, exc) from exc
            if not self.spec.prompt_in_pooling:
                model.set_pooling_include_prompt(False)
            model.eval()
            self._models[model_id] = model
        return self._models[model_id]

    def max_length(self, kind: Kind) -> int | None:
        return self.spec.max_length_for(kind) or self._model(kind).max_seq_length

    def dimension(self, kind: Kind) -> int:
        model = self._model(kind)
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def _prepare(self, texts: list[str], kind: Kind, instruction: str) -> Prepared:
        """Token counts from the model's own tokenizer (prompt + text, truncated to its max length): they order and
        cut the batches; sentence-transformers tokenizes each batch itself, padded to the batch's longest."""
        model = self._model(kind)
        length = self.spec.max_length_for(kind)
        if length is not None:
            model.max_seq_length = length
        tokenizer = getattr(model, "tokenizer", None)
        limit = model.max_seq_length
        if tokenizer is None or not callable(tokenizer) or not isinstance(limit, int):
            return Prepared(texts, None)
        ids = tokenizer([instruction + t for t in texts], truncation=True, max_length=limit,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        return Prepared(texts, [len(row) for row in ids])

    def _encode_rows(self, prepared: Prepared, rows: list[int], kind: Kind, instruction: str,
                     inputs: Any = None) -> np.ndarray:
        model = self._model(kind)
        length = self.spec.max_length_for(kind)
        if length is not None:
            model.max_seq_length = length
        return model.encode(
            [prepared.texts[i] for i in rows],
            prompt=instruction,
            batch_size=len(rows),
            normalize_embeddings=self.spec.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
