"""Qwen3-Reranker as its model card runs it (QwenLM/Qwen3-Embedding README.md:218-257): the prompt byte for byte,
local scoring on a tiny random Qwen3 model built here checked against a manual yes/no softmax with torch, and
server scoring from the top logprobs of a fake server."""

from __future__ import annotations

import math

import pytest
from completions_server import CompletionsServer

from r2med.options import Runtime
from r2med.rerankers.qwen3 import qwen3_pair, qwen3_prompt
from r2med.rerankers.registry import make_reranker

PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT = "Given a web search query, retrieve relevant passages that answer the query"


def test_the_prompt_is_the_model_cards_byte_for_byte():
    query, doc = "What is the capital of China?", "The capital of {China} is Beijing."
    assert qwen3_pair(query, doc) == f"<Instruct>: {DEFAULT}\n<Query>: {query}\n<Document>: {doc}"
    assert qwen3_prompt(query, doc, "Find medical evidence") == (
        PREFIX + "<Instruct>: Find medical evidence\n<Query>: What is the capital of China?\n"
        "<Document>: The capital of {China} is Beijing." + SUFFIX)


@pytest.mark.parametrize("style", ["openai", "llamacpp"])
def test_server_scores_normalise_yes_against_no(tmp_path, style):
    docs = {"a": "Beijing.", "b": "Gravity.", "c": "Nothing."}
    query = "capital of China"
    answers = {qwen3_prompt(query, docs["a"]): ("yes", "length", {"yes": -0.1, "no": -2.4, "Yes": -3.0}),
               qwen3_prompt(query, docs["b"]): ("no", "length", {"no": -0.05, "yes": -3.2}),
               qwen3_prompt(query, docs["c"]): ("maybe", "length", {"maybe": -0.01, "yes": -6.0})}
    with CompletionsServer(answers, style=style) as server:
        reranker = make_reranker("qwen3-reranker-0.6b", {"via_server": True, "base_url": server.base_url},
                                 Runtime(cache_dir=tmp_path, progress=False))
        scores = reranker.scorer.score([query] * 3, [docs["a"], docs["b"], docs["c"]])
        body = server.bodies[0]
    sigmoid = lambda a, b: math.exp(a) / (math.exp(a) + math.exp(b))
    # c: "no" is not among the top logprobs -> -10, as the card's vLLM usage (README.md:326-327)
    assert scores == pytest.approx([sigmoid(-0.1, -2.4), sigmoid(-3.2, -0.05), sigmoid(-6.0, -10.0)], abs=1e-12)
    assert (body["model"], body["temperature"], body["max_tokens"], body["logprobs"]) == (
        "Qwen/Qwen3-Reranker-0.6B", 0.0, 1, 20)


# ---------------------------------------------------------------- a tiny random Qwen3 model, built here
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"]


def _tiny_model(folder):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = set()
    split = pre_tokenizers.WhitespaceSplit()
    texts = [PREFIX, SUFFIX, qwen3_pair("what causes fever", "infection causes fever and chills yes no " * 3)]
    for text in texts:
        for special in SPECIAL:
            text = text.replace(special, " ")
        words |= {w for w, _ in split.pre_tokenize_str(text)}
    vocab = {tok: i for i, tok in enumerate([*SPECIAL, "[UNK]", "yes", "no", *sorted(words - {"yes", "no"})])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = split
    tok.add_special_tokens(SPECIAL)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="<|endoftext|>",
                                                eos_token="<|im_end|>")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.Qwen3Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      max_position_embeddings=256, tie_word_embeddings=False)
    model = transformers.Qwen3ForCausalLM(config).eval()
    model.save_pretrained(folder)
    return fast, model, vocab


