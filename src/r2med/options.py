"""Options declared once, beside the component that reads them.

A component's options are a frozen dataclass whose fields are declared with :func:`option` (default, help,
choices, range, command-line flag). From that one declaration come:

- the command-line flags (:class:`Flags`: argparse arguments whose values are checked as declared),
- the keys of a pipeline file's table (:func:`from_table`: unknown keys, types, choices and ranges checked,
  errors naming the file, the table and the key),
- the inline form ``NAME:key=value,key=value`` (``r2med run --retriever bm25:variant=lucene``, :func:`split_inline`),
- the resume key (:func:`key_of`: the options that change a result), and
- the rows of the docs' option list (:func:`doc_rows`).

A class may extend another (dataclass inheritance, ``kw_only``): the LLM endpoint is declared once
(``r2med.llm.endpoint``) and extended by the listwise reranker, ``r2med expand`` and the agent;
:func:`redefault` gives an inherited option another default without declaring it again.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True, kw_only=True)
... class Demo:
...     k1: float = option(0.9, "BM25 k1", minimum=0)
...     variant: str = option("r2med", "which BM25", choices=("r2med", "lucene"), aliases=("bm25_variant",))
>>> from_table(Demo, {"bm25_variant": "lucene"}, "p.toml [[retriever]] #1")
Demo(k1=0.9, variant='lucene')
>>> from_table(Demo, {"k1": -1}, "p.toml [[retriever]] #1")
Traceback (most recent call last):
...
r2med.errors.InvalidInputError: p.toml [[retriever]] #1: k1 must be at least 0, got -1
>>> split_inline("bm25:variant=lucene,k1=1.2"), split_inline("openai:Qwen/Qwen3-Embedding-8B")
(('bm25', {'variant': 'lucene', 'k1': '1.2'}), ('openai:Qwen/Qwen3-Embedding-8B', {}))
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union, get_args, get_origin, get_type_hints

from r2med.errors import InvalidInputError, UsageError
from r2med.numbers import NumberError, parse_decimal, parse_integer

_META = "r2med.option"
#: the word that sends no value for an option declared with ``none_word=True`` (a server's default sampling)
NONE_WORD = "none"


@dataclasses.dataclass(frozen=True)
class Option:
    """One declared option (see :func:`option`); ``kind`` is the field's type hint, resolved."""

    name: str
    kind: Any
    default: Any
    help: str
    choices: tuple[str, ...] | Callable[[], Sequence[str]] | None = None
    minimum: float | None = None
    maximum: float | None = None
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    keyed: bool = True
    in_file: bool = True
    none_word: bool = False
    metavar: str | None = None
    default_note: str | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def valid_choices(self) -> tuple[str, ...] | None:
        if self.choices is None:
            return None
        return tuple(self.choices() if callable(self.choices) else self.choices)

    @property
    def base(self) -> Any:
        """The type without ``| None`` (``list[float]`` stays a list type)."""
        kinds = [k for k in (get_args(self.kind) if _is_union(self.kind) else (self.kind,)) if k is not type(None)]
        return kinds[0] if len(kinds) == 1 else Union[tuple(kinds)]  # noqa: UP007

    @property
    def optional(self) -> bool:
        return _is_union(self.kind) and type(None) in get_args(self.kind)

    def type_name(self) -> str:
        base = self.base
        if get_origin(base) is list:
            return f"list of {_WORDS[get_args(base)[0]][1]}s"
        name = _WORDS.get(base, ("", getattr(base, "__name__", str(base))))[1]
        return f"{name} or {NONE_WORD!r}" if self.none_word else name

    def check(self, value: Any, where: str, key: str | None = None) -> Any:
        """``value`` if it has the declared type, choice and range (an int widened to a declared float); else
        InvalidInputError naming ``where`` and the key. Nothing is coerced: ``"8"`` is not an integer."""
        key = key or self.name
        if self.none_word and value == NONE_WORD:
            return value
        if value is None and self.optional:
            return None
        base = self.base
        if get_origin(base) is list:
            (item,) = get_args(base)
            if not isinstance(value, list) or not all(_fits(v, item) for v in value):
                raise InvalidInputError(f"{where}: {key} must be a {self.type_name()}, got {value!r}")
            if item is float and not all(math.isfinite(v) for v in value):  # as a single number must be
                raise InvalidInputError(f"{where}: {key} must be a list of finite numbers, got {value!r}")
            return [self._range(float(v) if item is float else v, where, key, v) for v in value]
        if not _fits(value, base):
            hint = ""
            if isinstance(value, str) and base in (int, float):
                hint = " (write it without quotes)"
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and base is str:
                hint = " (write it in quotes)"
            article = "" if base is bool else "an " if self.type_name()[0] in "aeiou" else "a "
            raise InvalidInputError(f"{where}: {key} must be {article}{self.type_name()}, got {value!r}{hint}")
        given = value
        if base is float:
            if not math.isfinite(value):
                raise InvalidInputError(f"{where}: {key} must be a finite number, got {value!r}")
            value = float(value)
        choices = self.valid_choices()
        if choices is not None and value not in choices:
            raise InvalidInputError(f"{where}: {key} must be one of {', '.join(map(repr, choices))}, got {value!r}")
        return self._range(value, where, key, given)

    def _range(self, value: Any, where: str, key: str, given: Any) -> Any:
        if self.minimum is not None and value < self.minimum:
            raise InvalidInputError(f"{where}: {key} must be at least {self.minimum:g}, got {given!r}")
        if self.maximum is not None and value > self.maximum:
            raise InvalidInputError(f"{where}: {key} must be at most {self.maximum:g}, got {given!r}")
        return value

    def parse(self, text: str) -> Any:
        """A command-line (or inline) string as this option's value; ValueError with a readable reason.

        >>> Option("k1", float, 0.9, "", minimum=0).parse("1.2")
        1.2
        >>> Option("temperature", float | None, 0.0, "", none_word=True).parse("None")
        'none'
        """
        if self.none_word and text.strip().lower() in (NONE_WORD, "default", "server"):
            return NONE_WORD
        base = self.base
        try:
            if get_origin(base) is list:
                (item,) = get_args(base)
                value: Any = [_list_item(part, item) for part in _csv(text)]
            elif base is bool:
                if text.strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                value = text.strip().lower() in ("true", "1", "yes")
            elif base in (int, float):
                value = read_number(text, base)
            else:
                value = text
        except ValueError as exc:
            extra = f" or {NONE_WORD!r}" if self.none_word else ""
            word = "comma-separated numbers" if get_origin(base) is list else _WORDS.get(base, ("a value",))[0]
            why = f" ({exc.hint})" if getattr(exc, "hint", "") else ""
            raise ValueError(f"expected {word}{extra}, got {text!r}{why}") from None
        try:
            return self.check(value, "", self.name)
        except InvalidInputError as exc:
            raise ValueError(str(exc).split(": ", 1)[-1].removeprefix(f"{self.name} ")) from None


