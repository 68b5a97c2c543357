"""The URL rule and the API-key rule of every HTTP client r2med has, and the one place secrets are cut out.

A base URL is an ``http(s)`` URL with a host (``check_base_url``); an API key is the one given, else the value of
the environment variable named (``$OPENAI_API_KEY`` unless told otherwise), and a server on this machine or a
private network may run without one (``resolve_key``). The key lives in a ``Secret``, whose repr hides it and whose
``redact`` is what cuts it out of every text a server sent before that text reaches an error, a log line or a file.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from r2med.errors import MissingResourceError, UsageError
from r2med.settings import ENV_OPENAI_API_KEY, get_secret

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


#: a value shorter than this (``EMPTY``, ``dummy``: what local servers are often given) is no secret to cut out:
#: replacing it would change answers that happen to contain the word
MIN_SECRET_LENGTH = 8


class Secret:
    """An API key that never shows itself in a repr, a str or a log line.

    >>> key = Secret("sk-abc123")
    >>> key, str(key), bool(Secret(""))
    (Secret('***'), "Secret('***')", False)
    >>> key.redact("bad key sk-abc123 given"), Secret("EMPTY").redact("EMPTY content")
    ('bad key *** given', 'EMPTY content')

    ``covering(url)`` also cuts out the credentials of a ``user:password@`` URL: the password as written and
    decoded, and the ``Basic`` token the HTTP client sends for them (a proxy that echoes headers quotes that).

    >>> key.covering("http://me:pa%24s-word9@localhost/v1").redact("Basic bWU6cGEkcy13b3JkOQ== pa$s-word9")
    'Basic *** ***'
    """

    __slots__ = ("_others", "_value")

    def __init__(self, value: str | None) -> None:
        self._value = value or ""
        self._others: tuple[str, ...] = ()

    def reveal(self) -> str:
        return self._value

    def covering(self, url: str) -> Secret:
        """This key, and the credentials written into ``url`` (none: ``self``)."""
        others = url_credentials(url)
        if not others:
            return self
        covered = Secret(self._value)
        covered._others = tuple(dict.fromkeys((*self._others, *others)))
        return covered

    def redact(self, text: str) -> str:
        # the longest first: a password inside its own Basic token must not break the token's replacement
        for value in self._cuts():
            text = text.replace(value, "***")
        return text

    def redact_all(self, value: Any) -> Any:
        """``value`` (decoded JSON: dicts, lists, strings, numbers) with every string, keys included, redacted; its
        dicts and lists are changed in place (without recursion: any depth ``json.loads`` gave).

        >>> Secret("sk-abc123").redact_all({"k": ["sk-abc123", 1.5], "sk-abc123": None})
        {'k': ['***', 1.5], '***': None}
        """
        if not self._cuts():
            return value
        if isinstance(value, str):
            return self.redact(value)
        pending = [value]
        while pending:
            node = pending.pop()
            if isinstance(node, dict):
                items = list(node.items())
                node.clear()
                for key, item in items:
                    node[self.redact(key) if isinstance(key, str) else key] = (
                        self.redact(item) if isinstance(item, str) else item)
                    pending.append(item)
            elif isinstance(node, list):
                for i, item in enumerate(node):
                    if isinstance(item, str):
                        node[i] = self.redact(item)
                    else:
                        pending.append(item)
        return value

    def _cuts(self) -> list[str]:
        """What ``redact`` replaces, the longest first."""
        return [v for v in sorted((self._value, *self._others), key=len, reverse=True) if len(v) >= MIN_SECRET_LENGTH]

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __reduce__(self) -> Any:  # never pickle a key into a file or another process
        raise TypeError("a Secret cannot be pickled")


def url_credentials(url: str) -> tuple[str, ...]:
    """What of ``url`` is a secret: the password of a ``user:password@`` part, as written and decoded, and the
    ``Basic`` authorization token an HTTP client makes of it; empty when the URL holds no password.

    >>> url_credentials("http://u:p%40ss@host/v1")
    ('p%40ss', 'p@ss', 'dTpwQHNz', 'dTpwJTQwc3M=')
    """
    try:
        parts = urlsplit(url)
        written_user, written = parts.username, parts.password
    except ValueError:
        return ()
    if not written:
        return ()
    user, password = unquote(written_user or ""), unquote(written)
    tokens = [base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in ((user, password), (written_user, written))]
    return tuple(dict.fromkeys((written, password, *tokens)))


def url_host(url: str) -> str:
    """``host[:port]`` of ``url``, without any ``user:password@`` part.

    >>> url_host("https://user:pw@api.openai.com/v1")
    'api.openai.com'
    >>> url_host("http://127.0.0.1:8000/v1")
    '127.0.0.1:8000'
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def safe_url(url: str) -> str:
    """``url`` without credentials, fit for messages.

    >>> safe_url("http://u:p@localhost:8000/v1/embeddings?x=1")
    'http://localhost:8000/v1/embeddings'
    """
    parts = urlsplit(url)
    return f"{parts.scheme}://{url_host(url)}{parts.path}"


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine or a private network, where servers often need no key.

    Local means: ``localhost``, a loopback or private IP address, or a single-label host name
    (``gpu-node-3``), as used for vLLM / TEI / Infinity servers on a cluster.

    >>> [is_local_url(u) for u in ("http://localhost:8000/v1", "http://127.0.0.1/v1", "http://10.1.2.3/v1")]
    [True, True, True]
    >>> [is_local_url(u) for u in ("http://gpu-node-3:8000/v1", "https://api.openai.com/v1")]
    [True, False]
    """
    host = (urlsplit(url).hostname or "").lower()
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost") or "." not in host and ":" not in host:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def check_base_url(url: str, *, provider: str) -> str:
    """``url`` without surrounding blanks and trailing slashes; ``UsageError`` unless it is an http(s) URL with a host.

    >>> check_base_url(" http://localhost:8000/v1/ ", provider="chat")
    'http://localhost:8000/v1'
    >>> check_base_url("localhost:8000", provider="chat")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: chat: base URL 'localhost:8000' is not an http(s) URL with a host; e.g. https://api.openai.com/v1 or http://localhost:8000/v1
    """
    cleaned = (url or "").strip().rstrip("/")
    parts = urlsplit(cleaned)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = safe_url(cleaned) if parts.hostname else cleaned.rsplit("@", 1)[-1]
        raise UsageError(f"{provider}: base URL {shown!r} is not an http(s) URL with a host; "
                         "e.g. https://api.openai.com/v1 or http://localhost:8000/v1")
    return cleaned


def resolve_key(base_url: str, *, provider: str, key: str | None = None, env: str | None = None) -> Secret:
    """The API key for ``base_url``: ``key`` when given, else the value of the variable ``env`` (``$OPENAI_API_KEY``
    when ``None``), else none for a local server (``is_local_url``); else ``MissingResourceError`` (exit 4).

    ``env`` must be a variable's NAME: a value that is not one (a key pasted in its place) is a ``UsageError`` that
    does not show it.

    >>> resolve_key("http://localhost:8000/v1", provider="chat", env="R2MED_NO_SUCH_VARIABLE")
    Secret('')
    >>> resolve_key("https://api.example.com/v1", provider="chat", key="sk-1").reveal()
    'sk-1'
    """
    env = ENV_OPENAI_API_KEY if env is None else env
    if not _ENV_NAME.match(env):
        raise UsageError(f"{provider}: the API key variable must be the NAME of an environment variable (e.g. "
                         f"{ENV_OPENAI_API_KEY}); the value given is not a variable name and is not shown")
    secret = Secret(key or get_secret(env))
    if not secret and not is_local_url(base_url):
        raise MissingResourceError(f"{provider}: no API key for {safe_url(base_url)}: set the environment variable "
                                   f"{env} (or name another variable with --api-key-env)")
    return secret
