"""The LLM response cache under damage, as ``r2med expand`` meets it: a torn last line is skipped with a warning
and generated again; damage in the middle (bad JSON, bad bytes, NULs) is an error naming the line (exit 5), never
a traceback; the paid-for responses around it are never thrown away silently."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_server import ChatServer

from r2med.errors import InvalidInputError
from r2med.llm import ResponseCache

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny"


@pytest.fixture
def server():
    with ChatServer() as running:
        yield running


def _expand(cli, server, data, out):
    return cli("expand", "--method", "hyde", "--llm-model", "m", "--base-url", server.base_url, "--data-dir", data,
               "--out", out, "--max-tokens", "16", "--json")


@pytest.mark.parametrize("damage", [b"not json\n", b"\xff\xfe\x00garbage\n", b"\x00" * 40 + b"\n", b"[1, 2]\n"])
def test_damage_in_the_middle_is_exit_5_naming_the_line(cli, server, tmp_path, damage):
    data = tmp_path / "data" / "Biology"
    shutil.copytree(TINY, data)
    first = _expand(cli, server, data, tmp_path / "x")
    assert first.code == 0, first.err
    generations = tmp_path / "x" / "generations.jsonl"
    lines = generations.read_bytes().splitlines(keepends=True)
    generations.write_bytes(lines[0] + damage + b"".join(lines[1:]))
    (tmp_path / "x" / "query_with_hydoc.jsonl").unlink()  # the file is made again, from the cache
    again = _expand(cli, server, data, tmp_path / "x")
    assert again.code == 5 and f"{generations}:2: not a cache record" in again.err
    assert "Traceback" not in again.err
    assert generations.read_bytes() == lines[0] + damage + b"".join(lines[1:])  # nothing thrown away


def test_a_torn_last_line_is_skipped_with_a_warning_and_generated_again(cli, server, tmp_path):
    data = tmp_path / "data" / "Biology"
    shutil.copytree(TINY, data)
    assert _expand(cli, server, data, tmp_path / "x").code == 0
    generations = tmp_path / "x" / "generations.jsonl"
    lines = generations.read_bytes().splitlines(keepends=True)
    generations.write_bytes(b"".join(lines[:2]) + lines[2][:25])  # killed in mid-line
    (tmp_path / "x" / "query_with_hydoc.jsonl").unlink()  # the file is made again, from the cache
    again = _expand(cli, server, data, tmp_path / "x")
    assert again.code == 0, again.err
    assert "generations.jsonl:3: ignoring a torn last line" in again.err
    report = again.json()["Biology"]
    assert (report["cached"], report["requested"]) == (2, 1)
    assert [json.loads(line)["key"] for line in generations.read_text().splitlines()] == [
        json.loads(line)["key"] for line in lines]


@pytest.mark.parametrize("content", [b"\x00" * 64, b"\xff\xfe{", b'{"key": "a"}\n\x00\x00'])
def test_an_unfinished_or_zeroed_last_line_is_torn_not_fatal(tmp_path, caplog, content):
    path = tmp_path / "g.jsonl"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="r2med"):
        cache = ResponseCache(path)
    assert "torn last line" in caplog.text
    cache.append("b", {"v": 2})
    cache.close()
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == [*(["a"] if b"key" in content else []), "b"]


def test_a_record_with_a_non_string_key_is_damage(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"key": 1}\n{"key": "b"}\n')
    with pytest.raises(InvalidInputError, match=r"g\.jsonl:1: not a cache record"):
        ResponseCache(path)
