"""The architecture contract of pyproject.toml ([tool.importlinter]): no import cycles, layers respected."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _contracts() -> list[dict]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_contracts_cover_cycles_and_layers():
    kinds = {c["type"]: c for c in _contracts()}
    assert kinds["acyclic_siblings"]["ancestors"] == ["r2med"]
    layers = kinds["layers"]["layers"]
    # reproduce() runs a pipeline: the reproduction use case sits above it; a pipeline executes a plan
    assert layers[:5] == ["cli", "reproduction", "pipeline", "execution", "planning"]
    assert layers.index("config") == 5 and layers.index("stages") == 6


def test_import_linter_passes(capsys):
    pytest.importorskip("importlinter")
    import logging

    from importlinter.cli import lint_imports

    # import-linter configures logging (it disables existing loggers): restore them for the tests that follow
    before = {name: logger.disabled for name, logger in logging.Logger.manager.loggerDict.items()
              if isinstance(logger, logging.Logger)}
    try:
        code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    finally:
        for name, logger in logging.Logger.manager.loggerDict.items():
            if isinstance(logger, logging.Logger):
                logger.disabled = before.get(name, False)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Contracts: 2 kept, 0 broken." in out
