"""Your own model as Python code through ``r2med.run``: an ``r2med.Encoder`` and an MTEB-style object, with caching.

The models count words: a text's vector is (fever, blood, glucose + sugar). On tests/data/tiny (q1 "what lowers a
fever": d1 and d4 relevant; q2 "how is blood sugar controlled": d2 grade 2, d3 grade 0) the plain queries rank
both queries' relevant documents first (nDCG@10 1). With the query instruction "blood blood " the queries lean
to blood: q1 [1, 2, 0] ranks d3, d2, then d1 and d4 (cosines 2/sqrt5, 2/sqrt10, 1/sqrt5, 1/sqrt5), q2 [0, 3, 1]
ranks d3 (3/sqrt10) above d2 (4/sqrt20): nDCG@10 = (1/log2(4) + 1/log2(5)) / (1 + 1/log2(3)) and
(2/log2(3)) / 2, averaged.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import r2med
from conftest import DATA
from r2med.errors import InvalidInputError, UsageError

TINY = DATA / "tiny"


def words(text: str) -> list[float]:
    return [text.count("fever"), text.count("blood"), text.count("glucose") + text.count("sugar")]


class WordCounter:
    """An ``r2med.Encoder``: applies the instruction itself; counts the texts it encodes per kind."""

    def __init__(self, key: str = "word-counts-v1") -> None:
        self.cache_key = key
        self.seen: Counter = Counter()
        self.texts: list[str] = []

    def encode(self, texts, *, kind, instruction):
        self.seen[kind] += len(texts)
        self.texts += [instruction + t for t in texts]
        return np.array([words(instruction + t) for t in texts], dtype=np.float32)


class MtebStyle:
    """``encode(sentences, **kwargs)`` as MTEB models have it, returning a list of lists."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict]] = []

    def encode(self, sentences, **kwargs):
        self.calls.append((list(sentences), kwargs))
        return [words(s) for s in sentences]


class SentenceTransformerStyle:
    """Names batch_size and show_progress_bar as SentenceTransformer.encode does: r2med passes them."""

    def __init__(self) -> None:
        self.kwargs: list[dict] = []

    def encode(self, sentences, batch_size=32, show_progress_bar=None, convert_to_numpy=True):
        self.kwargs.append({"batch_size": batch_size, "show_progress_bar": show_progress_bar})
        return np.array([words(s) for s in sentences], dtype=np.float32)


LEANING = round(((1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / math.log2(3)) + (2 / math.log2(3)) / 2) / 2, 5)


def test_an_encoder_runs_stores_and_is_reused(tmp_path):
    model = WordCounter()
    table = r2med.run(model, data_dir=TINY, output=tmp_path / "results", progress=False)
    assert table["tiny"]["ndcg_at_10"] == 1.0 and table["average"]["ndcg_at_10"] == 1.0
    assert model.seen == {"document": 4, "query": 3}
    folder = tmp_path / "results" / "base retriever" / "word-counts-v1"
    run = (folder / "tiny.run").read_text().splitlines()
    assert {line.split()[2] for line in run[:2]} == {"d1", "d4"}  # q1 [1, 0, 0]: d1 and d4 at cosine 1
    q2 = [line.split() for line in run if line.startswith("q2 ")]
    assert [(r[2], round(float(r[4]), 5)) for r in q2[:2]] == [("d2", 1.0), ("d3", 0.70711)]
    manifest = json.loads((folder / "tiny.manifest.json").read_text())
    assert manifest["config"]["retriever"]["query_encoder"] == {"cache_key": "word-counts-v1",
                                                                 "encoder": "r2med-python/1", "style": "r2med"}
    # the same model again: the stored result is reused, nothing is encoded
    again = WordCounter()
    assert r2med.run(again, data_dir=TINY, output=tmp_path / "results", progress=False) == table
    assert again.seen == {}
    # results elsewhere: the embeddings come from the cache (same key, instructions, texts)
    cached = WordCounter()
    assert r2med.run(cached, data_dir=TINY, output=tmp_path / "other", progress=False) == table
    assert cached.seen == {}
    # another cache key: encoded afresh, stored under its own name
    other = WordCounter("word-counts-v2")
    r2med.run(other, data_dir=TINY, output=tmp_path / "results", progress=False)
    assert other.seen == {"document": 4, "query": 3}
    assert (tmp_path / "results" / "base retriever" / "word-counts-v2" / "tiny.json").is_file()


def test_the_instruction_reaches_an_encoder_for_its_kind_only(tmp_path):
    model = WordCounter()
    table = r2med.run(model, data_dir=TINY, output=tmp_path, query_instruction="blood blood ", progress=False,
                      name="leaning")
    assert table["tiny"]["ndcg_at_10"] == LEANING
    assert "blood blood what lowers a fever" in model.texts
    assert "aspirin reduces fever and pain" in model.texts  # documents: no instruction
    assert (tmp_path / "base retriever" / "leaning" / "tiny.json").is_file()


