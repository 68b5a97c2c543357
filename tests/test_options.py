"""Options declared once (``r2med.options``): one declaration gives the flag, the pipeline-file key (type and range
checked), the inline ``NAME:key=value`` form, the resume key and the docs' row; the CLI and TOML routes agree."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import DATA, REPO
from r2med.cli import build_parser, main
from r2med.config import parse_spec
from r2med.errors import InvalidInputError, UsageError
from r2med.options import Flags, from_table, option, split_inline
from r2med.retrievers import registry
from r2med.retrievers.bm25.options import BM25Options
from r2med.retrievers.registry import RetrieverSpec

TINY = DATA / "tiny"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DummyBM25(BM25Options):
    dummy_depth: int = option(3, "a dummy option of the test", minimum=1)


@pytest.fixture
def dummy_family(monkeypatch):
    """BM25's registry row with ``DummyBM25`` as its options class: the only change a new option needs."""
    rows = tuple(dataclasses.replace(f, options=DummyBM25) if f.name == "bm25" else f for f in registry.FAMILIES)
    monkeypatch.setattr(registry, "FAMILIES", rows)


def test_one_declaration_gives_the_flag_the_file_key_and_the_docs_row(dummy_family, capsys):
    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    help_text = run.format_help()
    assert "--dummy-depth N" in help_text and "a dummy option of the test (default 3)" in help_text
    # the flag reaches the retriever's options (and its resume key)
    args = parser.parse_args(["run", "--dummy-depth", "7"])
    from r2med.cli.run import build_spec

    spec = build_spec(args)
    assert spec.retrievers[0].resolved() == DummyBM25(dummy_depth=7)
    assert spec.retrievers[0].key()["options"] == {"variant": "r2med", "k1": 0.9, "b": 0.4, "dummy_depth": 7}
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--dummy-depth", "0"])
    assert "argument --dummy-depth: expected at least 1, got 0" in capsys.readouterr().err.replace("must be ", "expected ")
    # the pipeline file's key, type and range checked with the file, table and key named
    parsed = parse_spec({"retriever": [{"name": "bm25", "dummy_depth": 5}]}, base=Path("."), source="p.toml")
    assert parsed.retrievers[0].resolved().dummy_depth == 5
    with pytest.raises(InvalidInputError, match=r"p.toml \[\[retriever\]\] #1: dummy_depth must be at least 1, got 0"):
        parse_spec({"retriever": [{"name": "bm25", "dummy_depth": 0}]}, base=Path("."), source="p.toml")
    with pytest.raises(InvalidInputError, match=r"dummy_depth must be an integer, got '5' \(write it without quotes\)"):
        parse_spec({"retriever": [{"name": "bm25", "dummy_depth": "5"}]}, base=Path("."), source="p.toml")
    # the inline form
    assert RetrieverSpec.parse("bm25:dummy_depth=9").resolved().dummy_depth == 9
    # the docs' option list
    from r2med.cli.options_doc import options_markdown

    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in options_markdown().splitlines()
            if line.startswith("| `--dummy-depth`")]
    assert rows == [["`--dummy-depth`", "`dummy_depth`", "integer >= 1", "3", "a dummy option of the test"]] * 2  # run, serve


def test_docs_option_list_is_the_generated_one():
    from r2med.cli.options_doc import options_markdown

    page = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    assert page == options_markdown() + "\n", "docs/options.md is stale: python tools/gen_options_doc.py"


def test_inline_options_parse_and_fail_with_the_valid_keys():
    assert split_inline("bm25:variant=lucene,k1=1.2") == ("bm25", {"variant": "lucene", "k1": "1.2"})
    assert split_inline("openai:Qwen/Qwen3-Embedding-8B") == ("openai:Qwen/Qwen3-Embedding-8B", {})
    assert split_inline("/models/a:b") == ("/models/a:b", {})
    spec = RetrieverSpec.parse("bm25:variant=lucene,b=0.75")
    assert (spec.resolved(), spec.system()) == (BM25Options(variant="lucene", b=0.75), "bm25-lucene-k1_0.9-b_0.75")
    with pytest.raises(UsageError, match=r"--retriever bm25:k=1: unknown option 'k'; did you mean k1\? "
                                         r"Valid: b, identical_ids, k1, system, variant"):
        RetrieverSpec.parse("bm25:k=1")
    with pytest.raises(UsageError, match=r"b=2: must be at most 1, got 2"):
        RetrieverSpec.parse("bm25:b=2")
    with pytest.raises(UsageError, match=r"variant=luce: must be one of 'r2med', 'lucene', got 'luce'"):
        RetrieverSpec.parse("bm25:variant=luce")
    # flags give a family its defaults; the inline value wins; another family's flags are not its own
    given = {"variant": "lucene", "k1": 1.5, "batch_size": 4}
    assert RetrieverSpec.parse("bm25:k1=1.2", given=given).resolved() == BM25Options(variant="lucene", k1=1.2)
    assert RetrieverSpec.parse("bm25-lucene").resolved() == BM25Options(variant="lucene")


