"""What each extra installs (issue 38, finding 10): Playwright, a browser driver for the report's test, is in the test
extra only, and nothing r2med runs imports it."""

from __future__ import annotations

import re
import sys

from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_playwright_is_a_test_tool_not_a_report_dependency():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert _names(extras["report"]) == {"jinja2", "matplotlib"}
    assert [name for name, needs in extras.items() if "playwright" in _names(needs)] == ["test"]
    importing = [str(p.relative_to(REPO)) for p in (REPO / "src" / "r2med").rglob("*.py")
                 if re.search(r"^\s*(import|from)\s+playwright", p.read_text(encoding="utf-8"), flags=re.M)]
    assert importing == []
