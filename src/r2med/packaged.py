"""r2med's package data (``r2med/data``: the dataset catalog, prompts, model zoo, published results), read by path.

``importlib.resources`` would import its adapters, readers and ``zipfile`` into every command (13 ms of
``r2med run``'s start-up) to reach files that sit beside this module in every install (pip unpacks wheels);
it is used only when they do not (r2med imported from a zip archive).

>>> import json
>>> json.loads(read_text("datasets.json"))["tasks"][0]["name"]
'Biology'
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR", "read_text"]

#: the folder of r2med's package data
DATA_DIR = Path(__file__).resolve().with_name("data")


def read_text(name: str) -> str:
    """The text (UTF-8) of the package data file ``name`` (a path under ``r2med/data``, ``/``-separated)."""
    try:
        return (DATA_DIR / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        if DATA_DIR.is_dir():  # a file r2med does not ship
            raise
    from importlib import resources  # imported from a zip archive: no folder on disk

    return resources.files("r2med").joinpath("data", *name.split("/")).read_text(encoding="utf-8")
