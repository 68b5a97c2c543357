"""Dataset directory names: one directory per dataset, names that make safe and distinct result files."""

from __future__ import annotations

import shutil

from conftest import DATA


def _dataset(root, name):
    shutil.copytree(DATA / "tiny", root / name)
    return root / name


def test_directories_of_the_same_dataset_are_an_error_listing_them(cli, tmp_path):
    root = tmp_path / "data"
    for name in ("Biology", "biology", "Stack-Biology", "Bioinformatics"):
        _dataset(root, name)
    result = cli("run", "--data-dir", root, "--output", tmp_path / "out", "--no-cache")
    assert result.code == 5, result.err
    assert (f"r2med: error: --data-dir {root}: the directories 'Biology', 'Stack-Biology', 'biology' all hold "
            "dataset 'Biology'; keep one of them (move or rename the others)") in result.err
    assert not (tmp_path / "out").exists()
    # asking for another dataset of the same directory is fine
    ok = cli("run", "--data-dir", root, "--tasks", "Bioinformatics", "--output", tmp_path / "out", "--no-cache", "--json")
    assert ok.code == 0, ok.err
    assert list(ok.json()) == ["Bioinformatics", "average"]


def test_names_that_differ_only_in_case_are_an_error(cli, tmp_path):
    root = tmp_path / "data"
    for name in ("mine", "Mine"):
        _dataset(root, name)
    result = cli("datasets", "validate", "--data-dir", root)
    assert result.code == 5
    assert (f"--data-dir {root}: the directories 'Mine', 'mine' all hold dataset names that differ only in case; "
            "their result files would overwrite each other on a case-insensitive file system") in result.err


def test_a_dataset_name_with_a_reserved_suffix_is_refused(cli, tmp_path):
    root = tmp_path / "data"
    _dataset(root, "x")
    _dataset(root, "x.manifest")
    result = cli("run", "--data-dir", root, "--output", tmp_path / "out", "--no-cache")
    assert result.code == 5
    assert (f"r2med: error: --data-dir {root}: the dataset directory 'x.manifest' cannot be used as a folder or file "
            "name: it ends in '.manifest', the suffix of r2med's own files beside a result; rename the directory") \
        in result.err
    assert not (tmp_path / "out").exists()
    single = cli("run", "--data-dir", root / "x.manifest", "--output", tmp_path / "out", "--no-cache")
    assert single.code == 5 and "'x.manifest' cannot be used" in single.err


def test_data_dir_dot_names_the_dataset_after_the_directory(cli, tmp_path, monkeypatch):
    folder = _dataset(tmp_path, "mydata")
    monkeypatch.chdir(folder)
    result = cli("run", "--data-dir", ".", "--output", tmp_path / "out", "--no-cache", "--json")
    assert result.code == 0, result.err
    assert list(result.json()) == ["mydata", "average"]
    assert (tmp_path / "out" / "base retriever" / "bm25" / "mydata.json").is_file()


def test_loading_a_directory_with_a_reserved_name_lists_the_problem(tmp_path):
    import pytest

    from r2med.datasets import load_dir, scan_dir
    from r2med.errors import InvalidInputError

    folder = _dataset(tmp_path, "notes.per_query")
    dataset, problems = scan_dir(folder)
    assert dataset is None
    assert problems.errors == [(f"{folder}: the dataset name 'notes.per_query' cannot be used as a file name: it ends in "
                                "'.per_query', the suffix of r2med's own files beside a result; rename the directory")]
    with pytest.raises(InvalidInputError, match="1 problems"):
        load_dir(folder)
    assert scan_dir(folder, "notes")[0].name == "notes"
