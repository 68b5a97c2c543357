"""Qrels formats are decided by extension and header, never by column count; BEIR TSV splits on tabs only."""

from __future__ import annotations

import pytest

from conftest import DATA
from json_decoders import json_decoder  # noqa: F401 (autouse: every test with msgspec and with json alone)
from r2med.datasets import load_dir
from r2med.errors import InvalidInputError
from r2med.evaluation import evaluate
from r2med.evaluation.files import load_qrels


def test_beir_tsv_is_split_on_tabs_only(tmp_path, cli):
    # before: split on any white space, 'q1<TAB>doc A<TAB>1' was read as TREC 'q1 doc A 1' and judged document 'A'
    path = tmp_path / "test.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tdoc A\t1\n")
    with pytest.raises(InvalidInputError) as err:
        load_qrels(path)
    assert [p.split(": ", 1)[0] for p in err.value.problems] == [f"{path}:3"]
    assert "field 'document id' 'doc A' contains white space U+0020 (SPACE) at character 4" in err.value.problems[0]
    result = cli("evaluate", "--qrels", path, "--run", DATA / "tiny_run.trec")
    assert result.code == 5 and f"{path}:3:" in result.err and "'doc A'" in result.err


def test_beir_dataset_directory_reads_tab_separated_fields_whole(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d-1/2#x", "title": "", "text": "one"}\n{"_id": "d2", "text": "two"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q:1", "text": "query"}\n')
    (folder / "qrels" / "test.tsv").write_text("q:1\td-1/2#x\t2\r\nq:1\td2\t0\r\n")  # no header, CRLF
    assert load_dir(folder).qrels == {"q:1": {"d-1/2#x": 2, "d2": 0}}
    (folder / "qrels" / "test.tsv").write_text("q:1\td-1/2#x 2\n")  # a space where the tab belongs
    with pytest.raises(InvalidInputError) as err:
        load_dir(folder)
    assert f"{folder / 'qrels' / 'test.tsv'}:1: expected 3 tab-separated fields" in err.value.problems[0]


@pytest.mark.parametrize("name,text,expected", [
    ("q.txt", "q1 0 d1 1\nq1\t0\td2\t2\n", {"q1": {"d1": 1, "d2": 2}}),  # TREC: any white space, 4 fields
    ("q.trec", "q1 Q0 d1 1\n", {"q1": {"d1": 1}}),
    ("q.txt", "query-id\tcorpus-id\tscore\nq1\td1\t3\n", {"q1": {"d1": 3}}),  # a BEIR header makes it TSV
    ("q.tsv", "q1\td1\t1\n", {"q1": {"d1": 1}}),  # .tsv makes it TSV without a header
])
def test_qrels_format_comes_from_extension_and_header(name, text, expected, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    assert load_qrels(path) == expected


@pytest.mark.parametrize("name,text,line,fragment", [
    ("q.txt", "q1 d1 1\n", 1, "expected 4 fields 'qid 0 docid relevance' (TREC qrels), got 3; a 3-column file is BEIR TSV"),
    ("q.tsv", "q1\t0\td1\t1\n", 1, "expected 3 tab-separated fields 'query-id<TAB>corpus-id<TAB>score' (BEIR TSV), got 4"),
    ("q.tsv", "q1 0 d1 1\n", 1, "expected 3 tab-separated fields 'query-id<TAB>corpus-id<TAB>score' (BEIR TSV), got 1"),
])
def test_column_count_never_decides_the_format(name, text, line, fragment, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InvalidInputError) as err:
        load_qrels(path)
    assert err.value.problems[0].startswith(f"{path}:{line}: {fragment}")


def test_tab_separated_qrels_score_what_they_say(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("q1\td4\t1\nq1\td1\t1\n")
    qrels = load_qrels(path)
    # the tiny run ranks d4 first and d1 third: P@1 = 1, recall@2 = 1/2
    scores = evaluate(qrels, {"q1": {"d4": 3.0, "d2": 2.0, "d1": 1.0}}, metrics=["precision_at_1", "recall_at_2"])
    assert scores.aggregate == {"precision_at_1": 1.0, "recall_at_2": 0.5}
