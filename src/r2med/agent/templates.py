"""Chat templates for text completion: how one user turn is wrapped before the model continues it.

The agents' authors generate with the raw model: the question goes through the tokenizer's chat template
(one user turn, generation prompt added), and every later turn continues that text. Through an
OpenAI-compatible server that is a text completion (``POST /v1/completions``) of the templated prompt, so
r2med applies the template itself. The beginning-of-sequence token is left to the server's tokenizer (vLLM and
llama.cpp add it as the model asks).

The template is the checkpoint's own when its tokenizer files are local (``--llm-model`` a directory) or in the
Hugging Face cache (``ModelChatTemplate``: ``chat_template.jinja``, else ``tokenizer_config.json``'s
``chat_template``, rendered with jinja2 as ``transformers``' ``apply_chat_template`` renders it); else the table
below, by model name (``template_for_model``); ``--chat-template NAME`` picks a row of the table.

>>> wrap("chatml", "Hi")
'<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
>>> template_for_model("Qwen/QwQ-32B"), template_for_model("PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo")
('qwq', 'qwen2.5')
>>> template_for_model("PeterJinGo/SearchR1-nq_hotpotqa_train-llama3.2-3b-em-ppo"), template_for_model("Qwen/QwQ-32B-Preview")
('llama3', None)
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from r2med.errors import InvalidInputError, MissingExtraError
from r2med.registry import Registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatTemplate:
    """``before`` + the user's text + ``after``: a one-turn prompt with the generation prompt added."""

    name: str
    before: str
    after: str
    description: str

    def wrap(self, text: str) -> str:
        return f"{self.before}{text}{self.after}"


_QWEN_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"

TEMPLATES: Mapping[str, ChatTemplate] = MappingProxyType({t.name: t for t in (
    ChatTemplate("qwen2.5", _QWEN_SYSTEM + "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n",
                 "Qwen2.5 instruct models (and the Search-R1 checkpoints trained from them): ChatML with Qwen's "
                 "default system turn"),
    ChatTemplate("qwq", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n<think>\n",
                 "QwQ-32B: ChatML, the generation prompt opens the thinking block"),
    ChatTemplate("chatml", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n",
                 "ChatML without a system turn (Qwen3 in thinking mode, other ChatML models)"),
    ChatTemplate("gemma", "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n", "Gemma 2 and 3"),
    ChatTemplate("llama3", "<|start_header_id|>user<|end_header_id|>\n\n",
                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "Llama 3.x instruct"),
    ChatTemplate("raw", "", "", "no template: the prompt as is (base models)"),
)})

#: model name pattern -> template, first match wins
#: Llama 3 before the Search-R1 names (its Llama-3.2 checkpoints, ``...-llama3.2-3b-em-ppo``, are Llama 3 models);
#: QwQ-32B-Preview matches nothing (its template is not QwQ-32B's, which opens a thinking block): pass one
_BY_NAME: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"qwq.*preview", re.IGNORECASE), None),
    (re.compile(r"qwq", re.IGNORECASE), "qwq"),
    (re.compile(r"llama[-_]?3", re.IGNORECASE), "llama3"),
    (re.compile(r"qwen[-_]?2\.5|searchr1|search-r1", re.IGNORECASE), "qwen2.5"),
    (re.compile(r"qwen", re.IGNORECASE), "chatml"),
    (re.compile(r"gemma", re.IGNORECASE), "gemma"),
)


def templates() -> Registry[ChatTemplate]:
    return Registry("chat template", TEMPLATES)


def template_for_model(model: str) -> str | None:
    """The template a model id or path names (``None``: not recognised; pass ``--chat-template``)."""
    return next((name for pattern, name in _BY_NAME if pattern.search(model)), None)  # first match, None included


def wrap(name: str, text: str) -> str:
    """``text`` as the one user turn of template ``name``."""
    return templates().get(name).wrap(text)


