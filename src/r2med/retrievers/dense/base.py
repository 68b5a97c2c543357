"""The encoder role shared by local models and embedding APIs.

An encoder turns texts into float32 vectors. It applies a model's instruction itself, because
how an instruction enters a model differs (prepended text for most, a prompt excluded from
pooling for Instructor), and it describes everything that changes its vectors in ``cache_key``
so embeddings can be cached by content, never by name alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

Kind = Literal["query", "document"]


@runtime_checkable
class Encoder(Protocol):
    """Texts -> ``(n, dim)`` float32 embeddings.

    ``encode`` must return rows in the order of ``texts``, apply ``instruction`` the way the model
    expects it (empty string: none), and respect ``kind`` where the model has separate query and
    document towers (MedCPT). ``cache_key(kind)`` returns a JSON-serialisable dict of everything
    besides text and instruction that determines the vectors (model id and revision, pooling, max
    length, dtype, normalisation, ...).

    Optional: an ``encode`` that also takes the keyword ``on_batch`` is called with a reporter, which it calls
    as ``on_batch(n)`` after each batch of ``n`` texts; the embedding cache then moves its progress bar per batch
    (without it, once per cache chunk). ``progress=True`` asks for the encoder's own bar; the cache passes False.
    """

    name: str

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
    ) -> np.ndarray: ...

    def cache_key(self, kind: Kind) -> dict[str, Any]: ...


def kind_label(kind: str) -> str:
    """What a bar over texts of ``kind`` is called.

    >>> kind_label("query"), kind_label("document")
    ('queries', 'documents')
    """
    return "queries" if kind == "query" else f"{kind}s"


def kind_unit(kind: str) -> str:
    """The unit of a bar over texts of ``kind`` (tqdm shows the rate as ``doc/s``, ``query/s``).

    >>> kind_unit("query"), kind_unit("document")
    ('query', 'doc')
    """
    return "query" if kind == "query" else "doc"


def keyword_names(function: Callable[..., Any]) -> set[str]:
    """The parameters ``function`` takes by name (``**kwargs`` alone names none: it may be handed on to a library
    that rejects an unknown keyword); empty for a callable without a signature.

    >>> keyword_names(lambda texts, *, kind, batch_size=8, **kwargs: None) == {"texts", "kind", "batch_size"}
    True
    """
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin or C-level callable without a signature
        return set()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
