"""System paths: the name a result folder gives its system (``gar/hyde/gpt4/nv``), as the leaderboard
and the comparisons read it (the grammar is :class:`r2med.store.results.SystemPath`'s).
"""

from __future__ import annotations

from pathlib import Path

from r2med.reporting.official import official_tree
from r2med.store.results import SystemPath


def system_path(folder: Path, root: Path) -> str:
    """The system path of a result folder: the system path its path ends with (:meth:`SystemPath.ending`, the
    official results/ tree's spelling read as the published one), else its path below ``root`` (``root``'s name
    when equal).

    >>> system_path(Path("/r/results/gar/hyde/gpt4/nv"), Path("/r/results"))
    'gar/hyde/gpt4/nv'
    >>> system_path(Path("/r/results/reranker/mono/top_10"), Path("/r"))
    'reranker/monobert/nv/top_10'
    >>> system_path(Path("/r/results/fusion/bm25+minilm"), Path("/r"))
    'fusion/bm25+minilm'
    >>> system_path(Path("/r/runs/mine"), Path("/r/runs")), system_path(Path("/r/runs"), Path("/r/runs"))
    ('mine', 'runs')
    """
    where = SystemPath.ending(Path(folder).absolute(), tree=official_tree())
    if where is not None:
        return str(where)
    relative = Path(folder).absolute().relative_to(Path(root).absolute())
    return relative.as_posix() if relative.parts else Path(root).absolute().name
