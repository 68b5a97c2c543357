"""The GAR methods: one row per method, everything the rest of r2med knows about a method.

A :class:`GarMethod` says how its expansions become the BM25 query and the dense query inputs (exactly as the
official R2MED evaluation composed them, see :mod:`r2med.expansion.compose`), which prompts generate it
(package data ``r2med/data/prompts.json``, see :mod:`r2med.expansion.prompts`), whether its prompt needs a
first-stage run (LameR: the top passages fill ``{PASSAGE}``) and whether the authors published its expansions
on the hub. Prompts, composition, generation, the published files and the retrievers read this table; adding a
method is one row in :data:`GAR_METHODS` (and its templates in prompts.json when r2med should generate it).

>>> gar_method("Query2doc").bm25("Why?", "Because.", False, True)
'Why?Why? Because.'
>>> [m.name for m in GAR_METHODS.values() if m.first_stage]
['lamer']
>>> gar_method("hyd")
Traceback (most recent call last):
...
r2med.errors.UsageError: unknown GAR method 'hyd'; did you mean 'hyde'? Valid: hyde, lamer, query2doc, search-o1, search-r1
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from r2med.errors import UsageError
from r2med.registry import Registry

#: ``(query, expansion, reasoning, glued) -> BM25 query text``. ``reasoning``: the expansion is a reasoning
#: model's answer (the official ``r1_mode``); ``glued``: the official composition (False: a corrected variant).
Bm25Rule = Callable[[str, str, bool, bool], str]
#: ``(query, expansion, reasoning) -> texts``: one text to embed as the query, or ``(query, expansion)`` whose two
#: embeddings the retriever averages (the query with the retriever's query instruction, the expansion without).
DenseRule = Callable[[str, str, bool], tuple[str, ...]]


def expansion_alone(query: str, expansion: str, reasoning: bool, glued: bool) -> str:
    """BM25: the expansion alone (HyDE; agentic methods, whose expansions are answers)."""
    return expansion


def query_then_expansion(query: str, expansion: str, reasoning: bool, glued: bool) -> str:
    """BM25: ``query + " " + expansion`` (LameR); a reasoning model's answer alone."""
    return expansion if reasoning else query + " " + expansion


def query_twice_then_expansion(query: str, expansion: str, reasoning: bool, glued: bool) -> str:
    """BM25: ``query * 2 + " " + expansion`` (Query2doc; the official code glued the two copies of the query without
    a space), ``query + " " + query + " " + expansion`` when not ``glued``; a reasoning model's answer alone."""
    if reasoning:
        return expansion
    return (query * 2 if glued else query + " " + query) + " " + expansion


def query_expansion_pair(query: str, expansion: str, reasoning: bool) -> tuple[str, ...]:
    """Dense: the pair ``(query, expansion)``, whose embeddings are averaged."""
    return (query, expansion)


def query_sep_expansion(query: str, expansion: str, reasoning: bool) -> tuple[str, ...]:
    """Dense: one text ``query + "[SEP]" + expansion`` (Query2doc); a reasoning model's answer: the pair."""
    return (query, expansion) if reasoning else (query + "[SEP]" + expansion,)


class Bm25Variant(NamedTuple):
    """A further named BM25 composition of a method (besides the official one, named after the method)."""

    name: str
    glued: bool
    description: str


@dataclass(frozen=True)
class Bm25Composition:
    """A named BM25 query composition: the GAR ``method`` and whether query2doc glues its two query copies."""

    name: str
    method: str
    glued: bool
    description: str


@dataclass(frozen=True)
class GarMethod:
    """One GAR method.

    ``bm25`` / ``dense``: how an expansion becomes the query (``bm25_description`` names the official BM25 rule,
    ``bm25_variants`` further named compositions such as the corrected ``query2doc-spaced``); ``prompt``: its key
    in prompts.json (None: r2med has no prompts for it and cannot generate it); ``first_stage``: its prompt takes
    the first-stage run's top passages (``{PASSAGE}``); ``published``: the authors published its expansions.
    """

    name: str
    bm25: Bm25Rule
    bm25_description: str
    dense: DenseRule
    prompt: str | None = None
    first_stage: bool = False
    published: bool = True
    bm25_variants: tuple[Bm25Variant, ...] = ()

    @property
    def generated(self) -> bool:
        """Whether r2med can generate this method's expansions (it has prompts)."""
        return self.prompt is not None

    def compositions(self) -> tuple[Bm25Composition, ...]:
        """The official BM25 composition (named after the method, glued) and the variants."""
        official = Bm25Composition(self.name, self.name, True, self.bm25_description)
        return (official, *(Bm25Composition(v.name, self.name, v.glued, v.description) for v in self.bm25_variants))


#: Every GAR method: the three generated ones (HyDE, Query2doc, LameR), then the agentic ones whose published
#: expansions are reasoning models' answers (composed as the answer alone for BM25, the pair for dense).
GAR_METHODS: Mapping[str, GarMethod] = MappingProxyType({m.name: m for m in (
    GarMethod("hyde", expansion_alone, "the expansion alone", query_expansion_pair, prompt="hyde"),
    GarMethod("query2doc", query_twice_then_expansion,
              'query + query + " " + expansion (official: copies glued without a space)', query_sep_expansion,
              prompt="query2doc",
              bm25_variants=(Bm25Variant("query2doc-spaced", False, 'query + " " + query + " " + expansion (corrected)'),)),
    GarMethod("lamer", query_then_expansion, 'query + " " + expansion', query_expansion_pair, prompt="lamer",
              first_stage=True),
    GarMethod("search-r1", expansion_alone, "the answer alone", query_expansion_pair),
    GarMethod("search-o1", expansion_alone, "the answer alone", query_expansion_pair),
)})


def gar_methods() -> Registry[GarMethod]:
    """The methods by name (case-insensitive, "did you mean" errors)."""
    return Registry("GAR method", GAR_METHODS)


def gar_method(name: str) -> GarMethod:
    """The method ``name``; UsageError with a suggestion and the valid names if unknown."""
    return gar_methods().get(name)


def method_names(*, generated: bool | None = None, published: bool | None = None, first_stage: bool | None = None) -> tuple[str, ...]:
    """Names of the methods (in table order) with the given properties (None: either).

    >>> method_names(generated=True), method_names(first_stage=True)
    (('hyde', 'query2doc', 'lamer'), ('lamer',))
    """
    return tuple(
        m.name for m in GAR_METHODS.values()
        if (generated is None or m.generated == generated)
        and (published is None or m.published == published)
        and (first_stage is None or m.first_stage == first_stage)
    )


def bm25_compositions() -> Mapping[str, Bm25Composition]:
    """Every named BM25 composition, in table order (each method's official one, then its variants)."""
    return MappingProxyType({c.name: c for m in GAR_METHODS.values() for c in m.compositions()})


def check_composition(name: str, expansion: str) -> None:
    """A BM25 composition is one method's (``query2doc-spaced`` is query2doc's): ``expansion`` (``METHOD/LLM``) of
    another method is a UsageError now, not after the first stages ran.

    >>> check_composition("query2doc-spaced", "hyde/o3-mini")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: --bm25-composition query2doc-spaced is for query2doc expansions, not hyde (--expansion hyde/o3-mini); drop it or use --expansion query2doc/LLM
    """
    found = bm25_compositions().get(name)
    method = expansion.partition("/")[0].strip().lower()
    if found is not None and found.method != method:
        raise UsageError(f"--bm25-composition {name} is for {found.method} expansions, not {method} "
                         f"(--expansion {expansion}); drop it or use --expansion {found.method}/LLM")