def test_an_mteb_style_model_is_taken_as_it_is(tmp_path):
    model = MtebStyle()
    table = r2med.run(model, cache_key="mteb-words", data_dir=TINY, output=tmp_path, progress=False,
                      query_instruction="blood blood ")
    assert table["tiny"]["ndcg_at_10"] == LEANING  # the instruction is prepended to each query
    sent = [text for texts, _ in model.calls for text in texts]
    assert sorted(sent) == sorted(["aspirin reduces fever and pain", "insulin regulates blood glucose",
                                   "the heart pumps blood through the body", "fever is a sign of infection",
                                   "blood blood what lowers a fever", "blood blood how is blood sugar controlled",
                                   "blood blood an unjudged query"])
    assert all(kwargs == {} for _, kwargs in model.calls)  # **kwargs: nothing extra is passed
    again = MtebStyle()
    assert r2med.run(again, cache_key="mteb-words", data_dir=TINY, output=tmp_path, progress=False,
                     query_instruction="blood blood ") == table
    assert again.calls == []  # reused


def test_a_sentence_transformer_style_encode_gets_batch_size_and_no_bar(tmp_path):
    model = SentenceTransformerStyle()
    r2med.run(model, cache_key="st-words", data_dir=TINY, output=tmp_path, batch_size=3, progress=False)
    assert model.kwargs == [{"batch_size": 3, "show_progress_bar": False}, {"batch_size": 1, "show_progress_bar": False},
                            {"batch_size": 3, "show_progress_bar": False}]  # 4 documents in 3 + 1, then 3 queries


def test_a_model_without_a_cache_key_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"MtebStyle needs a cache key .*cache_key='my-model-v1'") as info:
        r2med.run(MtebStyle(), data_dir=TINY, output=tmp_path)
    assert info.value.exit_code == 2
    with pytest.raises(UsageError, match="has no encode method"):
        r2med.run(object(), data_dir=TINY, output=tmp_path)
    with pytest.raises(UsageError, match="cache_key is for a Python model object"):
        r2med.run("bm25", cache_key="x", data_dir=TINY, output=tmp_path)


class Broken:
    def __init__(self, output) -> None:
        self.output, self.cache_key = output, f"broken-{id(self)}"

    def encode(self, texts, *, kind, instruction):
        return self.output(texts)


@pytest.mark.parametrize(("output", "message"), [
    (lambda texts: np.ones((len(texts) - 1, 3)), r"shape \(3, 3\) for 4 texts .*one vector per text"),
    (lambda texts: np.ones(len(texts)), r"shape \(4,\) for 4 texts"),
    (lambda texts: np.full((len(texts), 3), np.nan), "NaN or infinity for the text 'aspirin reduces fever and pain'"),
    (lambda texts: np.ones((len(texts), 2 if len(texts) == 4 else 3)), "width 3 after 2"),
    (lambda texts: [[1.0, 2.0]] + [[1.0]] * (len(texts) - 1), r"returned a list that is not an \(n, dim\) array"),
    (lambda texts: {"dense_vecs": np.ones((len(texts), 3))}, r"returned a dict that is not an \(n, dim\) array"),
])
def test_a_model_returning_bad_vectors_fails_naming_it(tmp_path, output, message):
    with pytest.raises(InvalidInputError, match=message) as info:
        r2med.run(Broken(output), data_dir=TINY, output=tmp_path, progress=False)
    assert "Broken.encode" in str(info.value) and info.value.exit_code == 5
    assert not list(tmp_path.glob("base retriever/*/tiny.json"))  # nothing stored


def test_r2med_encoder_is_a_runtime_protocol():
    assert isinstance(WordCounter(), r2med.Encoder) and not isinstance(MtebStyle(), r2med.Encoder)


class SentenceTransformer5:
    """encode_query / encode_document, as sentence-transformers 5 has them: each kind through its own method."""

    def __init__(self) -> None:
        self.kinds: Counter = Counter()

    def encode(self, sentences, **kwargs):
        raise AssertionError("encode_query / encode_document are used")

    def encode_query(self, sentences, batch_size=32):
        self.kinds["query"] += len(sentences)
        return np.array([words("blood blood " + s) for s in sentences], dtype=np.float32)

    def encode_document(self, sentences, batch_size=32):
        self.kinds["document"] += len(sentences)
        return np.array([words(s) for s in sentences], dtype=np.float32)


def test_a_model_with_encode_query_and_encode_document_gets_each_kind_through_its_own(tmp_path):
    model = SentenceTransformer5()
    table = r2med.run(model, cache_key="st5-words", data_dir=TINY, datasets="tiny", output=tmp_path, progress=False)
    assert model.kinds == {"document": 4, "query": 3}
    assert table["tiny"]["ndcg_at_10"] == LEANING  # its query side leans to blood, as the instruction did above


def test_without_the_cache_the_embeddings_live_in_a_folder_removed_afterwards(tmp_path, monkeypatch):
    import tempfile

    made = []
    real = tempfile.TemporaryDirectory

    def recording(*args, **kwargs):
        folder = real(*args, **kwargs)
        made.append(folder.name)
        return folder

    monkeypatch.setattr(tempfile, "TemporaryDirectory", recording)
    r2med.run(WordCounter(), data_dir=TINY, output=tmp_path, cache=False, progress=False)
    import gc

    gc.collect()
    assert len(made) == 1 and not any(Path(folder).exists() for folder in made)
