"""Package attributes imported on first use: a package's ``__init__`` names what it offers without importing it.

A command pays for every module it imports, on every run (``r2med run`` with BM25 must not load the agent loop, the
LLM rerankers' prompts or the fusion methods because their packages are imported for one name). A package lists its
public names and the submodule that defines each; :func:`lazy_exports` gives it the module-level ``__getattr__``
(PEP 562) that imports that submodule when a name is first read, and a ``__dir__`` that lists every name.
``__all__`` stays the true list of exports: ``from package import *`` and ``dir(package)`` see every name, and
``tests/test_lazy_exports.py`` checks that each resolves.

>>> getattr_, dir_ = lazy_exports("r2med.io", {"Digest": "r2med.io.digest"})
>>> getattr_("Digest").__name__, "Digest" in dir_()
('Digest', True)
>>> getattr_("Nothing")
Traceback (most recent call last):
...
AttributeError: module 'r2med.io' has no attribute 'Nothing'
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package ``package`` (its ``__name__``): ``exports`` maps each lazily
    imported name to the module that defines it. A name once read is kept in the package's namespace, so the next
    read is a plain attribute lookup."""
    table = dict(exports)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
