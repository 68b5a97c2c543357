"""A spy for ``--dry-run`` tests (tests/test_plan.py puts this folder first on PYTHONPATH of a subprocess): every
socket connection raises, every open of a dataset file (corpus.jsonl, query.jsonl, qrels.jsonl) raises, and at exit
the process writes what it tried and which heavy modules it imported to ``$R2MED_SPY_OUT`` (JSON).

The spy arms itself only when ``$R2MED_SPY_OUT`` is set, and tests/conftest.py keeps pytest from collecting this
folder: ``--doctest-modules`` once imported this file into the test process itself and blocked every later test's
sockets and dataset files."""

import atexit
import builtins
import io
import json
import os
import socket
import sys

_out = os.environ.get("R2MED_SPY_OUT")
_tried = {"connect": [], "open": []}
_DATA = ("corpus.jsonl", "query.jsonl", "qrels.jsonl")


def _connect(self, address, *args, **kwargs):
    _tried["connect"].append(repr(address))
    raise OSError("sockets are blocked by the dry-run test")


_open = io.open


def _spy_open(file, *args, **kwargs):
    name = os.fspath(file) if isinstance(file, (str, bytes, os.PathLike)) else ""
    if isinstance(name, str) and name.endswith(_DATA):
        _tried["open"].append(name)
        raise PermissionError(f"the dry-run test forbids reading {name}")
    return _open(file, *args, **kwargs)


def _report():
    heavy = sorted(m for m in ("torch", "transformers", "sentence_transformers", "openai", "jinja2") if m in sys.modules)
    with _open(_out, "w", encoding="utf-8") as handle:
        json.dump({**_tried, "imported": heavy}, handle)


if _out:
    socket.socket.connect = _connect
    socket.socket.connect_ex = _connect
    socket.create_connection = lambda address, *a, **k: _connect(None, address)
    builtins.open = _spy_open
    io.open = _spy_open
    atexit.register(_report)
