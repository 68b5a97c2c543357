"""The encoder role shared by local models and embedding APIs.

An encoder turns texts into float32 vectors. It applies a model's instruction itself, because
how an instruction enters a model differs (prepended text for most, a prompt excluded from
pooling for Instructor), and it describes everything that changes its vectors in ``cache_key``
so embeddings can be cached by content, never by name alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

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