# ---------------------------------------------------------------------------------------------- the model's own
#: the prefix of a resolved ``chat_template`` that is the model's own (then its sha256 follows, keying results)
MODEL_TEMPLATE = "model:"
#: the special tokens ``apply_chat_template`` passes to a template (transformers' ``SPECIAL_TOKENS_ATTRIBUTES``)
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class ModelChatTemplate:
    """A checkpoint's own chat template: its Jinja ``source`` (from ``path``) and the special tokens it may use."""

    path: str
    source: str
    special_tokens: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The resolved ``chat_template`` value (keys the agent's results): ``model:`` + the sha256 of the template
        and of the special tokens it is rendered with (a template may write ``eos_token`` into the user's turn, as
        Zephyr's does: a fine-tune with another ``eos_token`` gets another prompt)."""
        what = json.dumps({"template": self.source, "special_tokens": dict(sorted(self.special_tokens.items()))},
                          ensure_ascii=False, sort_keys=True)
        return MODEL_TEMPLATE + hashlib.sha256(what.encode("utf-8")).hexdigest()[:16]

    @property
    def description(self) -> str:
        return f"chat_template of {self.path}"

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """``messages`` rendered as ``tokenizer.apply_chat_template(messages, tokenize=False,
        add_generation_prompt=...)`` renders them (beginning-of-sequence token included where the template writes
        it); MissingExtraError (exit 3) without jinja2, InvalidInputError for a template that does not render."""
        require_jinja2(f"rendering {self.description} (or pass --chat-template NAME)")
        try:  # the template is input: it may not compile, or fail while rendering with any exception
            return _compiled(self.source).render(messages=messages, tools=None, documents=None,
                                                 add_generation_prompt=add_generation_prompt, **self.special_tokens)
        except Exception as exc:  # noqa: BLE001 - whatever the template raises, it is the template's fault
            why = " ".join(str(exc).split()) or type(exc).__name__
            raise InvalidInputError(f"{self.path}: the chat template does not render: {type(exc).__name__}: {why}; "
                                    "fix it or pass --chat-template NAME") from None

    def wrap(self, text: str) -> str:
        """``text`` as one user turn with the generation prompt, without a leading beginning-of-sequence token (the
        server's tokenizer adds it, as for the table's templates)."""
        rendered = self.render([{"role": "user", "content": text}])
        bos = self.special_tokens.get("bos_token")
        return rendered[len(bos):] if bos and rendered.startswith(bos) else rendered


def require_jinja2(purpose: str) -> Any:
    """jinja2, or MissingExtraError (exit 3) naming the ``llm`` extra."""
    try:
        import jinja2
    except ImportError as exc:
        raise MissingExtraError("jinja2", "llm", purpose) from exc
    version = str(getattr(jinja2, "__version__", "0"))
    if _version_tuple(version) < JINJA2_MIN:  # transformers refuses them too: a model's template is untrusted input
        raise MissingExtraError("jinja2>=3.1.6", "llm", f"{purpose}; jinja2 {version} is installed, and jinja2 "
                                "before 3.1.6 has known sandbox escapes (CVE-2025-27516)")
    return jinja2


#: the oldest jinja2 whose sandbox has no known escape (transformers' ``_compile_jinja_template`` asks for it too)
JINJA2_MIN = (3, 1, 6)


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"3.1.6"`` -> ``(3, 1, 6)``; a part without leading digits counts 0 (``"3.2.0rc1"`` -> ``(3, 2, 0)``).

    >>> _version_tuple("3.1.5"), _version_tuple("3.2.0rc1"), _version_tuple("3.10")
    ((3, 1, 5), (3, 2, 0), (3, 10))
    """
    return tuple(int(m.group()) if (m := re.match(r"\d+", part)) else 0 for part in version.split(".")[:3])


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> Any:
    """``source`` compiled in the environment of transformers' ``_compile_jinja_template``: a sandbox with
    ``trim_blocks``, ``lstrip_blocks``, loop controls and the ``{% generation %}`` block; ``tojson`` without HTML
    escaping; ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace``."""
    jinja2 = require_jinja2("rendering the model's chat template (or pass --chat-template NAME)")
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):  # {% generation %}...{% endgeneration %}: marks assistant text, renders it as is
        tags = frozenset({"generation"})

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template cannot set {name!r} on a namespace")

    class Namespace(jinja2.utils.Namespace):  # no underscore attributes, as transformers' TemplateNamespace
        def __init__(*args: Any, **kwargs: Any) -> None:  # jinja2's signature: namespace(self=...) still works
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            check(name)
            super().__setitem__(name, value)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = dict
    env.globals["namespace"] = Namespace
    return env.from_string(source)


def _token(value: Any) -> str | None:
    """A special token as ``tokenizer_config.json`` writes it: a string or an AddedToken dict (``content``)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _model_files(model: str) -> dict[str, Path]:
    """The model's tokenizer files that exist: in its directory, or in the Hugging Face cache."""
    from r2med.hf import is_local

    names = ("chat_template.jinja", "tokenizer_config.json", "special_tokens_map.json")
    if is_local(model):
        return {n: Path(model).expanduser() / n for n in names if (Path(model).expanduser() / n).is_file()}
    if "/" not in model:
        return {}
    from huggingface_hub import try_to_load_from_cache

    found = {}
    for name in names:
        try:
            path = try_to_load_from_cache(model, name)
        except ValueError:  # not a hub id
            return {}
        if isinstance(path, str):
            found[name] = Path(path)
    return found


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{path}: not a readable JSON file ({exc}); fix it or pass --chat-template NAME") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path}: not a JSON object; fix it or pass --chat-template NAME")
    return data


@functools.lru_cache(maxsize=32)
def model_chat_template(model: str) -> ModelChatTemplate | None:
    """The model's own chat template, read as ``transformers`` reads it: ``chat_template.jinja`` before
    ``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates: the ``default`` one);
    the special tokens from ``tokenizer_config.json``, ``special_tokens_map.json`` over them in the legacy layout
    (no ``added_tokens_decoder``). None when the model has none here (then the table by name)."""
    files = _model_files(model)
    config = _read_json(files["tokenizer_config.json"]) if "tokenizer_config.json" in files else {}
    if "chat_template.jinja" in files:
        path: Path | None = files["chat_template.jinja"]
        source: Any = path.read_text(encoding="utf-8")
    else:
        path, source = files.get("tokenizer_config.json"), config.get("chat_template")
        if isinstance(source, list):
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
            source = named.get("default")
            if source is None:
                logger.warning("%s: several chat templates and none named 'default': the template comes from the "
                               "model name", path)
    if not isinstance(source, str) or path is None:
        return None
    tokens = {name: _token(config.get(name)) for name in SPECIAL_TOKENS}
    if "added_tokens_decoder" not in config and "special_tokens_map.json" in files:
        legacy = _read_json(files["special_tokens_map.json"])
        tokens.update({name: _token(legacy[name]) for name in SPECIAL_TOKENS if name in legacy})
    return ModelChatTemplate(str(path), source, MappingProxyType({k: v for k, v in tokens.items() if v is not None}))


def resolve_template(model: str, chat_template: str | None, name: str | None = None) -> tuple[Any, str]:
    """The template an agent wraps its prompts with, and how it was chosen: a table row when ``chat_template``
    names one, the model's own (``chat_template`` None or ``model:<sha256>``), else the table row the model's
    name (or ``name``) matches; ``(None, "")`` when nothing fits."""
    if chat_template is not None and not chat_template.startswith(MODEL_TEMPLATE):
        return templates().get(chat_template), f"{chat_template} (given)"
    own = model_chat_template(model)
    if own is not None:
        require_jinja2(f"rendering {own.description} (or pass --chat-template NAME)")
        if chat_template is not None and chat_template != own.name:
            raise InvalidInputError(f"{own.description} is not the template the run was keyed with ({chat_template}): "
                                    "it changed; rerun without chat_template in the config")
        own.wrap("r2med")  # a template that does not render is found now, before any request
        return own, own.description
    if chat_template is not None:
        raise InvalidInputError(f"chat_template {chat_template}: {model} has no chat template here; pass "
                                "--chat-template NAME")
    by_name = template_for_model(model) or (template_for_model(name) if name else None)
    return (templates().get(by_name), f"{by_name} (from the model name)") if by_name else (None, "")
