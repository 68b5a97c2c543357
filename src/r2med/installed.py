"""How this r2med was installed, and so the ``pip`` command that adds one of its extras: the one place every install
hint (``MissingExtraError``) comes from.

``pip install "r2med[serve]"`` works only where r2med came from a package index. From a source checkout (the
README's ``pip install -e .``) pip would look for ``r2med`` on the index and fail (``No matching distribution found
for r2med``); there the extra comes from the checkout itself. What pip recorded (PEP 610's ``direct_url.json`` in
the installed distribution) says which:

============================================  =====================================================
installed from                                the command
============================================  =====================================================
an index (a wheel or sdist, no record)        ``pip install "r2med[X]"``
a checkout, editable (``pip install -e``)     ``pip install -e "<checkout>[X]"``
a checkout, not editable (``pip install .``)  ``pip install "<checkout>[X]"``
a VCS URL (``git+https://...``)               ``pip install "r2med[X] @ git+https://...@<commit>"``
an archive (a wheel or sdist file, a URL)     ``pip install "r2med[X] @ <its URL>"``
============================================  =====================================================

r2med imported from a checkout's ``src/`` (``PYTHONPATH=src``, or an editable install) is that checkout, whatever
pip recorded for another copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["install_command", "install_command_for"]

#: this package's folder (``.../src/r2med`` in a checkout, ``.../site-packages/r2med`` in an install)
PACKAGE_DIR = Path(__file__).resolve().parent


def install_command_for(extra: str, *, checkout: Path | str | None = None,
                        direct_url: dict[str, Any] | None = None) -> str:
    """The ``pip`` command that installs ``extra`` for an r2med imported from ``checkout`` (a source tree, or None)
    and installed as ``direct_url`` says (PEP 610's ``direct_url.json``, None when pip recorded none: an index).

    >>> install_command_for("serve")
    'pip install "r2med[serve]"'
    >>> install_command_for("serve", checkout="/home/me/r2med")
    'pip install -e "/home/me/r2med[serve]"'
    >>> install_command_for("dense", direct_url={"url": "file:///opt/r2med", "dir_info": {"editable": True}})
    'pip install -e "/opt/r2med[dense]"'
    >>> install_command_for("dense", direct_url={"url": "file:///opt/my%20r2med", "dir_info": {}})
    'pip install "/opt/my r2med[dense]"'
    >>> install_command_for("llm", direct_url={"url": "https://github.com/o/r2med.git",
    ...                                        "vcs_info": {"vcs": "git", "commit_id": "0e0c6ea"}})
    'pip install "r2med[llm] @ git+https://github.com/o/r2med.git@0e0c6ea"'
    >>> install_command_for("report", direct_url={"url": "file:///w/r2med-0.1.0-py3-none-any.whl", "archive_info": {}})
    'pip install "r2med[report] @ file:///w/r2med-0.1.0-py3-none-any.whl"'
    """
    if checkout is not None:
        return f'pip install -e "{checkout}[{extra}]"'
    if not direct_url or "url" not in direct_url:
        return f'pip install "r2med[{extra}]"'
    url = str(direct_url["url"])
    if "dir_info" in direct_url:
        parts = urlsplit(url)
        folder = unquote(parts.path) if parts.scheme == "file" else url
        editable = "-e " if (direct_url.get("dir_info") or {}).get("editable") else ""
        return f'pip install {editable}"{folder}[{extra}]"'
    if "vcs_info" in direct_url:
        vcs = direct_url["vcs_info"]
        commit = f"@{vcs['commit_id']}" if vcs.get("commit_id") else ""
        return f'pip install "r2med[{extra}] @ {vcs.get("vcs", "git")}+{url}{commit}"'
    return f'pip install "r2med[{extra}] @ {url}"'


def source_checkout(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The checkout r2med is imported from (``<checkout>/src/r2med`` beside a ``pyproject.toml`` that names r2med),
    or None (an installed copy)."""
    if package_dir.parent.name != "src":
        return None
    pyproject = package_dir.parent.parent / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    return pyproject.parent if 'name = "r2med"' in text else None


def recorded_direct_url(distribution: Any = None) -> dict[str, Any] | None:
    """What pip recorded of where the installed r2med came from (``direct_url.json``), or None (none recorded, or
    r2med not installed)."""
    try:
        if distribution is None:
            from importlib import metadata

            distribution = metadata.distribution("r2med")
        text = distribution.read_text("direct_url.json")
        found = json.loads(text) if text else None
    except Exception:  # noqa: BLE001 (not installed, unreadable or malformed: the index's command is the best guess)
        return None
    return found if isinstance(found, dict) else None


def install_command(extra: str) -> str:
    """The ``pip`` command that installs ``extra`` for this r2med, as it was installed (see the module docstring)."""
    checkout = source_checkout()
    return install_command_for(extra, checkout=checkout, direct_url=None if checkout else recorded_direct_url())
