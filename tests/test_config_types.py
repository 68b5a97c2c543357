"""Pipeline spec files: every value is checked against its declared type (bool is not an int); nothing is coerced."""

from __future__ import annotations

import pytest

from r2med.config import load_spec, parse_spec
from r2med.errors import InvalidInputError, UsageError

BM25 = '[[retriever]]\nname = "bm25"\n'
DENSE = '[[retriever]]\nname = "/models/m"\n'  # a dense model directory: its options, not BM25's
CE = '[[retriever]]\nname = "bm25"\n[reranker]\nname = "org/x"\n'  # a cross-encoder by hub id
LISTWISE = '[[retriever]]\nname = "bm25"\n[reranker]\nname = "listwise"\nllm_model = "m"\n'


@pytest.mark.parametrize(("body", "message"), [
    ('[pipeline]\nname = 5\n' + BM25, "[pipeline]: name must be a string, got 5"),
    ('[pipeline]\ntop_k = true\n' + BM25, "[pipeline]: top_k must be an integer, got True"),
    ('[pipeline]\ntop_k = 10.0\n' + BM25, "[pipeline]: top_k must be an integer, got 10.0"),
    ('[pipeline]\ndatasets = ["Biology", 3]\n' + BM25, "[pipeline]: datasets must be a list of names"),
    ('[pipeline]\noutput = 3\n' + BM25, "[pipeline]: output must be a path string, got 3"),
    ('[[retriever]]\nname = 5\n', "[[retriever]] #1: name must be a string, got 5"),
    (BM25 + 'bm25_variant = 3\n', "[[retriever]] #1: bm25_variant must be a string, got 3"),
    (DENSE + 'batch_size = "8"\n', "[[retriever]] #1: batch_size must be an integer, got '8' (write it without quotes)"),
    (DENSE + 'batch_size = true\n', "[[retriever]] #1: batch_size must be an integer, got True"),
    (DENSE + 'batch_size = 0\n', "[[retriever]] #1: batch_size must be at least 1, got 0"),
    (BM25 + 'k1 = "0.9"\n', "[[retriever]] #1: k1 must be a number, got '0.9' (write it without quotes)"),
    (BM25 + 'k1 = false\n', "[[retriever]] #1: k1 must be a number, got False"),
    (BM25 + 'b = nan\n', "[[retriever]] #1: b must be a finite number, got nan"),
    (DENSE + 'device = 0\n', "[[retriever]] #1: device must be a string, got 0 (write it in quotes)"),
    (BM25 + 'identical_ids = "maybe"\n', "[[retriever]] #1: identical_ids must be one of 'drop', 'keep', got 'maybe'"),
    (BM25 + 'identical_ids = true\n', "[[retriever]] #1: identical_ids must be a string, got True"),
    (BM25 + '[fusion]\nk = "sixty"\n', "[fusion]: k must be a number, got 'sixty' (write it without quotes)"),
    (BM25 + '[fusion]\nmethod = 1\n', "[fusion]: method must be one of 'rrf', 'combsum', 'combmnz', 'interpolate', got 1"),
    (BM25 + '[fusion]\nmethod = "rrff"\n', "[fusion]: method must be one of 'rrf', 'combsum', 'combmnz', 'interpolate', got 'rrff'"),
    (BM25 + '[fusion]\nweights = [1, "2"]\n', "[fusion]: weights must be a list of numbers, got [1, '2']"),
    (BM25 + '[fusion]\nnorm = "l2"\nmethod = "combsum"\n', "[fusion]: norm must be one of 'minmax', 'zscore', 'none', got 'l2'"),
    (BM25 + '[fusion]\nalpha = 0.3\n', "[fusion]: alpha is not an option of method 'rrf' (its options: k, weights)"),
    (BM25 + '[expansion]\nspec = 7\n', "[expansion]: spec must be a string, got 7"),
    (BM25 + '[expansion]\nspec = "hyde"\n', "[expansion]: spec 'hyde': expected METHOD/LLM such as hyde/o3-mini"),
    (BM25 + '[expansion]\nspec = "hyde/x"\nanswer_policy = "maybe"\n',
     "[expansion]: answer_policy must be one of 'fallback', 'authors', 'error', got 'maybe'"),
    (BM25 + '[expansion]\nspec = "hyde/x"\nbm25_composition = 3\n', "[expansion]: bm25_composition must be a string, got 3"),
    (CE + 'truncate = "yes"\n', "[reranker]: truncate must be true or false, got 'yes'"),
    (CE + 'identical_ids = "maybe"\n',
     "[reranker]: identical_ids must be one of 'drop', 'keep', got 'maybe'"),
    (CE + 'batch_size = "8"\n', "[reranker]: batch_size must be an integer, got '8'"),
    (LISTWISE + 'window = 2.5\n', "[reranker]: window must be an integer, got 2.5"),
    (LISTWISE + 'with_scores = 1\n', "[reranker]: with_scores must be true or false, got 1"),
    (LISTWISE + 'temperature = "hot"\n', "[reranker]: temperature must be a number or 'none', got 'hot'"),
    (LISTWISE + 'direction = "sideways"\n',
     "[reranker]: direction must be one of 'back_to_front', 'front_to_back', got 'sideways'"),
])
def test_wrong_types_are_rejected_with_file_and_key(tmp_path, body, message):
    path = tmp_path / "p.toml"
    path.write_text(body)
    with pytest.raises(InvalidInputError) as info:
        load_spec(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_right_types_pass_and_ints_widen_to_floats_only(tmp_path):
    raw = {"pipeline": {"name": "hybrid", "top_k": 5},
           "retriever": [{"name": "bm25", "k1": 1, "b": 0.5, "identical_ids": "drop"}, {"name": "/m", "batch_size": 4}],
           "fusion": {"method": "interpolate", "alpha": 1, "norm": "zscore"},
           "reranker": {"name": "listwise", "llm_model": "m", "temperature": 0, "truncate": True, "window": 4}}
    spec = parse_spec(raw, base=tmp_path)
    first = spec.retrievers[0]
    options = first.resolved()
    assert (options.k1, type(options.k1), options.b, first.identical_ids) == (1.0, float, 0.5, "drop")
    assert spec.retrievers[1].resolved().batch_size == 4 and spec.top_k == 5 and spec.name == "hybrid"
    assert spec.fusion.method == "interpolate" and spec.fusion.options == {"alpha": 1.0, "norm": "zscore"}
    assert type(spec.fusion.options["alpha"]) is float
    assert spec.reranker.truncate is True and spec.reranker.options.temperature == 0.0
    assert type(spec.reranker.options.temperature) is float


def test_make_retriever_refuses_an_unknown_identical_ids_rule(tmp_path):
    from r2med.retrievers.registry import RetrieverSpec, make_retriever

    with pytest.raises(UsageError, match="identical_ids must be 'drop' or 'keep' .*, got 'maybe'"):
        make_retriever(RetrieverSpec("bm25", identical_ids="maybe"), cache_dir=None)