_WORDS: dict[Any, tuple[str, str]] = {bool: ("true or false", "true or false"), int: ("a whole number", "integer"),
                                      float: ("a number", "number"), str: ("a string", "string"),
                                      list: ("comma-separated values", "list")}


def read_number(text: str, kind: type[int | float] = float) -> Any:
    """``text`` typed on the command line or inline (``bm25:k1=0.9``) as a number, in the grammar files are read in
    (``r2med.numbers``: what C's ``strtod``/``strtol`` read whole, ASCII only), never Python's, by which ``float``
    reads ``0_9`` as 9.0 and ``int`` reads Arabic-Indic ``١٢`` as 12. A float must be finite. ValueError (a
    ``NumberError``, whose ``hint`` says what is wrong and what to write) otherwise.

    >>> read_number("0.9"), read_number(" 12 ", int), read_number("1e-3"), read_number("+3", int)
    (0.9, 12, 0.001, 3)
    >>> def hint(text, kind=float):
    ...     try:
    ...         read_number(text, kind)
    ...     except NumberError as exc:
    ...         return exc.hint
    >>> hint("0_9")
    "it holds '_'; write ASCII digits with an optional sign, '.' and exponent, e.g. 0.9, -12, 1.5e-3"
    >>> hint("١٢", int)
    "it holds the non-ASCII character '١' (U+0661); write ASCII digits with an optional sign, e.g. 0, 1, 2"
    >>> hint("nan"), hint("1e999")
    ('it is not finite; write a finite number, e.g. 0.9', 'it is not finite; write a finite number, e.g. 0.9')
    """
    if kind is int:
        return parse_integer(text)
    value = parse_decimal(text)
    if not math.isfinite(value):
        raise NumberError(f"{text!r:.60} is not a finite number", "it is not finite; write a finite number, e.g. 0.9")
    return value


