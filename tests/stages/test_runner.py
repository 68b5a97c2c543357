"""The one runner: any Stage is run, evaluated, stored with its artifacts and manifest, and resumed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import DATA
from r2med.config import PipelineSpec, RerankSpec, parse_spec
from r2med.datasets import load_dir
from r2med.errors import InvalidInputError, UsageError
from r2med.retrievers.registry import RetrieverSpec
from r2med.stages import Stage, run_stage, summarise
from r2med.store.results import SystemPath
from r2med.types import Run


class Toy:
    """A stage whose run is fixed: q1 finds d1 then d4 (both relevant), q2 finds d3 then d2 (d2 relevant, grade 2)."""

    def __init__(self, flavour: str = "a") -> None:
        self.where = SystemPath.base("toy")
        self.ignore_identical_ids = False
        self.flavour = flavour
        self.calls = 0

    def config(self, dataset) -> dict[str, Any]:
        return {"toy": self.flavour}

    def run(self, dataset) -> Run:
        self.calls += 1
        return Run({"q1": {"d1": 2.0, "d4": 1.0}, "q2": {"d3": 2.0, "d2": 1.0}})

    def details(self, dataset) -> dict[str, Any]:
        return {"flavour": self.flavour}

    def artifacts(self, dataset) -> dict[str, list[dict[str, Any]]]:
        return {"notes": [{"qid": "q1", "note": "é"}]}


@pytest.fixture
def tiny():
    return load_dir(DATA / "tiny", "tiny")


def test_a_stage_is_stored_evaluated_and_resumed(tiny, tmp_path):
    stage = Toy()
    assert isinstance(stage, Stage)
    [result] = run_stage(stage, [tiny], output=tmp_path)
    folder = tmp_path / "base retriever" / "toy"
    assert result.files.run == folder / "tiny.run" and not result.reused
    # q1: both relevant documents at ranks 1-2 -> nDCG@10 1; q2: the grade-2 document at rank 2 -> 3/log2(3) / 3
    assert result.scores.per_query["q1"]["ndcg_at_10"] == pytest.approx(1.0)
    assert result.scores.per_query["q2"]["ndcg_at_10"] == pytest.approx(0.63093, abs=1e-5)
    assert summarise([result])["tiny"]["ndcg_at_10"] == 0.81546
    assert (folder / "tiny.notes.jsonl").read_text(encoding="utf-8") == '{"qid": "q1", "note": "é"}\n'
    manifest = json.loads((folder / "tiny.manifest.json").read_text())
    assert manifest["config"]["toy"] == "a" and manifest["config"]["system"] == "base retriever/toy"
    assert manifest["config"]["ignore_identical_ids"] is False and manifest["details"] == {"flavour": "a"}
    assert result.details == {"flavour": "a"}

    [again] = run_stage(stage, [lambda: tiny], output=tmp_path)  # a loader is called when its turn comes
    assert again.reused and stage.calls == 1 and again.details == {}
    assert again.scores.rounded() == result.scores.rounded()
    assert again.scores.per_query == json.loads(json.dumps(result.scores.per_query))

    other = Toy("b")  # another configuration recomputes
    [changed] = run_stage(other, [tiny], output=tmp_path)
    assert not changed.reused and other.calls == 1
    assert run_stage(Toy("b"), [tiny], output=tmp_path, resume=False)[0].reused is False


def test_pipeline_spec_rules():
    with pytest.raises(UsageError, match="exactly one first stage: retrievers, a stored first stage or an agent"):
        PipelineSpec()
    with pytest.raises(UsageError, match="exactly one first stage: retrievers, a stored first stage or an agent"):
        PipelineSpec(retrievers=(RetrieverSpec("bm25"),), first_stage="bm25", reranker=RerankSpec("x"))
    with pytest.raises(UsageError, match="name a reranker"):
        PipelineSpec(first_stage="bm25")
    with pytest.raises(UsageError, match="--bm25-composition needs --expansion"):
        PipelineSpec(retrievers=(RetrieverSpec("bm25"),), bm25_composition="query2doc-spaced")
    with pytest.raises(UsageError, match="--top-k must be at least 1, got 0"):
        PipelineSpec(retrievers=(RetrieverSpec("bm25"),), top_k=0)


def test_a_spec_file_can_name_a_reranker_stage(tmp_path):
    raw = {"retriever": [{"name": "bm25"}], "expansion": {"spec": "query2doc/m", "bm25_composition": "query2doc-spaced"},
           "reranker": {"name": "listwise", "top_k": 20, "truncate": True, "window": 10, "llm_model": "m"}}
    spec = parse_spec(raw, base=tmp_path)
    assert spec.bm25_composition == "query2doc-spaced"
    assert (spec.reranker.name, spec.reranker.top_k, spec.reranker.truncate) == ("listwise", 20, True)
    assert (spec.reranker.options.window, spec.reranker.options.llm_model, spec.reranker.options.stride) == (10, "m", 10)
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: unknown key\(s\) api_key"):
        parse_spec({**raw, "reranker": {"name": "listwise", "api_key": "sk"}}, base=tmp_path)
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: top_k must be an integer, got True"):
        parse_spec({**raw, "reranker": {"name": "listwise", "top_k": True}}, base=tmp_path)
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: needs name"):
        parse_spec({**raw, "reranker": {"top_k": 3}}, base=tmp_path)


class Partial(Toy):
    """Fails (IncompleteResultError) on the dataset named ``bad``; answers only q1 elsewhere, ``judged_all`` set."""

    judged_all = True

    def run(self, dataset) -> Run:
        from r2med.errors import IncompleteResultError

        self.calls += 1
        if dataset.name == "bad":
            raise IncompleteResultError("2 of 9 queries failed")
        return Run({"q1": {"d1": 2.0, "d4": 1.0}})


def test_an_incomplete_dataset_is_not_stored_the_others_are_and_the_run_ends_with_exit_6(tiny, tmp_path):
    import dataclasses

    from r2med.errors import IncompleteResultError

    bad = dataclasses.replace(tiny, name="bad")
    stage = Partial()
    with pytest.raises(IncompleteResultError, match=r"base retriever/toy: 1 dataset\(s\) incomplete.*bad: 2 of 9") as info:
        run_stage(stage, [bad, tiny], output=tmp_path)
    assert info.value.exit_code == 6
    assert stage.calls == 2  # the dataset after the incomplete one still ran
    assert not (tmp_path / "base retriever" / "toy" / "bad.json").exists()
    stored = json.loads((tmp_path / "base retriever" / "toy" / "tiny.json").read_text())
    # judged_all: q2 (judged, absent from the run) counts 0, so nDCG@10 is q1's value halved
    [only_q1] = run_stage(Toy(), [dataclasses.replace(tiny, queries={"q1": tiny.queries["q1"]},
                                                      qrels={"q1": tiny.qrels["q1"]})], output=tmp_path / "q1")
    assert stored["test"]["ndcg_at_10"] == round(only_q1.scores.aggregate["ndcg_at_10"] / 2, 5)


def test_the_run_table_average_is_the_leaderboards():
    """Seven datasets at 0.26885 and one at 0.26884: the exact mean 0.26884875 is 26.88 in `r2med run`'s table, as
    in the leaderboard; an average rounded to 5 decimals first (0.26885) would show 26.89."""
    from r2med.reporting.tables import pct
    from r2med.stages import summarise
    from r2med.stages.base import DatasetResult
    from r2med.types import Scores

    values = [0.26885] * 7 + [0.26884]
    table = summarise([DatasetResult(f"D{i}", Scores({"ndcg_at_10": v}), None, 0.0) for i, v in enumerate(values)])
    assert table["average"]["ndcg_at_10"] == 0.26884875 and pct(table["average"]["ndcg_at_10"]) == "26.88"
