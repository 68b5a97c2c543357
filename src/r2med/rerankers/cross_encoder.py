"""Cross-encoders through sentence-transformers' ``CrossEncoder``: bge-reranker-v2-m3, monoBERT, any by name or path.

The pair is tokenized as ``(query, document)`` with ``longest_first`` truncation to ``max_length``,
as the R2MED authors' ``RerankerModel.predict`` did; the score is the raw logit (no sigmoid), and for
a two-class head (monoBERT) the logit of class 1, "relevant", which is what the authors ranked by.
The model loads on the first batch that needs scoring, so a run answered from the score cache
never loads it.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from r2med.batching import TokenBudget, device_budget, run_in_order
from r2med.errors import InvalidInputError, UsageError
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

#: Padded tokens per batch on a GPU (at most ``batching.CPU_BATCH_TOKENS`` elsewhere): bge-reranker-v2-m3 (568M)
#: keeps well under 10 GB of activations at this size.
BATCH_TOKENS = 65536


def check_classification_head(architectures: Sequence[str] | None, model: str) -> None:
    """A cross-encoder scores with a trained sequence-classification head. A checkpoint saved as another
    architecture (a bi-encoder's ``BertModel``, a base model) would get a randomly initialised head: numbers that
    differ on every run, with exit 0. Refused (InvalidInputError, exit 5); a config without ``architectures`` passes.

    >>> check_classification_head(["XLMRobertaForSequenceClassification"], "bge")
    >>> check_classification_head(["BertModel"], "/models/minilm")
    Traceback (most recent call last):
    ...
    r2med.errors.InvalidInputError: /models/minilm is not a cross-encoder: its checkpoint is a BertModel, with no trained classification head (a reranker would score with random weights); use a cross-encoder such as bge-reranker or monobert, or a model saved as *ForSequenceClassification
    """
    if architectures and not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise InvalidInputError(
            f"{model} is not a cross-encoder: its checkpoint is a {', '.join(map(str, architectures))}, with no trained "
            "classification head (a reranker would score with random weights); use a cross-encoder such as "
            "bge-reranker or monobert, or a model saved as *ForSequenceClassification"
        )


def model_dir(model: str, revision: str | None = None) -> Path | None:
    """The directory holding ``model``'s files: the path itself, or the hub cache's snapshot (None if neither)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json", revision=revision)
    except ValueError:  # not a valid hub id
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def checkpoint_keys(folder: Path) -> set[str] | None:
    """The names of the tensors a checkpoint directory stores, read without loading a weight: the index of a
    sharded checkpoint, the headers of ``*.safetensors`` files, or the keys of ``pytorch_model.bin`` (memory-mapped).
    None when the folder holds no checkpoint in these formats, or one whose index or headers cannot be read
    (nothing can be said then: loading the model reports a damaged file itself)."""
    try:
        return _checkpoint_keys(folder)
    except (OSError, ValueError, struct.error, AttributeError, TypeError) as exc:  # JSON/Unicode errors are ValueErrors
        logger.warning("%s: cannot read the checkpoint's tensor names (%s); checking its architecture only", folder, exc)
        return None


def _checkpoint_keys(folder: Path) -> set[str] | None:
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            return set(json.loads((folder / index).read_text(encoding="utf-8")).get("weight_map", {}))
    tensors = sorted(folder.glob("*.safetensors"))
    if tensors:
        keys: set[str] = set()
        for path in tensors:
            with path.open("rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                keys |= set(json.loads(handle.read(size))) - {"__metadata__"}
        return keys
    if (folder / "pytorch_model.bin").is_file():
        torch = require("torch", "rerank")
        try:
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True, mmap=True)
        except (RuntimeError, OSError, ValueError):  # an old (non-zip) file cannot be memory-mapped
            return None
        return set(state)
    return None


def missing_head_weights(head: Sequence[str], stored: set[str]) -> list[str]:
    """The classification-head parameters ``head`` (names in the model) that checkpoint keys ``stored`` lack.

    A key may carry a prefix (``model.classifier.weight``) or an old TensorFlow name (``gamma``/``beta`` for
    ``weight``/``bias``).

    >>> missing_head_weights(["classifier.weight", "classifier.bias"], {"bert.pooler.dense.weight"})
    ['classifier.weight', 'classifier.bias']
    >>> missing_head_weights(["classifier.dense.weight"], {"roberta.x", "classifier.dense.weight"})
    []
    """
    legacy = {"weight": "gamma", "bias": "beta"}

    def present(name: str) -> bool:
        base, _, leaf = name.rpartition(".")
        names = {name} | ({f"{base}.{legacy[leaf]}"} if leaf in legacy else set())
        return any(key in names or any(key.endswith("." + n) for n in names) for key in stored)

    return [name for name in head if not present(name)]


def check_head_weights(hf_model: Any, model: str, revision: str | None = None) -> None:
    """Refuse (exit 5) a model whose checkpoint does not hold the weights of its classification head: transformers
    initialised them at random, so its scores would change on every run. Passes when the checkpoint cannot be read."""
    folder = model_dir(model, revision)
    stored = checkpoint_keys(folder) if folder is not None else None
    prefix = str(getattr(hf_model, "base_model_prefix", "") or "")
    if stored is None or not prefix:
        logger.debug("%s: the checkpoint's tensor names could not be read; its classification head is not checked", model)
        return
    head = [name for name, _ in hf_model.named_parameters() if not name.startswith(prefix + ".")]
    missing = missing_head_weights(head, stored)
    if missing:
        raise InvalidInputError(
            f"{model} has no trained classification head: its checkpoint holds no {', '.join(missing)} (transformers "
            "would initialise them at random, and the scores would change on every run); use a cross-encoder such as "
            "bge-reranker or monobert, or a checkpoint saved with its classification head"
        )


class CrossEncoderScorer:
    """A ``PairScorer`` over ``sentence_transformers.CrossEncoder``.

    ``score_column`` picks the logit of a multi-output head (default: the only one, or class 1 of two);
    ``dtype`` is used on CUDA only (float32 elsewhere); ``device`` None picks cuda, mps or cpu.
    """

    def __init__(
        self,
        model: str,
        *,
        max_length: int | None = None,
        device: str | None = None,
        dtype: str | None = None,
        revision: str | None = None,
        score_column: int | None = None,
        trust_remote_code: bool = False,
        batch_tokens: int | None = None,
    ) -> None:
        if max_length is not None and max_length < 1:
            raise UsageError(f"max length must be positive, got {max_length}")
        check_model_exists(model, revision)  # before torch is imported: an unreachable hub fails at once
        require("torch", "rerank")
        require("sentence_transformers", "rerank")
        self.model_id = model
        self.max_length = max_length
        self.revision = revision
        self.score_column = score_column
        self.trust_remote_code = trust_remote_code
        self._model: Any = None
        self.device = resolve_device(device)
        self.dtype = effective_dtype(dtype, self.device)
        #: pairs per model batch: padded tokens (and a cap on pairs, set by the reranker), halved on out-of-memory
        self.token_budget = TokenBudget(tokens=device_budget(BATCH_TOKENS, self.device, batch_tokens))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "cross-encoder",
            "model": self.model_id,
            "weights": model_fingerprint(self.model_id, self.revision),
            "max_length": self.max_length,
            "score_column": self.score_column,
            "dtype": self.dtype,
            "input": "(query, document), longest_first truncation, raw logit",
        }

    def load(self) -> Any:
        """The loaded ``CrossEncoder`` (loaded once)."""
        if self._model is None:
            st = require("sentence_transformers", "rerank")
            hub = hub_kwargs(self.revision, self.model_id)
            kwargs: dict[str, Any] = {"device": self.device, "trust_remote_code": self.trust_remote_code, **hub}
            if self.max_length is not None:
                kwargs["max_length"] = self.max_length
            model_kwargs = {**adapter_kwargs(hub), **(dtype_kwargs(self.dtype) if self.dtype != "float32" else {})}
            if model_kwargs:
                kwargs["model_kwargs"] = model_kwargs
            logger.info("loading cross-encoder %s on %s (%s, max length %s)", self.model_id, self.device, self.dtype, self.max_length)
            transformers = require("transformers", "rerank")
            try:
                config = transformers.AutoConfig.from_pretrained(self.model_id, trust_remote_code=self.trust_remote_code,
                                                                 **hub)
                check_classification_head(getattr(config, "architectures", None), self.model_id)
                model = st.CrossEncoder(self.model_id, **kwargs)
            except OSError as exc:
                raise load_error(self.model_id, exc) from exc
            hf_model = getattr(model, "transformers_model", None)  # sentence-transformers 6; .model before
            hf_model = getattr(model, "model", None) if hf_model is None else hf_model
            if hf_model is not None:
                check_head_weights(hf_model, self.model_id, self.revision)
            model.eval()
            self._model = model
        return self._model

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]:
        """Raw logits of the pairs, in token-budget batches (``r2med.batching``): the pairs are tokenized once to
        count their tokens, and each batch goes to ``CrossEncoder.predict``, padded to its own longest pair."""
        torch = require("torch", "rerank")
        model = self.load()
        pairs = list(zip(queries, documents))
        tokenizer, limit = getattr(model, "tokenizer", None), getattr(model, "max_seq_length", None)
        limit = getattr(model, "max_length", None) if limit is None else limit  # sentence-transformers < 5
        kwargs = {"max_length": limit} if isinstance(limit, int) else {}
        if callable(tokenizer):
            lengths = [len(row) for row in tokenizer([q for q, _ in pairs], [d for _, d in pairs],
                                                     truncation="longest_first", return_attention_mask=False,
                                                     return_token_type_ids=False, **kwargs)["input_ids"]]
        else:  # no tokenizer to count with: every pair counts as one token (the cap on pairs alone cuts batches)
            lengths = [1] * len(pairs)

        def run(rows: list[int]) -> Any:
            with torch.inference_mode():
                logits = model.predict([pairs[i] for i in rows], batch_size=len(rows),
                                       activation_fn=torch.nn.Identity(), show_progress_bar=False,
                                       convert_to_numpy=True)
            return self._column(logits)

        values = run_in_order(lengths, run, self.token_budget, name=self.model_id,
                              device=self.device, what="pair")
        return [float(x) for x in values]

    def _column(self, logits: Any) -> Any:
        if logits.ndim == 1:
            return logits
        outputs = logits.shape[1]
        column = self.score_column
        if column is None:
            if outputs > 2:
                raise UsageError(
                    f"cross-encoder {self.model_id} has {outputs} outputs per pair; say which one is relevance "
                    "(score_column)"
                )
            column = outputs - 1  # the only logit, or class 1 ("relevant") of a two-class head
        if not 0 <= column < outputs:
            raise UsageError(f"score column {column} is out of range for {self.model_id}, which has {outputs} outputs")
        return logits[:, column]
