"""Fusion: hand-computed RRF, CombSUM, CombMNZ and interpolation values, errors, and ``r2med fuse``."""

from __future__ import annotations

import pytest

from r2med.errors import UsageError
from r2med.fusion import combmnz, combsum, fuse, interpolate, normalise, rrf
from r2med.store.runs import read_run, write_trec_run
from r2med.types import Run

BM25 = Run({"q1": {"a": 12.0, "b": 9.0, "c": 3.0}, "q2": {"x": 1.0}})
DENSE = Run({"q1": {"c": 0.9, "a": 0.7, "d": 0.5}, "q3": {"y": 0.2}})


def test_rrf_by_hand():
    fused = rrf([BM25, DENSE], k=60)
    # q1: a = 1/61 + 1/62, c = 1/63 + 1/61, b = 1/62, d = 1/63
    assert fused["q1"] == pytest.approx({"a": 1 / 61 + 1 / 62, "c": 1 / 63 + 1 / 61, "b": 1 / 62, "d": 1 / 63}, abs=0)
    assert list(fused["q1"]) == ["a", "c", "b", "d"]
    # queries only one run has still come out, with 1/(k+1)
    assert fused["q2"] == {"x": 1 / 61} and fused["q3"] == {"y": 1 / 61}
    # weights and another k: a = 2/(1+1) + 1/(1+2) = 4/3, c = 2/(1+3) + 1/(1+1) = 1, b = 2/3, d = 1/4
    weighted = rrf([BM25, DENSE], k=1, weights=[2, 1])
    assert weighted["q1"] == pytest.approx({"a": 4 / 3, "c": 1.0, "b": 2 / 3, "d": 0.25}, abs=1e-15)


def test_combsum_and_combmnz_by_hand():
    # min-max per query: BM25 q1 a=1, b=(9-3)/9=2/3, c=0; dense q1 c=1, a=(0.7-0.5)/0.4=0.5, d=0
    s = combsum([BM25, DENSE])["q1"]
    assert s == pytest.approx({"a": 1.5, "c": 1.0, "b": 2 / 3, "d": 0.0}, abs=1e-12)
    assert list(s) == ["a", "c", "b", "d"]
    m = combmnz([BM25, DENSE])["q1"]  # a and c are in both runs: doubled
    assert m == pytest.approx({"a": 3.0, "c": 2.0, "b": 2 / 3, "d": 0.0}, abs=1e-12)
    # z-scores: BM25 q1 mean 8, population std sqrt(((4)^2 + 1^2 + 5^2)/3) = sqrt(14)
    z = combsum([BM25], norm="zscore")["q1"]
    assert z == pytest.approx({"a": 4 / 14**0.5, "b": 1 / 14**0.5, "c": -5 / 14**0.5}, abs=1e-12)
    raw = combsum([BM25, DENSE], norm="none")["q1"]
    assert raw == pytest.approx({"a": 12.7, "b": 9.0, "c": 3.9, "d": 0.5}, abs=1e-12)


def test_interpolation_by_hand():
    # 0.3 * bm25 + 0.7 * dense (min-max): a = 0.3 + 0.35, b = 0.2, c = 0.7, d = 0
    fused = interpolate([BM25, DENSE], alpha=0.3)["q1"]
    assert fused == pytest.approx({"c": 0.7, "a": 0.65, "b": 0.2, "d": 0.0}, abs=1e-12)
    assert list(fused) == ["c", "a", "b", "d"]


def test_depth_ties_and_errors():
    assert list(rrf([BM25, DENSE], depth=2)["q1"]) == ["a", "c"]
    tied = combsum([Run({"q": {"z": 1.0, "m": 1.0}})])["q"]
    assert list(tied) == ["z", "m"]  # equal fused scores: trec_eval's order, document id descending
    assert normalise({}, "minmax") == {}
    with pytest.raises(UsageError, match="one weight per run"):
        rrf([BM25, DENSE], weights=[1])
    with pytest.raises(UsageError, match="exactly 2 runs"):
        interpolate([BM25])
    with pytest.raises(UsageError, match="valid: minmax, zscore, none"):
        combsum([BM25], norm="l2")
    with pytest.raises(UsageError, match="valid: rrf, combsum, combmnz, interpolate"):
        fuse([BM25], "borda")
    with pytest.raises(UsageError, match="at least one run"):
        rrf([])


def test_fuse_command(cli, tmp_path):
    a, b = write_trec_run(BM25, tmp_path / "a.run"), write_trec_run(DENSE, tmp_path / "b.run")
    out = tmp_path / "fused.run"
    result = cli("fuse", a, b, "--method", "rrf", "--output", out)
    assert result.code == 0, result.err
    fused = read_run(out)
    assert list(fused["q1"]) == ["a", "c", "b", "d"]
    assert fused["q1"]["a"] == pytest.approx(1 / 61 + 1 / 62, abs=1e-15)
    inter = cli("fuse", a, b, "--method", "interpolate", "--alpha", "0.3", "--output", tmp_path / "i.run")
    assert inter.code == 0 and list(read_run(tmp_path / "i.run")["q1"]) == ["c", "a", "b", "d"]
    bad = cli("fuse", a, "--method", "interpolate", "--output", tmp_path / "x.run")
    assert bad.code == 2 and "exactly 2 runs" in bad.err
    missing = cli("fuse", a, tmp_path / "nope.run", "--output", tmp_path / "y.run")
    assert missing.code == 4 and "nope.run" in missing.err


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("method", ["rrf", "combsum", "combmnz", "interpolate"])
def test_fusion_rejects_non_finite_scores(method, bad):
    from r2med.errors import InvalidInputError

    broken = Run({"q1": {"a": 1.0, "b": bad}}, name="broken")
    with pytest.raises(InvalidInputError, match=r"run 'broken', query 'q1', document 'b': score (inf|-inf|nan) is not finite"):
        fuse([BM25, broken], method)
    with pytest.raises(InvalidInputError, match="is not finite"):
        normalise({"a": 1.0, "b": bad}, "minmax")


def test_fused_ties_are_ranked_and_cut_as_trec_eval_ranks_them():
    # every document of q gets 1/61 (rank 1 in exactly one run): a four-way tie
    runs = [Run({"q": {"m": 2.0}}), Run({"q": {"z": 1.0}}), Run({"q": {"a": 3.0}}), Run({"q": {"k": 3.0}})]
    fused = rrf(runs, depth=None)["q"]
    assert list(fused) == ["z", "m", "k", "a"] and set(fused.values()) == {1 / 61}
    assert list(rrf(runs, depth=2)["q"]) == ["z", "m"]  # the cut keeps trec_eval's first two
    # ranks inside an input run follow trec_eval too: in (x 1.0, y 1.0) y is rank 1, x rank 2
    tied = rrf([Run({"q": {"x": 1.0, "y": 1.0}})], k=0)["q"]
    assert tied == {"y": 1.0, "x": 0.5}