def _list_item(part: str, item: type) -> Any:
    """One item of a comma-separated list: a number as :func:`read_number` reads it (its hint naming the item)."""
    if item not in (int, float):
        return item(part)
    try:
        return read_number(part, item)
    except NumberError as exc:
        raise NumberError(str(exc), f"{part.strip()!r:.60}: {exc.hint}") from None


def _is_union(kind: Any) -> bool:
    import types

    return get_origin(kind) in (Union, types.UnionType)


def _fits(value: Any, kind: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if _is_union(kind):
        return any(_fits(value, k) for k in get_args(kind))
    return isinstance(value, kind) if isinstance(kind, type) else True


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def option(default: Any = dataclasses.MISSING, help: str = "", *, choices: Any = None,
           minimum: float | None = None, maximum: float | None = None, flag: str | None = None,
           aliases: Iterable[str] = (), keyed: bool = True, in_file: bool = True, none_word: bool = False,
           metavar: str | None = None) -> Any:
    """Declare an option as a dataclass field.

    ``choices``: the valid values (a tuple, or a function returning them, looked up when checked);
    ``minimum``/``maximum``: the range; ``flag``: the command-line flag (default ``--<name-with-dashes>``);
    ``aliases``: other keys a pipeline file may use (older spellings); ``keyed``: part of the resume key (False for
    what does not change a result: addresses, timeouts, concurrency); ``in_file``: settable in a pipeline file;
    ``none_word``: ``none`` on the command line (or ``"none"`` in a file) sends no value (the server's default).
    """
    meta = {_META: {"help": help, "choices": choices, "minimum": minimum, "maximum": maximum, "flag": flag,
                    "aliases": tuple(aliases), "keyed": keyed, "in_file": in_file, "none_word": none_word,
                    "metavar": metavar, "default_note": None}}
    return dataclasses.field(default=default, metadata=meta)


def redefault(cls: type, name: str, default: Any, *, note: str | None = None) -> Any:
    """The field ``name`` of ``cls``, declared once there, with another default (in a class that extends ``cls``);
    ``note`` says what the default is where it is not a value (``"default: Search-R1 1024, Search-o1 8192"``)."""
    found = {f.name: f for f in dataclasses.fields(cls)}[name]
    meta = {_META: {**found.metadata[_META], "default_note": note}}
    return dataclasses.field(default=default, metadata=meta)


@functools.cache
def options_of(cls: type) -> tuple[Option, ...]:
    """The declared options of ``cls``, in field order (fields without :func:`option` are not options)."""
    hints = get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_META)
        if meta is None:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append(Option(f.name, hints[f.name], default, **meta))
    return tuple(out)


def file_keys(cls: type) -> dict[str, Option]:
    """Every key a pipeline file may use for ``cls`` (names and aliases) -> its option."""
    keys: dict[str, Option] = {}
    for opt in options_of(cls):
        if opt.in_file:
            keys[opt.name] = opt
            keys.update(dict.fromkeys(opt.aliases, opt))
    return keys


