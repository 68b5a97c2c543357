"""The generation prompts of R2MED's GAR methods (package data ``r2med/data/prompts.json``) and how they are filled.

Faithful to the official ``src/generate_hypothetical_doc.py``: prompts are filled with ``str.format(TEXT=...,
PASSAGE=...)`` (one pass, so braces or "{PASSAGE}" inside a query are left as they are); LameR's ``{PASSAGE}`` is
the top-10 first-stage passages, each ``"\\n[i]. "`` (i from 1) + its first 512 whitespace-separated words after
newlines became spaces; the chat is a system "You are a helpful assistant." (Sky-T1: its own system prompt) and
the filled prompt as the user turn.

>>> build_prompt("hyde", "Biology", "Why {do} moths fly to light?")
'Please write a passage to help answer the Biology post.\\nPost: Why {do} moths fly to light?\\nPassage: '
>>> format_passages(["first\\npassage", "second"])
'\\n[1]. first passage\\n[2]. second'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType

from r2med.errors import UsageError
from r2med.expansion.methods import GAR_METHODS, GarMethod, method_names
from r2med.packaged import read_text
from r2med.registry import Registry

#: The methods r2med has prompts for (those of the GAR method table with a prompt key).
METHODS = method_names(generated=True)

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

#: Sampling of the official generation script. API models (gpt-4o, DeepSeek-R1, o1-mini through an
#: OpenAI-compatible client): temperature 0.8, top_p 0.8, nothing else (no max_tokens, no seed).
#: Local models (vLLM ``SamplingParams(temperature=0.7, seed=42, max_tokens=10240)``): top_p left at vLLM's 1.0.
#: Verified against R2MED/R2MED src/generate_hypothetical_doc.py; it agrees with PROTOCOL.md. Read-only:
#: use ``sampling_params(kind)`` for a dict to change or serialise.
DEFAULT_SAMPLING: Mapping[str, Mapping[str, float | int]] = MappingProxyType({
    "api": MappingProxyType({"temperature": 0.8, "top_p": 0.8}),
    "local": MappingProxyType({"temperature": 0.7, "max_tokens": 10240, "seed": 42}),
})

#: The system prompt the official script gave Sky-T1-32B-Preview (``SkyAI_system_prompt`` in
#: R2MED/R2MED src/instrcution.py, MIT license; the "\n\n" inside is two real newlines, as in the original).
SKY_T1_SYSTEM_PROMPT = (
    "Your role as an assistant involves thoroughly exploring questions through a systematic long "
    "thinking process before providing the final precise and accurate solutions. This requires "
    "engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, "
    "backtracing, and iteration to develop well-considered thinking process. "
    "Please structure your response into two main sections: Thought and Solution. "
    "In the Thought section, detail your reasoning process using the specified format: "
    "<|begin_of_thought|> {thought with steps separated with '\n\n'} "
    "<|end_of_thought|> "
    "Each step should include detailed considerations such as analisying questions, summarizing "
    "relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining "
    "any errors, and revisiting previous steps. "
    "In the Solution section, based on various attempts, explorations, and reflections from the Thought "
    "section, systematically present the final solution that you deem correct. The solution should "
    "remain a logical, accurate, concise expression style and detail necessary step needed to reach the "
    "conclusion, formatted as follows: "
    "<|begin_of_solution|> "
    "{final formatted, precise, and clear solution} "
    "<|end_of_solution|> "
    "Now, try to solve the following question through the above guidelines:"
)


@lru_cache(maxsize=1)
def _prompts() -> dict[str, dict[str, str]]:
    raw = json.loads(read_text("prompts.json"))
    return raw["prompts"]


def _method_registry() -> Registry[GarMethod]:
    return Registry("GAR method", {name: GAR_METHODS[name] for name in METHODS})


def prompt_datasets(method: str) -> list[str]:
    """The dataset keys of ``method`` in prompts.json (the 8 public names).

    >>> len(prompt_datasets("lamer"))
    8
    """
    return list(_prompts()[str(_method_registry().get(method).prompt)])


def prompt_template(method: str, dataset: str) -> str:
    """The template of ``method`` for ``dataset`` (any name or alias the dataset catalog accepts, any case).

    >>> prompt_template("HyDE", "stack-biology")
    'Please write a passage to help answer the Biology post.\\nPost: {TEXT}\\nPassage: '
    """
    from r2med.datasets.catalog import get_spec

    gar = _method_registry().get(method)
    templates = _prompts()[str(gar.prompt)]
    try:
        spec = get_spec(dataset)
    except UsageError as exc:  # a collection outside R2MED: its prompts are another dataset's, chosen by the user
        unknown = str(exc).split(" Valid:")[0].rstrip(".")  # "unknown dataset 'x'" and the registry's "did you mean", if any
        raise UsageError(
            f"{unknown} (R2MED's {gar.name} prompts are written per R2MED dataset): for a collection outside R2MED, "
            "choose the dataset whose prompt suits it with --prompt-dataset NAME (prompt_dataset=NAME in Python), "
            f"one of {', '.join(templates)}"
        ) from None
    if spec.name not in templates:
        raise UsageError(f"no {gar.name} prompt for dataset {spec.name!r}; prompts exist for: {', '.join(templates)}")
    return templates[spec.name]


def prompt_sha256(method: str, dataset: str) -> str:
    """Hex SHA-256 of the template's UTF-8 text (an ingredient of generation cache keys).

    >>> len(prompt_sha256("hyde", "Biology"))
    64
    """
    return hashlib.sha256(prompt_template(method, dataset).encode("utf-8")).hexdigest()


def format_passages(passages: Sequence[str], *, max_words: int = 512, max_passages: int | None = 10) -> str:
    """LameR's ``{PASSAGE}``: the first ``max_passages`` passages, each ``"\\n[i]. "`` + its first ``max_words`` words.

    As the official ``cut_text``: newlines become spaces, the text is split on any whitespace and re-joined with
    single spaces (so runs of whitespace collapse even in short passages); numbering starts at 1; no separator
    other than the leading newline of each entry. ``max_passages=None`` keeps all.

    >>> format_passages(["a  b\\tc", "x\\ny z"], max_words=2)
    '\\n[1]. a b\\n[2]. x y'
    """
    if max_words < 1:
        raise UsageError(f"max_words must be at least 1, got {max_words}")
    chosen = passages if max_passages is None else passages[:max_passages]
    parts = []
    for number, text in enumerate(chosen, start=1):
        words = text.replace("\n", " ").split()[:max_words]
        parts.append(f"\n[{number}]. {' '.join(words)}")
    return "".join(parts)


def build_prompt(method: str, dataset: str, query: str, passages: Sequence[str] | None = None) -> str:
    """The filled prompt: ``{TEXT}`` = ``query``; for a first-stage method (lamer) ``{PASSAGE}`` = ``format_passages(passages)``.

    lamer requires ``passages`` (the first-stage ranking's texts, best first); hyde and query2doc reject them.

    >>> build_prompt("lamer", "MedQA-Diag", "Q?", ["P one"]).endswith("Exam: Q?\\n\\nPossible Relevant Passages: \\n[1]. P one")
    True
    """
    template = prompt_template(method, dataset)
    gar = _method_registry().get(method)
    if gar.first_stage:
        if passages is None:
            raise UsageError(f"{gar.name} needs the first-stage passages of each query (passages=[...], best first); "
                             "run a first-stage retriever (the authors used BM25) and pass its top-10 texts")
        if isinstance(passages, str):
            raise UsageError("passages must be a list of passage texts, not one string")
        return template.format(TEXT=query, PASSAGE=format_passages(passages))
    if passages is not None:
        only = " / ".join(method_names(generated=True, first_stage=True))
        raise UsageError(f"{gar.name} does not use first-stage passages; only {only} does (drop passages=...)")
    return template.format(TEXT=query)


def system_prompt_for(llm: str) -> str:
    """The system prompt the official script used for ``llm``: Sky-T1's own, otherwise "You are a helpful assistant."

    >>> system_prompt_for("qwen-7b")
    'You are a helpful assistant.'
    >>> system_prompt_for("NovaSky-AI/Sky-T1-32B-Preview").startswith("Your role as an assistant")
    True
    """
    from r2med.llm.reasoning import style_for_llm

    return SKY_T1_SYSTEM_PROMPT if style_for_llm(llm) == "sky-t1" else DEFAULT_SYSTEM_PROMPT


def chat_messages(prompt: str, *, system: str | None = DEFAULT_SYSTEM_PROMPT) -> list[dict[str, str]]:
    """OpenAI-style chat messages: the system turn (unless ``system`` is None) and the prompt as the user turn.

    >>> chat_messages("Hi")
    [{'role': 'system', 'content': 'You are a helpful assistant.'}, {'role': 'user', 'content': 'Hi'}]
    >>> chat_messages("Hi", system=None)
    [{'role': 'user', 'content': 'Hi'}]
    """
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": prompt})
    return messages


def sampling_params(kind: str) -> dict[str, float | int]:
    """A fresh copy of ``DEFAULT_SAMPLING[kind]`` ("api" or "local").

    >>> sampling_params("api")
    {'temperature': 0.8, 'top_p': 0.8}
    """
    if kind not in DEFAULT_SAMPLING:
        raise UsageError(f"unknown sampling kind {kind!r}; valid: {', '.join(DEFAULT_SAMPLING)}")
    return dict(DEFAULT_SAMPLING[kind])
