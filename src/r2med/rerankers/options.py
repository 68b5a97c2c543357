"""The rerankers' options, one class per kind (``r2med.options``: flags, ``[reranker]`` keys and docs from these
declarations). A kind's registry row (``r2med.rerankers.registry.KINDS``) names its class."""

from __future__ import annotations

from dataclasses import dataclass

from r2med.hf import DTYPES
from r2med.llm.endpoint import LLMOptions
from r2med.llm.reasoning import STYLES
from r2med.options import option, redefault
from r2med.rerankers.windows import DIRECTIONS

#: ReasonRank's prompt modes (the authors' --prompt_mode) and how a window is sent; r2med.rerankers.reasonrank checks
#: the same tuples (kept here too so that declaring the options imports nothing more)
REASONRANK_MODES = ("rank_GPT_reasoning", "rank_GPT_qwen3")
REQUEST_AS = ("text", "chat")

#: what a listwise window that fails after its retries does
ON_ERROR = ("raise", "keep")


@dataclass(frozen=True, kw_only=True)
class PointwiseOptions:
    """A (query, document) scorer on this machine: a cross-encoder."""

    device: str | None = option(None, "pointwise: cpu, cuda (every visible GPU), cuda:N, a list cuda:0,cuda:2 (one "
                                "worker process per device) or mps (default: the best available)", keyed=False)
    dtype: str | None = option(None, "pointwise: weights on CUDA (default float32; float16 for RankLLaMA); float32 "
                               "elsewhere", choices=DTYPES)
    batch_size: int | None = option(None, "pointwise: pairs per batch (default 32; 8 for RankLLaMA)", minimum=1,
                                    keyed=False)
    batch_tokens: int | None = option(None, "pointwise, on this machine: padded tokens per model batch, pairs sorted "
                                      "by token count; halved on out-of-memory (default: the model's, sized for an "
                                      "80 GB GPU; at most 8192 on a CPU)", minimum=1, keyed=False)
    max_length: int | None = option(None, "pointwise: tokens per (query, document) pair (default: as the authors ran "
                                    "the model)", minimum=1)


@dataclass(frozen=True, kw_only=True)
class RankLlamaOptions(PointwiseOptions):
    """RankLLaMA: a LoRA adapter on a base model."""

    base_model: str | None = option(None, "rankllama: the base model the LoRA adapter goes on (default "
                                    "meta-llama/Llama-2-7b-hf)", metavar="NAME|PATH")


@dataclass(frozen=True, kw_only=True)
class WindowOptions(LLMOptions):
    """A sliding window of passages over an OpenAI-compatible LLM server (the listwise and ReasonRank rerankers)."""

    window: int = option(20, "passages per window", minimum=1)
    stride: int = option(10, "step between windows", minimum=1)


@dataclass(frozen=True, kw_only=True)
class ListwiseOptions(WindowOptions):
    """RankGPT's sliding window over an OpenAI-compatible chat model (temperature 0 by default, as RankGPT)."""

    temperature: float | None = redefault(LLMOptions, "temperature", 0.0)
    direction: str = option("back_to_front", "where the windows start (back_to_front, as RankGPT)", choices=DIRECTIONS)
    max_words: int | None = option(300, "words kept per passage in the prompt", minimum=1)
    with_scores: bool = option(False, "show each passage's first-stage score in the prompt (InsertRank)")
    reasoning_style: str = option("auto", "how a reasoning model's trace is marked (default: detected from the tags)",
                                  choices=("auto", *STYLES))
    on_error: str = option("raise", "a window that fails after retries: raise = exit 6 once the other queries are "
                           "done (rerun to resume), keep = the window keeps its order", choices=ON_ERROR)