def check_keys(table: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """InvalidInputError naming the unknown keys of ``table``, a suggestion and the valid ones."""
    allowed = sorted(set(allowed))
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        close = difflib.get_close_matches(unknown[0], allowed, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InvalidInputError(f"{where}: unknown key(s) {', '.join(unknown)}{hint}; valid: {', '.join(allowed)}")


def values_from_table(cls: type, table: Mapping[str, Any], where: str, *, ignore: Iterable[str] = ()) -> dict[str, Any]:
    """The checked values of ``table`` for ``cls`` (aliases resolved; the keys in ``ignore`` left to the caller)."""
    keys = file_keys(cls)
    ignore = set(ignore)
    check_keys(table, set(keys) | ignore, where)
    values: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in table.items():
        if key in ignore:
            continue
        opt = keys[key]
        if opt.name in seen:
            raise InvalidInputError(f"{where}: {seen[opt.name]} and {key} are the same option; keep one")
        seen[opt.name] = key
        values[opt.name] = opt.check(value, where, key)
    return values


def from_table(cls: type, table: Mapping[str, Any], where: str, *, ignore: Iterable[str] = (), **fixed: Any) -> Any:
    """``cls`` from a pipeline file's table: every key known, every value checked (InvalidInputError naming ``where``
    and the key); ``fixed`` are values the caller sets (not from the file)."""
    values = values_from_table(cls, table, where, ignore=ignore)
    try:
        return cls(**values, **fixed)
    except UsageError as exc:  # a rule across options (the class's __post_init__)
        raise InvalidInputError(f"{where}: {exc}") from None


_KEY = re.compile(r"\s*([A-Za-z_][\w-]*)\s*=")


def split_inline(text: str, where: str | None = None) -> tuple[str, dict[str, str]]:
    """``NAME:key=value,key=value`` -> ``(NAME, {key: value})``; values are strings (see :func:`values_from_text`).

    The options start at the first ``:`` followed by ``key=``: a name without one (``openai:MODEL``, a hub id) has
    none, and an existing file or directory is always a name (``/models/lr:k=1``). A comma not followed by ``key=``
    belongs to the value (``rrf:weights=1,2``, an instruction with commas). A key given twice or an empty option
    (``k1=1.2,,b=0.5``) is a UsageError naming ``where`` (default: the text).

    >>> split_inline("rrf:k=30,weights=1,2"), split_inline("nv:query_instruction=Given a question, retrieve: a")
    (('rrf', {'k': '30', 'weights': '1,2'}), ('nv', {'query_instruction': 'Given a question, retrieve: a'}))
    >>> split_inline("bm25:k1=1.2,k1=1.5")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: bm25:k1=1.2,k1=1.5: k1 is given twice; keep one
    """
    import os

    where = where or text
    if os.path.exists(os.path.expanduser(text)):
        return text, {}
    at = next((i for i, char in enumerate(text) if char == ":" and i and _KEY.match(text, i + 1)), None)
    if at is None:
        return text, {}
    pairs: dict[str, str] = {}
    key = None
    for part in text[at + 1:].split(","):
        found = _KEY.match(part)
        if found:
            key = found.group(1).replace("-", "_")
            if key in pairs:
                raise UsageError(f"{where}: {key} is given twice; keep one")
            pairs[key] = part[found.end():]
        elif not part.strip():
            raise UsageError(f"{where}: an empty option (two commas, or one at the end); write NAME:key=value,key=value")
        else:
            assert key is not None  # the first part matched _KEY
            pairs[key] += "," + part
    return text[:at], {key: value.strip() for key, value in pairs.items()}


def values_from_text(classes: Sequence[type], pairs: Mapping[str, str], where: str) -> dict[str, Any]:
    """The inline ``pairs`` of ``where`` parsed as options of ``classes`` (UsageError naming the key and the valid ones)."""
    keys: dict[str, Option] = {}
    for cls in classes:
        keys.update(file_keys(cls))
    names = sorted({opt.name for opt in keys.values()})
    values = {}
    for key, text in pairs.items():
        if key not in keys:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]}?" if close else "."
            raise UsageError(f"{where}: unknown option {key!r}{hint} Valid: {', '.join(names) or 'none'}")
        try:
            values[keys[key].name] = keys[key].parse(text)
        except ValueError as exc:
            raise UsageError(f"{where}: {key}={text}: {exc}") from None
    return values


def key_of(options: Any) -> dict[str, Any]:
    """The options of ``options`` (an instance) that change a result, by name: what keys a stored result."""
    return {opt.name: getattr(options, opt.name) for opt in options_of(type(options)) if opt.keyed}


