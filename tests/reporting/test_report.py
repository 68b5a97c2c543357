"""r2med report: one self-contained page; tables, plots and drill-down; data text shown, never run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from reporting_helpers import REPORTING, run

from r2med.datasets.local import load_dir
from r2med.evaluation import evaluate
from r2med.store.results import SystemPath, write_result
from r2med.types import Run

pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')

DATASETS = REPORTING / "datasets"
EVIL = "<img src=x onerror=alert(5)>"  # a system name that is markup (a folder name cannot hold '/')
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two systems on the tiny Biology set, written by the store as 'r2med run' does.

    Per query nDCG@10 (trec_eval gains = grades):
      A (gar/hyde/gpt4/bm25): q1 d1,d3,d2 -> (1 + 1/log2 4) / (1 + 1/log2 3) = 0.91972; q2, q3, q4 perfect = 1.
      B: q1 d4,d3,d1 -> 0.5 / 1.63093 = 0.30657; q2 d3(0),d6(1) -> (1/log2 3) / (2 + 1/log2 3) = 0.23981;
         q3 d4,d5 -> 1/log2 3 = 0.63093; q4 = 1.
    Means 0.97993 and 0.54433, difference 0.43560; wins/ties/losses 3/1/0.
    """
    out = tmp_path_factory.mktemp("report") / "results"
    dataset = load_dir(DATASETS / "Biology", "Biology")
    runs = {
        SystemPath.gar("hyde", "gpt4", "bm25"): Run({"q1": {"d1": 3.0, "d3": 2.0, "d2": 1.0}, "q2": {"d7": 2.0, "d6": 1.5, "d3": 1.0},
                                                     "q3": {"d5": 1.0, "d4": 0.5}, "q4": {"d8": 1.0}}),
        SystemPath.base(EVIL): Run({"q1": {"d4": 3.0, "d3": 2.0, "d1": 1.0}, "q2": {"d3": 2.0, "d6": 1.5},
                                    "q3": {"d4": 1.0, "d5": 0.5}, "q4": {"d8": 1.0}}),
    }
    for where, ranking in runs.items():
        write_result(out, where, "Biology", evaluate(dataset.qrels, ranking), ranking, seconds=1.0)
    return out


@pytest.fixture(scope="module")
def page_html(results, tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "report.html"
    result = run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 500)
    assert result.code == 0, result.err
    assert result.out.strip() == str(path)
    return path


