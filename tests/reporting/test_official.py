"""The published numbers as package data: complete, addressable by official path, read in both key styles."""

from __future__ import annotations

import json

import pytest
from reporting_helpers import PROTOCOL_AVERAGES, package_results

from conftest import shared_path
from r2med.datasets.catalog import dataset_names
from r2med.errors import UsageError
from r2med.reporting.official import (
    display_name,
    is_published,
    normalise_metric,
    published,
    published_paths,
    published_systems,
)


def test_package_data_is_the_shared_reference_verbatim():
    reference = json.loads(shared_path("protocol", "official_results.json").read_text())["results"]
    assert package_results() == reference


def test_all_71_systems_with_8_datasets_each():
    systems = published_systems()
    assert len(systems) == 71 and len(set(published_paths())) == 71
    for system in systems:
        assert set(system.scores) == set(dataset_names()), system.path
        assert len(system.values("ndcg_at_10")) == 8, system.path  # NDCG@10-style files read too


@pytest.mark.parametrize("retriever,average", sorted(PROTOCOL_AVERAGES.items()))
def test_base_retriever_averages_are_the_protocols(retriever, average):
    values = published(f"base retriever/{retriever}").values("ndcg_at_10")
    assert f"{100 * sum(values.values()) / 8:.2f}" == f"{average:.2f}"


def test_protocol_lists_these_averages():
    text = shared_path("PROTOCOL.md").read_text()
    for label in ("BM25 15.13", "Contriever 11.76", "MedCPT 7.87", "NV-Embed-v2 31.43", "GritLM 31.12"):
        assert label in text


def test_both_key_styles_give_the_same_keys():
    # gar/hyde/gpt4/bm25 is stored with NDCG@10-style keys; Biology's value from the official file is 0.57342
    hyde = published("gar/hyde/gpt4/bm25")
    assert hyde.values("ndcg_at_10")["Biology"] == 0.57342
    assert hyde.values("NDCG@10") == hyde.values("ndcg_at_10")
    assert hyde.values("precision_at_10")["Biology"] == 0.21845  # P@10
    assert normalise_metric("Recall@100") == "recall_at_100"


def test_paths_aliases_names_and_notes():
    assert published("reranker/mono/top_10").path == "reranker/monobert/nv/top_10"
    assert published("reranker/llama/top_10").path == "reranker/rankllama/nv/top_10"
    assert is_published("gar/hyde/gpt4/nv") and not is_published("gar/hyde/gpt5/nv")
    assert display_name("base retriever/openai") == "text-embedding-3-large"
    assert "9.02" in published("base retriever/medcpt").note
    with pytest.raises(UsageError, match="did you mean 'base retriever/bm25'"):
        published("base retriever/bm52")
