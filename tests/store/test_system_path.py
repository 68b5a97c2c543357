"""The one result-path grammar: ``SystemPath`` parses every shape (the official results/ tree's too), gives the
path back, finds the system path a folder ends with, and refuses a bad path with a message that names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med.errors import UsageError
from r2med.store.results import OfficialTree, SystemPath

TREE = OfficialTree({"mono": "monobert", "bge": "bge-reranker"}, "nv")
SHAPES = ("'base retriever/<system>', 'gar/<method>/<llm>/<system>', 'reranker/<reranker>/<system>/top_<k>', "
          "'fusion/<system>' or 'agent/<style>/<llm>/<system>'")


@pytest.mark.parametrize("text,expected", [
    ("base retriever/bm25", SystemPath("base retriever", "bm25")),
    ("gar/hyde/gpt4/nv", SystemPath("gar", "nv", method="hyde", llm="gpt4")),
    ("reranker/bge/nv/top_10", SystemPath("reranker", "nv", reranker="bge", top_k=10)),
    ("reranker/listwise-gpt4/bm25/top_100", SystemPath("reranker", "bm25", reranker="listwise-gpt4", top_k=100)),
    ("fusion/bm25+minilm", SystemPath("fusion", "bm25+minilm")),
    ("agent/search-r1/qwen/bm25", SystemPath("agent", "bm25", method="search-r1", llm="qwen")),
])
def test_every_shape_parses_and_gives_its_path_back(text, expected, tmp_path):
    where = SystemPath.parse(text)
    assert where == expected
    assert str(where) == text and SystemPath.parse(str(where)) == where
    assert where.directory(tmp_path) == tmp_path.joinpath(*text.split("/"))
    assert SystemPath.parse(text, tree=TREE) == where  # the official tree's spelling changes only its own shape
    assert SystemPath.parse(f"/{text.replace('/', '//')}/") == where  # outer and doubled slashes are no folder


@pytest.mark.parametrize("text,expected", [
    ("reranker/mono/top_10", "reranker/monobert/nv/top_10"),
    ("reranker/bge/top_100", "reranker/bge-reranker/nv/top_100"),
    ("reranker/other/top_5", "reranker/other/nv/top_5"),  # a short name the table lacks is kept
])
def test_the_official_tree_reranker_shape_reads_as_the_published_path(text, expected):
    assert str(SystemPath.parse(text, tree=TREE)) == expected


def test_the_official_tree_shape_is_no_path_of_r2med_own():
    with pytest.raises(UsageError) as err:
        SystemPath.parse("reranker/mono/top_10")
    assert str(err.value) == f"'reranker/mono/top_10' is not a system path; expected {SHAPES}"
    with pytest.raises(UsageError) as err:
        SystemPath.parse("reranker/mono/latest", tree=TREE)
    assert str(err.value) == (f"'reranker/mono/latest' is not a system path; expected {SHAPES} (or, in the official "
                              "results/ tree, 'reranker/<reranker>/top_<k>')")


@pytest.mark.parametrize("text", [
    "", "/", "bm25", "base retriever", "base retriever/bm25/extra", "gar/hyde/bm25", "gar/hyde/gpt4/nv/x",
    "fusion", "agent/search-r1/bm25", "reranker/bge/nv", "reranker/bge/nv/10", "reranker/bge/nv/top_",
    "reranker/bge/nv/top_x", "reranker/bge/nv/top_010", "reranker/bge/nv/top_1.5", "reranker/bge/nv/top_-1",
    "reranker/bge/nv/top_\u0663", "Gar/hyde/gpt4/nv", "dense/minilm",
])
def test_a_path_of_no_shape_is_refused_naming_it_and_the_shapes(text):
    with pytest.raises(UsageError) as err:
        SystemPath.parse(text)
    assert str(err.value) == f"'{text}' is not a system path; expected {SHAPES}"
    assert SystemPath.maybe(text) is None


@pytest.mark.parametrize("text,message", [
    ("reranker/bge/nv/top_0", "a reranker's top_k must be a positive integer, got 0"),
    ("gar/hyde/../nv", "the llm name '..' cannot be used as a folder or file name: it is '..', which names a folder"),
    ("base retriever/-x", "the system name '-x' cannot be used as a folder or file name: it starts with '-'"),
    ("agent/ r1/qwen/bm25", "the method name ' r1' cannot be used as a folder or file name"),
    ("reranker/nul/nv/top_10", "the reranker name 'nul' cannot be used as a folder or file name"),
])
def test_a_shape_with_a_bad_component_is_refused_naming_its_role(text, message):
    with pytest.raises(UsageError) as err:
        SystemPath.parse(text)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("folder,expected", [
    ("/r/results/base retriever/bm25", "base retriever/bm25"),
    ("/r/results/gar/hyde/gpt4/nv", "gar/hyde/gpt4/nv"),
    ("results/reranker/bge/nv/top_10", "reranker/bge/nv/top_10"),
    ("/r/fusion/a+b", "fusion/a+b"),
    ("/r/agent/search-r1/qwen/bm25", "agent/search-r1/qwen/bm25"),
    ("/r/gar/hyde/gpt4/base retriever/bm25", "base retriever/bm25"),  # the deepest level that parses
    ("/r/base retriever/gar", "base retriever/gar"),  # a system named like a kind
    ("/r/results/reranker/mono/top_10", None),  # the official tree's shape needs the tree
    ("/r/runs/mine", None),
    ("/r/results/reranker/bge/nv/top_010", None),
    ("/", None),
])
def test_the_system_path_a_folder_ends_with(folder, expected):
    found = SystemPath.ending(Path(folder))
    assert (None if found is None else str(found)) == expected


def test_the_official_tree_folder_ends_with_the_published_path():
    assert str(SystemPath.ending(Path("/r/results/reranker/mono/top_10"), tree=TREE)) == "reranker/monobert/nv/top_10"
    # r2med's own four-level reranker path keeps its names, the tree or not
    assert str(SystemPath.ending(Path("/r/reranker/mono/nv/top_10"), tree=TREE)) == "reranker/mono/nv/top_10"