def test_page_is_self_contained_and_escaped(page_html):
    html = page_html.read_text(encoding="utf-8")
    assert "<script" not in html.lower() and "<img" not in html.lower()  # no markup from data, no script of ours
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # document d3, as text
    assert "&lt;/details&gt;&lt;script&gt;alert(3)&lt;/script&gt;" in html  # the expansion of q2, as text
    assert "&lt;img src=x onerror=alert(5)&gt;" in html  # the system's name, in tables and in the SVG plots
    # nothing is fetched: every src/href/url() is a reference inside the page (the SVGs' "#id" links); the SVG
    # namespace URL is a name, not a request
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']?([^"' >]*)|url\(([^)]*)\)""", html.replace("&lt;img src=x", ""))
    assert refs and all((a or b).startswith("#") for a, b in refs)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_tables_plots_and_drilldown_content(page_html):
    html = page_html.read_text(encoding="utf-8")
    assert html.count("<svg") == 2  # leaderboard bars and the per-query win/loss plot
    assert '<td class="num best">97.99</td>' in html and "<td class=\"num\">54.43</td>" in html
    assert "<td>+43.56</td>" in html and "<td>3/1/0</td>" in html
    # exact randomization test: q4 ties, the other 3 differences are positive: 2 of 8 sign patterns (x2 for q4's
    # irrelevant sign) reach the observed mean -> p = 4/16
    assert "<td>0.2500</td>" in html
    assert "Why are insects attracted to light?" in html and "2 of 2 relevant in the top 10" in html
    assert "Insects such as moths orient by the moon; &lt;b&gt;lamps&lt;/b&gt; confuse them." in html  # expansion
    assert "no expansion: the query was used as it is" in html  # the base retriever
    assert '<td class="rel">\u2713 1</td>' in html and '<td class="nonrel">\u2717</td>' in html  # q2's d3 graded 0
    assert '<td class="unjudged">?</td>' in html  # q1's d3 is not judged
    queries = re.findall(r"<summary>(q\d)", html)
    assert queries == ["q2", "q1", "q3", "q4"]  # by |A - B|: 0.76019, 0.61315, 0.36907, 0


QUERY_BLOCK = re.compile(r'<details class="query" id="q-\d+">.*?\n</details>', re.DOTALL)


@pytest.fixture(scope="module")
def split_html(results, tmp_path_factory):
    """The same report with its drill-down on a page of its own (more than 2 queries: --inline-queries 2)."""
    path = tmp_path_factory.mktemp("split") / "report.html"
    result = run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 500, "--inline-queries", 2)
    assert result.code == 0, result.err
    return path


def test_a_large_drilldown_is_a_page_per_dataset_with_the_same_content(page_html, split_html):
    """Issue 38, finding 8: R2MED's 876 queries made one 11 MB page. Past --inline-queries the texts and documents
    move to one page per dataset (read when opened); the report keeps every per-query value, each linking to its
    query. What the reader can reach is the same: every query block is the one the single page holds."""
    inline, split = page_html.read_text(encoding="utf-8"), split_html.read_text(encoding="utf-8")
    drill = split_html.parent / "report_files" / "drill-1-Biology.html"
    assert sorted(p.name for p in drill.parent.iterdir()) == ["drill-1-Biology.html"]
    page = drill.read_text(encoding="utf-8")
    assert QUERY_BLOCK.findall(page) == QUERY_BLOCK.findall(inline) and len(QUERY_BLOCK.findall(inline)) == 4
    assert QUERY_BLOCK.findall(split) == [] and "Why are insects attracted to light?" not in split
    assert split[:split.index('<h2 id="drilldown-section">')] == inline[:inline.index('<h2 id="drilldown-section">')]
    # the index: each query (by |A - B|) with both systems' values, A - B, and a link to its block on the page
    rows = re.findall(r'<tr><td><a href="report_files/drill-1-Biology.html#q-(\d)">(q\d)</a></td>'
                      r'<td class="num">([\d.]+)</td><td class="num">([\d.]+)</td><td class="num (?:pos|neg|)">'
                      r"([-+\d.]+)</td></tr>", split)
    assert rows == [("1", "q2", "100.00", "23.98", "+76.02"), ("2", "q1", "91.97", "30.66", "+61.31"),
                    ("3", "q3", "100.00", "63.09", "+36.91"), ("4", "q4", "100.00", "100.00", "+0.00")]
    for number, qid, *_ in rows:
        assert re.search(rf'<details class="query" id="q-{number}">\n<summary>{qid} ', page)
    # the page stands alone as the report does: no script, nothing fetched, a link back
    assert "<script" not in page.lower() and "default-src 'none'" in page
    assert '<a href="../report.html#drill-1">../report.html</a>' in page


def test_the_json_summary_lists_the_drilldown_pages(results, tmp_path):
    import json

    path = tmp_path / "r.html"
    split = run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 50, "--inline-queries", 3,
                "--json")
    assert split.code == 0 and json.loads(split.out)["drill_pages"] == [str(tmp_path / "r_files" / "drill-1-Biology.html")]
    inline = run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 50, "--json")
    assert inline.code == 0 and json.loads(inline.out)["drill_pages"] == []


def test_a_smaller_report_removes_the_drilldown_pages_of_an_earlier_one(results, tmp_path):
    path = tmp_path / "r.html"
    assert run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 50, "--inline-queries", 1).code == 0
    folder = tmp_path / "r_files"
    (folder / "mine.txt").write_text("a file of the user's")
    assert sorted(p.name for p in folder.iterdir()) == ["drill-1-Biology.html", "mine.txt"]
    assert run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 50).code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"] and len(QUERY_BLOCK.findall(path.read_text())) == 4
    (folder / "mine.txt").unlink()
    assert run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 50, "--inline-queries", 1).code == 0
    assert run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 50).code == 0
    assert not folder.exists()


def test_split_report_in_headless_chromium(split_html):
    """The report of a large drill-down in a browser: the index's link opens the dataset's page, whose query blocks
    open as on the single page; nothing runs, nothing but the two pages is read."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (run .ci/install-browser)")
    sync_api = pytest.importorskip("playwright.sync_api", reason='Playwright is not installed (pip install "r2med[report]")')
    url = split_html.as_uri()
    drill = (split_html.parent / "report_files" / "drill-1-Biology.html").as_uri()
    with sync_api.sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            dialogs, requests = [], []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.route("**/*", lambda route: (requests.append(route.request.url),
                                              route.continue_() if route.request.url in (url, drill) else route.abort()))
            page.goto(url)
            page.wait_for_load_state("load")
            assert page.locator("table.drill-index tbody tr").count() == 4
            assert page.locator("details.query").count() == 0
            page.locator("table.drill-index a").nth(1).click()  # q1, the second by |A - B|
            page.wait_for_load_state("load")
            assert page.url == drill + "#q-2"
            assert page.locator("details.query").count() == 4
            page.locator("details.query").first.locator("summary").first.click()  # q2: its documents
            doc = page.locator("details.query").first.locator("td.doc", has_text="<script>alert(1)</script>").first
            assert doc.is_visible() and doc.inner_text().startswith("<script>alert(1)</script> A document")
            assert page.evaluate("document.scripts.length") == 0
            assert dialogs == [] and requests == [url, drill]
        finally:
            browser.close()


