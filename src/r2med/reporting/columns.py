"""Which columns a table shows: the datasets the results hold, and groups of them (a :class:`Breakdown`).

Any collection is a dataset here, not only R2MED's eight: a result file ``<Dataset>.json`` names its
dataset by its stem (``scifact.json`` -> ``scifact``); R2MED's datasets are also known by the authors'
old names (``Stack-Biology.json`` -> ``Biology``). Tables list R2MED's datasets first, in the paper's
order, then the others alphabetically (:func:`order_datasets`).

What a table shows (:func:`choose_datasets`): by default every dataset the results hold, except the
files of other collections that the official repository's results/ tree keeps beside some systems
(``BEIR_NFCorpus.json``, :func:`r2med.reporting.official.official_tree_extras`); asked for by name
(``--tasks``), exactly those, where ``r2med`` stands for the eight and ``all`` for everything held.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from r2med.datasets.catalog import catalog, dataset_names
from r2med.errors import UsageError
from r2med.io.names import RESERVED_SUFFIXES
from r2med.reporting.official import official_tree_extras

#: ``--tasks`` words: R2MED's eight, and every dataset the results hold
R2MED_GROUP = "r2med"
ALL = "all"


def dataset_of(stem: str, recorded: object = None) -> str | None:
    """The dataset of a result file ``<stem>.json`` (``recorded``: its ``dataset_name``): an R2MED dataset's public
    name, else the stem itself; ``None`` for the files r2med writes beside a result (``x.manifest``) or hidden ones.

    >>> dataset_of("Stack-Biology"), dataset_of("run1", "PMCPatients"), dataset_of("scifact"), dataset_of("x.manifest")
    ('Biology', 'PMC-Clinical', 'scifact', None)
    """
    for candidate in (stem, recorded):
        if isinstance(candidate, str) and candidate in catalog():
            return catalog().canonical(candidate)
    if stem.startswith(".") or stem.lower().endswith(RESERVED_SUFFIXES):
        return None
    return stem


def order_datasets(names: Iterable[str]) -> list[str]:
    """R2MED's datasets in the paper's order, then the others alphabetically (case-insensitive).

    >>> order_datasets(["scifact", "PMC-Clinical", "NFCorpus", "Biology"])
    ['Biology', 'PMC-Clinical', 'NFCorpus', 'scifact']
    """
    have = set(names)
    r2med = dataset_names()
    return [n for n in r2med if n in have] + sorted((n for n in have if n not in r2med), key=lambda n: (n.casefold(), n))


def _one(name: str, held: Sequence[str]) -> list[str]:
    word = name.strip()
    if word.lower() == R2MED_GROUP:
        return dataset_names()
    if word.lower() == ALL:
        return list(held)
    if word in catalog():
        return [catalog().canonical(word)]
    if word in held:
        return [word]
    folded = [h for h in held if h.casefold() == word.casefold()]
    if len(folded) == 1:
        return folded
    choices = list(held) + dataset_names()
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UsageError(f"no result holds a dataset '{name}'{hint} Datasets in these results: "
                     f"{', '.join(held) or 'none'}; also accepted: R2MED's names, '{R2MED_GROUP}' (all 8), '{ALL}'")


def choose_datasets(held: Iterable[str], wanted: Sequence[str] | None = None) -> list[str]:
    """The datasets a table shows, in :func:`order_datasets` order.

    ``wanted`` empty or ``None``: every held dataset but the official tree's other collections (kept when
    they are all there is). Else the names asked for (R2MED's old names too), ``r2med`` = the eight,
    ``all`` = every held dataset; a name that is neither R2MED's nor held is a UsageError with a suggestion.

    >>> choose_datasets(["scifact", "Biology", "BEIR_NFCorpus"])
    ['Biology', 'scifact']
    >>> choose_datasets(["scifact", "BEIR_NFCorpus"], ["all"]), choose_datasets(["scifact"], ["stack-biology"])
    (['BEIR_NFCorpus', 'scifact'], ['Biology'])
    >>> choose_datasets(["scifact"], ["scifakt"])
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: no result holds a dataset 'scifakt'; did you mean 'scifact'? Datasets in these results: scifact; also accepted: R2MED's names, 'r2med' (all 8), 'all'
    """
    held = order_datasets(held)
    if not wanted:
        usual = [name for name in held if name not in official_tree_extras()]
        return usual or held
    return order_datasets(name for word in wanted for name in _one(word, held))


def average_label(shown: Sequence[str]) -> str:
    """The average column's header: ``Avg`` over R2MED's eight (the paper's average), else how many it averages.

    >>> average_label(dataset_names()), average_label(["scifact", "nfcorpus"]), average_label(["Biology"])
    ('Avg', 'Avg (2 datasets)', 'Avg (1 dataset)')
    """
    if list(shown) == dataset_names():
        return "Avg"
    return f"Avg ({len(shown)} dataset{'' if len(shown) == 1 else 's'})"


@dataclass(frozen=True)
class Breakdown:
    """A table's value columns grouped otherwise than by dataset (``by``: ``task`` or ``body-system``).

    ``values``: (system path, source) of each row -> column -> value (0-1); a row or column missing has none.
    ``legend``: what the columns mean, printed under the table.
    """

    by: str
    columns: tuple[str, ...]
    values: Mapping[tuple[str, str], Mapping[str, float]]
    legend: str
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
