"""The model's tokens, for protocols that cut observations and context in tokens (``search-r1-eval``).

``token_counter(model, base_url)`` finds the model's tokenizer: a local one when ``model`` is a directory or is in
the Hugging Face cache (``transformers``), else the server's (``POST /tokenize`` and ``/detokenize`` at the
server's root, as vLLM and llama.cpp serve them). Both encode without special tokens (as Search-R1's
``tokenizer(..., add_special_tokens=False)``) and decode keeping them (the chat template's tokens are text).

``count(text)`` is the context budget's measure (``r2med.agent.context``): the tokens the server's prompt takes,
special tokens it adds included (the beginning-of-sequence token), as vLLM's and llama.cpp's completions
count them. ``prompt_counter`` picks the most exact one there is: the local tokenizer, the server's
``/tokenize``, else ``ByteBound``, a bound that is never below the true count.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from r2med.errors import MissingResourceError

if TYPE_CHECKING:
    from r2med.http import Secret

logger = logging.getLogger(__name__)


class TokenCounter(Protocol):
    source: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def count(self, text: str) -> int: ...


class NoTokenizeEndpoint(MissingResourceError):
    """The server answers 404 to ``/tokenize`` (not vLLM, not llama.cpp)."""


class ByteBound:
    """A bound on a prompt's tokens without a tokenizer: its UTF-8 bytes (of its longest Unicode normalization,
    ``FORMS``) + ``SPECIAL``. Every token of a byte-level
    BPE or SentencePiece vocabulary (byte fallback, or ``<unk>``) stands for at least one byte of the text, except
    the special tokens the server adds and SentencePiece's prefix space: ``SPECIAL`` covers those. Cautious (a
    token is ~4 bytes of English), it clamps ``max_tokens`` early, never too late.

    >>> ByteBound().count("héllo")
    22
    """

    SPECIAL = 16
    source = "a bound: UTF-8 bytes + 16 (no tokenizer: pass a local model directory or use a server with /tokenize)"

    #: the Unicode normalizations an LLM's tokenizer may apply first (Qwen2's NFC, SentencePiece's nmt_nfkc):
    #: some grow the text (NFC decomposes U+FB2C, 3 bytes, into 6; NFKC turns U+FDFA, 3 bytes, into 33), and a token
    #: stands for at least one byte of the normalized text, so the bound counts the longest of them
    FORMS = ("NFC", "NFKC")

    def count(self, text: str) -> int:
        import unicodedata

        longest = max([len(text.encode("utf-8"))] + [len(unicodedata.normalize(form, text).encode("utf-8"))
                                                     for form in self.FORMS])
        return longest + self.SPECIAL

    def encode(self, text: str) -> list[int]:  # pragma: no cover - a bound cannot cut
        raise MissingResourceError("no tokenizer: the protocol cuts in the model's tokens")

    decode = encode


class LocalTokenizer:
    """A ``transformers`` tokenizer (or anything with ``encode(text, add_special_tokens=...)`` and ``decode``)."""

    def __init__(self, tokenizer: Any, source: str) -> None:
        self.tokenizer = tokenizer
        self.source = source

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=True))


def server_root(base_url: str) -> str:
    """The server's root, where vLLM and llama.cpp serve ``/tokenize``.

    >>> server_root("http://h:8000/v1/"), server_root("http://h:8080")
    ('http://h:8000', 'http://h:8080')
    """
    return base_url.rstrip("/").removesuffix("/v1")


class ServerTokenizer:
    """The server's tokenizer: ``POST /tokenize`` (vLLM ``{"model", "prompt", "add_special_tokens"}`` -> ``tokens``;
    llama.cpp ``{"content", "add_special"}`` -> ``tokens``) and ``POST /detokenize`` (``{"model", "tokens"}`` ->
    vLLM ``prompt``, llama.cpp ``content``). One body carries both servers' field names. ``secret``: the key of the
    agent's completions (``AgentConfig.secret``): a server that checks one checks it here too."""

    def __init__(self, base_url: str, model: str, *, timeout: float = 60.0, max_retries: int = 2,
                 secret: Secret | None = None) -> None:
        from r2med.http import JsonClient, RetryPolicy, Secret
        from r2med.http.rules import safe_url

        self.root = server_root(base_url)
        self.model = model
        self.source = f"the server's /tokenize ({safe_url(self.root)})"
        # r2med's one HTTP stack: its deadline per attempt, retries and redaction
        self._http = JsonClient(self.root, label="tokenize", secret=secret or Secret(None), timeout=timeout,
                                policy=RetryPolicy(max_retries=max_retries))

    def _post(self, path: str, body: dict[str, Any], parse: Any) -> Any:
        from r2med.http import FatalProviderError
        from r2med.http.rules import safe_url

        try:
            return self._http.post(path, body, parse=parse)
        except FatalProviderError as exc:
            if "404" not in str(exc):
                raise
            raise NoTokenizeEndpoint(
                f"{safe_url(self.root)}{path}: 404; the protocol cuts in the model's tokens and this server has no {path} (vLLM "
                "and llama.cpp have one): pass a local model directory (or a model in the Hugging Face cache) as "
                "--llm-model, or use --protocol search-r1-infer") from None

    def encode(self, text: str) -> list[int]:
        return self._post("/tokenize", {"model": self.model, "prompt": text, "content": text,
                                        "add_special_tokens": False, "add_special": False}, _token_ids)

    def count(self, text: str) -> int:
        return len(self._post("/tokenize", {"model": self.model, "prompt": text, "content": text,
                                            "add_special_tokens": True, "add_special": True}, _token_ids))

    def decode(self, ids: list[int]) -> str:
        return self._post("/detokenize", {"model": self.model, "tokens": list(ids)}, _detokenized)


