"""Manifests beside every result, and resuming from them: same configuration and data -> reuse."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from r2med.manifest import config_sha256, read_manifest, scrub


def _run(cli, out, *extra):
    return cli("run", "--data-dir", DATA / "tiny", "--output", out, "--top-k", "3", "--json", *extra)


def test_manifest_records_what_made_the_result_and_no_secret(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-value")
    result = _run(cli, tmp_path)
    assert result.code == 0, result.err
    folder = tmp_path / "base retriever" / "bm25"
    manifest = read_manifest(folder / "tiny.json")
    text = (folder / "tiny.manifest.json").read_text()
    assert "sk-very-secret-value" not in text
    from r2med import __version__

    assert manifest["environment"]["r2med"] == __version__
    assert {"numpy", "scipy"} <= set(manifest["environment"]["packages"])
    assert manifest["system"] == "base retriever/bm25"
    assert manifest["config"]["retriever"] == {
        "retriever": "bm25", "variant": "r2med", "k1": 0.9, "b": 0.4,
        "analyzer": "pyserini-0.22.1-default-english/1", "ignore_identical_ids": False,
        # the declared options of the spec that built it (r2med.options): they key the result whatever describe() says
        "options": {"family": "bm25", "name": "bm25", "options": {"variant": "r2med", "k1": 0.9, "b": 0.4},
                    "identical_ids": None},
    }
    assert manifest["config"]["config_format"] == 3
    assert manifest["config"]["top_k"] == 3
    import hashlib

    corpus_sha = hashlib.sha256((DATA / "tiny" / "corpus.jsonl").read_bytes()).hexdigest()
    assert manifest["dataset"]["sha256"]["corpus.jsonl"] == corpus_sha
    assert manifest["config"]["dataset"]["sha256"]["corpus.jsonl"] == corpus_sha
    assert manifest["config_sha256"] == config_sha256(manifest["config"])
    assert set(manifest["timings_s"]) == {"search", "evaluate", "total"}


def test_a_second_run_reuses_the_stored_result_unless_something_changed(cli, tmp_path, monkeypatch):
    first = _run(cli, tmp_path)
    assert first.code == 0
    stored = (tmp_path / "base retriever" / "bm25" / "tiny.run").read_text()
    from r2med.retrievers.bm25.retriever import BM25Retriever

    calls = []
    original = BM25Retriever.retrieve

    def counting(self, dataset, *, top_k=100):
        calls.append(top_k)
        return original(self, dataset, top_k=top_k)

    monkeypatch.setattr(BM25Retriever, "retrieve", counting)
    again = cli("run", "--data-dir", DATA / "tiny", "--output", tmp_path, "--top-k", "3")
    assert again.code == 0 and calls == []
    assert "stored result reused" in again.err
    assert _run(cli, tmp_path).json() == first.json()
    assert (tmp_path / "base retriever" / "bm25" / "tiny.run").read_text() == stored
    # a different top k is a different configuration; --force recomputes the same one
    assert _run(cli, tmp_path, "--top-k", "2").code == 0 and calls == [2]
    assert _run(cli, tmp_path, "--top-k", "2", "--force").code == 0 and calls == [2, 2]
    # a result without its manifest (written by an older r2med, or interrupted) is recomputed
    (tmp_path / "base retriever" / "bm25" / "tiny.manifest.json").unlink()
    assert _run(cli, tmp_path, "--top-k", "2").code == 0 and calls == [2, 2, 2]


def test_changed_data_is_recomputed(cli, tmp_path, monkeypatch):
    import shutil

    data = tmp_path / "tiny"
    shutil.copytree(DATA / "tiny", data)
    out = tmp_path / "out"
    assert cli("run", "--data-dir", data, "--output", out, "-q").code == 0
    with (data / "corpus.jsonl").open("a") as handle:
        handle.write(json.dumps({"id": "d5", "text": "aspirin for fever"}) + "\n")
    changed = cli("run", "--data-dir", data, "--output", out)
    assert changed.code == 0 and "stored result reused" not in changed.err
    assert "d5" in (out / "base retriever" / "bm25" / "tiny.run").read_text()


@pytest.mark.parametrize("key", ["api_key", "OPENAI_API_KEY", "hf_token", "Authorization", "password"])
def test_scrub_drops_credentials(key):
    assert scrub({key: "x", "keep": [{"voyage_api_key": 1, "n": 2}]}) == {"keep": [{"n": 2}]}


def test_installed_versions_are_importlib_metadatas_for_every_installed_distribution():
    from importlib import metadata

    from r2med.manifest import installed_version

    names = {dist.metadata["Name"] for dist in metadata.distributions()}
    assert {"numpy", "scipy", "tqdm"} <= names
    assert {name: installed_version(name) for name in names} == {name: metadata.version(name) for name in names}


def test_installed_version_reads_the_first_metadata_header_along_sys_path(tmp_path, monkeypatch):
    from r2med.manifest import installed_version, package_versions

    first, second = tmp_path / "first", tmp_path / "second"
    for folder, version in ((first, "1.2.3"), (second, "9.9.9")):
        info = folder / "Sentence_Transformers-x.dist-info"
        info.mkdir(parents=True)
        # the header ends at the first blank line: a Version line in the description is not the version
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sentence-transformers\nVersion: {version}\n\n"
                                       "Version: 0.0.1 (in the description)\n")
    egg = second / "peft.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\r\nName: peft\r\nVersion: 0.10.0\r\n\r\nbody\r\n")
    (second / "tqdm-4.1.0-py3.11.egg-info").write_text("Metadata-Version: 1.1\nName: tqdm\nVersion:   4.1.0  \n")
    monkeypatch.setattr("sys.path", [str(tmp_path / "missing"), str(first), str(second)])
    assert installed_version("sentence-transformers") == "1.2.3"
    assert installed_version("Sentence.Transformers") == "1.2.3"
    assert installed_version("peft") == "0.10.0" and installed_version("tqdm") == "4.1.0"
    assert installed_version("numpy") is None
    assert package_versions() == {"sentence-transformers": "1.2.3", "peft": "0.10.0", "tqdm": "4.1.0"}
