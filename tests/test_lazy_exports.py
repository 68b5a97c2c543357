"""Packages whose names load their modules on first use (``r2med.lazy``): every exported name resolves, ``dir`` lists
it, and importing the package alone imports none of the modules behind the names."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from r2med.lazy import lazy_exports

LAZY_PACKAGES = ["r2med.stages", "r2med.expansion", "r2med.rerankers", "r2med.llm", "r2med.reproduction"]


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_every_exported_name_resolves_and_is_listed(name):
    package = importlib.import_module(name)
    assert package.__all__ and len(set(package.__all__)) == len(package.__all__)
    for export in package.__all__:
        value = getattr(package, export)
        module = getattr(value, "__module__", None)
        if module is not None:  # a class or function: defined in the package, not somewhere else
            assert module.startswith(name + "."), (export, module)
    assert set(package.__all__) <= set(dir(package))
    namespace: dict = {}
    exec(f"from {name} import *", namespace)
    assert set(package.__all__) <= set(namespace)


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_an_unknown_name_is_an_attribute_error(name):
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'no_such_name'"):
        getattr(importlib.import_module(name), "no_such_name")


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_importing_the_package_imports_none_of_its_modules(name):
    code = f"import json, sys; import {name}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('{name}.'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == []


def test_a_name_is_imported_once_then_kept_in_the_package():
    import r2med.stages

    r2med.stages.__dict__.pop("Fuse", None)
    first = r2med.stages.Fuse
    assert r2med.stages.__dict__["Fuse"] is first is importlib.import_module("r2med.stages.fuse").Fuse


def test_lazy_exports_of_a_made_up_table():
    getattr_, dir_ = lazy_exports("r2med.io", {"Digest": "r2med.io.digest", "check_id": "r2med.io.ids"})
    from r2med.io.digest import Digest
    from r2med.io.ids import check_id

    assert getattr_("Digest") is Digest and getattr_("check_id") is check_id
    assert {"Digest", "check_id"} <= set(dir_())
    with pytest.raises(AttributeError, match="module 'r2med.io' has no attribute 'digest_of'"):
        getattr_("digest_of")