def test_local_scores_are_the_yes_no_softmax_at_the_last_position(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "tiny-qwen3-reranker"
    _, model, vocab = _tiny_model(folder)
    from r2med.rerankers import registry

    spec = registry.RerankerSpec("tiny", "qwen3-reranker", "tiny", model=str(folder), max_length=60)
    monkeypatch.setattr(registry, "SPECS", (*registry.SPECS, spec))
    reranker = make_reranker("tiny", {"device": "cpu", "batch_size": 3}, Runtime(progress=False))
    queries = ["what causes fever", "what causes fever", "fever"]
    docs = ["infection causes fever", "chills", "infection causes fever and chills yes no " * 3]  # the last is cut
    scores = reranker.scorer.score(queries, docs)

    def ids(text):  # WordLevel over whitespace: one id per word, special tokens by name
        for special in SPECIAL:
            text = text.replace(special, f" {special} ")
        return [vocab.get(w, vocab["[UNK]"]) for w in text.split()]

    prefix, suffix = ids(PREFIX), ids(SUFFIX)
    expected = []
    for query, doc in zip(queries, docs):
        body = ids(f"<Instruct>: {DEFAULT}\n<Query>: {query}\n<Document>: {doc}")[: 60 - len(prefix) - len(suffix)]
        sequence = torch.tensor([prefix + body + suffix])
        assert sequence.shape[1] <= 60
        with torch.no_grad():
            last = model(input_ids=sequence).logits[0, -1]
        yes, no = last[vocab["yes"]].item(), last[vocab["no"]].item()
        expected.append(math.exp(yes) / (math.exp(yes) + math.exp(no)))
    assert len(ids(qwen3_pair(queries[2], docs[2]))) > 60 - len(prefix) - len(suffix)  # the truncation was exercised
    assert scores == pytest.approx(expected, abs=1e-5)
    assert len({round(s, 6) for s in scores}) == 3
    batch = reranker.scorer.encode(queries, docs)
    assert batch["input_ids"].shape[1] == 60 and batch["attention_mask"][1, 0].item() == 0  # left padding


def test_the_cost_line_of_the_server_scorer(tmp_path):
    """One request per distinct pair; the tokens are what the fake server says (prompt: characters, completion: 1)."""
    from r2med.rerankers.base import cost_line
    from r2med.types import Run

    docs = {"a": "Beijing.", "b": "Gravity.", "c": "Nothing at all."}
    queries = {"q1": "capital of China", "q2": "what is gravity"}
    run = Run({"q1": {"a": 2.0, "b": 1.0}, "q2": {"b": 3.0, "c": 2.0, "a": 1.0}})
    pairs = [(queries["q1"], docs["a"]), (queries["q1"], docs["b"]), (queries["q2"], docs["b"]),
             (queries["q2"], docs["c"]), (queries["q2"], docs["a"])]
    answers = {qwen3_prompt(q, d): ("no", "length", {"no": -0.1, "yes": -2.0}) for q, d in pairs}
    prompt_total = sum(len(qwen3_prompt(q, d)) for q, d in pairs)
    with CompletionsServer(answers, usage=lambda prompt, text: (len(prompt), 1)) as server:
        reranker = make_reranker("qwen3-reranker-0.6b", {"via_server": True, "base_url": server.base_url},
                                 Runtime(cache_dir=tmp_path, progress=False))
        stats = reranker.rerank(queries, docs, run, top_k=3).details()
        assert len(server.bodies) == 5
    assert cost_line(stats) == (f"cost per query: {prompt_total / 2:,.0f} prompt + 2 completion tokens (2 queries, 5 "
                                f"pairs, 0 from the cache; this run sent 5 requests, {prompt_total:,} + 5 tokens)")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet (the characters ``tokenizers``' ByteLevel pre-tokenizer maps bytes to): printable
    bytes stand for themselves, the others for 256, 257, ... in byte order."""
    shown = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    others = [b for b in range(256) if b not in shown]
    return {**{b: chr(b) for b in shown}, **{b: chr(256 + i) for i, b in enumerate(others)}}


def test_with_the_models_tokenizer_the_server_gets_the_cards_input_as_token_ids(tmp_path):
    """The card's process_inputs (README.md:224-231): the pair cut to max_length minus the prefix and suffix tokens,
    between them; worked out here in bytes (a byte-level tokenizer: one token per byte)."""
    from test_reasonrank import byte_tokenizer

    tokenizer = byte_tokenizer()
    folder = tmp_path / "tok"
    tokenizer.save_pretrained(folder)
    alphabet = sorted(bytes_to_unicode().values())
    to_unicode = bytes_to_unicode()

    def ids(raw: bytes) -> tuple[int, ...]:
        return tuple(alphabet.index(to_unicode[b]) for b in raw)

    prefix, suffix = PREFIX.encode(), SUFFIX.encode()
    max_length = len(prefix) + len(suffix) + 125
    query, short, long = "fever", "Aspirin.", "Aspirin Na\u00efve patients " + "x" * 200
    pair_short = f"<Instruct>: {DEFAULT}\n<Query>: {query}\n<Document>: {short}".encode()
    pair_long = f"<Instruct>: {DEFAULT}\n<Query>: {query}\n<Document>: {long}".encode()
    assert len(pair_short) == 122 and pair_long[124:126] == "\u00ef".encode()  # the cut falls inside "ï"
    expected_short = ids(prefix) + ids(pair_short) + ids(suffix)
    expected_long = ids(prefix) + ids(pair_long[:125]) + ids(suffix)  # the first 125 bytes of the pair
    answers = {expected_short: ("yes", "length", {"yes": -0.2, "no": -1.7}),
               expected_long: ("no", "length", {"no": -0.3, "yes": -1.2})}
    with CompletionsServer(answers) as server:
        reranker = make_reranker("qwen3-reranker-0.6b", {"via_server": True, "base_url": server.base_url,
                                                         "tokenizer": str(folder), "max_length": max_length},
                                 Runtime(cache_dir=tmp_path, progress=False))
        scores = reranker.scorer.score([query, query], [short, long])
        # the two requests go concurrently: their arrival order is the race's, not the reranker's
        assert sorted(tuple(b["prompt"]) for b in server.bodies) == sorted([expected_short, expected_long])
    sigmoid = lambda a, b: math.exp(a) / (math.exp(a) + math.exp(b))
    assert scores == pytest.approx([sigmoid(-0.2, -1.7), sigmoid(-1.2, -0.3)], abs=1e-12)


def test_without_a_tokenizer_the_whole_text_goes_and_a_warning_says_so(tmp_path, caplog):
    doc = "word " * 5000  # past 8192 tokens of any tokenizer
    answers = {qwen3_prompt("q", doc): ("yes", "length", {"yes": -0.2, "no": -1.7})}
    with CompletionsServer(answers) as server:
        reranker = make_reranker("qwen3-reranker-0.6b", {"via_server": True, "base_url": server.base_url},
                                 Runtime(cache_dir=tmp_path, progress=False))
        with caplog.at_level("WARNING"):
            reranker.scorer.score(["q"], [doc])
        assert server.bodies[0]["prompt"] == qwen3_prompt("q", doc)
    assert "not cut to 8192 tokens as the model card does (pass --tokenizer DIR|ID)" in caplog.text
