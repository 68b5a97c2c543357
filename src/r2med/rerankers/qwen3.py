"""Qwen3-Reranker (``Qwen/Qwen3-Reranker-0.6B``/``4B``/``8B``): pointwise yes/no, as its model card runs it.

From the card's usage (``QwenLM/Qwen3-Embedding`` ``README.md``, the Hugging Face model card's text; every text is
package data with its file:line, see ``r2med/data/pointwise_llm_prompts.json``): a pair is
``<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {doc}`` (line 221; default instruction "Given a web
search query, retrieve relevant passages that answer the query", line 220), tokenized and cut (``longest_first``)
to ``max_length`` (8192) minus the prefix and suffix tokens, between the system prefix and the suffix with the
empty think block (lines 256-257); batches are left-padded. The score is the softmax over the logits of ``no`` and
``yes`` at the last position, the probability of ``yes`` (``compute_logits``, lines 237-244).

Two ways: :class:`Qwen3RerankerScorer` loads the model here with transformers (``AutoModelForCausalLM``);
:class:`Qwen3ServerScorer` sends the same text (prefix + pair + suffix) to an OpenAI-compatible ``/v1/completions``
server for one token with the top 20 logprobs, and normalises ``yes`` against ``no`` among them (a token not there
counts as logprob -10, as the card's vLLM usage does, lines 316-330). With the model's tokenizer at hand
(``tokenizer``: a directory or hub id; by default the model's own when it is in the local Hugging Face cache) the
server gets the card's input exactly: the token ids of the prefix, the pair cut as above, and the suffix. Without
one it gets the whole text, not cut to ``max_length`` (a warning says so).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

from r2med.batching import TokenBudget, device_budget, run_in_order
from r2med.errors import UsageError
from r2med.hf import (
    check_model_exists,
    dtype_kwargs,
    effective_dtype,
    hub_kwargs,
    load_error,
    model_fingerprint,
    require,
    resolve_device,
)
from r2med.llm.client import SamplingParams
from r2med.rerankers.completions import CompletionRequests, TextRequest, fact, tokens_of, two_way

logger = logging.getLogger(__name__)

TASK = "rerank-qwen3-reranker/1"
#: Padded tokens per local batch on a GPU (at most ``batching.CPU_BATCH_TOKENS`` elsewhere), as the dense 8B recipes
BATCH_TOKENS = 32768
NAME = "qwen3-reranker"


def qwen3_pair(query: str, document: str, instruction: str | None = None) -> str:
    """The card's ``format_instruction`` (None: its default instruction).

    >>> qwen3_pair("What is the capital of China?", "The capital of China is Beijing.")
    '<Instruct>: Given a web search query, retrieve relevant passages that answer the query\\n<Query>: What is the capital of China?\\n<Document>: The capital of China is Beijing.'
    """
    if instruction is None:
        instruction = fact(NAME, "default_instruction")
    return fact(NAME, "pair").format(instruction=instruction, query=query, doc=document)


def qwen3_prompt(query: str, document: str, instruction: str | None = None) -> str:
    """The whole text the model reads: the card's prefix, the pair and its suffix (what the server is sent)."""
    return fact(NAME, "prefix") + qwen3_pair(query, document, instruction) + fact(NAME, "suffix")


def card_input_ids(tokenizer: Any, pairs: Sequence[str], max_length: int) -> list[list[int]]:
    """The card's ``process_inputs`` before padding: each pair tokenized and cut (``longest_first``) to ``max_length``
    minus the prefix and suffix tokens, between them (README.md:224-231, 254-259)."""
    prefix = tokenizer.encode(fact(NAME, "prefix"), add_special_tokens=False)
    suffix = tokenizer.encode(fact(NAME, "suffix"), add_special_tokens=False)
    if max_length <= len(prefix) + len(suffix):
        raise UsageError(f"max length {max_length} leaves no room for the pair after the prompt's "
                         f"{len(prefix) + len(suffix)} prefix and suffix tokens")
    out = tokenizer(list(pairs), padding=False, truncation="longest_first", return_attention_mask=False,
                    max_length=max_length - len(prefix) - len(suffix))
    return [prefix + list(ids) + suffix for ids in out["input_ids"]]


def qwen3_server_score(top: dict[str, float] | None) -> float:
    """P(yes) normalised against ``no`` from the top logprobs of the one generated position (a missing one: -10).

    >>> import math
    >>> round(qwen3_server_score({"yes": math.log(0.2), "no": math.log(0.6)}), 6), qwen3_server_score({})
    (0.25, 0.5)
    """
    yes, no = fact(NAME, "answer_tokens")
    missing = float(fact(NAME, "server_sampling")["missing_logprob"])
    value = two_way(top or {}, yes, no, missing=missing)
    assert value is not None  # a missing token counts as `missing`
    return value


