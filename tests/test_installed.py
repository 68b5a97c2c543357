"""Install hints that work for how r2med was installed (issue 38, finding 1): one place, every MissingExtraError."""

from __future__ import annotations

import json
from importlib.metadata import PathDistribution

from conftest import REPO
from r2med.errors import MissingExtraError
from r2med.installed import install_command, recorded_direct_url, source_checkout


def _dist(tmp_path, direct_url: dict | None) -> PathDistribution:
    info = tmp_path / "r2med-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: r2med\nVersion: 0.1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return PathDistribution(info)


def test_a_checkout_gets_an_editable_install_of_itself_not_the_index():
    # the tests import r2med from this checkout's src/: the index has no r2med, the checkout has the extras
    assert source_checkout() == REPO
    assert install_command("serve") == f'pip install -e "{REPO}[serve]"'
    said = str(MissingExtraError("uvicorn", "serve", "r2med serve"))
    assert said == ("the Python package 'uvicorn' is needed for r2med serve but is not installed; "
                    f'install it with: pip install -e "{REPO}[serve]"')


def test_an_installed_copy_is_not_a_checkout(tmp_path):
    package = tmp_path / "site-packages" / "r2med"
    package.mkdir(parents=True)
    assert source_checkout(package) is None
    # a src/ folder of some other project is not r2med's checkout either
    other = tmp_path / "other" / "src" / "r2med"
    other.mkdir(parents=True)
    (tmp_path / "other" / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert source_checkout(other) is None


def test_what_pip_recorded_is_read_from_the_distribution(tmp_path):
    editable = {"url": "file:///home/me/r2med", "dir_info": {"editable": True}}
    assert recorded_direct_url(_dist(tmp_path / "a", editable)) == editable
    assert recorded_direct_url(_dist(tmp_path / "b", None)) is None  # a wheel from the index: nothing recorded
    broken = _dist(tmp_path / "c", None)
    (broken._path / "direct_url.json").write_text("{not json")
    assert recorded_direct_url(broken) is None