@dataclass(frozen=True, kw_only=True)
class ReasonRankOptions(WindowOptions):
    """ReasonRank's prompt and sampling as its authors ran them (r2med.rerankers.reasonrank), over an OpenAI-compatible
    server (vLLM, SGLang, llama.cpp) serving the model."""

    llm_model: str | None = redefault(LLMOptions, "llm_model", None, note="default: the model's hub id, e.g. "
                                      "liuwenhan/reasonrank-32B")
    temperature: float | None = redefault(LLMOptions, "temperature", None, note="default: the authors' (0; 0.6 for "
                                          "reasonrank-8b)")
    max_tokens: int | None = redefault(LLMOptions, "max_tokens", None, note="default: --reasoning-maxlen + 100")
    prompt_mode: str | None = option(None, "reasonrank: the authors' prompt mode (default: the model's: "
                                     "rank_GPT_reasoning for 7b/32b, rank_GPT_qwen3 for 8b)", choices=REASONRANK_MODES)
    request_as: str = option("text", "reasonrank: text = one prompt under the model's chat template to /v1/completions "
                             "(byte for byte the authors' input); chat = the authors' messages to /v1/chat/completions",
                             choices=REQUEST_AS)
    tokenizer: str | None = option(None, "reasonrank: the model's tokenizer, a local directory or hub id (default: the "
                                   "model's, from the local Hugging Face cache or the hub)", metavar="DIR|ID")
    doc_maxlen: int = option(512, "reasonrank: tokens kept per passage (the authors' DOC_MAXLEN for R2MED)", minimum=1)
    reasoning_maxlen: int = option(3072, "reasonrank: the reasoning budget in tokens; max tokens = this + 100, as the "
                                   "authors'", minimum=1)
    on_error: str = redefault(ListwiseOptions, "on_error", "raise")

    def ready(self) -> None:
        """The model defaults to the registry's: only an unset ``api_key_env`` variable is an error here."""
        self.api_key()


@dataclass(frozen=True, kw_only=True)
class LogprobOptions:
    """What a reranker that reads an answer token's log-probability from a server asks for."""

    top_logprobs: int = option(20, "rank1 / qwen3-reranker server: top log-probabilities asked per token (the "
                               "authors' 20)", minimum=1)
    answer_token_ids: list[int] | None = option(None, "rank1 / qwen3-reranker server: the ids of the two answer tokens "  # noqa: RUF009
                                                "(' true',' false' / 'yes','no') in the served model's tokenizer, sent "
                                                "as vLLM's allowed_token_ids as the authors did (default: not sent)",
                                                metavar="ID,ID")


@dataclass(frozen=True, kw_only=True)
class Rank1Options(LogprobOptions, LLMOptions):
    """Rank1 over an OpenAI-compatible /v1/completions server (vLLM): its authors' greedy 8192-token trace."""

    llm_model: str | None = redefault(LLMOptions, "llm_model", None, note="default: the reranker's hub id")
    temperature: float | None = redefault(LLMOptions, "temperature", 0.0)
    max_tokens: int | None = redefault(LLMOptions, "max_tokens", 8192, note="default: 8192 for rank1")
    dataset_prompt: str | None = option(None, "rank1: a prompt with FILL_QUERY_HERE where the query goes (the authors' "
                                        "prompts.py; none for R2MED's datasets)", metavar="TEXT")


@dataclass(frozen=True, kw_only=True)
class Qwen3RerankerOptions(LogprobOptions, LLMOptions, PointwiseOptions):
    """Qwen3-Reranker: transformers on this machine, or (``via_server``) an OpenAI-compatible /v1/completions server."""

    llm_model: str | None = redefault(LLMOptions, "llm_model", None, note="default: the reranker's hub id")
    temperature: float | None = redefault(LLMOptions, "temperature", 0.0)
    max_tokens: int | None = redefault(LLMOptions, "max_tokens", 1, note="default: 1 for qwen3-reranker")
    via_server: bool = option(False, "qwen3-reranker: score through the server at --base-url (/v1/completions with "
                              "logprobs) instead of loading the model here")
    tokenizer: str | None = option(None, "qwen3-reranker server: the model's tokenizer, a local directory or hub id, "
                                   "to send the model card's input as token ids, the pair cut to --max-length (default: "
                                   "the model's, when in the local Hugging Face cache; else the whole text is sent)",
                                   metavar="DIR|ID")
    instruction: str | None = option(None, "qwen3-reranker: the <Instruct> text (default: the model card's 'Given a "
                                     "web search query, retrieve relevant passages that answer the query')",
                                     metavar="TEXT")