def test_file_tables_check_every_declared_range():
    def fusion(table):
        return parse_spec({"retriever": [{"name": "bm25"}, {"name": "bm25-lucene"}], "fusion": table},
                          base=Path("."), source="p.toml")

    assert fusion({"method": "rrf", "k": 30}).fusion.options == {"k": 30.0}
    for table, message in (({"method": "interpolate", "alpha": 7.0}, "alpha must be at most 1, got 7.0"),
                           ({"method": "rrf", "k": -60}, "k must be at least 0, got -60"),
                           ({"method": "rrf", "weights": [1, -2]}, "weights must be at least 0, got -2"),
                           ({"method": "rrf", "alpha": 0.5}, (r"alpha is not an option of method 'rrf' \(its options: "
                                                              r"k, weights\)")),
                           ({"method": "rrf", "kk": 1}, (r"unknown key\(s\) kk \(did you mean k\?\); valid: k, method, "
                                                         r"weights"))):
        with pytest.raises(InvalidInputError, match=rf"p.toml \[fusion\]: {message}"):
            fusion(table)
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: window must be at least 1, got 0"):
        parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "listwise", "llm_model": "m", "window": 0}},
                   base=Path("."), source="p.toml")
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: unknown key\(s\) window; valid: .*max_length"):
        parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "monobert", "window": 5}},
                   base=Path("."), source="p.toml")


def test_every_llm_command_takes_the_same_endpoint_flags():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for command in ("rerank", "agent", "run"):
        text = commands[command].format_help()
        for flag in ("--api-key-env", "--timeout", "--max-retries", "--temperature"):
            assert flag in text, (command, flag)
    for command, argv in (("rerank", ["--run", "bm25", "--reranker", "listwise"]),
                          ("agent", ["--style", "search-r1", "--llm-model", "m", "--base-url", "http://x/v1"])):
        args = parser.parse_args([command, *argv, "--temperature", "none", "--timeout", "2", "--max-retries", "0"])
        assert (args.opt_temperature, args.opt_timeout, args.opt_max_retries) == ("none", 2.0, 0)


def test_reproduce_takes_the_endpoint_flags_from_their_one_declaration():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices

    def declared(command):
        return {action.option_strings[0]: (action.help, action.metavar, getattr(action.type, "__name__", None))
                for action in commands[command]._actions if action.option_strings}

    endpoint = ("--base-url", "--llm-model", "--api-key-env", "--timeout", "--max-retries")
    reproduce, rerank = declared("reproduce"), declared("rerank")
    assert {flag: reproduce.get(flag) for flag in endpoint} == {flag: rerank[flag] for flag in endpoint}
    args = parser.parse_args(["reproduce", "reranker/reasonrank-32b/e5/top_100", "--base-url", "http://x/v1",
                              "--timeout", "2", "--max-retries", "0"])
    assert (args.opt_base_url, args.opt_timeout, args.opt_max_retries) == ("http://x/v1", 2.0, 0)
    with pytest.raises(SystemExit):  # checked as declared: at least 0.001 s
        parser.parse_args(["reproduce", "base retriever/bm25", "--timeout", "0"])


def test_the_agent_sends_no_temperature_when_told_none():
    from r2med.agent.config import AgentConfig

    config = AgentConfig(protocol="search-r1-infer", llm_model="m", base_url="http://x/v1", chat_template="raw",
                         temperature="none")
    assert config.resolved().sampling().to_request() == {"max_tokens": 1024}
    assert AgentConfig(protocol="search-r1-infer", llm_model="m", base_url="http://x/v1", chat_template="raw"
                       ).resolved().sampling().to_request() == {"temperature": 0.7, "max_tokens": 1024}
    # search-r1-eval (the default for search-r1) is greedy: temperature 0, top_p 1, 500 tokens
    assert AgentConfig(style="search-r1", llm_model="m", base_url="http://x/v1", chat_template="raw"
                       ).resolved().sampling().to_request() == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 500}


