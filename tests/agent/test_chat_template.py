"""The checkpoint's own chat template (``r2med.agent.templates.ModelChatTemplate``): read from a local model directory
as ``transformers`` reads it and rendered exactly as its ``apply_chat_template`` renders it (both are compared here,
on a tiny tokenizer built in the test), used by the agent with the beginning-of-sequence token left to the server;
the name table stays the fallback; without jinja2 only a template that must be rendered is an exit-3 error."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sys

import pytest
from completion_server import CompletionServer

from conftest import shared_path
from r2med.agent.loop import AgentConfig, run_agent
from r2med.agent.search import open_searcher
from r2med.agent.styles import r1_prompt
from r2med.agent.templates import model_chat_template, resolve_template
from r2med.datasets import load_dir
from r2med.errors import MissingExtraError
from r2med.retrievers.bm25.retriever import BM25Retriever
from r2med.installed import install_command

transformers = pytest.importorskip("transformers", reason="transformers (llm extra) renders the reference")
tokenizers = pytest.importorskip("tokenizers")

#: a template with what chat templates use: the BOS token, a system turn, whitespace control (trim_blocks and
#: lstrip_blocks), loop controls, namespace, tojson, raise_exception, the generation block, add_generation_prompt
TEMPLATE = """{{ bos_token }}
{%- set ns = namespace(system=false) %}
{% for message in messages %}
    {% if message['role'] == 'system' %}
        {% set ns.system = true %}
<|system|>{{ message['content'] | trim }}<|end|>
    {% elif message['role'] == 'user' %}
<|user|>
{{ message['content'] }}<|end|>
    {% elif message['role'] == 'assistant' %}
