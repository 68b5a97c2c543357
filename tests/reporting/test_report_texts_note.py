"""The report's body-system note says what is true (issue 38, finding 6): without --data-dir the report finds a
dataset's files through the results' manifests (as its drill-down does), so the note names the query file it read,
not "pass --data-dir"."""

from __future__ import annotations

import html
import json

import pytest


def test_without_data_dir_the_body_system_note_names_the_folder_the_manifest_records(cli, tmp_path, monkeypatch,
                                                                                   isolated_home):
    pytest.importorskip("jinja2", reason="the report needs the report extra")
    pytest.importorskip("matplotlib", reason="the report needs the report extra")
    monkeypatch.chdir(tmp_path)
    assert cli("datasets", "sample", "r2med-sample").code == 0
    assert cli("-q", "run", "--data-dir", "r2med-sample", "--output", "res").code == 0
    done = cli("-q", "report", "res", "-o", "page.html", "--n-resamples", "100", "--json")
    assert done.code == 0, done.err
    folder = tmp_path / "r2med-sample" / "scifact-sample"  # what the manifest records: absolute
    note = f"scifact-sample: no query in {folder} has a 'body_system'"
    page = html.unescape((tmp_path / "page.html").read_text(encoding="utf-8"))
    assert f"by body system: not shown: no query of the datasets shown carries a body system ('body_system' in the " \
           f"query file): {note}" in page
    assert "pass --data-dir" not in page
    assert "pass --data-dir" not in " ".join(json.loads(done.out)["warnings"])