class Plain:
    """A retriever without ``describe``: its declared options still key its stored result."""

    ignore_identical_ids = False

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.name = "plain"
        self.calls = 0

    def retrieve(self, dataset, *, top_k=100):
        from r2med.types import Run

        self.calls += 1
        docs = list(dataset.corpus)[: self.depth]
        return Run({qid: {doc: float(len(docs) - i) for i, doc in enumerate(docs)} for qid in dataset.queries})


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlainOptions:
    depth: int = option(2, "documents per query", minimum=1)


def test_a_retriever_without_describe_is_keyed_by_its_options(monkeypatch, tmp_path):
    from r2med.config import PipelineSpec
    from r2med.pipeline import run_pipeline

    built: list[Plain] = []

    def build(spec, options, runtime):
        built.append(Plain(options.depth))
        return built[-1]

    plain = registry.RetrieverFamily("plain", lambda spec: spec.name == "plain", PlainOptions,
                                     lambda spec, options: "plain", build)
    monkeypatch.setattr(registry, "FAMILIES", (plain, *registry.FAMILIES))

    def run(depth: int):
        spec = PipelineSpec(retrievers=(RetrieverSpec("plain", {"depth": depth}),), data_dir=TINY,
                            output=tmp_path / "results", cache=False)
        return next(iter(run_pipeline(spec, progress=False).values()))[0]

    first = run(2)
    assert not first.reused and built[-1].calls == 1
    assert run(2).reused and built[-1].calls == 0  # same options: the stored result
    changed = run(3)
    assert not changed.reused and built[-1].calls == 1  # another option value: recomputed, never reused
    manifest = json.loads(changed.files.result.with_name(f"{changed.dataset}.manifest.json").read_text())
    assert manifest["config"]["retriever"]["options"]["options"] == {"depth": 3}
    assert (manifest["config"]["retriever"]["class"], manifest["config"]["retriever"]["name"]) == (
        "test_options.Plain", "plain")


def test_fused_variants_from_flags_equal_the_pipeline_file(tmp_path, capsys):
    toml = tmp_path / "p.toml"
    toml.write_text(f'[pipeline]\nname = "two"\ndata_dir = "{TINY}"\noutput = "file"\n'
                    '[[retriever]]\nname = "bm25"\n[[retriever]]\nname = "bm25"\nbm25_variant = "lucene"\n'
                    '[fusion]\nmethod = "rrf"\nk = 30\n')
    assert main(["run", "-q", "--config", str(toml), "--no-cache"]) == 0
    assert main(["run", "-q", "--data-dir", str(TINY), "--output", str(tmp_path / "flags"), "--name", "two",
                 "--retriever", "bm25", "--retriever", "bm25:variant=lucene", "--fuse", "rrf:k=30", "--no-cache"]) == 0
    for system in ("base retriever/bm25", "base retriever/bm25-lucene", "fusion/two"):
        for suffix in (".run", ".per_query.jsonl"):
            a = (tmp_path / "file" / system / f"tiny{suffix}").read_bytes()
            assert a == (tmp_path / "flags" / system / f"tiny{suffix}").read_bytes(), (system, suffix)
    capsys.readouterr()
    # one variant twice is refused, naming both
    code = main(["run", "-q", "--data-dir", str(TINY), "--output", str(tmp_path / "x"), "--retriever", "bm25",
                 "--retriever", "bm25", "--bm25-variant", "lucene"])
    assert code == 2
    assert ("retrievers #1 (bm25) and #2 (bm25) would both be stored as 'bm25-lucene'" in capsys.readouterr().err)


def test_flags_are_shared_not_declared_twice():
    import argparse

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Other:
        device: str | None = option(None, "another component's device")

    parser = argparse.ArgumentParser()
    from r2med.retrievers.dense.options import DenseOptions

    first, second = Flags(DenseOptions), Flags(Other)
    first.add(parser)
    second.add(parser)
    args = parser.parse_args(["--device", "cpu"])
    assert first.given(args)["device"] == second.given(args)["device"] == "cpu"
    assert from_table(Other, {}, "t") == Other()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReverseOptions:
    depth: int = option(5, "documents reversed per query", minimum=1)


