"""System paths: the name a result folder gives its system (``gar/hyde/gpt4/nv``), as the leaderboard
and the comparisons read it.
"""

from __future__ import annotations

from pathlib import Path

from r2med.reporting.official import official_tree_path

#: The first folder of each kind of system path and the number of folders such a path has.
_SHAPES = {"base retriever": (2,), "gar": (4,), "reranker": (3, 4), "fusion": (2,), "agent": (4,)}


def system_path(folder: Path, root: Path) -> str:
    """The system path of a result folder: from its deepest ``base retriever``/``gar``/``reranker``/``fusion``
    level that has the right depth, else its path below ``root`` (``root``'s name when equal).

    >>> system_path(Path("/r/results/gar/hyde/gpt4/nv"), Path("/r/results"))
    'gar/hyde/gpt4/nv'
    >>> system_path(Path("/r/results/reranker/mono/top_10"), Path("/r"))
    'reranker/monobert/nv/top_10'
    >>> system_path(Path("/r/results/fusion/bm25+minilm"), Path("/r"))
    'fusion/bm25+minilm'
    >>> system_path(Path("/r/runs/mine"), Path("/r/runs")), system_path(Path("/r/runs"), Path("/r/runs"))
    ('mine', 'runs')
    """
    parts = Path(folder).absolute().parts
    for start in range(len(parts) - 1, -1, -1):
        if len(parts) - start in _SHAPES.get(parts[start], ()):
            return official_tree_path(parts[start:])
    relative = Path(folder).absolute().relative_to(Path(root).absolute())
    return relative.as_posix() if relative.parts else Path(root).absolute().name
