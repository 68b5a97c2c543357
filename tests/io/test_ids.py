"""The one id rule (``r2med.io.ids``): what a TREC run line can hold, applied by every loader and by validate."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from r2med.errors import InvalidInputError
from r2med.evaluation import evaluate
from r2med.evaluation.files import load_qrels
from r2med.expansion.published import read_expansions
from r2med.io.ids import id_problem
from r2med.io.problems import Problems
from r2med.io.readers import coerce_id
from r2med.store.runs import read_run

#: (class, a bad id with the character inside, the character) -- every class the rule rejects
REJECTED = [
    ("ASCII space", "doc A", " "),
    ("tab", "doc\tA", "\t"),
    ("line feed", "doc\nA", "\n"),
    ("carriage return", "doc\rA", "\r"),
    ("NUL", "doc\x00A", "\x00"),
    ("other C0 control (BEL)", "doc\x07A", "\x07"),
    ("other C0 control (unit separator)", "doc\x1fA", "\x1f"),
    ("DEL", "doc\x7fA", "\x7f"),
    ("C1 control (NEL)", "doc\x85A", "\x85"),
    ("NBSP U+00A0", "doc\u00a0A", "\u00a0"),
    ("line separator U+2028", "doc\u2028A", "\u2028"),
    ("paragraph separator U+2029", "doc\u2029A", "\u2029"),
    ("zero-width space U+200B", "doc\u200bA", "\u200b"),
    ("BOM / zero-width no-break space U+FEFF", "doc\ufeffA", "\ufeff"),
    ("ideographic space U+3000", "doc\u3000A", "\u3000"),
    ("leading space", " docA", " "),
    ("trailing newline", "docA\n", "\n"),
]
ACCEPTED = ["doc-1/2#x", "Ärztin_β", "病例123", "q:1|2,3;(4)", "PMC123.v2", "d'1\"", "😀"]


@pytest.mark.parametrize("label,value,char", REJECTED, ids=[r[0] for r in REJECTED])
def test_id_rule_rejects_every_character_class(label, value, char):
    problem = id_problem(value)
    assert problem is not None, label
    assert f"U+{ord(char):04X}" in problem and f"at character {value.index(char) + 1}" in problem
    p = Problems()
    assert coerce_id(value, field="id", path="c.jsonl", line=7, problems=p) is None
    assert len(p.errors) == 1 and p.errors[0].startswith(f"c.jsonl:7: field 'id' {value!r}")
    assert "a TREC run line cannot hold it" in p.errors[0] and "fix" in p.errors[0]


@pytest.mark.parametrize("value", ACCEPTED)
def test_id_rule_keeps_letters_punctuation_and_symbols(value):
    assert id_problem(value) is None
    p = Problems()
    assert coerce_id(value, field="id", path="c.jsonl", line=1, problems=p) == value and p.ok


def test_empty_id_is_rejected():
    assert id_problem("") == "is empty"


def _dataset(folder, corpus_id="d1", query_id="q1"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"id": corpus_id, "text": "one"}) + "\n" + '{"id": "d2", "text": "two"}\n')
    (folder / "query.jsonl").write_text(json.dumps({"id": query_id, "text": "query"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": query_id, "p_id": corpus_id, "score": 1}) + "\n")
    return folder


@pytest.mark.parametrize("label,value,char", REJECTED, ids=[r[0] for r in REJECTED])
def test_validate_rejects_every_class_with_file_line_and_repr(label, value, char, tmp_path, cli):
    folder = _dataset(tmp_path / "ds", corpus_id=value)
    result = cli("datasets", "validate", "--data-dir", folder)
    assert result.code == 5, (label, result.out, result.err)
    assert f"{folder / 'corpus.jsonl'}:1: field 'id' {value!r}" in result.out
    assert f"{folder / 'qrels.jsonl'}:1: field 'p_id' {value!r}" in result.out


def test_nul_in_a_query_id_is_rejected_in_every_file_kind(tmp_path, cli):
    bad = "q\x001"
    folder = _dataset(tmp_path / "ds", query_id=bad)
    result = cli("datasets", "validate", "--data-dir", folder)
    assert result.code == 5 and f"{folder / 'query.jsonl'}:1: field 'id' {bad!r}" in result.out
    # qrels in the three formats
    (tmp_path / "q.tsv").write_text(f"query-id\tcorpus-id\tscore\n{bad}\td1\t1\n")
    (tmp_path / "q.txt").write_text(f"q2 0 d1 1\n{bad} 0 d1 1\n")
    for path, line in ((tmp_path / "q.tsv", 2), (tmp_path / "q.txt", 2), (folder / "qrels.jsonl", 1)):
        with pytest.raises(InvalidInputError) as err:
            load_qrels(path)
        assert any(p.startswith(f"{path}:{line}:") and repr(bad) in p for p in err.value.problems), err.value.problems
    # runs: TREC and top-k JSONL; before, pytrec_eval aborted the process (exit 134) on a NUL query id
    (tmp_path / "r.run").write_text(f"{bad} Q0 d1 1 1.0 t\n")
    (tmp_path / "r.jsonl").write_text(json.dumps({"id": "q1", "topk_pid": [["d\x001", 1.0]]}) + "\n")
    for path, what in ((tmp_path / "r.run", "qid"), (tmp_path / "r.jsonl", "topk_pid docid")):
        with pytest.raises(InvalidInputError) as err:
            read_run(path)
        assert any(p.startswith(f"{path}:1:") and what in p for p in err.value.problems), err.value.problems
        result = cli("evaluate", "--qrels", DATA / "tiny", "--run", path)
        assert result.code == 5 and f"{path}:1:" in result.err
    # expansion files
    exp = tmp_path / "query_with_hydoc.jsonl"
    exp.write_text(json.dumps({"id": bad, "text": "t", "hy_doc": "h"}) + "\n")
    with pytest.raises(InvalidInputError) as err:
        read_expansions(exp, method="hyde", llm="x")
    assert any(p.startswith(f"{exp}:1: field 'id' {bad!r}") for p in err.value.problems)


def test_evaluate_rejects_ids_pytrec_eval_would_truncate():
    # a NUL inside a document id: pytrec_eval reads 'd1\x00x' as 'd1' (a silent wrong number) -> exit 5 instead
    with pytest.raises(InvalidInputError, match=r"document id 'd1\\x00x'"):
        evaluate({"q": {"d1": 1}}, {"q": {"d1\x00x": 1.0}})
    with pytest.raises(InvalidInputError, match=r"query id 'q\\x00'"):
        evaluate({"q\x00": {"d1": 1}}, {"q\x00": {"d1": 1.0}})
