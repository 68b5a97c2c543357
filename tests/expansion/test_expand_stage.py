"""``r2med expand`` as a stage: its ``query_with_hydoc.jsonl`` gets a runner manifest recording the configuration;
a rerun keeps it (nothing requested), makes it again when the configuration changed (from the generations cache),
and refuses (exit 5) to write over a file edited since."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))
from chat_server import Status
from test_generate import TINY, server, tiny  # noqa: F401 - the scripted chat server and tiny as Biology (fixtures)

from r2med.expansion.generate import ExpansionConfig, plan_expansions
from r2med.expansion.prompts import build_prompt, prompt_sha256
from r2med.llm import ChatClient, SamplingParams, request_key
from r2med.stages.expand import Expand, expand_dataset
from r2med.types import Run


SAMPLING = SamplingParams(temperature=0.7, max_tokens=48, seed=42)


def config(server, method="hyde", **kwargs) -> ExpansionConfig:
    return ExpansionConfig(method, "tiny-llm", server.base_url, SAMPLING, concurrency=2, **kwargs)


def client(server) -> ChatClient:
    return ChatClient("tiny-llm", server.base_url, max_retries=1, backoff=0.001, max_backoff=0.01)


def manifest(folder: Path) -> dict:
    return json.loads((folder / "query_with_hydoc.manifest.json").read_text())


def test_the_expansion_file_has_a_manifest_of_its_configuration(server, tiny, tmp_path):
    report = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (report.written, report.reused) == (3, False)
    stored = manifest(tmp_path)
    assert stored["system"] == "expand/hyde/tiny-llm"
    assert set(stored["files"]) == {"query_with_hydoc.jsonl", "summary.json"}  # not the append-only cache
    expansions = (tmp_path / "query_with_hydoc.jsonl").read_bytes()
    assert stored["files"]["query_with_hydoc.jsonl"] == {"sha256": hashlib.sha256(expansions).hexdigest(),
                                                         "size": len(expansions)}
    system = "You are a helpful assistant."
    keys = [[qid, request_key("tiny-llm", [{"role": "system", "content": system},
                                          {"role": "user", "content": build_prompt("hyde", "Biology", text)}], SAMPLING)]
            for qid, text in tiny.queries.items()]
    assert stored["config"] == {
        "system": "expand/hyde/tiny-llm",
        "expansion": {"method": "hyde", "model": "tiny-llm", "llm": "tiny-llm",
                      "sampling": '{"max_tokens": 48, "seed": 42, "temperature": 0.7, "top_p": null}',
                      "style": "auto", "parsed_as": "auto", "policy": "fallback",
                      "prompt": {"dataset": "Biology", "sha256": prompt_sha256("hyde", "Biology"), "system": system},
                      "requests_sha256": hashlib.sha256(json.dumps(keys).encode()).hexdigest()},
        "dataset": {"name": "Biology", "revision": tiny.revision, "sha256": dict(tiny.sha256)},
    }
    assert stored["details"] == {"expansion": {"dataset": "Biology", "method": "hyde", "llm": "tiny-llm", "queries": 3,
                                               "written": 3, "truncated": 0, "fell_back": 0}}


def test_a_rerun_keeps_the_file_and_requests_nothing(server, tiny, tmp_path):
    expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    again = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (again.reused, again.cached, again.requested, again.written, again.usage.requests) == (True, 3, 0, 3, 0)
    assert again.paths["expansions"] == tmp_path / "query_with_hydoc.jsonl" and len(server.requests) == 3
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written again


def test_another_configuration_is_made_again_from_the_cache(server, tiny, tmp_path):
    expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    first = manifest(tmp_path)["config_sha256"]
    authors = expand_dataset(tiny, config(server, policy="authors"), out_dir=tmp_path, client=client(server),
                             progress=False)
    assert (authors.reused, authors.requested, len(server.requests)) == (False, 0, 3)  # the answers were stored
    stored = manifest(tmp_path)
    assert stored["config"]["expansion"]["policy"] == "authors" and stored["config_sha256"] != first
    assert {json.loads(line)["answer_policy"] for line in (tmp_path / "query_with_hydoc.jsonl").read_text().splitlines()} == {"authors"}


def test_lamer_is_keyed_by_its_first_stage_passages(server, tiny, tmp_path):
    one = Run({"q1": {"d4": 3.0, "d1": 2.0}, "q2": {"d2": 1.0}, "q3": {"d3": 1.0}})
    other = Run({"q1": {"d1": 3.0, "d4": 2.0}, "q2": {"d2": 1.0}, "q3": {"d3": 1.0}})  # another order of q1's top
    plans = [plan_expansions(tiny, config(server, "lamer"), run) for run in (one, other)]
    assert plans[0].keys["q2"] == plans[1].keys["q2"] and plans[0].keys["q1"] != plans[1].keys["q1"]
    assert plans[0].key()["expansion"]["requests_sha256"] != plans[1].key()["expansion"]["requests_sha256"]
    expand_dataset(tiny, config(server, "lamer"), out_dir=tmp_path, client=client(server), first_stage=one,
                   progress=False)
    again = expand_dataset(tiny, config(server, "lamer"), out_dir=tmp_path, client=client(server), first_stage=other,
                           progress=False)
    assert (again.reused, again.cached, again.requested) == (False, 2, 1)


def test_failed_queries_leave_no_manifest_and_the_rerun_completes_it(server, tiny, tmp_path):
    server.script(build_prompt("hyde", "Biology", "what lowers a fever"), *[Status(500)] * 2)
    report = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert report.failed == 1 and not (tmp_path / "query_with_hydoc.manifest.json").exists()
    assert report.problem().startswith("1 of 3 queries have no expansion (first: ('q1', ")
    assert report.problem().endswith(f"the finished ones are in {tmp_path / 'query_with_hydoc.jsonl'} and "
                                     f"{tmp_path / 'generations.jsonl'}: rerun to retry them")
    rerun = expand_dataset(tiny, config(server), out_dir=tmp_path, client=client(server), progress=False)
    assert (rerun.reused, rerun.cached, rerun.requested, rerun.written) == (False, 2, 1, 3)
    assert manifest(tmp_path)["details"]["expansion"]["written"] == 3


# ------------------------------------------------------------------ CLI
BASE = ["expand", "--method", "hyde", "--llm-model", "m", "--max-tokens", "16"]


@pytest.fixture
def data(tmp_path):
    shutil.copytree(TINY, tmp_path / "data" / "Biology")
    return tmp_path / "data"


def test_cli_an_edited_expansion_file_is_exit_5_naming_it(cli, server, data, tmp_path):
    out = tmp_path / "x"
    assert cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--out", out).code == 0
    edited = out / "query_with_hydoc.jsonl"
    rows = edited.read_text().splitlines()
    edited.write_text("\n".join([rows[0].replace('"hy_doc": "', '"hy_doc": "EDITED '), *rows[1:]]) + "\n")
    again = cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--out", out)
    assert again.code == 5 and len(server.requests) == 3
    assert f"r2med: error: {edited}: does not match the checksum r2med recorded" in again.err
    assert ("(query_with_hydoc.manifest.json); r2med keeps it; to have it made again, delete query_with_hydoc.jsonl "
            f"and query_with_hydoc.manifest.json in {out}") in again.err
    assert "EDITED" in edited.read_text() and "Traceback" not in again.err
    edited.unlink()  # what the message says: made again, from the cache
    remade = cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--out", out, "--json")
    assert remade.code == 0 and len(server.requests) == 3
    assert (remade.json()["Biology"]["reused"], remade.json()["Biology"]["cached"]) == (False, 3)


def test_cli_a_kept_file_says_so_and_an_older_file_is_made_again(cli, server, data, tmp_path):
    out = tmp_path / "x"
    assert cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--out", out).code == 0
    kept = cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--out", out)
    assert kept.code == 0 and ("Biology: 3 queries, 3 cached, 0 requested, 0 failed, 0 truncated traces, 0 fell back; "
                               "0 requests (0 retries), 0 prompt + 0 completion tokens; ") in kept.out
    assert kept.out.rstrip().endswith(f"-> {out / 'query_with_hydoc.jsonl'} (kept: made by the same configuration)")
    (out / "query_with_hydoc.manifest.json").unlink()  # as an older r2med left it
    older = cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--out", out, "--json")
    assert older.code == 0 and older.json()["Biology"]["reused"] is False and len(server.requests) == 3
    assert f"query_with_hydoc.jsonl in {out} has no manifest (written by an older r2med" in older.err
    assert (out / "query_with_hydoc.manifest.json").is_file()


def test_cli_several_datasets_one_manifest_each_and_a_failure_exits_6(cli, server, data, tmp_path):
    shutil.copytree(TINY, data / "Other")
    server.script(build_prompt("hyde", "Biology", "what lowers a fever"), *[Status(500)] * 2)
    result = cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--tasks", "Biology,Other",
                 "--prompt-dataset", "Biology", "--out", tmp_path / "x", "--max-retries", "1")
    assert result.code == 6 and "failed q1: " in result.out and "total: 6 queries" in result.out
    assert not (tmp_path / "x" / "Biology" / "query_with_hydoc.manifest.json").exists()
    assert (tmp_path / "x" / "Other" / "query_with_hydoc.manifest.json").is_file()
    assert "r2med: error" not in result.err  # the failures are the report's, as before
    again = cli(*BASE, "--base-url", server.base_url, "--data-dir", data, "--tasks", "Biology,Other",
                "--prompt-dataset", "Biology", "--out", tmp_path / "x", "--json")
    reports = again.json()
    assert again.code == 0 and (reports["Biology"]["requested"], reports["Other"]["reused"]) == (1, True)


def test_the_default_folder_cleans_a_model_id_once_and_the_method_is_as_run_names_it(tiny, isolated_home):
    stage = Expand(ExpansionConfig(" Query2doc", "org/Model X", "http://127.0.0.1:9/v1", SAMPLING))
    assert stage.name == "expand/query2doc/org_Model_X"
    assert stage.folder(tiny) == isolated_home / "expansions" / "Biology" / "query2doc" / "org_Model_X"


def test_cli_an_unset_api_key_variable_is_a_usage_error(cli, data, monkeypatch):
    monkeypatch.delenv("R2MED_TEST_NO_SUCH_KEY", raising=False)
    result = cli(*BASE, "--base-url", "http://127.0.0.1:9/v1", "--data-dir", data, "--api-key-env", "R2MED_TEST_NO_SUCH_KEY")
    assert (result.code, result.err) == (2, "r2med: error: --api-key-env R2MED_TEST_NO_SUCH_KEY: that environment "
                                            "variable is not set\n")
