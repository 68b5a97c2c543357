"""The model zoo: every entry resolves, instruction keys and texts match the protocol, inference."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import DATA, REPO, shared_path
from r2med.datasets.catalog import dataset_names
from r2med.errors import MissingResourceError, UsageError
from r2med.retrievers.dense.zoo import (
    ModelSpec,
    get_model,
    model_names,
    model_registry,
    resolve_model,
)

PAPER = ["contriever", "medcpt", "inst-l", "inst-xl", "bge", "e5", "bmr-410m", "bmr-2b", "bmr-7b",
         "grit", "sfr", "nv", "openai", "voyage"]  # fmt: skip
REASONING = ["qwen3-embedding-0.6b", "qwen3-embedding-4b", "qwen3-embedding-8b", "reasonir-8b",
             "reason-embed-qwen3-8b", "bge-reasoner-embed", "diver-retriever-4b"]  # fmt: skip
TINY_BERT = DATA / "dense" / "tiny-bert"


def test_the_zoo_holds_the_paper_retrievers_the_authors_variant_and_reasoning_embedders():
    names = model_names()
    assert [n for n in names if n in PAPER] == PAPER  # the paper's order
    assert "medcpt-authors" in names
    assert set(REASONING) <= set(names)


@pytest.mark.parametrize("name", model_names())
def test_every_entry_resolves(name):
    spec = resolve_model(name)
    assert spec is get_model(name.upper())
    assert spec.name == name and spec.model
    for alias in spec.aliases:
        assert resolve_model(alias) is spec


def test_every_instruction_key_is_a_catalog_dataset():
    catalog = set(dataset_names())
    for name in model_names():
        spec = get_model(name)
        assert set(spec.query_instructions) <= catalog, name
        assert set(spec.document_instructions) <= catalog, name
        if spec.query_instructions:
            assert set(spec.query_instructions) == catalog, f"{name} lacks datasets"


def test_paper_instructions_equal_the_protocol_file():
    protocol = json.loads(shared_path("protocol", "instructions.json").read_text(encoding="utf-8"))["instructions"]
    for name in [*PAPER, "medcpt-authors"]:
        spec = get_model(name)
        expected = protocol["medcpt" if name == "medcpt-authors" else name]
        assert dict(spec.query_instructions) == expected["query"], name
        assert dict(spec.document_instructions) == expected["document"], name


def test_models_json_does_not_copy_instruction_strings():
    raw = (REPO / "src" / "r2med" / "data" / "models.json").read_text(encoding="utf-8")
    protocol = json.loads((REPO / "src" / "r2med" / "data" / "instructions.json").read_text(encoding="utf-8"))
    for tables in protocol["instructions"].values():
        for text in {*tables["query"].values(), *tables["document"].values()}:
            if len(text) > 12:
                assert json.dumps(text)[1:-1] not in raw, text


def test_paper_specs_as_the_authors_ran_them():
    contriever = get_model("contriever")
    assert (contriever.pooling, contriever.normalize, contriever.backend) == ("mean", False, "transformers")
    bge = get_model("bge")
    assert (bge.pooling, bge.query_max_length, bge.document_max_length) == ("cls", 512, 512)
    for name, length in {"bmr-410m": 512, "bmr-2b": 1024, "bmr-7b": 2048}.items():
        spec = get_model(name)
        assert (spec.pooling, spec.eos, spec.padding_side, spec.query_max_length) == ("last-bmr", "append", "left", length)
    for name in ("e5", "sfr"):
        assert (get_model(name).pooling, get_model(name).query_max_length) == ("last", 2048)
    grit = get_model("grit")
    assert (grit.backend, grit.query_max_length, grit.document_max_length) == ("gritlm", 512, 2048)
    assert not grit.prompt_in_pooling and grit.bidirectional
    assert (get_model("nv").backend, get_model("nv").query_max_length) == ("nv-embed", 4096)
    for name in ("inst-l", "inst-xl"):
        assert get_model(name).backend == "instructor" and not get_model(name).prompt_in_pooling
    assert {get_model(n).backend for n in ("openai", "voyage")} == {"api"}


def test_medcpt_towers_and_the_authors_bug():
    good, bug = get_model("medcpt"), get_model("medcpt-authors")
    assert good.model_for("query") == "ncbi/MedCPT-Query-Encoder"
    assert good.model_for("document") == "ncbi/MedCPT-Article-Encoder"
    assert bug.model_for("query") == bug.model_for("document") == "ncbi/MedCPT-Article-Encoder"
    assert good.document_pair and bug.document_pair
    assert resolve_model("medcpt-bug") is bug


def test_reasoning_embedders_use_their_published_formats():
    qwen = get_model("qwen3-embedding-4b")
    assert qwen.instruction("query", "Biology") == (
        "Instruct: Given a Biology post, retrieve relevant passages that help answer the post.\nQuery:"
    )
    assert qwen.instruction("document", "Biology") == ""
    assert (qwen.pooling, qwen.padding_side, qwen.eos) == ("last", "left", "ensure")
    reasonir = get_model("reasonir-8b")
    assert reasonir.instruction("query", "MedQA-Diag").startswith("<|user|>\nGiven a Medical Exam")
    assert reasonir.instruction("query", "MedQA-Diag").endswith("\n<|embed|>\n")
    assert reasonir.instruction("document", "MedQA-Diag") == "<|embed|>\n"
    assert reasonir.trust_remote_code and not reasonir.prompt_in_pooling
    assert get_model("reasonembed").instruction("query", "IIYi-Clinical").endswith("\nQuery: ")


def test_every_spec_has_a_known_backend_and_params_for_local_models():
    for name in model_names():
        spec = get_model(name)
        if spec.backend != "api":
            assert spec.params, name
            assert spec.pooling or spec.backend in ("nv-embed",), name


def test_unknown_name_lists_the_valid_ones_with_a_suggestion():
    with pytest.raises(UsageError) as info:
        resolve_model("contreiver")
    message = str(info.value)
    assert "did you mean 'contriever'?" in message and "medcpt-authors" in message
    assert info.value.exit_code == 2


def test_instruction_for_a_dataset_outside_the_table_falls_back(caplog):
    assert get_model("e5").instruction("query", "scifact") == ""
    assert "no query instruction" in caplog.text
    assert get_model("contriever").instruction("query", None) == ""


def test_spec_validation_names_the_bad_value():
    with pytest.raises(UsageError, match="pooling 'max'"):
        ModelSpec(name="x", model="x", backend="transformers", pooling="max")
    with pytest.raises(UsageError, match="backend 'onnx'"):
        ModelSpec(name="x", model="x", backend="onnx")
    with pytest.raises(UsageError, match="max length"):
        replace(get_model("bge"), query_max_length=0)


def test_local_transformers_directory_gets_mean_pooling_and_given_instructions():
    spec = resolve_model(TINY_BERT, query_instruction="query: ")
    assert (spec.backend, spec.pooling, spec.normalize, spec.name) == ("transformers", "mean", True, "tiny-bert")
    assert spec.instruction("query", "Biology") == spec.instruction("query", "anything") == "query: "
    assert spec.instruction("document", "Biology") == ""
    assert resolve_model(str(TINY_BERT), pooling="cls", max_length=32).pooling == "cls"


def test_local_sentence_transformers_directory(tmp_path):
    (tmp_path / "modules.json").write_text("[]", encoding="utf-8")
    spec = resolve_model(tmp_path)
    assert spec.backend == "sentence-transformers" and spec.pooling is None


def test_missing_or_unusable_local_paths_exit_4(tmp_path):
    with pytest.raises(MissingResourceError, match="does not exist") as info:
        resolve_model(tmp_path / "nowhere")
    assert info.value.exit_code == 4
    with pytest.raises(MissingResourceError, match="does not exist"):
        resolve_model("./no/such/model")
    with pytest.raises(MissingResourceError, match="neither modules.json"):
        resolve_model(tmp_path)


def test_hub_id_outside_the_zoo_offline_and_uncached_exits_4():
    with pytest.raises(MissingResourceError, match="HF_HUB_OFFLINE"):
        resolve_model("r2med-tests/no-such-model")


def test_zoo_overrides_and_instructions():
    spec = resolve_model("bge", query_instruction="", max_length=256)
    assert spec.instruction("query", "Biology") == "" and spec.query_max_length == spec.document_max_length == 256
    assert get_model("bge").instruction("query", "Biology") != ""  # the zoo itself is untouched


def test_registry_is_built_once():
    assert model_registry() is model_registry()


def test_importing_the_zoo_and_encoders_does_not_import_torch():
    code = (
        "import sys, r2med.retrievers.dense.zoo, r2med.retrievers.dense.encoders, r2med.retrievers.dense.pooling; "
        "print(any(m in sys.modules for m in ('torch', 'transformers', 'sentence_transformers')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def _fake_hub_cache(root, repo: str, files: dict[str, str], commit: str = "0123456789abcdef" * 2 + "01234567"):
    """A Hugging Face cache holding ``repo`` at ``commit`` with ``files`` (name -> text)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit, encoding="utf-8")
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, text in files.items():
        (snapshot / name).write_text(text, encoding="utf-8")
    return commit


