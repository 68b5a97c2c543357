"""Reports read a stored result only when it matches its manifest; official files (no manifest) as they are."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import DATA
from r2med.errors import DamagedFileError
from r2med.reporting.compare import read_per_query


@pytest.fixture
def results(cli, tmp_path):
    shutil.copytree(DATA / "tiny", tmp_path / "data" / "Biology")
    out = tmp_path / "out"
    assert cli("run", "--data-dir", tmp_path / "data" / "Biology", "--output", out, "--no-cache", "-q").code == 0
    return out / "base retriever" / "bm25"


def test_a_leaderboard_refuses_a_result_json_its_manifest_does_not_describe(cli, results):
    assert cli("leaderboard", results.parent.parent).code == 0
    record = json.loads((results / "Biology.json").read_text())
    record["test"]["ndcg_at_10"] = 0.4321  # another run's numbers beside this manifest
    (results / "Biology.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    refused = cli("leaderboard", results.parent.parent)
    assert refused.code == 5 and "Biology.json: does not match" in refused.err and "43.21" not in refused.out
    (results / "Biology.manifest.json").unlink()  # no manifest: a plain (official-style) file, read as it is
    assert "43.21" in cli("leaderboard", results.parent.parent).out


def test_per_query_values_of_a_set_are_verified(results):
    path = results / "Biology.per_query.jsonl"
    assert set(read_per_query(path, "ndcg_at_10")) == {"q1", "q2"}
    path.write_text(path.read_text().replace('"q2"', '"q9"'))
    with pytest.raises(DamagedFileError, match=r"Biology\.per_query\.jsonl: does not match"):
        read_per_query(path, "ndcg_at_10")
