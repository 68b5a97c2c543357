"""The local pointwise rerankers batch (query, document) pairs by tokens (issue 36, item 7), through the loop the
dense encoders use (``r2med.batching``): pairs tokenized once, sorted by token count, cut to a budget of padded
tokens, at most ``--batch-size`` pairs; an out-of-memory error halves the budget. Scores are today's: within float
noise where a batch holds other pairs, the same bits where it holds the same ones."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")

from conftest import DATA
from r2med.rerankers.cross_encoder import CrossEncoderScorer
from r2med.rerankers.pointwise import PointwiseReranker
from r2med.types import Run

WORDS = "patient fever acute chronic heart brain blood gene protein drug dose case study pain cell".split()
QUERIES = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 4)) for i in range(30)]
DOCUMENTS = [" ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(1 + (7 * i) % 40)) for i in range(30)]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    return make_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"))


def make_tiny_cross_encoder(folder):
    """A random-weight BERT cross-encoder in tiny-bert's shape (one logit), with tiny-bert's tokenizer, in ``folder``."""
    config = transformers.AutoConfig.from_pretrained(DATA / "dense" / "tiny-bert", num_labels=1,
                                                     architectures=["BertForSequenceClassification"])
    torch.manual_seed(7)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(DATA / "dense" / "tiny-bert").save_pretrained(folder)
    return folder


def shipped_scores(scorer: CrossEncoderScorer, size: int) -> list[float]:
    """Scores as r2med made them before: pairs longest first by characters (PointwiseReranker), ``size`` at a
    time, each batch one CrossEncoder.predict call."""
    model = scorer.load()
    order = sorted(range(len(QUERIES)), key=lambda i: -(len(QUERIES[i]) + len(DOCUMENTS[i])))
    out = [0.0] * len(QUERIES)
    for start in range(0, len(order), size):
        rows = order[start:start + size]
        with torch.inference_mode():
            logits = model.predict([(QUERIES[i], DOCUMENTS[i]) for i in rows], batch_size=len(rows),
                                   activation_fn=torch.nn.Identity(), show_progress_bar=False, convert_to_numpy=True)
        for row, value in zip(rows, scorer._column(logits)):
            out[row] = float(value)
    return out


def test_cross_encoder_scores_in_token_batches_are_todays(tiny_cross_encoder):
    scorer = CrossEncoderScorer(str(tiny_cross_encoder), device="cpu", batch_tokens=150)
    expected = np.array(shipped_scores(scorer, size=4))
    seen: list[int] = []
    model = scorer.load()
    predict = model.predict
    model.predict = lambda pairs, **kw: (seen.append(len(pairs)), predict(pairs, **kw))[1]
    got = np.array(scorer.score(QUERIES, DOCUMENTS))
    assert len(seen) > 3 and len(set(seen)) > 1 and sum(seen) == len(QUERIES)
    assert (np.abs(got - expected) <= 1e-6 * np.maximum(1.0, np.abs(expected))).all()


def test_one_batch_of_the_same_pairs_gives_the_same_bits(tiny_cross_encoder):
    scorer = CrossEncoderScorer(str(tiny_cross_encoder), device="cpu", batch_tokens=1_000_000)
    model = scorer.load()
    with torch.inference_mode():
        logits = model.predict(list(zip(QUERIES, DOCUMENTS)), batch_size=len(QUERIES),
                               activation_fn=torch.nn.Identity(), show_progress_bar=False, convert_to_numpy=True)
    assert scorer.score(QUERIES, DOCUMENTS) == [float(x) for x in scorer._column(logits)]


def test_the_reranker_hands_a_local_model_groups_and_its_batch_size_caps_pairs(tiny_cross_encoder):
    scorer = CrossEncoderScorer(str(tiny_cross_encoder), device="cpu")
    calls: list[int] = []
    score = scorer.score
    scorer.score = lambda q, d: (calls.append(len(q)), score(q, d))[1]
    run = Run({"q": {f"d{i}": float(-i) for i in range(30)}})
    queries, corpus = {"q": "fever pain"}, {f"d{i}": DOCUMENTS[i] for i in range(30)}
    reranked = PointwiseReranker("ce", scorer, batch_size=5, progress=False).rerank(queries, corpus, run, top_k=30)
    assert calls == [30] and scorer.token_budget.texts == 5  # one group; model batches of 5 pairs at most
    direct = scorer.score(["fever pain"] * 30, DOCUMENTS)
    assert list(reranked["q"]) == [f"d{i}" for i in sorted(range(30), key=lambda i: (-direct[i], i))]


def test_out_of_memory_halves_and_gives_the_same_scores(tiny_cross_encoder, caplog):
    expected = np.array(CrossEncoderScorer(str(tiny_cross_encoder), device="cpu").score(QUERIES, DOCUMENTS))
    scorer = CrossEncoderScorer(str(tiny_cross_encoder), device="cpu", batch_tokens=4000)
    model = scorer.load()
    predict = model.predict

    def small_memory(pairs, **kw):
        longest = max(len(model.tokenizer(q, d)["input_ids"]) for q, d in pairs)
        if len(pairs) * longest > 200:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return predict(pairs, **kw)

    model.predict = small_memory
    got = np.array(scorer.score(QUERIES, DOCUMENTS))
    assert scorer.token_budget.tokens <= 200
    assert (np.abs(got - expected) <= 1e-6 * np.maximum(1.0, np.abs(expected))).all()
    assert "tokens per batch worked" in caplog.text


def test_qwen3_reranker_in_small_token_batches_scores_as_in_one(tmp_path):
    """Qwen3-Reranker's local scorer over a tiny random model: token batches of a few pairs give the scores of one
    batch of all (today's, for a call of that many pairs) within float noise."""
    from test_qwen3_reranker import _tiny_model

    from r2med.rerankers.qwen3 import Qwen3RerankerScorer

    folder = tmp_path / "qwen3"
    _tiny_model(folder)
    queries, docs = ["what causes fever"] * 6, ["infection causes fever and chills yes no " * k for k in range(1, 7)]
    whole = Qwen3RerankerScorer(str(folder), max_length=60, device="cpu", batch_tokens=1_000_000)
    small = Qwen3RerankerScorer(str(folder), max_length=60, device="cpu", batch_tokens=130)
    sizes: list[int] = []
    pad = small._pad
    small._pad = lambda out: (sizes.append(len(out["input_ids"])), pad(out))[1]
    got = np.array(small.score(queries, docs))
    assert len(sizes) > 1 and sum(sizes) == 6
    assert np.abs(got - np.array(whole.score(queries, docs))).max() <= 1e-6


def test_rankllama_in_small_token_batches_scores_as_in_one(tiny_rankllama):
    pytest.importorskip("peft")
    from test_rankllama import DOCUMENTS as DOCS
    from test_rankllama import MAX_LENGTH
    from test_rankllama import QUERIES as QS

    from r2med.rerankers.rankllama import RankLlamaScorer

    _, adapter_dir, _ = tiny_rankllama
    whole = RankLlamaScorer(str(adapter_dir), max_length=MAX_LENGTH, device="cpu", batch_tokens=1_000_000)
    small = RankLlamaScorer(str(adapter_dir), max_length=MAX_LENGTH, device="cpu", batch_tokens=12)  # one pair each
    # a pair alone has no padding, so attention runs without a mask (another kernel than a padded batch): 4.5e-6
    # apart at most on logits near 2, within test_rankllama's 1e-5 of an unpadded reference
    assert np.abs(np.array(small.score(QS, DOCS)) - np.array(whole.score(QS, DOCS))).max() <= 1e-5


from test_rankllama import tiny_rankllama  # noqa: E402,F401  (its fixture)


def test_the_token_budget_is_a_flag_of_rerank_and_run_and_a_key_of_the_file(tiny_cross_encoder, tmp_path):
    """``r2med rerank --batch-tokens N``, ``r2med run --rerank-batch-tokens N`` and ``batch_tokens = N`` in a
    pipeline file's ``[reranker]`` set the scorer's budget; it is not part of the result's key (scores are the
    same at any budget), and it is checked like every option."""
    from r2med.cli import build_parser
    from r2med.cli.flags import given
    from r2med.cli.rerank import flag_sets as rerank_flags
    from r2med.cli.run import build_spec
    from r2med.config import parse_spec
    from r2med.errors import InvalidInputError
    from r2med.rerankers.registry import make_reranker, options_for

    parser = build_parser()
    model = str(tiny_cross_encoder)
    args = parser.parse_args(["rerank", "--run", "x.run", "--reranker", model, "--batch-tokens", "150",
                              "--device", "cpu"])
    from_rerank = given(args, rerank_flags()[1:])
    assert from_rerank["batch_tokens"] == 150
    spec = build_spec(parser.parse_args(["run", "--reranker", model, "--rerank-batch-tokens", "150",
                                         "--device", "cpu"]))
    from_run = spec.reranker.options
    bm25 = [{"name": "bm25"}]
    from_file = parse_spec({"retriever": bm25, "reranker": {"name": model, "batch_tokens": 150, "device": "cpu"}},
                           base=tmp_path, source="p.toml").reranker.options
    for options in (from_rerank, from_run, from_file):
        reranker = make_reranker(model, options)
        assert reranker.scorer.token_budget.tokens == 150
    default = make_reranker(model, {"device": "cpu"})
    assert default.scorer.token_budget.tokens == 8192  # the CPU cap of the model's 65,536
    assert default.describe() == make_reranker(model, from_rerank).describe()
    assert options_for(model, {"batch_tokens": 150}) != options_for(model, {})
    with pytest.raises(SystemExit):
        parser.parse_args(["rerank", "--run", "x.run", "--reranker", model, "--batch-tokens", "0"])
    with pytest.raises(InvalidInputError, match=r"p.toml \[reranker\]: batch_tokens must be at least 1, got 0"):
        parse_spec({"retriever": bm25, "reranker": {"name": model, "batch_tokens": 0}}, base=tmp_path, source="p.toml")
