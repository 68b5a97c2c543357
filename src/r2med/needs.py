"""What running a component needs beyond r2med itself: a GPU-sized model, an API key, an LLM server, hub access.

Each component declares its own needs beside its description (a zoo model from its size and backend, a retriever
family, a reranker kind, a GAR expansion source), so ``r2med reproduce --list`` and ``--dry-run`` say what a
system needs without loading or contacting anything.

>>> Need.of("api-key", "OPENAI_API_KEY").text
'an API key ($OPENAI_API_KEY)'
>>> model_size("7.9B"), model_size("2x110M"), model_size(None)
(7900000000.0, 220000000.0, None)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: kind -> what it means (the order in which a plan lists them)
NEED_KINDS = {
    "gpu": "a GPU-sized model (1B parameters or more; a GPU with enough memory for it)",
    "model": "a small model (runs on a CPU)",
    "api-key": "an API key",
    "llm-server": "an OpenAI-compatible LLM server (vLLM, SGLang, llama.cpp) or a hosted API",
    "hub": "Hugging Face hub access (or the files already on this machine)",
    "download": "a download from a URL (cached and checksummed)",
}
#: from this many parameters on, a model is listed as GPU-sized
GPU_PARAMS = 1e9
_SIZE = re.compile(r"^(?:(\d+)x)?(\d+(?:\.\d+)?)([MB])$")


@dataclass(frozen=True, order=True)
class Need:
    """One thing a component needs: its ``kind`` (a key of :data:`NEED_KINDS`) and what exactly (``detail``)."""

    kind: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in NEED_KINDS:
            raise ValueError(f"need kind {self.kind!r} is not one of: {', '.join(NEED_KINDS)}")

    @classmethod
    def of(cls, kind: str, detail: str = "") -> Need:
        return cls(kind, detail)

    @property
    def text(self) -> str:
        head = NEED_KINDS[self.kind].split(" (")[0]
        detail = f"${self.detail}" if self.kind == "api-key" and self.detail.isupper() else self.detail
        return f"{head} ({detail})" if detail else head

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}


def model_size(params: str | None) -> float | None:
    """Parameters of a zoo model's declared size (``110M``, ``7B``, ``2x110M``); None when not declared."""
    if not params:
        return None
    match = _SIZE.match(params.strip())
    if match is None:
        return None
    count, number, unit = match.groups()
    return int(count or 1) * float(number) * (1e6 if unit == "M" else 1e9)


def merged(*groups: tuple[Need, ...]) -> tuple[Need, ...]:
    """The needs of several components, each once, in the order of :data:`NEED_KINDS` (then as given).

    >>> [n.kind for n in merged((Need("hub", "x"), Need("gpu", "m")), (Need("hub", "x"),))]
    ['gpu', 'hub']
    """
    seen: dict[Need, int] = {}
    for group in groups:
        for need in group:
            seen.setdefault(need, len(seen))
    order = list(NEED_KINDS)
    return tuple(sorted(seen, key=lambda n: (order.index(n.kind), seen[n])))
