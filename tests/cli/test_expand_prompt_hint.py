"""``r2med expand`` on a collection outside R2MED points to ``--prompt-dataset`` before loading or requesting anything."""

from __future__ import annotations

import shutil

import pytest

from conftest import DATA

BASE = ["expand", "-q", "--method", "hyde", "--llm-model", "m", "--base-url", "http://127.0.0.1:9/v1"]


@pytest.fixture
def scifact(tmp_path):
    folder = tmp_path / "scifact"
    shutil.copytree(DATA / "tiny", folder)
    return folder


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a dataset is loaded or an LLM request is made."""

    def forbidden(*args, **kwargs):
        raise AssertionError("nothing may be loaded or requested before the prompts are checked")

    monkeypatch.setattr("r2med.datasets.loading.load_dir", forbidden)
    monkeypatch.setattr("r2med.llm.client.ChatClient.complete_many", forbidden)


def test_a_collection_outside_r2med_is_told_to_pass_prompt_dataset(cli, scifact, no_loading):
    result = cli(*BASE, "--data-dir", scifact)
    assert result.code == 2
    assert result.err == (
        "r2med: error: unknown dataset 'scifact' (R2MED's hyde prompts are written per R2MED dataset): for a "
        "collection outside R2MED, choose the dataset whose prompt suits it with --prompt-dataset NAME "
        "(prompt_dataset=NAME in Python), one of Biology, Bioinformatics, Medical-Sciences, MedXpertQA-Exam, "
        "MedQA-Diag, PMC-Treatment, PMC-Clinical, IIYi-Clinical\n"
    )


def test_a_misspelt_prompt_dataset_names_the_option_and_a_suggestion(cli, scifact, no_loading):
    result = cli(*BASE, "--data-dir", scifact, "--prompt-dataset", "biolgy")
    assert result.code == 2
    assert result.err.startswith(
        "r2med: error: --prompt-dataset biolgy: unknown dataset 'biolgy'; did you mean 'Biology'?"
    )
