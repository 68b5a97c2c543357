"""Imported by the reader tests (tests/io, tests/datasets): each test of the module runs twice, with the JSON
readers' fast paths (msgspec: ``r2med.io.jsonsafe.loads`` and the whole-file read of ``r2med.io.readers.jsonl_rows``)
and with the standard json module alone, line by line, so that both read, accept and refuse exactly the same."""

import pytest

from r2med.io import jsonsafe, readers


@pytest.fixture(autouse=True, params=["msgspec", "json"])
def json_decoder(request, monkeypatch):
    if request.param == "json":
        monkeypatch.setattr(jsonsafe, "_FAST", None)
        monkeypatch.setattr(readers, "_fast_jsonl_rows", lambda lines: None)  # no whole-file read either
    else:
        assert jsonsafe._FAST is not None, "msgspec (a core dependency) is not installed"
    return request.param