def test_cached_hub_ids_resolve_offline_and_pin_their_commit(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from r2med.hf import model_fingerprint

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    commit = _fake_hub_cache(tmp_path, "r2med-tests/st-model", {"modules.json": "[]", "config.json": "{}"})
    _fake_hub_cache(tmp_path, "r2med-tests/plain-model", {"config.json": "{}"})
    st = resolve_model("r2med-tests/st-model")
    assert (st.backend, st.name) == ("sentence-transformers", "r2med-tests/st-model")
    plain = resolve_model("r2med-tests/plain-model")
    assert (plain.backend, plain.pooling) == ("transformers", "mean")
    assert model_fingerprint("r2med-tests/st-model", None) == commit
    assert model_fingerprint("r2med-tests/st-model", "v1.0") == "v1.0"
    assert model_fingerprint("r2med-tests/not-cached", None) is None
    assert model_fingerprint(str(TINY_BERT), None).startswith("dir:")


def test_every_model_that_runs_remote_code_pins_a_commit():
    """Remote code runs on this machine: a zoo entry with trust_remote_code loads one reviewed commit, never
    whatever the repo's main branch holds tomorrow."""
    import re

    remote = [get_model(name) for name in model_names() if get_model(name).trust_remote_code]
    assert sorted(spec.name for spec in remote) == ["grit", "nv", "reasonir-8b"]
    for spec in remote:
        for kind in ("query", "document"):
            revision = spec.revision_for(kind)
            assert isinstance(revision, str) and re.fullmatch(r"[0-9a-f]{40}", revision), (spec.name, kind, revision)
    assert {spec.name: spec.revision for spec in remote} == {
        "grit": "13f00a0e36500c80ce12870ea513846a066004af",
        "nv": "7604d305b621f14095a1aa23d351674c2859553a",
        "reasonir-8b": "c3d0690370ff4a8c3d3882d8dfa85c43650034fa",
    }
