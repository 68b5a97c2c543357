"""ResponseCache: append-only JSONL that survives a killed writer."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from r2med.errors import InvalidInputError
from r2med.llm import ResponseCache


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_roundtrip_last_line_of_a_key_wins(tmp_path):
    path = tmp_path / "sub" / "g.jsonl"
    cache = ResponseCache(path)
    assert len(cache) == 0 and not path.exists()  # nothing is created until the first append
    cache.append("a", {"text": "one", "n": 1})
    cache.append("b", {"text": "héllo"})
    cache.append("a", {"text": "two", "key": "ignored"})  # a record cannot override its key
    cache.close()
    assert [row["key"] for row in lines(path)] == ["a", "b", "a"]
    again = ResponseCache(path)
    assert len(again) == 2 and again.get("a") == {"text": "two"} and again.get("b") == {"text": "héllo"}
    assert "c" not in again and again.get("c") is None


def test_each_append_is_on_disk_before_it_returns(tmp_path):
    path = tmp_path / "g.jsonl"
    writer = ResponseCache(path)
    writer.append("k", {"v": 1})
    # another process reads the file while the writer still holds it open
    code = f"import json; print(json.loads(open({str(path)!r}).read().splitlines()[0])['v'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
    writer.close()


def test_a_killed_writer_leaves_a_torn_last_line_that_is_ignored_then_cut(tmp_path, caplog):
    path = tmp_path / "g.jsonl"
    path.write_text('{"key": "a", "v": 1}\n{"key": "b", "v": 2}\n{"key": "c", "v"', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="r2med.llm.cache"):
        cache = ResponseCache(path)
    assert cache.keys() == ["a", "b"]
    assert "g.jsonl:3: ignoring a torn last line" in caplog.text
    cache.append("c", {"v": 3})
    cache.close()
    assert lines(path) == [{"key": "a", "v": 1}, {"key": "b", "v": 2}, {"key": "c", "v": 3}]


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"key": "a", "v": 1}', encoding="utf-8")  # killed between the record and its "\n"
    cache = ResponseCache(path)
    assert cache.get("a") == {"v": 1}
    cache.append("b", {"v": 2})
    cache.close()
    assert lines(path) == [{"key": "a", "v": 1}, {"key": "b", "v": 2}]


def test_damage_in_the_middle_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"g\.jsonl:2: not a cache record"):
        ResponseCache(path)
    path.write_text('{"key": "a"}\n\n{"no_key": 1}\n{"key": "b"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"g\.jsonl:3: not a cache record"):
        ResponseCache(path)


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('\n{"key": "a"}\n\n{"key": "b"}\n\n', encoding="utf-8")
    assert ResponseCache(path).keys() == ["a", "b"]


def test_a_second_writer_is_detected(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"key": "a"}\n', encoding="utf-8")
    first = ResponseCache(path)
    second = ResponseCache(path)
    second.append("b", {})
    second.close()
    with pytest.raises(InvalidInputError, match="changed by another process"):
        first.append("c", {})
    assert os.path.getsize(path) == len('{"key": "a"}\n{"key": "b"}\n')  # nothing lost
