"""Catalog, loading (R2MED, BEIR, TREC qrels, directories of datasets), validation and statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DATA, SHARED, shared_path
from json_decoders import json_decoder  # noqa: F401 (autouse: every test with msgspec and with json alone)
from r2med.datasets import get_spec, load_datasets, load_dir, local_dataset_dirs, resolve_names, scan_dir
from r2med.datasets.catalog import dataset_names
from r2med.datasets.stats import compute_stats
from r2med.errors import InvalidInputError, MissingResourceError, UsageError


def test_catalog_has_the_eight_datasets_as_published():
    assert dataset_names() == [
        "Biology", "Bioinformatics", "Medical-Sciences", "MedXpertQA-Exam",
        "MedQA-Diag", "PMC-Treatment", "PMC-Clinical", "IIYi-Clinical",
    ]
    shared = SHARED / "protocol" / "datasets.json"
    if shared.exists():
        for task in json.loads(shared.read_text())["tasks"]:
            spec = get_spec(task["name"])
            assert (spec.repo, spec.revision, spec.queries, spec.documents) == (
                task["repo"], task["revision"], task["queries"], task["documents"])
    assert sum(get_spec(n).queries for n in dataset_names()) == 876


@pytest.mark.parametrize("alias,name", [
    ("stack-biology", "Biology"), ("Stack-Bioinformatics", "Bioinformatics"), ("Stack-Medical", "Medical-Sciences"),
    ("PMC-Treat", "PMC-Treatment"), ("PMCPatients", "PMC-Clinical"), ("IIYiPatients-EN", "IIYi-Clinical"),
    ("medqa-diag", "MedQA-Diag"), ("MEDXPERTQA-EXAM", "MedXpertQA-Exam"),
])
def test_names_resolve_case_insensitively_and_through_aliases(alias, name):
    assert get_spec(alias).name == name


def test_unknown_name_suggests_and_lists():
    with pytest.raises(UsageError) as err:
        get_spec("Biolgy")
    assert "did you mean 'Biology'" in str(err.value) and "IIYi-Clinical" in str(err.value)
    assert [s.name for s in resolve_names(["all"])] == dataset_names()
    assert [s.name for s in resolve_names(["biology", "Stack-Biology"])] == ["Biology"]


def test_load_biology_demo_sample():
    ds = load_dir(shared_path("samples", "Biology-demo"), "Biology")
    assert len(ds.doc_ids) == 2 and len(ds.queries) == 2
    assert ds.judged_query_ids == ["0"]
    assert ds.query_fields["0"]["doc_id"][0].startswith("insects_attracted_to_light/")
    # unjudged queries are left out of scoring as the benchmark does: said at INFO (-v), not warned (the Python API
    # would print a warning with progress off); judgements of absent documents change scores: a warning
    assert ds.infos == ("1 queries have no judgements (e.g. '1'); they are excluded from scoring",)
    assert not any("no judgements" in w for w in ds.warnings)
    assert any("not in the corpus" in w for w in ds.warnings)


def test_the_python_api_prints_nothing_about_unjudged_queries(tmp_path):
    """In a plain Python process (no logging set up: Python prints warnings itself), not under pytest's handlers."""
    import subprocess
    import sys

    code = ("import r2med; r2med.run('bm25', data_dir={data!r}, datasets='Biology-demo', output={out!r}, "
            "progress=False)").format(data=str(shared_path("samples")), out=str(tmp_path / "out"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "not in the corpus" in done.stderr  # a real warning still shows
    assert "no judgements" not in done.stderr + done.stdout


def test_a_beir_folder_with_only_dev_judgements_says_so(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "fever"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "fever"}\n')
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    ds = load_dir(folder)
    said = (f"{folder / 'qrels' / 'dev.tsv'}: scored on BEIR's dev split (the folder has no qrels/test.tsv); its "
            "numbers are not test numbers")
    assert ds.warnings == (said,)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert load_dir(folder).warnings == ()  # the test split, when there is one, says nothing


def test_load_scifact_with_hashes():
    ds = load_dir(shared_path("data", "scifact"))
    assert (len(ds.doc_ids), len(ds.queries), len(ds.judged_query_ids)) == (5183, 300, 300)
    assert set(ds.sha256) == {"corpus.jsonl", "query.jsonl", "qrels.jsonl"}
    assert all(len(h) == 64 for h in ds.sha256.values())
    assert ds.warnings == ()


def test_tiny_stats_worked_out():
    stats = compute_stats(load_dir(DATA / "tiny"))
    # judged queries q1 (4 words, 2 positives) and q2 (5 words, 1 positive; d3 has grade 0)
    assert (stats.queries, stats.documents) == (2, 4)
    assert stats.avg_positives == pytest.approx(1.5)
    assert stats.query_len == pytest.approx(4.5)
    assert stats.doc_len == pytest.approx((5 + 4 + 7 + 6) / 4)  # words per document


def test_beir_layout_joins_title_and_text():
    ds = load_dir(DATA / "tiny_beir")
    assert ds.layout == "beir"
    assert ds.corpus == {"d1": "Aspirin reduces fever and pain", "d2": "insulin regulates blood glucose"}
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 1}}