<|assistant|>{% generation %}{{ message['content'] }}{% endgeneration %}<|end|>
    {% else %}
        {{ raise_exception('unknown role ' ~ message['role']) }}
    {% endif %}
    {% if loop.index > 5 %}{% break %}{% endif %}
{% endfor %}
{% if not ns.system %}<|meta|>{{ {"system": none, "note": "é"} | tojson }}<|end|>
{% endif %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}"""
#: what the template gives for one user turn "Hi", with the generation prompt, worked out by hand
HI = '<s><|user|>\nHi<|end|>\n<|meta|>{"system": null, "note": "é"}<|end|>\n<|assistant|>\n'
TEXTS = ["Hi", "Question: what lowers \"homocysteine\"?\n\n  indented {{ braces }} {% raw %} </s> é 漢字"]


def tiny_tokenizer(directory, template=TEMPLATE):
    """A word-level tokenizer with special tokens and ``template``, saved by transformers itself."""
    words = ["[UNK]", "<s>", "</s>", "<pad>", "Hi"]
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                               unk_token="[UNK]", pad_token="<pad>")
    tok.chat_template = template
    tok.save_pretrained(directory)
    return directory


def reference(directory, messages):
    tok = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def conversations(text):
    return [[{"role": "user", "content": text}],
            [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": text},
             {"role": "assistant", "content": "Ok."}, {"role": "user", "content": text}]]


def layouts(root):
    """The same template as transformers saves it (``chat_template.jinja``), inside ``tokenizer_config.json``, and
    as a list of named templates whose ``default`` is it."""
    saved = tiny_tokenizer(root / "saved")
    out = {"saved": saved}
    for name, value in (("in-config", TEMPLATE), ("named", [{"name": "tool_use", "template": "{{ 'tools' }}"},
                                                           {"name": "default", "template": TEMPLATE}])):
        directory = root / name
        directory.mkdir()
        for path in saved.iterdir():
            if path.name != "chat_template.jinja":
                (directory / path.name).write_bytes(path.read_bytes())
        config = json.loads((directory / "tokenizer_config.json").read_text())
        (directory / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": value}))
        out[name] = directory
    return out


def test_the_model_template_renders_as_apply_chat_template(tmp_path):
    dirs = layouts(tmp_path)
    assert (dirs["saved"] / "chat_template.jinja").is_file()  # transformers' own layout
    for name, directory in dirs.items():
        own = model_chat_template(str(directory))
        assert own is not None and own.special_tokens["bos_token"] == "<s>", name
        assert own.path == str(directory / ("chat_template.jinja" if name == "saved" else "tokenizer_config.json"))
        for text in TEXTS:
            for messages in conversations(text):
                assert own.render(messages) == reference(directory, messages), (name, messages)
        assert own.render([{"role": "user", "content": "Hi"}]) == HI
        # the agent's prompt: the BOS token is the server's to add
        assert own.wrap("Hi") == HI.removeprefix("<s>")
    with pytest.raises(Exception, match="unknown role tool"):
        model_chat_template(str(dirs["saved"])).render([{"role": "tool", "content": "x"}])


def test_the_agent_uses_the_model_template_and_says_so(tmp_path, caplog):
    model = tiny_tokenizer(tmp_path / "ckpt")
    scifact = load_dir(shared_path("data", "scifact"), "scifact")
    dataset = dataclasses.replace(scifact, queries={"q": "GARBAGE about anemia"}, qrels={})
    searcher = open_searcher(BM25Retriever(progress=False), dataset)
    with CompletionServer() as server, caplog.at_level(logging.INFO, logger="r2med.agent.loop"):
        config = AgentConfig(protocol="search-r1-infer", llm_model=str(model), llm_name="ckpt", base_url=server.base_url)
        run_agent(dataset, config, searcher, out_dir=tmp_path / "out", progress=False)
    user = r1_prompt("GARBAGE about anemia")
    assert server.requests[0]["prompt"] == reference(model, [{"role": "user", "content": user}]).removeprefix("<s>")
    assert server.requests[0]["prompt"].startswith("<|user|>\nAnswer the given question.")
    where = model / "chat_template.jinja"
    assert f"template: chat_template of {where}" in caplog.text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["template"] == f"chat_template of {where}"
    # the template and the special tokens it is rendered with key the result: their sha256
    tokens = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "[UNK]"}
    keyed = json.dumps({"template": TEMPLATE, "special_tokens": tokens}, ensure_ascii=False, sort_keys=True)
    assert summary["config"]["chat_template"] == "model:" + hashlib.sha256(keyed.encode()).hexdigest()[:16]
    # a table name still picks the table's template
    assert AgentConfig(protocol="search-r1-infer", llm_model=str(model), llm_name="ckpt", base_url=server.base_url,
                       chat_template="chatml").resolved().chat_template == "chatml"


def test_the_name_table_is_the_fallback(tmp_path):
    llama = "PeterJinGo/SearchR1-nq_hotpotqa_train-llama3.2-3b-em-ppo"  # not here: its name picks the template
    template, how = resolve_template(llama, None)
    assert how == "llama3 (from the model name)" and template.wrap("Hi") == (
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    (tmp_path / "no-template").mkdir()  # a local directory without tokenizer files: the name again
    assert resolve_template(str(tmp_path / "no-template"), None, "qwen2.5-7b")[1] == "qwen2.5 (from the model name)"


def test_without_jinja2_only_a_template_to_render_is_an_exit_3_error(tmp_path, monkeypatch):
    model = tiny_tokenizer(tmp_path / "ckpt")
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 raises ImportError
    assert resolve_template("Qwen/QwQ-32B", None)[1] == "qwq (from the model name)"  # the table needs none
    assert resolve_template(str(model), "chatml")[1] == "chatml (given)"
    with pytest.raises(MissingExtraError) as caught:
        resolve_template(str(model), None)
    assert caught.value.exit_code == 3 and install_command("llm") in str(caught.value)
    assert "--chat-template NAME" in str(caught.value)


def test_the_pipeline_says_how_the_template_was_found(tmp_path, isolated_home):
    """The stage resolves its config before the run: the summary still tells a name's template from a given one."""
    from conftest import DATA
    from r2med.config import AgentSpec, PipelineSpec
    from r2med.pipeline import run_pipeline

    data = tmp_path / "data"
    (data / "Biology").mkdir(parents=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (data / "Biology" / name).write_bytes((DATA / "tiny" / name).read_bytes())
    llama = "PeterJinGo/SearchR1-nq_hotpotqa_train-llama3.2-3b-em-ppo"
    found = {}
    with CompletionServer() as server:
        for llm, given in (("by-name", None), ("given", "llama3")):
            config = AgentConfig(protocol="search-r1-infer", llm_model=llama, llm_name=llm, base_url=server.base_url,
                                 chat_template=given)
            run_pipeline(PipelineSpec(agent=AgentSpec(config), data_dir=data, output=tmp_path / "out"), progress=False)
            (summary,) = isolated_home.rglob(f"{llm}/summary.json")
            found[llm] = json.loads(summary.read_text())["template"]
    assert found == {"by-name": "llama3 (from the model name)", "given": "llama3 (given)"}
