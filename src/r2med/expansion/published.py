"""Expansion files (``query_with_hydoc.jsonl``): the authors' published ones and any generated one.

The official layout puts an LLM's expansions of a dataset at ``<dataset dir>/<method>/<llm>/query_with_hydoc.jsonl``,
one JSON object per query: ``{"id", "text", "hy_doc", ...}``. The authors published theirs in the same place of
each hub dataset repo (``hyde/o3-mini/...``), and ``r2med expand`` writes the same format under
``<R2MED_HOME>/expansions/<Dataset>/<method>/<llm>/`` (``r2med.store.expansions``). :func:`find_expansions` looks in those places in turn:

1. the dataset's own directory (``--data-dir`` or the hub cache), as the authors' code does;
2. the generated expansions under R2MED_HOME;
3. the hub repo of an R2MED dataset, downloaded at the pinned revision into the dataset's cache directory.

>>> parse_expansion_spec("hyde/o3-mini")
('hyde', 'o3-mini')
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from r2med.datasets.catalog import catalog
from r2med.datasets.model import Dataset
from r2med.errors import HubUnreachableError, InvalidInputError, MissingResourceError, UsageError
from r2med.expansion.methods import method_names
from r2med.io.names import check_name
from r2med.io.problems import Problems
from r2med.io.readers import HashingLines, coerce_id, iter_jsonl
from r2med.settings import Settings, get_settings
from r2med.store.expansions import EXPANSION_FILE, expansion_dir, expansions_root

logger = logging.getLogger(__name__)

#: the methods the authors published expansions for (configs of the hub datasets)
PUBLISHED_METHODS = method_names(published=True)
#: a part of ``--expansion METHOD/LLM``; ``@`` joins an agent's LLM and the searcher it used (``<llm>@<searcher>``:
#: ``r2med.store.expansions.agent_folder_name``)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@-]*$")


@dataclass(frozen=True)
class Expansions:
    """One LLM's expansions of one dataset's queries, as read from a ``query_with_hydoc.jsonl``.

    ``hy_docs`` holds the text exactly as stored (a reasoning model's whole output included);
    ``texts`` the query text stored beside it, which the authors' code used as the query.
    ``answered`` lists the queries whose row says its ``hy_doc`` is already an answer (``r2med expand``
    writes the chosen answer and its ``answer_policy``): those are not cut again.
    """

    method: str
    llm: str
    hy_docs: dict[str, str]
    texts: dict[str, str]
    path: Path
    sha256: str
    answered: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.hy_docs)

    @property
    def spec(self) -> str:
        return f"{self.method}/{self.llm}"


def parse_expansion_spec(text: str) -> tuple[str, str]:
    """``"<method>/<llm>"`` -> ``(method, llm)``; UsageError naming the expected form otherwise.

    >>> parse_expansion_spec("query2doc/qwen-72b/"), parse_expansion_spec("search-r1/qwen@server-10.0.0.5_80_retrieve")
    (('query2doc', 'qwen-72b'), ('search-r1', 'qwen@server-10.0.0.5_80_retrieve'))
    """
    parts = [p for p in str(text).strip().strip("/").split("/") if p]
    if len(parts) != 2 or not all(_NAME.match(p) for p in parts):
        raise UsageError(
            f"--expansion {text!r}: expected METHOD/LLM such as hyde/o3-mini or query2doc/gpt4 "
            f"(methods published by the authors: {', '.join(PUBLISHED_METHODS)})"
        )
    for part in parts:  # each names a folder: gar/<method>/<llm>/...
        check_name(part, what=f"--expansion {text!r}: the part")
    return parts[0], parts[1]


def read_expansions(path: Path, *, method: str, llm: str) -> Expansions:
    """Read and check one expansion file; InvalidInputError (exit 5) listing every bad line.

    Each line needs an ``id`` and a string ``hy_doc`` (an empty one is allowed here and caught when the
    query is composed); ``text`` is optional. A repeated id keeps its last row (counted as a warning).
    """
    path = Path(path)
    problems = Problems()
    lines = HashingLines(path, problems)
    hy_docs: dict[str, str] = {}
    texts: dict[str, str] = {}
    answered: set[str] = set()
    name = str(path)
    for number, row in iter_jsonl(lines):
        qid = coerce_id(row.get("id", row.get("_id")), field="id", path=name, line=number, problems=problems)
        hy_doc = row.get("hy_doc")
        if not isinstance(hy_doc, str):
            got = "missing" if "hy_doc" not in row else f"{type(hy_doc).__name__} {hy_doc!r:.40}"
            problems.error(name, number, f'"hy_doc" must be a string, got {got}; regenerate this query or remove the line')
            continue
        text = row.get("text")
        if text is not None and not isinstance(text, str):
            problems.error(name, number, f'"text" must be a string, got {type(text).__name__}')
            continue
        if qid is None:
            continue
        if qid in hy_docs:
            problems.count("duplicate-expansion", name, number, "rows repeat an earlier query id (the last row is used)")
        hy_docs[qid] = hy_doc
        if text is not None:
            texts[qid] = text
        if "answer_policy" in row:
            answered.add(qid)
    if not hy_docs and not problems.errors:
        problems.error(name, None, "no expansions in the file")
    if problems.errors:
        raise InvalidInputError(f"{path}: the expansions cannot be used ({len(problems.errors)} problems)", problems.errors)
    for warning in problems.warnings:
        logger.warning("%s: %s", path, warning)
    return Expansions(method=method, llm=llm, hy_docs=hy_docs, texts=texts, path=path, sha256=lines.sha256,
                      answered=frozenset(answered))


def local_expansions(root: Path) -> list[tuple[str, str, Path]]:
    """``(method, llm, file)`` for every ``<root>/<method>/<llm>/query_with_hydoc.jsonl``, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return [(p.parent.parent.name, p.parent.name, p) for p in sorted(root.glob(f"*/*/{EXPANSION_FILE}"))]


def hub_expansions(dataset: str, settings: Settings | None = None) -> list[tuple[str, str]]:
    """``(method, llm)`` of every expansion file in an R2MED dataset's hub repo (lists the repo: needs the network)."""
    from r2med.datasets.hub import list_files

    settings = settings or get_settings()
    found = []
    offline_way = "pass --local to list only the expansion files on this machine"
    for name in list_files(catalog().get(dataset), settings, offline_way=offline_way):
        parts = name.split("/")
        if len(parts) == 3 and parts[2] == EXPANSION_FILE:
            found.append((parts[0], parts[1]))
    return found


def _candidates(dataset: Dataset, method: str, llm: str, settings: Settings) -> list[Path]:
    return expansion_places(dataset.name, dataset.source, method, llm, settings)


def expansion_places(name: str, source: str | Path | None, method: str, llm: str, settings: Settings) -> list[Path]:
    """Where the expansion file of ``method``/``llm`` for the dataset ``name`` (in the directory ``source``, if any)
    is looked for, in order, before the hub (known from names alone: ``r2med.planning`` checks them before any work)."""
    places = []
    if source:
        places.append(Path(source) / method / llm / EXPANSION_FILE)
    places.append(expansion_dir(settings, name, method, llm) / EXPANSION_FILE)
    return places


def missing_expansions(name: str, places: list[Path], method: str, llm: str, hub_problem: str = "") -> MissingResourceError:
    """The error for no ``method``/``llm`` expansions of ``name`` in ``places``: every place searched, what is
    available there and how to make them."""
    available = sorted({f"{m}/{n}" for root in {p.parents[2] for p in places} for m, n, _ in local_expansions(root)})
    return MissingResourceError(
        f"no {method}/{llm} expansions for {name}: looked for "
        + ", ".join(str(p) for p in places)
        + f". Available here: {', '.join(available) or 'none'}. Generate them with "
        f"'r2med expand --method {method} --llm-name {llm} --llm-model MODEL --base-url URL --tasks {name}'"
        f", or put the file in one of those places.{hub_problem}"
    )


def find_expansions(dataset: Dataset, method: str, llm: str, *, settings: Settings | None = None) -> Path:
    """The expansion file of ``method``/``llm`` for ``dataset`` (see the module docstring for the search order).

    MissingResourceError (exit 4) names every place searched, what is available locally and how to get it.
    """
    settings = settings or get_settings()
    places = _candidates(dataset, method, llm, settings)
    for place in places:
        if place.is_file():
            return place
    if dataset.name in catalog():
        from r2med.datasets.hub import cache_dir, fetch_file

        spec = catalog().get(dataset.name)
        filename = f"{method}/{llm}/{EXPANSION_FILE}"
        offline_way = (f"generate them ('r2med expand --method {method} --llm-name {llm} ...'), or put the file at "
                       f"{places[-1]}")
        try:
            return fetch_file(spec, filename, cache_dir(spec, settings), settings, offline_way=offline_way)
        except HubUnreachableError as exc:
            raise HubUnreachableError(f"no {method}/{llm} expansions for {dataset.name} on this machine, and {exc}") from None
        except MissingResourceError as exc:
            hub_problem = f" The hub copy could not be fetched either: {exc}"
    else:
        hub_problem = ""
    raise missing_expansions(dataset.name, places, method, llm, hub_problem)


def load_expansions(dataset: Dataset, method: str, llm: str, *, settings: Settings | None = None) -> Expansions:
    """Find and read ``method``/``llm``'s expansions of ``dataset``."""
    return read_expansions(find_expansions(dataset, method, llm, settings=settings), method=method, llm=llm)


def available_expansions(
    name: str, folder: Path | None, *, settings: Settings | None = None, hub: bool = True
) -> tuple[list[tuple[str, str, str]], str | None]:
    """``(method, llm, where)`` of every expansion set for dataset ``name`` and why the hub was not listed.

    ``where`` is ``"dataset"`` (``folder``, the dataset's own directory), ``"generated"`` (``r2med expand``'s
    output under R2MED_HOME) or ``"hub"`` (the authors' published files, listed when ``hub`` and online).
    """
    settings = settings or get_settings()
    found: dict[tuple[str, str], str] = {}
    if folder is not None:
        for method, llm, _ in local_expansions(folder):
            found.setdefault((method, llm), "dataset")
    for method, llm, _ in local_expansions(expansions_root(settings, name)):
        found.setdefault((method, llm), "generated")
    problem = None
    if hub and name in catalog():
        try:
            for method, llm in hub_expansions(name, settings):
                found.setdefault((method, llm), "hub")
        except HubUnreachableError:
            raise  # not a quiet note: HF_HUB_OFFLINE unset, so the hub was asked for
        except MissingResourceError as exc:
            problem = str(exc)
    elif hub:
        problem = f"{name} is not an R2MED dataset: no hub repo to list"
    return [(m, n, w) for (m, n), w in sorted(found.items())], problem
