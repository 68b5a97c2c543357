"""Encoders on plain transformers: ``AutoTokenizer`` + ``AutoModel`` + explicit pooling.

``TransformersEncoder`` covers every recipe of the zoo that runs on raw hidden states:

- BERT-style models with CLS or mean pooling (BGE, Contriever);
- decoder models with last-token pooling (E5-Mistral, SFR, Qwen3-Embedding), padding as asked;
- BMRetriever: truncate to ``max_length - 1``, append EOS, pad left, ``last-bmr`` pooling;
- MedCPT's two towers, chosen by ``kind``; documents as the pair ``('', text)``;
- GritLM: bidirectional attention (``is_causal=False``), instruction excluded from the mean.

``NVEmbedEncoder`` calls NV-Embed-v2's own ``encode`` (remote code), as the authors did.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

import numpy as np

from r2med.batching import Launched, is_out_of_memory
from r2med.errors import UsageError
from r2med.hf import adapter_kwargs, dtype_kwargs, hub_kwargs, load_error, require
from r2med.retrievers.dense import compiled, pooling
from r2med.retrievers.dense.base import Kind
from r2med.retrievers.dense.encoders import BaseEncoder, Prepared

logger = logging.getLogger(__name__)

_FALLBACK_MAX_LENGTH = 512


class _Tower:
    """One loaded tokenizer + model pair."""

    def __init__(self, tokenizer: Any, model: Any) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.compiled: Any = None  # the model under torch.compile (--compile), made on first use
        self.checked = False  # its vectors were compared with eager's (on the tower's first batch)


class TransformersEncoder(BaseEncoder):
    """AutoModel + pooling + optional L2 normalisation; one tower per distinct model id."""

    compiles = True

    def __init__(self, spec, **options) -> None:
        super().__init__(spec, **options)
        if spec.pooling is None:
            raise UsageError(f"model '{spec.name}' needs a pooling for the transformers backend")
        require("transformers")
        self._towers: dict[tuple[str, str | None], _Tower] = {}

    # -- loading -------------------------------------------------------------------------------

    def _tower(self, kind: Kind) -> _Tower:
        model_id, revision = self.spec.model_for(kind), self.spec.revision_for(kind)
        key = (model_id, revision)
        if key not in self._towers:
            self._towers[key] = self._load(model_id, revision)
        return self._towers[key]

    def _load(self, model_id: str, revision: str | None) -> _Tower:
        transformers = require("transformers")
        common: dict[str, Any] = {"trust_remote_code": self.trust_remote_code, **hub_kwargs(revision, model_id)}
        logger.info("loading %s (%s) on %s, %s", model_id, self.spec.backend, self.device, self.dtype)
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(model_id, **common)
            model = transformers.AutoModel.from_pretrained(model_id, **common, **adapter_kwargs(common),
                                                           **dtype_kwargs(self.dtype))
        except OSError as exc:
            raise load_error(model_id, exc) from exc
        if self.spec.padding_side:
            tokenizer.padding_side = self.spec.padding_side
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise UsageError(f"the tokenizer of '{model_id}' has neither a pad nor an EOS token to pad with")
            logger.info("%s: no pad token; padding with the EOS token %r", model_id, tokenizer.eos_token)
            tokenizer.pad_token = tokenizer.eos_token
        if self.spec.eos != "none" and tokenizer.eos_token_id is None:
            raise UsageError(f"model '{self.spec.name}' appends EOS, but the tokenizer of '{model_id}' has none")
        model.to(self.device)
        model.eval()
        return _Tower(tokenizer, model)

    def max_length(self, kind: Kind) -> int:
        length = self.spec.max_length_for(kind)
        if length is not None:
            return length
        limit = getattr(self._tower(kind).tokenizer, "model_max_length", None)
        return int(limit) if isinstance(limit, int) and 1 < limit < 1_000_000 else _FALLBACK_MAX_LENGTH

    def dimension(self, kind: Kind) -> int:
        return int(self._tower(kind).model.config.hidden_size)

    # -- tokenisation ----------------------------------------------------------------------------

    def _tokenize(self, tower: _Tower, texts: list[str], kind: Kind) -> dict[str, list[list[int]]]:
        """The model's inputs of ``texts``, unpadded (one list of ids per text), truncated and with EOS as the
        recipe says; ``_pad`` pads a batch of them to its own longest."""
        tokenizer, spec, length = tower.tokenizer, self.spec, self.max_length(kind)
        if spec.document_pair and kind == "document":
            titles = [""] * len(texts)
            return dict(tokenizer(titles, texts, truncation="longest_first", max_length=length))
        if spec.eos == "none":
            return dict(tokenizer(texts, truncation=True, max_length=length))
        eos = tokenizer.eos_token_id
        if spec.eos == "append":  # BMRetriever: room for the EOS, then append it
            ids = tokenizer(
                texts,
                max_length=length - 1,
                truncation=True,
                padding=False,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
            ids = [row + [eos] for row in ids]
        else:  # "ensure": EOS last, whether or not the tokenizer put it there
            ids = tokenizer(texts, max_length=length, truncation=True, return_token_type_ids=False)["input_ids"]
            ids = [row if row and row[-1] == eos else row[: length - 1] + [eos] for row in ids]
        return {"input_ids": ids}

    @staticmethod
    def _pad(tower: _Tower, features: dict[str, list[list[int]]], rows: list[int]) -> Any:
        """A batch of the texts at ``rows``, padded to its longest (on the tokenizer's padding side), as tensors."""
        batch = {key: [values[i] for i in rows] for key, values in features.items()}
        return tower.tokenizer.pad(batch, padding=True, return_attention_mask=True, return_tensors="pt")

    def _prompt_length(self, tokenizer: Any, instruction: str, kind: Kind) -> int:
        """Tokens of the instruction at the start of an input, its trailing special token excluded."""
        ids = tokenizer(instruction, truncation=True, max_length=self.max_length(kind))["input_ids"]
        if ids and ids[-1] in set(tokenizer.all_special_ids):
            ids = ids[:-1]
        return len(ids)

    # -- encoding --------------------------------------------------------------------------------

    def _prepare(self, texts: list[str], kind: Kind, instruction: str) -> Prepared:
        tower = self._tower(kind)
        features = self._tokenize(tower, [instruction + t for t in texts], kind)
        prompt = self._prompt_length(tower.tokenizer, instruction, kind) if instruction and not self.spec.prompt_in_pooling else 0
        return Prepared(texts, [len(ids) for ids in features["input_ids"]], (features, prompt))

    def _inputs(self, prepared: Prepared, rows: list[int], kind: Kind) -> dict[str, Any]:
        """The batch padded on the host (on a background thread, while the batch before it runs); on CUDA in pinned
        memory, so that its copy to the device does not block."""
        batch = self._pad(self._tower(kind), prepared.state[0], rows)
        if self.device.startswith("cuda"):
            return {key: value.pin_memory() for key, value in batch.items()}
        return dict(batch)

    def _encode_rows(self, prepared: Prepared, rows: list[int], kind: Kind, instruction: str,
                     inputs: Any = None) -> Launched:
        tower = self._tower(kind)
        _, prompt = prepared.state
        host = inputs if inputs is not None else self._inputs(prepared, rows, kind)
        inputs = {key: value.to(self.device, non_blocking=True) for key, value in host.items()}
        # the vectors stay on the device, launched: they are taken to the host (without blocking on CUDA) once the
        # next batch is running (batching.run_batches' finish)
        if not self.compile:
            return Launched(self._vectors(tower.model, inputs, prompt))
        if tower.compiled is None:
            tower.compiled = compiled.compile_model(tower.model)
        try:
            vectors = self._vectors(tower.compiled, inputs, prompt)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise
            raise compiled.compile_failed(self.name, self.device, exc) from exc
        if not tower.checked:  # the tower's first batch: eager is the reference
            worst = compiled.check_compiled(self.name, self.autocast or self.dtype,
                                            self._vectors(tower.model, inputs, prompt).cpu().numpy(),
                                            vectors.cpu().numpy())
            tower.checked = True
            logger.info("%s: --compile checked on a first batch of %d texts: worst per-text cosine %.7f against "
                        "eager", self.name, len(rows), worst)
        return Launched(vectors)

    def _vectors(self, model: Any, inputs: dict[str, Any], prompt: int) -> Any:
        """Pooled (and, as the recipe says, normalised) float32 vectors of the batch ``inputs`` through ``model``,
        on the device."""
        torch = require("torch")
        extra = {"is_causal": False} if self.spec.bidirectional else {}
        autocast = torch.autocast("cuda", dtype=getattr(torch, self.autocast)) if self.autocast else nullcontext()
        with torch.inference_mode(), autocast:
            output = model(**inputs, **extra)
            hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
            mask = inputs["attention_mask"]
            if prompt:
                mask = pooling.exclude_prefix(mask, prompt)
            vectors = pooling.pool(self.spec.pooling, hidden, mask)
            if self.spec.normalize:
                vectors = pooling.l2_normalize(vectors)
        return vectors.float()


class NVEmbedEncoder(BaseEncoder):
    """NV-Embed-v2 through its remote code's ``encode(texts, instruction=, max_length=)``."""

    def __init__(self, spec, **options) -> None:
        super().__init__(spec, **options)
        require("transformers")
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            transformers = require("transformers")
            kwargs: dict[str, Any] = {
                "trust_remote_code": self.trust_remote_code,
                **hub_kwargs(self.spec.revision, self.spec.model),
                **dtype_kwargs(self.dtype),
            }
            kwargs.update(adapter_kwargs(kwargs))
            if not self.trust_remote_code:
                logger.warning("%s: NV-Embed needs its remote code; pass trust_remote_code=True", self.spec.name)
            try:
                model = transformers.AutoModel.from_pretrained(self.spec.model, **kwargs)
            except OSError as exc:
                raise load_error(self.spec.model, exc) from exc
            model.to(self.device)
            model.eval()
            self._model = model
        return self._model

    def dimension(self, kind: Kind) -> int:
        config = self._load().config
        return int(getattr(config, "hidden_size", None) or config.text_config.hidden_size)

    def _encode_rows(self, prepared: Prepared, rows: list[int], kind: Kind, instruction: str,
                     inputs: Any = None) -> np.ndarray:
        torch = require("torch")
        length = self.spec.max_length_for(kind) or 4096
        texts = [prepared.texts[i] for i in rows]
        with torch.inference_mode():
            vectors = self._load().encode(texts, instruction=instruction, max_length=length)
            if not torch.is_tensor(vectors):
                vectors = torch.as_tensor(np.asarray(vectors))
            if self.spec.normalize:
                vectors = pooling.l2_normalize(vectors)
        return vectors.float().cpu().numpy()
