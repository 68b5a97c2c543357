"""Reranker names and where first-stage runs are found; no model is loaded here."""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys

import pytest

from r2med.errors import MissingResourceError, UsageError
from r2med.rerankers.options import ListwiseOptions
from r2med.rerankers.registry import make_reranker, reranker_registry, resolve_reranker
from r2med.stages.rerank import FirstStage, run_digest
from r2med.types import Run
import re
from r2med.installed import install_command


def test_the_papers_rerankers_as_the_authors_ran_them():
    # src/eval_reranker.py of R2MED: max_length 1024 for RankLLaMA, 512 otherwise; monoBERT ranked by logit 1
    bge, mono, llama = (resolve_reranker(n) for n in ("bge-reranker-v2-m3", "monobert", "rankllama"))
    assert (bge.model, bge.max_length, bge.folder) == ("BAAI/bge-reranker-v2-m3", 512, "bge-reranker")
    assert (mono.model, mono.max_length, mono.score_column, mono.folder) == (
        "castorini/monobert-large-msmarco", 512, 1, "monobert")
    assert (llama.model, llama.base_model, llama.max_length, llama.folder) == (
        "castorini/rankllama-v1-7b-lora-passage", "meta-llama/Llama-2-7b-hf", 1024, "rankllama")
    # the folders are the official results/reranker/<folder>/ names
    assert {s.folder for s in (bge, mono, llama)} == {"bge-reranker", "monobert", "rankllama"}
    assert [resolve_reranker(a).name for a in ("BGE-Reranker", "mono", "llama", "rankgpt")] == [
        "bge-reranker-v2-m3", "monobert", "rankllama", "listwise"]
    assert reranker_registry().names()[:4] == ["bge-reranker-v2-m3", "monobert", "rankllama", "listwise"]


def test_any_cross_encoder_by_path_or_hub_id(tmp_path):
    local = tmp_path / "my-ce"
    local.mkdir()
    digest = hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:8]  # two folders named alike differ
    assert (resolve_reranker(str(local)).kind, resolve_reranker(str(local)).folder) == ("cross-encoder", f"my-ce-{digest}")
    assert resolve_reranker("cross-encoder/ms-marco-MiniLM-L-6-v2").folder == "cross-encoder__ms-marco-MiniLM-L-6-v2"


def test_unknown_names_suggest():
    with pytest.raises(UsageError, match=r"unknown reranker 'rankllma'; did you mean 'rankllama'\? Valid: .*hub id"):
        resolve_reranker("rankllma")


def test_listwise_needs_an_llm_and_takes_its_name_into_the_folder():
    with pytest.raises(UsageError, match="--llm-model"):
        make_reranker("listwise", ListwiseOptions())
    reranker = make_reranker("listwise", ListwiseOptions(llm_model="Qwen/Qwen3-8B", base_url="http://localhost:9/v1",
                                                         with_scores=True, window=10, stride=5))
    assert reranker.name == "listwise-Qwen__Qwen3-8B+scores"
    assert (reranker.window, reranker.stride, reranker.cache) == (10, 5, None)
    with pytest.raises(UsageError, match="stride must be between 1 and the window"):
        make_reranker("listwise", ListwiseOptions(llm_model="m", base_url="http://localhost:9/v1", window=5, stride=6))


def test_first_stage_from_names_paths_directories_and_files(tmp_path):
    out = tmp_path / "results"
    assert FirstStage.resolve("nv", output=out) == FirstStage("nv", directory=out / "base retriever" / "nv")
    assert FirstStage.resolve("base retriever/bm25", output=out).system == "bm25"
    gar = FirstStage.resolve("gar/hyde/o3-mini/bm25", output=out)
    assert (gar.system, gar.directory) == ("gar-hyde-o3-mini-bm25", out / "gar" / "hyde" / "o3-mini" / "bm25")
    # a directory inside the output names its system; the official top-k JSONL layout uses old dataset names
    folder = out / "base retriever" / "nv"
    folder.mkdir(parents=True)
    (folder / "Stack-Biology.jsonl").write_text('{"id": "q", "topk_pid": [["d", 1.0]]}\n')
    stage = FirstStage.resolve(folder, output=out)
    assert stage.system == "nv" and stage.path_for("Biology") == folder / "Stack-Biology.jsonl"
    assert stage.load("Biology") == {"q": {"d": 1.0}}
    with pytest.raises(MissingResourceError, match="no first-stage run for Medical-Sciences"):
        stage.path_for("Medical-Sciences")
    single = tmp_path / "elsewhere" / "run.trec"
    single.parent.mkdir()
    single.write_text("q Q0 d 1 1.0 x\n")
    assert FirstStage.resolve(single, output=out) == FirstStage("elsewhere", file=single)
    with pytest.raises(MissingResourceError, match="no such file or directory"):
        FirstStage.resolve("./missing/run.trec", output=out)


def test_run_digest_sees_order_and_scores():
    a = Run({"q": {"x": 2.0, "y": 1.0}})
    assert run_digest(a) == run_digest(Run({"q": {"y": 1.0, "x": 2.0}}))
    assert run_digest(a) != run_digest(Run({"q": {"x": 1.0, "y": 2.0}}))


@pytest.mark.parametrize(("module", "scorer", "args"), [
    ("peft", "r2med.rerankers.rankllama:RankLlamaScorer", ("adapter", "base")),
    ("sentence_transformers", "r2med.rerankers.cross_encoder:CrossEncoderScorer", ("model",)),
])
def test_a_missing_package_names_the_rerank_extra(monkeypatch, module, scorer, args):
    from r2med.errors import MissingExtraError

    where, name = scorer.split(":")
    cls = getattr(importlib.import_module(where), name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(MissingExtraError, match=re.escape(install_command("rerank"))) as info:
        cls(*args)
    assert info.value.exit_code == 3 and info.value.extra == "rerank"


def test_importing_the_reranking_code_imports_nothing_heavy():
    code = (
        "import sys, r2med.rerankers, r2med.rerankers.registry, r2med.stages.rerank, r2med.cli.rerank; "
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'peft', 'openai') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_reasoning_rerankers_have_their_hub_ids_and_folders():
    assert [(s.name, s.kind, s.model, s.folder) for s in map(resolve_reranker, ("rank1-7b", "jhu-clsp/rank1-32b"))] == [
        ("rank1-7b", "rank1", "jhu-clsp/rank1-7b", "rank1-7b"), ("rank1-32b", "rank1", "jhu-clsp/rank1-32b", "rank1-32b")]
    qwen = [resolve_reranker(n) for n in ("qwen3-reranker-0.6b", "Qwen/Qwen3-Reranker-4B", "qwen3-reranker-8b")]
    assert [(s.kind, s.model, s.max_length, s.folder) for s in qwen] == [
        ("qwen3-reranker", "Qwen/Qwen3-Reranker-0.6B", 8192, "qwen3-reranker-0.6b"),
        ("qwen3-reranker", "Qwen/Qwen3-Reranker-4B", 8192, "qwen3-reranker-4b"),
        ("qwen3-reranker", "Qwen/Qwen3-Reranker-8B", 8192, "qwen3-reranker-8b")]