def test_a_reranker_kind_with_options_is_its_module_and_one_row(monkeypatch):
    """A new kind: its options class and builder (what its module would hold), one KINDS row and its name's spec."""
    from types import MappingProxyType

    from r2med.rerankers import registry as rr

    built = []

    def build(spec, options, runtime):
        built.append(options)
        return Plain(options.depth)

    monkeypatch.setattr(rr, "KINDS", MappingProxyType({**rr.KINDS, "reverse": rr.RerankerKind("reverse", ReverseOptions,
                                                                                               build)}))
    monkeypatch.setattr(rr, "SPECS", (*rr.SPECS, rr.RerankerSpec("reverse", "reverse", "reverse")))
    parser = build_parser()
    rerank = parser._subparsers._group_actions[0].choices["rerank"]
    assert "--depth N" in rerank.format_help()
    args = parser.parse_args(["rerank", "--run", "bm25", "--reranker", "reverse", "--depth", "7"])
    from r2med.cli.flags import given
    from r2med.cli.rerank import flag_sets

    assert rr.options_for("reverse", given(args, flag_sets())) == ReverseOptions(depth=7)
    spec = parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "reverse", "depth": 3}}, base=Path("."))
    assert spec.reranker.options == ReverseOptions(depth=3)
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: depth must be at least 1, got 0"):
        parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "reverse", "depth": 0}}, base=Path("."))
    rr.make_reranker("reverse", {"depth": 2})
    assert built == [ReverseOptions(depth=2)]


def test_max_tokens_keys_a_stored_result():
    """A limit of tokens is not a credential: two agents that differ only in max_tokens have different keys."""
    from r2med.agent.config import AgentConfig
    from r2med.manifest import config_sha256

    def key(max_tokens):
        return config_sha256({"agent": AgentConfig(style="search-r1", llm_model="m", base_url="http://x/v1",
                                                   chat_template="raw", max_tokens=max_tokens).key()})

    assert key(512) != key(1024)


def test_a_result_stored_by_an_older_r2med_is_recomputed_once_with_a_warning(tmp_path, capsys):
    """An older r2med keyed results without the declared options (no config_format): such a result is recomputed
    once, with a warning naming it, and its files come out byte-identical."""
    from r2med.manifest import config_sha256, write_manifest

    out = tmp_path / "results"
    argv = ["run", "-q", "--data-dir", str(TINY), "--output", str(out), "--no-cache"]
    assert main(argv) == 0
    folder = out / "base retriever" / "bm25"
    before = {p.name: p.read_bytes() for p in folder.glob("tiny.*") if "manifest" not in p.name and p.suffix != ".json"}
    assert set(before) == {"tiny.run", "tiny.per_query.jsonl"}
    manifest_file = folder / "tiny.manifest.json"
    manifest = json.loads(manifest_file.read_text())
    old = {k: v for k, v in manifest["config"].items() if k != "config_format"}  # what r2med 0.1.0 keyed by
    old["retriever"] = {k: v for k, v in old["retriever"].items() if k != "options"}
    write_manifest(folder / "tiny.json", {**manifest, "config": old, "config_sha256": config_sha256(old)})
    capsys.readouterr()
    assert main([*argv[:1], *argv[2:]]) == 0
    err = capsys.readouterr().err
    assert (f"r2med: WARNING: tiny: {folder / 'tiny.json'} was stored by an older r2med (configuration format 1, now "
            "3); recomputing it once") in err
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert json.loads(manifest_file.read_text())["config"]["config_format"] == 3
    assert main([*argv[:1], *argv[2:]]) == 0  # once: the next run reuses it, silently
    assert "older r2med" not in capsys.readouterr().err


