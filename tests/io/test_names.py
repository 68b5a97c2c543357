"""Every name that becomes a path component goes through one check (``r2med.io.names``)."""

from __future__ import annotations

import hashlib

import pytest

from r2med.errors import InvalidInputError, UsageError
from r2med.io.names import check_dataset_name, check_name, name_problem


@pytest.mark.parametrize("name,problem", [
    ("", "it is empty"),
    ("   ", "it is only whitespace"),
    (".", "it is '.', which names this folder"),
    ("..", "it is '..', which names a folder above"),
    ("../../x", "it contains '/'"),
    ("/abs", "it contains '/'"),
    ("a\\b", "it contains '\\\\'"),
    ("a\x00b", "it contains the control character '\\x00'"),
    ("a\nb", "it contains the control character '\\n'"),
    ("a\x7fb", "it contains the control character '\\x7f'"),
    ("a\u2028b", "it contains the control character '\\u2028'"),
    ("bad\udcff", "it is not valid Unicode (a file name that is not UTF-8?)"),
    (" bm25", "it starts or ends with whitespace"),
    ("bm25\u00a0", "it starts or ends with whitespace"),
    ("-rf", "it starts with '-'"),
    ("x.", "it ends with '.'"),
    ("CON", "it is a reserved device name on Windows"),
    ("lpt1.json", "it is a reserved device name on Windows"),
    ("x" * 256, "it is 256 bytes long in UTF-8; the limit is 255"),
    (5, "it is int, not a string"),
])
def test_unusable_names_and_why(name, problem):
    assert name_problem(name) == problem
    with pytest.raises(UsageError) as err:
        check_name(name, what="--name")
    assert str(err.value).startswith(f"--name {name!r}"[:40])
    assert f"cannot be used as a folder or file name: {problem}; use a plain name" in str(err.value)


@pytest.mark.parametrize("name", ["bm25", "bm25+minilm", "gar-hyde-gpt4-nv", "Qwen__Qwen3-Embedding-0.6B", ".hidden",
                                  "a b", "é" * 127, "x" * 255, "console", "nul-model", "listwise-o3-mini+scores"])
def test_usable_names_pass_unchanged(name):
    assert name_problem(name) is None
    assert check_name(name, what="--name") == name


@pytest.mark.parametrize("name,problem", [
    ("x.manifest", "it ends in '.manifest', the suffix of r2med's own files beside a result"),
    ("x.per_query", "it ends in '.per_query', the suffix of r2med's own files beside a result"),
    ("X.WINDOWS", "it ends in '.windows', the suffix of r2med's own files beside a result"),
    ("d" * 201, "it is 201 bytes long in UTF-8; the limit is 200"),
])
def test_dataset_names_have_reserved_suffixes_and_a_shorter_limit(name, problem):
    assert name_problem(name) is None  # fine as a folder name
    assert name_problem(name, dataset=True) == problem
    with pytest.raises(InvalidInputError, match="rename the directory"):
        check_dataset_name(name, what="dataset", fix="rename the directory", error=InvalidInputError)
    assert check_dataset_name("x.manifests", what="dataset", fix="") == "x.manifests"


def test_the_reserved_suffixes_cover_every_file_stored_beside_a_result(tmp_path):
    from r2med.io.names import RESERVED_SUFFIXES
    from r2med.manifest import manifest_path
    from r2med.store.results import SystemPath, result_files

    files = result_files(tmp_path, SystemPath.base("bm25"), "Biology")
    stems = {p.name[len("Biology"):].rsplit(".", 1)[0] for p in (files.per_query, manifest_path(files.result))}
    stems.add(".windows")  # the listwise reranker's artifact (stages.rerank), <Dataset>.windows.jsonl
    assert stems == set(RESERVED_SUFFIXES)


@pytest.mark.parametrize("make", [
    lambda S: S.base(".."),
    lambda S: S.base(""),
    lambda S: S.fusion("/tmp/abs"),
    lambda S: S.fusion("../../x"),
    lambda S: S.gar("hyde", "..", "bm25"),
    lambda S: S.gar("../m", "gpt4", "bm25"),
    lambda S: S.rerank("listwise-../..", "bm25", 10),
    lambda S: S.rerank("bge-reranker", "a/b", 10),
    lambda S: S.parse("base retriever/.."),
    lambda S: S.parse("gar/hyde/../bm25"),
])
def test_system_paths_refuse_components_that_leave_the_output(make):
    from r2med.store.results import SystemPath

    with pytest.raises(UsageError, match="cannot be used as a folder or file name"):
        make(SystemPath)


def test_system_path_names_the_role_of_the_bad_component():
    from r2med.store.results import SystemPath

    with pytest.raises(UsageError) as err:
        SystemPath.rerank("listwise-../..", "bm25", 10)
    assert str(err.value).startswith("the reranker name 'listwise-../..' cannot be used as a folder or file name: "
                                     "it contains '/'")
    with pytest.raises(UsageError, match="top_k must be a positive integer, got 0"):
        SystemPath.rerank("bge-reranker", "bm25", 0)
    with pytest.raises(UsageError, match="kind 'x' is not one of"):
        SystemPath("x", "bm25")


def test_system_name_of_a_model_path_is_checked(tmp_path, monkeypatch):
    from r2med.retrievers.registry import system_name

    (tmp_path / "my-model" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "my-model" / "sub")
    # a directory: its last part and 8 hex digits of its absolute path's sha256 (two folders named alike differ)
    assert system_name("/models/my-model/") == system_name("/models/my-model") == "my-model-6b7440fa"
    assert system_name("/other/my-model") == "my-model-2c88e827"
    up = hashlib.sha256(str(tmp_path / "my-model").encode()).hexdigest()[:8]
    here = hashlib.sha256(str(tmp_path / "my-model" / "sub").encode()).hexdigest()[:8]
    # the folders they stand for, not '..' or ''
    assert system_name("..") == f"my-model-{up}" and system_name("./") == f"sub-{here}"
    for name, problem in (("/", "it is empty"), ("-x", "it starts with '-'"), ("m" * 300, "it is 300 bytes long"),
                          ("nul", "it is a reserved device name on Windows")):
        with pytest.raises(UsageError) as err:
            system_name(name)
        assert str(err.value).startswith(f"--retriever {name!r}: its results folder name ")
        assert problem in str(err.value)
    with pytest.raises(UsageError, match="^--reranker '-x': its results folder name '-x' cannot be used"):
        system_name("-x", flag="--reranker")


def test_expansion_names_are_checked():
    from r2med.expansion.published import parse_expansion_spec
    from r2med.settings import get_settings
    from r2med.store.expansions import expansion_dir, llm_dir_name

    settings = get_settings({"R2MED_HOME": "/h"})
    with pytest.raises(UsageError, match="the dataset name '..' cannot be used"):
        expansion_dir(settings, "..", "hyde", "gpt4")
    with pytest.raises(UsageError, match="the LLM name 'a/b' cannot be used"):
        expansion_dir(settings, "Biology", "hyde", "a/b")  # a folder name, not made one (that is llm_dir_name's)
    with pytest.raises(UsageError, match="--expansion 'hyde/CON': the part 'CON' cannot be used"):
        parse_expansion_spec("hyde/CON")
    with pytest.raises(UsageError, match="is 300 bytes long"):
        llm_dir_name("q" * 300)
    assert llm_dir_name("../../x") == "x"  # a model id is made safe, not refused