def test_directory_of_datasets_resolves_old_names(tmp_path):
    for folder in ("Stack-Biology", "PMC-Treat", "mine"):
        target = tmp_path / folder
        target.mkdir()
        for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
            (target / name).write_text((DATA / "tiny" / name).read_text())
    assert [n for n, _ in local_dataset_dirs(tmp_path)] == ["Biology", "PMC-Treatment", "mine"]
    assert [n for n, _ in local_dataset_dirs(tmp_path, ["pmc-treatment"])] == ["PMC-Treatment"]
    with pytest.raises(MissingResourceError, match="no directory for dataset 'MedQA-Diag'"):
        local_dataset_dirs(tmp_path, ["MedQA-Diag"])
    loaded = load_datasets(["Biology"], data_dir=tmp_path)
    assert loaded[0].name == "Biology" and len(loaded[0].doc_ids) == 4


def test_duplicate_doc_ids_are_kept_and_reported(tmp_path):
    make(tmp_path, corpus=['{"id": "a", "text": "one"}', '{"id": "b", "text": "two"}', '{"id": "a", "text": "three"}'])
    ds = load_dir(tmp_path)
    assert ds.doc_ids == ["a", "b", "a"]
    assert ds.corpus == {"a": "three", "b": "two"}
    assert ds.n_duplicate_doc_rows == 1
    assert any("1 rows repeat an earlier document id" in w and "line 3" in w for w in ds.warnings)


def test_integer_ids_are_coerced_and_counted(tmp_path):
    make(tmp_path, corpus=['{"id": 1, "text": "one"}', '{"id": "2", "text": "two"}'],
         queries=['{"id": 7, "text": "q"}'], qrels=['{"q_id": 7, "p_id": 1, "score": "1"}'])
    ds = load_dir(tmp_path)
    assert ds.doc_ids == ["1", "2"] and ds.qrels == {"7": {"1": 1}}
    assert any("non-string ids converted" in w for w in ds.warnings)


def test_query_id_equal_to_doc_id_is_reported(tmp_path):
    make(tmp_path, corpus=['{"id": "0", "text": "x"}'], queries=['{"id": "0", "text": "q"}'], qrels=['{"q_id": "0", "p_id": "0", "score": 1}'])
    assert any("query ids are also document ids" in w for w in load_dir(tmp_path).warnings)


def test_empty_texts_are_counted(tmp_path):
    make(tmp_path, corpus=['{"id": "a", "text": ""}', '{"id": "b", "text": "  "}', '{"id": "c", "text": "ok"}'])
    assert any("2 documents with empty text (kept) (first at lines 1, 2)" in w for w in load_dir(tmp_path).warnings)


