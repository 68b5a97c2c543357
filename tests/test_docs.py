"""The docs' Python examples run as written and print what the page shows; every link between pages resolves.

The Python blocks of a page run in order in one namespace from the repository root (so `tests/data/tiny` and
`../shared/data/scifact` resolve), with `/tmp/` pointed at a fresh folder; a block followed by a ```text block
must print exactly that text.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from conftest import REPO, shared_path

DOCS = REPO / "docs"


def examples(page: Path) -> list[tuple[str, str | None]]:
    """``(python code, the text block right after it or None)`` in page order."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [(code, blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None)
            for i, (language, code) in enumerate(blocks) if language == "python"]


def test_python_api_page_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("scipy")
    if not shared_path("data", "scifact").is_dir():
        pytest.skip("../shared is not beside the checkout")
    monkeypatch.chdir(REPO)
    namespace: dict = {}
    found = examples(DOCS / "python-api.md")
    assert len(found) >= 5
    for code, expected in found:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code.replace("/tmp/", f"{tmp_path}/"), "docs/python-api.md", "exec"), namespace)  # noqa: S102
        if expected is not None:
            assert out.getvalue() == expected.replace("/tmp/", f"{tmp_path}/"), code


def test_links_between_pages_resolve():
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_pipeline_file_runs_as_written(cli, tmp_path, monkeypatch):
    """docs/pipelines.md's TOML on the bundled sample (its optional blocks are comments): the table it shows."""
    pytest.importorskip("scipy")
    monkeypatch.chdir(tmp_path)
    [toml] = re.findall(r"```toml\n(.*?)```", (DOCS / "pipelines.md").read_text(encoding="utf-8"), flags=re.DOTALL)
    (tmp_path / "pipeline.toml").write_text(toml)
    assert cli("datasets", "sample", "r2med-sample").code == 0
    done = cli("run", "--config", "pipeline.toml")
    assert done.code == 0, done.err
    assert "| scifact-sample |               79.66 |                      79.34 |            80.19 |" in done.out
