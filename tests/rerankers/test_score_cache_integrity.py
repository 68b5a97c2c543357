"""The score cache's checksum covers what r2med appended: damage there rescores with a warning; a kill between an
append and its checksum keeps the appended scores."""

from __future__ import annotations

import json
import logging

import pytest

from r2med.errors import InvalidInputError
from r2med.rerankers.score_cache import ScoreCache


def _open(root, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="r2med"):
        return ScoreCache.open(root, {"model": "m"})


def _filled(root):
    cache = ScoreCache.open(root, {"model": "m"})
    cache.put_many({"k1": 1.5, "k2": -2.0})
    cache.put_many({"k3": 0.25})
    return cache.path


@pytest.mark.parametrize("damage", ["edited", "cut", "zeroed", "empty"])
def test_damage_in_the_checked_part_rescores_with_a_warning(tmp_path, caplog, damage):
    path = _filled(tmp_path)
    text = path.read_text()
    if damage == "edited":  # still a valid record: a silent other score without the checksum
        path.write_text(text.replace('"s": 1.5', '"s": 9.5'))
    elif damage == "cut":
        path.write_text(text[: len(text) - 25])
    elif damage == "zeroed":
        path.write_bytes(bytes(len(text)))
    else:
        path.write_text("")
    cache = _open(tmp_path, caplog)
    assert len(cache) == 0 and "does not match" in caplog.text and str(path) in caplog.text
    cache.put_many({"k1": 1.5})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"scorer": {"model": "m"}}, {"k": "k1", "s": 1.5}]
    assert len(_open(tmp_path, caplog)) == 1 and caplog.text == ""


def test_scores_appended_after_the_checksum_are_kept(tmp_path, caplog):
    path = _filled(tmp_path)
    with path.open("a") as handle:  # a run killed after its append, before its checksum
        handle.write('{"k": "k4", "s": 4.0}\n')
    cache = _open(tmp_path, caplog)
    assert cache.get("k4") == 4.0 and cache.get("k1") == 1.5 and caplog.text == ""
    cache.put_many({"k5": 5.0})
    assert len(_open(tmp_path, caplog)) == 5 and caplog.text == ""


@pytest.mark.parametrize("line", ['{"k": "k4", "s": "abc"}', '{"k": "k4", "s": null}', '{"k": "k4", "s": [1]}',
                                  '{"k": "k4", "s": NaN}', "[1, 2]"])
def test_a_bad_record_is_an_error_naming_the_line_not_a_traceback(tmp_path, line):
    path = _filled(tmp_path)
    with path.open("a") as handle:
        handle.write(line + "\n" + '{"k": "k5", "s": 5.0}\n')
    with pytest.raises(InvalidInputError, match=r":5: not a score record"):
        ScoreCache.open(tmp_path, {"model": "m"})