def make(folder: Path, corpus=None, queries=None, qrels=None) -> Path:
    """Write a small R2MED-layout dataset; each argument is a list of raw lines."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = corpus or ['{"id": "d1", "text": "one"}', '{"id": "d2", "text": "two"}']
    queries = queries or ['{"id": "q1", "text": "query one"}']
    qrels = qrels or ['{"q_id": "q1", "p_id": "d1", "score": 1}']
    for name, lines in (("corpus.jsonl", corpus), ("query.jsonl", queries), ("qrels.jsonl", qrels)):
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


BAD_INPUTS = [
    # (file, raw lines, expected line number, expected message fragment)
    ("corpus", ['{"id": "d1", "text": "one"}', '{"id": "d2", "text": "two"'], 2, "malformed JSON"),
    ("corpus", ['{"id": "d1", "text": "one"}', '{"text": "no id"}'], 2, "missing field 'id'"),
    ("corpus", ['{"id": "d1"}'], 1, "missing field 'text'"),
    ("corpus", ['{"id": 1.5, "text": "x"}'], 1, "must be a string or an integer, got float 1.5"),
    ("corpus", ['{"id": "d1", "text": 12}'], 1, "field 'text' must be a string"),
    ("corpus", ['["d1", "one"]'], 1, "expected a JSON object"),
    ("queries", ['{"id": "q1", "text": "fine"}', '{"id": "", "text": "x"}'], 2, "empty string"),
    ("qrels", ['{"q_id": "q1", "p_id": "d1"}'], 1, "missing field(s) 'score'"),
    ("qrels", ['{"q_id": "q1", "p_id": "d1", "score": "high"}'], 1, "relevance must be an integer"),
]


@pytest.mark.parametrize("which,lines,line_no,fragment", BAD_INPUTS)
def test_bad_input_exits_5_with_file_and_line_and_writes_nothing(which, lines, line_no, fragment, tmp_path, cli, isolated_home):
    folder = make(tmp_path / "ds", **{which: lines})
    before = sorted(p for p in tmp_path.rglob("*"))
    fname = {"corpus": "corpus.jsonl", "queries": "query.jsonl", "qrels": "qrels.jsonl"}[which]
    for command in ("stats", "validate"):
        result = cli("datasets", command, "--data-dir", folder)
        assert result.code == 5, (command, result.err, result.out)
        text = result.err + result.out
        assert f"{folder / fname}:{line_no}:" in text and fragment in text, text
    with pytest.raises(InvalidInputError) as err:
        load_dir(folder)
    assert any(f"{fname}:{line_no}:" in p and fragment in p for p in err.value.problems)
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert list(isolated_home.rglob("*")) == []


def test_validate_reports_every_problem_not_just_the_first(tmp_path, cli):
    folder = make(tmp_path, corpus=['{"id": "d1", "text": "one"}', "{oops", '{"id": "d3"}', '{"id": "d1", "text": ""}'],
                  qrels=['{"q_id": "q1", "p_id": "d1", "score": 1}', '{"q_id": "q9", "p_id": "zz", "score": "x"}'])
    result = cli("datasets", "validate", "--data-dir", folder, "--json")
    assert result.code == 5
    entry = result.json()[folder.name]
    assert not entry["usable"]
    assert [e.split(": ", 1)[0] for e in entry["errors"]] == [
        f"{folder / 'corpus.jsonl'}:2", f"{folder / 'corpus.jsonl'}:3", f"{folder / 'qrels.jsonl'}:2"]
    assert any("repeat an earlier document id" in w for w in entry["warnings"])
    assert any("empty text" in w for w in entry["warnings"])


def test_invalid_utf8_is_reported_with_line(tmp_path, cli):
    folder = make(tmp_path)
    (folder / "corpus.jsonl").write_bytes(b'{"id": "d1", "text": "ok"}\n{"id": "d2", "text": "\xff\xfe"}\n')
    dataset, problems = scan_dir(folder)
    assert dataset is None and problems.errors[0].startswith(f"{folder / 'corpus.jsonl'}:2: not valid UTF-8")


def test_missing_files_exit_4(tmp_path, cli):
    (tmp_path / "corpus.jsonl").write_text('{"id": "d", "text": "t"}\n')
    result = cli("datasets", "stats", "--data-dir", tmp_path)
    assert result.code == 4
    assert "missing query.jsonl" in result.err and "qrels.jsonl" in result.err


def test_stats_json_on_scifact(cli):
    result = cli("datasets", "stats", "--data-dir", shared_path("data", "scifact"), "--json")
    assert result.code == 0
    row = result.json()[0]
    assert (row["name"], row["queries"], row["documents"]) == ("scifact", 300, 5183)
    assert row["avg_positives"] == pytest.approx(339 / 300)


def test_unknown_documents_in_qrels_are_named_with_their_lines(tmp_path, cli):
    folder = make(tmp_path / "ds", qrels=['{"q_id": "q1", "p_id": "d1", "score": 1}', '{"q_id": "q1", "p_id": "zz", "score": 1}',
                                         '{"q_id": "q1", "p_id": "yy", "score": 0}', '{"q_id": "q9", "p_id": "d2", "score": 1}'])
    warnings = load_dir(folder).warnings
    qrels = folder / "qrels.jsonl"
    assert f"{qrels}: 2 judgements point at document ids not in the corpus: 'zz' (line 2), 'yy' (line 3); they still count as relevant" in warnings
    assert f"{qrels}: 1 judged query ids are not in the queries: 'q9' (line 4); they are not scored" in warnings
    result = cli("datasets", "validate", "--data-dir", folder)
    assert result.code == 0 and "'zz' (line 2), 'yy' (line 3)" in result.out


def test_a_dataset_directory_without_corpus_says_which_file_is_missing_where(tmp_path, cli):
    folder = make(tmp_path / "ds")
    (folder / "corpus.jsonl").unlink()
    for command in ("validate", "stats"):
        result = cli("datasets", command, "--data-dir", folder)
        assert result.code == 4, result.err
        assert f"{folder}: not a dataset directory, missing corpus.jsonl" in result.err
        assert "no dataset directories inside" not in result.err
    # a directory of datasets: the one without a corpus is named
    make(tmp_path / "all" / "Biology")
    (tmp_path / "all" / "Biology" / "corpus.jsonl").unlink()
    result = cli("datasets", "validate", "--data-dir", tmp_path / "all")
    assert result.code == 4
    assert f"{tmp_path / 'all' / 'Biology'}: not a dataset directory, missing corpus.jsonl" in result.err
    result = cli("datasets", "validate", "biology", "--data-dir", tmp_path / "all")
    assert result.code == 4 and f"{tmp_path / 'all' / 'Biology'}: not a dataset directory, missing corpus.jsonl" in result.err


def test_duplicate_document_ids_are_called_duplicates_with_ids_and_lines(tmp_path):
    make(tmp_path, corpus=['{"id": "a", "text": "one"}', '{"id": "b", "text": "two"}', '{"id": "a", "text": "three"}',
                           '{"id": "b", "text": "four"}', '{"id": "a", "text": "five"}'])
    (warning,) = [w for w in load_dir(tmp_path).warnings if "repeat an earlier document id" in w]
    assert warning.startswith(f"{tmp_path / 'corpus.jsonl'}: 3 rows repeat an earlier document id (duplicate ids: "
                              "'a' at lines 1, 3, 5; 'b' at lines 2, 4;")
    make(tmp_path, queries=['{"id": "q1", "text": "x"}', '{"id": "q1", "text": "y"}'])
    assert any("duplicate ids: 'q1' at lines 1, 2" in w for w in load_dir(tmp_path).warnings)


def test_queries_without_any_judgement_make_the_dataset_unusable(tmp_path, cli):
    folder = make(tmp_path / "ds", queries=['{"id": "1", "text": "x"}', '{"id": "2", "text": "y"}'],
                  qrels=['{"q_id": "q1", "p_id": "d1", "score": 1}'])
    result = cli("datasets", "validate", "--data-dir", folder)
    assert result.code == 5, result.out
    assert (f"{folder / 'qrels.jsonl'}: nothing to score: no query of {folder / 'query.jsonl'} has a judgement "
            "(queries: '1', '2'; judged: 'q1')") in result.out