class Qwen3RerankerScorer:
    """A ``PairScorer`` running the model here (transformers ``AutoModelForCausalLM``), as the card's usage.

    ``dtype`` is used on CUDA only (default float32, as the card loads it; it recommends float16 with flash
    attention); ``device`` None picks cuda, mps or cpu.
    """

    def __init__(self, model: str, *, max_length: int = 8192, instruction: str | None = None, device: str | None = None,
                 dtype: str | None = None, revision: str | None = None, batch_tokens: int | None = None) -> None:
        check_model_exists(model, revision)  # before torch is imported: an unreachable hub fails at once
        require("torch", "rerank")
        require("transformers", "rerank")
        self.model_id = model
        self.max_length = max_length
        self.instruction = instruction
        self.revision = revision
        self.device = resolve_device(device)
        self.dtype = effective_dtype(dtype, self.device)
        self._loaded: tuple[Any, Any, list[int], list[int], int, int] | None = None
        #: pairs per model batch: padded tokens (and a cap on pairs, set by the reranker), halved on out-of-memory
        self.token_budget = TokenBudget(tokens=device_budget(BATCH_TOKENS, self.device, batch_tokens))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": NAME, "task": TASK, "model": self.model_id, "weights": model_fingerprint(self.model_id, self.revision),
            "max_length": self.max_length, "dtype": self.dtype, "instruction": self.instruction,
            "input": [fact(NAME, "prefix"), fact(NAME, "pair"), fact(NAME, "suffix"), "left padding, softmax(no, yes)"],
        }

    def load(self) -> tuple[Any, Any, list[int], list[int], int, int]:
        """``(tokenizer, model, prefix ids, suffix ids, yes id, no id)``, loaded once."""
        if self._loaded is None:
            transformers = require("transformers", "rerank")
            hub = hub_kwargs(self.revision, self.model_id)
            logger.info("loading %s on %s (%s, max length %d)", self.model_id, self.device, self.dtype, self.max_length)
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(self.model_id, padding_side="left", **hub)
                model = transformers.AutoModelForCausalLM.from_pretrained(self.model_id, **hub,
                                                                          **dtype_kwargs(self.dtype))
            except OSError as exc:
                raise load_error(self.model_id, exc) from exc
            tokenizer.padding_side = "left"
            yes, no = (tokenizer.convert_tokens_to_ids(token) for token in fact(NAME, "answer_tokens"))
            for token, found in zip(fact(NAME, "answer_tokens"), (yes, no)):
                if found is None or found == tokenizer.unk_token_id:
                    raise UsageError(f"{self.model_id}: its tokenizer has no token {token!r}; is it a Qwen3-Reranker?")
            prefix = tokenizer.encode(fact(NAME, "prefix"), add_special_tokens=False)
            suffix = tokenizer.encode(fact(NAME, "suffix"), add_special_tokens=False)
            model.to(self.device).eval()
            self._loaded = (tokenizer, model, prefix, suffix, int(yes), int(no))
        return self._loaded

    def encode(self, queries: Sequence[str], documents: Sequence[str]) -> Any:
        """The card's ``process_inputs``: each pair cut to fit, wrapped in the prefix and suffix, left-padded."""
        tokenizer = self.load()[0]
        pairs = [qwen3_pair(q, d, self.instruction) for q, d in zip(queries, documents)]
        return self._pad({"input_ids": card_input_ids(tokenizer, pairs, self.max_length)})

    def _pad(self, out: dict[str, list[list[int]]]) -> Any:
        tokenizer = self.load()[0]
        with warnings.catch_warnings():  # the card passes max_length to pad(), which transformers says it ignores
            warnings.simplefilter("ignore", UserWarning)
            return tokenizer.pad(out, padding=True, return_tensors="pt", max_length=self.max_length)

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]:
        """P(yes) of the pairs: the card's inputs made once, unpadded, then in token-budget batches
        (``r2med.batching``), each left-padded to its own longest pair."""
        torch = require("torch", "rerank")
        tokenizer, model, _, _, yes, no = self.load()
        pairs = [qwen3_pair(q, d, self.instruction) for q, d in zip(queries, documents)]
        ids = card_input_ids(tokenizer, pairs, self.max_length)

        def prepare(rows: list[int]) -> dict[str, Any]:  # on a background thread, while the batch before runs
            inputs = self._pad({"input_ids": [ids[i] for i in rows]})
            return {k: v.pin_memory() if self.device.startswith("cuda") else v for k, v in inputs.items()}

        def run(inputs: dict[str, Any]) -> list[float]:
            with torch.inference_mode():
                last = model(**{k: v.to(self.device, non_blocking=True) for k, v in inputs.items()}).logits[:, -1, :]
                pair = torch.stack([last[:, no], last[:, yes]], dim=1).float()
                return torch.nn.functional.log_softmax(pair, dim=1)[:, 1].exp().cpu().tolist()

        return run_in_order([len(row) for row in ids], run, self.token_budget, name=self.model_id,
                            device=self.device, what="pair", prepare=prepare)