def _two_systems(out: Path, first: Run) -> Path:
    dataset = load_dir(DATASETS / "Biology", "Biology")
    second = Run({"q1": {"d1": 1.0}, "q2": {"d3": 1.0}, "q3": {"d5": 1.0}, "q4": {"d8": 1.0}})
    for where, ranking in ((SystemPath.base("one"), first), (SystemPath.base("two"), second)):
        write_result(out, where, "Biology", evaluate(dataset.qrels, ranking), ranking, seconds=1.0)
    return out


def test_documents_missing_from_the_corpus_are_warned_about_and_named(tmp_path, caplog):
    # runs made on another collection: their documents' text columns would be empty without a word
    results = _two_systems(tmp_path / "res", Run({"q1": {"d1": 2.0, "d99": 1.0}, "q2": {"x7": 1.0},
                                                  "q3": {"d5": 1.0}, "q4": {"d8": 1.0}}))
    path = tmp_path / "r.html"
    done = run("report", results, "-o", path, "--data-dir", DATASETS, "--n-resamples", 100)
    assert done.code == 0, done.err
    said = (f"2 documents of the runs are not in the corpus of Biology ({DATASETS / 'Biology'}), so their text is "
            "empty (e.g. d99, x7); is --data-dir the collection the runs searched?")
    assert said in path.read_text(encoding="utf-8")
    assert f"Biology: {said}" in [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_dataset_that_cannot_be_read_is_warned_about_and_named(tmp_path, caplog):
    results = _two_systems(tmp_path / "res", Run({"q1": {"d1": 1.0}, "q2": {"d6": 1.0}, "q3": {"d4": 1.0},
                                                  "q4": {"d8": 1.0}}))
    broken = tmp_path / "data" / "Biology"
    shutil.copytree(DATASETS / "Biology", broken)
    (broken / "corpus.jsonl").write_text("{not json\n", encoding="utf-8")
    path = tmp_path / "r.html"
    done = run("report", results, "-o", path, "--data-dir", broken.parent, "--n-resamples", 100)
    assert done.code == 0, done.err
    assert "drill-down not available: " in path.read_text(encoding="utf-8")
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(m.startswith("Biology: drill-down not available: ") and "corpus.jsonl" in m for m in warned)


def test_without_datasets_the_runs_are_still_shown(results, tmp_path, caplog):
    path = tmp_path / "r.html"
    done = run("report", results, "-o", path, "--n-resamples", 100, "--a", f"base retriever/{EVIL}")
    assert done.code == 0
    html = path.read_text(encoding="utf-8")
    assert "texts and judgements not shown" in html and "r2med datasets download Biology" in html
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(m.startswith("Biology: texts and judgements not shown") for m in warned)  # said on the terminal too
    assert "A = <b>base retriever/&lt;img" in html and "<td>-43.56</td>" in html  # A and B swapped by --a
    bad = run("report", results, "-o", tmp_path / "x.html", "--a", "base retriever/nope")
    assert bad.code == 2 and "not in the result directory" in bad.err and not (tmp_path / "x.html").exists()


def _launch(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def test_report_in_headless_chromium(page_html, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (run .ci/install-browser)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (the test extra)")
    url = page_html.as_uri()
    with sync_api.sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            dialogs, requests = [], []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.route("**/*", lambda route: (requests.append(route.request.url),
                                              route.continue_() if route.request.url == url else route.abort()))
            page.goto(url)
            page.wait_for_load_state("load")
            assert page.locator("#leaderboard tbody tr").count() == 2
            assert page.locator("#leaderboard tbody tr").first.locator("td").nth(4).inner_text() == "97.99"
            assert page.locator("#comparison tbody tr").count() == 2  # Biology and the pooled row
            for plot in ("#leaderboard-bars svg", "#win-loss svg"):
                box = page.locator(plot).bounding_box()
                assert box and box["width"] > 100 and box["height"] > 100, plot
            assert page.evaluate("document.scripts.length") == 0
            page.locator("details.query summary").first.click()  # q2: its documents and expansion
            doc = page.locator("details.query").first.locator("td.doc", has_text="<script>alert(1)</script>").first
            assert doc.is_visible() and doc.inner_text().startswith("<script>alert(1)</script> A document")
            assert page.get_by_text(EVIL).first.is_visible()
            page.wait_for_timeout(200)
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
            assert dialogs == [] and requests == [url]  # nothing ran, nothing else was fetched
            # the check can fail: the same browser does report a script that runs
            control = browser.new_page()
            control.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            control.set_content("<p>x</p><script>alert(1)</script>")
            assert dialogs == ["1"]
        finally:
            browser.close()
    keep = shutil.copy(shot, page_html.parent / "report.png")
    assert Path(keep).exists()