def flat(options: Any) -> dict[str, Any]:
    """Every declared option of ``options`` by name."""
    return {opt.name: getattr(options, opt.name) for opt in options_of(type(options))}


class Flags:
    """The command-line flags of one options class: ``add(parser)`` declares them, ``given(args)`` returns the values
    the user gave (by option name) and ``build(args)`` the options. A flag already on the parser (another class's,
    e.g. ``--device``) is shared, not declared twice. ``rename``: option -> flag for this command (``run`` has both
    a dense and a reranker batch size); ``required``: options the command needs; ``skip``: options not offered."""

    def __init__(self, cls: type, *, rename: Mapping[str, str] | None = None, required: Iterable[str] = (),
                 skip: Iterable[str] = (), title: str | None = None) -> None:
        self.cls = cls
        self.rename = dict(rename or {})
        self.required = set(required)
        self.skip = set(skip)
        self.title = title

    def options(self) -> list[Option]:
        return [opt for opt in options_of(self.cls) if opt.name not in self.skip]

    def flag(self, opt: Option) -> str:
        return self.rename.get(opt.name, opt.cli_flag)

    @staticmethod
    def dest(flag: str) -> str:
        return "opt_" + flag.lstrip("-").replace("-", "_")

    def add(self, parser: argparse.ArgumentParser) -> None:
        existing = {s for action in parser._actions for s in action.option_strings}
        target: Any = parser.add_argument_group(self.title) if self.title else parser
        for opt in self.options():
            flag = self.flag(opt)
            if flag in existing:
                continue
            kwargs: dict[str, Any] = {"dest": self.dest(flag), "default": argparse.SUPPRESS,
                                      "help": _help(opt), "required": opt.name in self.required}
            if opt.base is bool and not opt.none_word:
                kwargs["action"] = "store_false" if opt.default else "store_true"
            else:
                kwargs["type"] = _argtype(opt)
                kwargs["metavar"] = opt.metavar or {int: "N", float: "X"}.get(opt.base) or opt.name.upper()
                choices = opt.valid_choices()
                if choices is not None:
                    kwargs["metavar"] = opt.metavar or "{" + ",".join(choices) + "}"
            target.add_argument(flag, **kwargs)

    def given(self, args: argparse.Namespace) -> dict[str, Any]:
        out = {}
        for opt in self.options():
            dest = self.dest(self.flag(opt))
            if hasattr(args, dest):
                out[opt.name] = getattr(args, dest)
        return out

    def build(self, args: argparse.Namespace, **fixed: Any) -> Any:
        return self.cls(**{**self.given(args), **fixed})


def _argtype(opt: Option) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return opt.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = opt.type_name()  # argparse names the type in its "invalid ... value" message
    return convert


def _help(opt: Option) -> str:
    text = opt.help.replace("%", "%%")
    if opt.default_note:
        text += f" ({opt.default_note})"
    elif "default" not in opt.help and opt.default is not None and not (opt.base is bool and opt.default is False):
        text += f" (default {opt.default})"
    return text


def doc_rows(flags: Flags) -> list[list[str]]:
    """The docs' option list of one class as it is offered: flag, file key, type, default, help."""
    rows = []
    for opt in flags.options():
        choices = opt.valid_choices()
        kind = " | ".join(choices) if choices else opt.type_name()
        if opt.minimum is not None and opt.maximum is not None:
            kind += f" in [{opt.minimum:g}, {opt.maximum:g}]"
        elif opt.minimum is not None:
            kind += f" >= {opt.minimum:g}"
        key = opt.name if opt.in_file else "-"
        default = "-" if opt.default is None else str(opt.default).lower() if isinstance(opt.default, bool) else str(opt.default)
        default = opt.default_note or default
        rows.append([f"`{flags.flag(opt)}`", f"`{key}`" if key != "-" else "-", kind, default, opt.help])
    return rows


@dataclasses.dataclass(frozen=True)
class Runtime:
    """What a builder gets besides a component's options: ``cache_dir`` (R2MED_HOME; None: nothing cached) and
    whether to draw progress bars. Never part of a result's key."""

    cache_dir: Any = None
    progress: bool = True
