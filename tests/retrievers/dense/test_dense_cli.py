"""The dense retriever through the CLI: models list, a local model directory, options, errors."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, SHARED


def test_models_list_shows_the_zoo_with_the_protocol_instructions(cli):
    result = cli("models", "list", "--json")
    assert result.code == 0
    rows = {row["name"]: row for row in result.json()}
    for name in ("contriever", "medcpt", "medcpt-authors", "inst-l", "inst-xl", "bge", "e5", "bmr-410m", "bmr-2b",
                 "bmr-7b", "grit", "sfr", "nv", "openai", "voyage", "qwen3-embedding-8b", "reasonir-8b"):
        assert name in rows
    protocol = SHARED / "protocol" / "instructions.json"
    if protocol.exists():
        instructions = json.loads(protocol.read_text())["instructions"]
        for name, table in instructions.items():
            for kind in ("query", "document"):
                for dataset, text in table[kind].items():
                    assert rows[name]["instructions"][dataset][kind] == text, (name, kind, dataset)
    text = cli("models", "list", "--instructions")
    assert text.code == 0 and "Represent the Biology post for retrieving relevant paragraphs: " in text.out


def test_unknown_model_is_a_usage_error(cli, tmp_path):
    result = cli("run", "--retriever", "contriver", "--data-dir", DATA / "tiny", "--output", tmp_path)
    assert result.code == 2 and "unknown retriever 'contriver'; did you mean 'contriever'?" in result.err
    assert "bm25, bm25-lucene, contriever, medcpt" in result.err
    missing = cli("run", "--retriever", str(tmp_path / "no-such-model"), "--data-dir", DATA / "tiny", "--output", tmp_path)
    assert missing.code == 4 and "does not exist" in missing.err


def test_local_model_directory_end_to_end(cli, tmp_path, isolated_home):
    pytest.importorskip("torch")
    model = DATA / "dense" / "tiny-bert"
    args = ("run", "--retriever", model, "--data-dir", DATA / "tiny", "--json", "--batch-size", "2", "--device", "cpu",
            "--query-instruction", "query: ", "--doc-instruction", "passage: ")
    first = cli(*args, "--output", tmp_path / "a")
    assert first.code == 0, first.err
    from r2med.retrievers.registry import system_name

    out = tmp_path / "a" / "base retriever" / system_name(str(model))  # tiny-bert-<8 hex of its path's sha256>
    assert out.name.startswith("tiny-bert-")
    assert (out / "tiny.json").is_file() and (out / "tiny.run").is_file()
    assert len(list((isolated_home / "embeddings").iterdir())) == 2  # documents and queries
    second = cli(*args, "--output", tmp_path / "b")
    assert second.json() == first.json()
    other = cli("run", "--retriever", model, "--data-dir", DATA / "tiny", "--json", "--output", tmp_path / "c", "--query-instruction", "q: ")
    assert other.code == 0
    assert len(list((isolated_home / "embeddings").iterdir())) == 4  # new instructions: new keys for both
