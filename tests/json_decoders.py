"""Imported by the reader tests (tests/io, tests/datasets): each test of the module runs twice, with the JSON
readers' fast decoder (msgspec) and with the standard json module alone, so that both read, accept and refuse exactly the same (r2med.io.jsonsafe)."""

import pytest

from r2med.io import jsonsafe


@pytest.fixture(autouse=True, params=["msgspec", "json"])
def json_decoder(request, monkeypatch):
    if request.param == "json":
        monkeypatch.setattr(jsonsafe, "_FAST", None)
    else:
        assert jsonsafe._FAST is not None, "msgspec (a core dependency) is not installed"
    return request.param
