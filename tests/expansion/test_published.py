"""Finding, downloading and reading expansion files (query_with_hydoc.jsonl)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import DATA, shared_path
from r2med.datasets import load_dir
from r2med.datasets.catalog import get_spec
from r2med.datasets.hub import cache_dir
from r2med.errors import InvalidInputError, MissingResourceError, UsageError
from r2med.expansion.published import (
    EXPANSION_FILE,
    find_expansions,
    load_expansions,
    local_expansions,
    parse_expansion_spec,
    read_expansions,
)
from r2med.settings import get_settings
from r2med.store.expansions import expansion_dir


def _write(path: Path, rows: list[object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_authors_sample_reads_as_published():
    path = shared_path("samples", "Biology-demo", "hyde", "qwen-7b", EXPANSION_FILE)
    exp = read_expansions(path, method="hyde", llm="qwen-7b")
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert list(exp.hy_docs) == [str(r["id"]) for r in raw]
    assert [exp.hy_docs[str(r["id"])] for r in raw] == [r["hy_doc"] for r in raw]
    assert [exp.texts[str(r["id"])] for r in raw] == [r["text"] for r in raw]
    assert exp.spec == "hyde/qwen-7b" and len(exp) == len(raw) and len(exp.sha256) == 64


def test_bad_lines_are_all_reported_with_file_and_line(tmp_path):
    path = _write(tmp_path / EXPANSION_FILE, [
        {"id": "q1", "text": "t", "hy_doc": "fine"},
        {"id": "q2", "text": "t", "hy_doc": None},
        "{not json",
        {"id": "q3", "text": 5, "hy_doc": "x"},
        {"text": "no id", "hy_doc": "x"},
        [1, 2],
    ])
    with pytest.raises(InvalidInputError) as info:
        read_expansions(path, method="hyde", llm="x")
    problems = "\n".join(info.value.problems)
    assert f"{path}:2" in problems and '"hy_doc" must be a string, got NoneType None' in problems
    assert f"{path}:3" in problems and "malformed JSON" in problems
    assert f"{path}:4" in problems and '"text" must be a string, got int' in problems
    assert f"{path}:5" in problems
    assert f"{path}:6" in problems and "expected a JSON object" in problems
    assert info.value.exit_code == 5


def test_repeated_ids_keep_the_last_row_and_int_ids_become_strings(tmp_path):
    path = _write(tmp_path / EXPANSION_FILE, [{"id": 1, "hy_doc": "a"}, {"id": "1", "hy_doc": "b"}, {"id": 2, "hy_doc": ""}])
    exp = read_expansions(path, method="hyde", llm="x")
    assert exp.hy_docs == {"1": "b", "2": ""} and exp.texts == {}


def test_spec_parsing():
    assert parse_expansion_spec("search-r1/qwen-7b-ins") == ("search-r1", "qwen-7b-ins")
    for bad in ("hyde", "hyde/gpt4/bm25", "../x/y", "hyde/ "):
        with pytest.raises(UsageError, match="expected METHOD/LLM"):
            parse_expansion_spec(bad)


@pytest.fixture
def tiny(tmp_path) -> Path:
    folder = tmp_path / "Biology"
    shutil.copytree(DATA / "tiny", folder)
    return folder


def test_search_order_dataset_dir_then_generated(tiny):
    settings = get_settings()
    dataset = load_dir(tiny, "Biology")
    generated = _write(expansion_dir(settings, "Biology", "hyde", "m") / EXPANSION_FILE, [{"id": "q1", "hy_doc": "gen"}])
    assert find_expansions(dataset, "hyde", "m") == generated
    local = _write(tiny / "hyde" / "m" / EXPANSION_FILE, [{"id": "q1", "hy_doc": "local"}])
    assert find_expansions(dataset, "hyde", "m") == local  # the dataset's own directory wins, as in the official code
    assert load_expansions(dataset, "hyde", "m").hy_docs == {"q1": "local"}
    assert local_expansions(tiny) == [("hyde", "m", local)]


def test_missing_offline_names_the_places_and_what_exists(tiny):
    _write(tiny / "lamer" / "gpt4" / EXPANSION_FILE, [{"id": "q1", "hy_doc": "x"}])
    dataset = load_dir(tiny, "Biology")
    with pytest.raises(MissingResourceError) as info:
        find_expansions(dataset, "hyde", "gpt4")
    message = str(info.value)
    assert str(tiny / "hyde" / "gpt4" / EXPANSION_FILE) in message
    assert "Available here: lamer/gpt4" in message
    assert "r2med expand --method hyde --llm-name gpt4" in message
    assert "HF_HUB_OFFLINE is set" in message  # the hub was the last place and is off


def test_an_r2med_dataset_fetches_the_published_file_from_the_hub(tiny, monkeypatch):
    import huggingface_hub

    calls = []

    def fake(repo_id, filename, *, repo_type, revision, local_dir, token=None, **kw):
        calls.append((repo_id, filename, repo_type, revision))
        return str(_write(Path(local_dir) / filename, [{"id": "q1", "text": "what lowers a fever", "hy_doc": "hub"}]))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    settings = get_settings()
    dataset = load_dir(tiny, "Biology")
    spec = get_spec("Biology")
    path = find_expansions(dataset, "hyde", "o3-mini", settings=settings)
    assert calls == [("R2MED/Biology", "hyde/o3-mini/query_with_hydoc.jsonl", "dataset", spec.revision)]
    assert path == cache_dir(spec, settings) / "hyde" / "o3-mini" / EXPANSION_FILE
    assert read_expansions(path, method="hyde", llm="o3-mini").hy_docs == {"q1": "hub"}


def test_datasets_expansions_lists_local_generated_and_says_why_not_the_hub(cli, tiny):
    _write(tiny / "hyde" / "gpt4" / EXPANSION_FILE, [{"id": "q1", "hy_doc": "x"}])
    _write(expansion_dir(get_settings(), "Biology", "lamer", "qwen-7b") / EXPANSION_FILE, [{"id": "q1", "hy_doc": "y"}])
    result = cli("datasets", "expansions", "--data-dir", tiny)
    assert result.code == 0, result.err
    assert result.out.splitlines()[2:] == [
        "| Biology | hyde/gpt4     | dataset   |",
        "| Biology | lamer/qwen-7b | generated |",
    ]
    assert "Biology: hub not listed: HF_HUB_OFFLINE is set" in result.err
    local = cli("datasets", "expansions", "--data-dir", tiny, "--local", "--json")
    assert local.json()["Biology"] == {
        "expansions": [{"method": "hyde", "llm": "gpt4", "where": "dataset"},
                       {"method": "lamer", "llm": "qwen-7b", "where": "generated"}],
        "hub": None,
    }


def test_hub_listing_finds_every_published_file(monkeypatch):
    from r2med.expansion import published

    files = ["corpus.jsonl", "hyde/o3-mini/query_with_hydoc.jsonl", "query2doc/gpt4/query_with_hydoc.jsonl",
             "hyde/o3-mini/README.md", "search-r1/qwen-7b-ins/query_with_hydoc.jsonl"]
    monkeypatch.setattr("r2med.datasets.hub.list_files", lambda spec, settings, **kw: files)
    assert published.hub_expansions("Biology") == [("hyde", "o3-mini"), ("query2doc", "gpt4"), ("search-r1", "qwen-7b-ins")]