class Qwen3ServerScorer:
    """A ``PairScorer`` over an OpenAI-compatible server serving a Qwen3-Reranker (``/v1/completions``, one token).

    ``answer_token_ids``: the ids of ``yes`` and ``no``, sent as vLLM's ``allowed_token_ids`` as the card's vLLM usage
    does (None: not sent; the ratio of the two is the same, but a token outside the top ``logprobs`` counts as -10).
    ``tokenizer``: the model's tokenizer (a loaded one, or a directory or hub id loaded at the first pair): each
    request is then the card's input as token ids, the pair cut to ``max_length``; None: the whole text is sent.
    """

    def __init__(self, requests: CompletionRequests, *, instruction: str | None = None, logprobs: int = 20,
                 answer_token_ids: Sequence[int] | None = None, params: SamplingParams | None = None,
                 tokenizer: Any = None, max_length: int = 8192) -> None:
        if answer_token_ids is not None and len(answer_token_ids) != 2:
            raise UsageError(f"answer_token_ids takes the ids of 'yes' and 'no' (two ids), got {list(answer_token_ids)}")
        sampling = fact(NAME, "server_sampling")
        self.requests = requests
        self.instruction = instruction
        self.logprobs = logprobs
        self.answer_token_ids = list(answer_token_ids) if answer_token_ids is not None else None
        self.params = params or SamplingParams(temperature=float(sampling["temperature"]),
                                               max_tokens=int(sampling["max_tokens"]))
        self.tokenizer_source = tokenizer if isinstance(tokenizer, str) or tokenizer is None else \
            str(getattr(tokenizer, "name_or_path", "") or "given")
        self._tokenizer = None if isinstance(tokenizer, str) else tokenizer
        self.max_length = max_length
        self._warned = False

    def describe(self) -> dict[str, Any]:
        cut = ({"token_ids": True, "tokenizer": self.tokenizer_source, "max_length": self.max_length}
               if self.tokenizer_source is not None else {"token_ids": False, "cut": "whole text, not cut"})
        return {"kind": f"{NAME}-server", "task": TASK, "model": self.requests.client.model,
                "instruction": self.instruction, "params": self.params.to_request(), "logprobs": self.logprobs,
                "answer_token_ids": self.answer_token_ids,
                "input": [fact(NAME, "prefix"), fact(NAME, "pair"), fact(NAME, "suffix")], **cut}

    def tokenizer(self) -> Any:
        """The model's tokenizer (loaded at the first use), or None when the whole text is sent."""
        if self._tokenizer is None and self.tokenizer_source is not None:
            from r2med.rerankers.reasonrank import load_tokenizer

            self._tokenizer = load_tokenizer(self.tokenizer_source,
                                             purpose="cutting Qwen3-Reranker's input as its model card (--tokenizer)")
        return self._tokenizer

    def requests_for(self, queries: Sequence[str], documents: Sequence[str]) -> list[TextRequest]:
        """One request per pair: the card's input as token ids (with a tokenizer), else the whole text."""
        extra = {"allowed_token_ids": self.answer_token_ids} if self.answer_token_ids is not None else {}
        tokenizer = self.tokenizer()
        if tokenizer is None:
            if not self._warned:
                logger.warning("%s: no tokenizer of the model here: each pair goes to the server whole, not cut to %d "
                               "tokens as the model card does (pass --tokenizer DIR|ID)", self.requests.client.model,
                               self.max_length)
                self._warned = True
            prompts: list[str | tuple[int, ...]] = [qwen3_prompt(q, d, self.instruction)
                                                    for q, d in zip(queries, documents)]
        else:
            pairs = [qwen3_pair(q, d, self.instruction) for q, d in zip(queries, documents)]
            prompts = [tuple(ids) for ids in card_input_ids(tokenizer, pairs, self.max_length)]
        return [TextRequest(prompt, self.params, (), self.logprobs, extra) for prompt in prompts]

    def request(self, query: str, document: str) -> TextRequest:
        return self.requests_for([query], [document])[0]

    def sent(self) -> tuple[int, int, int]:
        return self.requests.sent()

    def pair_tokens(self, query: str, document: str) -> tuple[int, int] | None:
        """The tokens of the pair's one request, as its response recorded them (None when it is not at hand)."""
        return tokens_of([self.requests.lookup(self.request(query, document))])

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]:
        records = self.requests.fetch(self.requests_for(queries, documents))
        return [qwen3_server_score(record.get("last_top_logprobs")) for record in records]