def test_the_agent_searches_with_a_retriever_and_its_inline_options():
    table = {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1", "search_with": "bm25:variant=lucene"}
    spec = parse_spec({"agent": table}, base=Path("."), source="p.toml")
    assert spec.agent.search_with.resolved() == BM25Options(variant="lucene")
    with pytest.raises(InvalidInputError, match=r"p.toml \[agent\] search_with 'bm25:k=2': unknown option 'k'"):
        parse_spec({"agent": {**table, "search_with": "bm25:k=2"}}, base=Path("."), source="p.toml")


def test_inline_options_take_commas_and_colons_in_values_and_refuse_repeats(tmp_path):
    assert split_inline("rrf:k=30,weights=1,2") == ("rrf", {"k": "30", "weights": "1,2"})
    assert split_inline("nv:query_instruction=Given a question, retrieve: the passage") == (
        "nv", {"query_instruction": "Given a question, retrieve: the passage"})
    assert split_inline("openai:Qwen/Qwen3-Embedding-8B:batch_size=4") == (  # the first ':' before key= starts them
        "openai:Qwen/Qwen3-Embedding-8B", {"batch_size": "4"})
    model = tmp_path / "lr:k=1"  # an existing directory is a name, whatever it looks like
    model.mkdir()
    assert split_inline(str(model)) == (str(model), {})
    with pytest.raises(UsageError, match=r"--fuse rrf:k=1,k=2: k is given twice; keep one"):
        split_inline("rrf:k=1,k=2", "--fuse rrf:k=1,k=2")
    with pytest.raises(UsageError, match=r"bm25:k1=1.2,,b=0.5: an empty option"):
        split_inline("bm25:k1=1.2,,b=0.5")
    with pytest.raises(UsageError, match=r"bm25:b=0.5,: an empty option"):
        split_inline("bm25:b=0.5,")
    # a known retriever with ':' and no key=value is a typo, not a model id
    with pytest.raises(UsageError, match=r"--retriever bm25:lucene: the options after 'bm25:' must be key=value "
                                         r"pairs separated by commas, got 'lucene'; valid keys: b, identical_ids, k1"):
        RetrieverSpec.parse("bm25:lucene")


def test_one_retriever_spelled_two_ways_is_one_stored_result():
    assert RetrieverSpec.parse("bm25-lucene").key() == RetrieverSpec.parse("bm25:variant=lucene").key()
    assert RetrieverSpec.parse("bm25").key() != RetrieverSpec.parse("bm25-lucene").key()
    from r2med.config import RerankSpec
    from r2med.pipeline import reranker_key

    assert reranker_key(RerankSpec("mono")) == reranker_key(RerankSpec("monobert"))


def test_run_gives_each_component_its_own_flags():
    """--batch-size is the dense retriever's, --rerank-batch-size the reranker's; --device reaches both."""
    from r2med.cli.run import build_spec

    args = build_parser().parse_args(["run", "--retriever", "bm25", "--retriever", "Qwen/Qwen3-Embedding-0.6B",
                                      "--batch-size", "3", "--reranker", "mono", "--rerank-batch-size", "5",
                                      "--device", "cpu"])
    spec = build_spec(args)
    dense = spec.retrievers[1].resolved()
    assert (dense.batch_size, dense.device) == (3, "cpu")
    assert (spec.reranker.options.batch_size, spec.reranker.options.device) == (5, "cpu")


def test_a_pipeline_file_with_a_reranker_takes_its_device_flag(tmp_path):
    from r2med.cli.run import build_spec

    file = tmp_path / "p.toml"
    file.write_text('[[retriever]]\nname = "bm25"\n', encoding="utf-8")
    args = build_parser().parse_args(["run", "--config", str(file), "--reranker", "mono", "--device", "cpu"])
    assert build_spec(args).reranker.options.device == "cpu"


def test_an_unset_key_variable_fails_before_the_first_stage(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("R2MED_TEST_NO_SUCH_KEY", raising=False)
    out = tmp_path / "results"
    code = main(["run", "-q", "--data-dir", str(TINY), "--output", str(out), "--no-cache", "--reranker", "listwise",
                 "--llm-model", "m", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "R2MED_TEST_NO_SUCH_KEY"])
    assert code == 2
    assert "--api-key-env R2MED_TEST_NO_SUCH_KEY: that environment variable is not set" in capsys.readouterr().err
    assert not (out / "base retriever").exists()  # BM25 did not run first


def test_a_bm25_composition_is_a_variant_of_the_expansion_method(capsys):
    from r2med.expansion.options import _compositions

    assert _compositions() == ("query2doc-spaced",)
    code = main(["run", "--expansion", "hyde/o3-mini", "--bm25-composition", "query2doc-spaced"])
    assert code == 2
    assert ("--bm25-composition query2doc-spaced is for query2doc expansions, not hyde (--expansion hyde/o3-mini)"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit) as exited:  # the official one is the default, named by no flag
        main(["run", "--expansion", "query2doc/o3-mini", "--bm25-composition", "query2doc"])
    assert exited.value.code == 2
    assert "--bm25-composition: must be one of 'query2doc-spaced', got 'query2doc'" in capsys.readouterr().err