def _token_ids(answer: dict[str, Any], attempts: int) -> list[int]:
    """vLLM's ``tokens`` (ids) or llama.cpp's (ids, or ``{"id": ...}`` pieces); ``BadAnswer`` (retried) otherwise."""
    from r2med.http import BadAnswer

    tokens = answer.get("tokens")
    ids = [t.get("id") if isinstance(t, dict) else t for t in tokens] if isinstance(tokens, list) else None
    if ids is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadAnswer("the /tokenize answer has no list of token ids ('tokens')")
    return ids


def _detokenized(answer: dict[str, Any], attempts: int) -> str:
    from r2med.http import BadAnswer

    text = answer.get("prompt", answer.get("content"))
    if not isinstance(text, str):
        raise BadAnswer("the /detokenize answer has no text ('prompt' or 'content')")
    return text


def local_tokenizer(model: str) -> LocalTokenizer | None:
    """The model's own tokenizer when it is a local directory or in the Hugging Face cache (None otherwise)."""
    from r2med.hf import in_hf_cache, is_local

    try:
        if not (is_local(model) or ("/" in model and in_hf_cache(model))):
            return None
        from transformers import AutoTokenizer

        return LocalTokenizer(AutoTokenizer.from_pretrained(model, local_files_only=True), f"{model} (local)")
    except Exception as exc:  # noqa: BLE001 - no tokenizer files, transformers missing: the server's tokenizer is the fallback
        logger.debug("no local tokenizer for %s: %s", model, exc)
        return None


def token_counter(model: str, base_url: str, *, secret: Secret | None = None, timeout: float = 60.0,
                  max_retries: int = 2) -> TokenCounter:
    """The model's local tokenizer, else the server's (with the agent's --timeout, --max-retries and the key of its
    completions: ``AgentConfig.secret``)."""
    return local_tokenizer(model) or ServerTokenizer(base_url, model, secret=secret, timeout=timeout,
                                                     max_retries=max_retries)


def prompt_counter(model: str, base_url: str, *, secret: Secret | None = None, timeout: float = 60.0,
                   max_retries: int = 2, tokens: TokenCounter | None = None) -> TokenCounter | ByteBound:
    """What counts a prompt's tokens for the context budget: ``tokens`` (the protocol's tokenizer) when given, else
    the model's local tokenizer, else the server's ``/tokenize`` (tried once here), else ``ByteBound``."""
    from r2med.errors import ProviderError

    counter = tokens or local_tokenizer(model)
    if counter is not None:
        return counter
    server = ServerTokenizer(base_url, model, secret=secret, timeout=timeout, max_retries=max_retries)
    try:
        server.count("r2med")
    except NoTokenizeEndpoint:
        return ByteBound()
    except ProviderError as exc:
        if getattr(exc, "fatal", False):
            raise
        logger.info("the server's /tokenize refused a request (%s): the context budget counts %s", exc, ByteBound.source)
        return ByteBound()
    return server
