"""The LLM endpoint, declared once: every command that calls an LLM (``r2med expand``, the listwise reranker,
``r2med agent``) takes these options, with the same flags, file keys, checks and defaults (a component may give one
another default with ``r2med.options.redefault``).

>>> LLMOptions(temperature="none", top_p=0.9).sampling({"temperature": 0.7, "max_tokens": 512}).to_request()
{'top_p': 0.9, 'max_tokens': 512}
>>> LLMOptions().sampling({"temperature": 0.7}).to_request()
{'temperature': 0.7}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from r2med.errors import UsageError
from r2med.llm.requests import SamplingParams
from r2med.options import NONE_WORD, option

#: the sampling options, in SamplingParams' order
SAMPLING = ("temperature", "top_p", "max_tokens", "seed")


@dataclass(frozen=True, kw_only=True)
class LLMOptions:
    """An OpenAI-compatible server and how to sample from it. ``None`` takes the component's default (the authors'
    sampling); ``"none"`` (``--temperature none``) sends no value, for models that refuse one."""

    llm_model: str | None = option(None, "model id the server knows (sent as 'model')", metavar="MODEL")
    llm_name: str | None = option(None, "name of the LLM in results and expansion folders (default: a safe form of "
                                  "--llm-model)", metavar="NAME", keyed=False)
    base_url: str | None = option(None, "OpenAI-compatible base URL, e.g. http://localhost:8000/v1 (default: "
                                  "$OPENAI_BASE_URL)", metavar="URL", keyed=False)
    api_key_env: str | None = option(None, "environment variable holding the API key (default OPENAI_API_KEY; local "
                                     "servers need none)", metavar="NAME", keyed=False)
    timeout: float = option(300.0, "deadline of each request attempt in seconds: connecting, sending and the whole "
                            "answer", minimum=0.001, keyed=False)
    max_retries: int = option(5, "retries per request", minimum=0, keyed=False)
    concurrency: int = option(8, "requests in flight at once", minimum=1, keyed=False)
    max_requests: int | None = option(None, "budget: HTTP requests for the whole run (retries included); when spent, "
                                      "what was answered stays in the cache and the run exits 6: rerun to resume",
                                      minimum=1, keyed=False)
    temperature: float | None = option(None, "sampling temperature ('none' sends none, for models that refuse one)",
                                       minimum=0, none_word=True)
    top_p: float | None = option(None, "nucleus sampling: the probability mass kept ('none' sends none)", minimum=0,
                                 maximum=1, none_word=True)
    max_tokens: int | None = option(None, "completion tokens per request (reasoning models need many)", minimum=1)
    seed: int | None = option(None, "sampling seed, for servers that take one")

    def __post_init__(self) -> None:
        if self.llm_name is not None:  # it names folders (listwise-<llm name>, expansions/<Dataset>/<method>/<llm>)
            from r2med.io.names import check_name

            check_name(self.llm_name, what="--llm-name", fix="name the LLM with a plain name such as 'o3-mini'")

    def api_key(self) -> str | None:
        """The key in ``api_key_env`` (None: the client's default, OPENAI_API_KEY); UsageError when it is not set."""
        if not self.api_key_env:
            return None
        from r2med.settings import get_secret

        key = get_secret(self.api_key_env)
        if key is None:
            raise UsageError(f"--api-key-env {self.api_key_env}: that environment variable is not set")
        return key

    def ready(self) -> None:
        """UsageError now, before any work, when no model is given or ``api_key_env`` names an unset variable."""
        if not self.llm_model:
            raise UsageError("no LLM given: pass --llm-model MODEL (and --base-url URL)")
        self.api_key()

    def sampling(self, defaults: Mapping[str, Any] | None = None) -> SamplingParams:
        """The sampling sent: each option given, ``defaults`` (the component's) for the rest; ``"none"`` sends none."""
        values = {}
        for name in SAMPLING:
            value = getattr(self, name)
            values[name] = (defaults or {}).get(name) if value is None else None if value == NONE_WORD else value
        return SamplingParams(**values)

    def given_sampling(self) -> dict[str, Any]:
        """The sampling options the user set (``"none"`` as None): what overrides the component's defaults."""
        return {name: None if getattr(self, name) == NONE_WORD else getattr(self, name) for name in SAMPLING
                if getattr(self, name) is not None}

    def client(self, base_url: str, **kwargs: Any) -> Any:
        """A ``ChatClient`` for ``llm_model`` at ``base_url`` with this endpoint's key, timeout, retries and
        ``max_requests`` budget (``budget=`` for another)."""
        from r2med.llm.client import ChatClient
        from r2med.llm.requests import Budget

        self.ready()
        kwargs.setdefault("budget", Budget(max_requests=self.max_requests))
        return ChatClient(self.llm_model, base_url, api_key=self.api_key(), api_key_env=self.api_key_env,
                          timeout=self.timeout, max_retries=self.max_retries, **kwargs)
