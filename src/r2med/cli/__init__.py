"""The ``r2med`` command line: a thin argparse front over the library, one module per subcommand.

Each subcommand parses, calls library functions and prints; printing happens here and in
``r2med.reporting`` only. Exit codes: 0 ok, 2 usage, 3 missing extra, 4 missing resource, 5 invalid
input, 6 provider/runtime failure, 130 interrupted (the table in ``r2med.errors``' docstring says which
error class has which). Importing this package imports no heavy dependency: every subcommand imports
its work lazily.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from r2med import __version__
from r2med.errors import R2MedError

logger = logging.getLogger("r2med")

#: the subcommands, in the order ``r2med --help`` lists them; each module of r2med.cli has
#: ``register(subparsers, common)``, which adds its parser with ``parents=[common]`` (-q/-v)
COMMAND_MODULES = (
    "evaluate", "run", "reproduce", "fuse", "models", "datasets", "expand", "rerank", "agent", "serve", "leaderboard",
    "compare", "report",
)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'X'?"`` for the choice closest to ``word`` (difflib), ``""`` when none is close.

    >>> did_you_mean("--data-dri", ["--data-dir", "--output"])
    "; did you mean '--data-dir'?"
    >>> did_you_mean("--zzz", ["--data-dir"])
    ''
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


class CliParser(argparse.ArgumentParser):
    """The parser of ``r2med`` and, through ``add_subparsers``, of every subcommand: an unknown option is reported by
    the (sub)command that got it, with its own usage line and the closest of its options (exit 2), before a missing
    required option (often the same one, misspelt); an invalid choice (a misspelt subcommand, too) gets the closest
    valid one."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:  # the deepest subcommand parses first, so the one whose options these were not says so
            self._unrecognized(extras)
        return namespace, extras

    def error(self, message: str):  # type: ignore[override]
        """The error and its suggestion first, then one line of usage (``--help`` has the rest), exit 2: argparse's
        own would print the whole usage first (27 lines for ``run``), the line that matters last."""
        if message.startswith("the following arguments are required"):
            extras = self._extras_when_nothing_is_required()
            if extras:
                self._unrecognized(extras)
        self._fail(message)

    def _fail(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n{self.usage_hint()}\n")

    def usage_hint(self) -> str:
        """One line: argparse's usage where it fits on one, else the command and its positional arguments.

        >>> parser = CliParser(prog="r2med x")
        >>> _ = parser.add_argument("name"), parser.add_argument("--long-option-" + "a" * 80)
        >>> parser.usage_hint()
        "usage: r2med x [options] name ('r2med x --help' for the rest)"
        """
        usage = self.format_usage().strip()
        if "\n" in usage:
            positionals = [action.metavar or action.dest for action in self._actions
                           if not action.option_strings and action.help is not argparse.SUPPRESS]
            usage = " ".join(["usage:", self.prog, "[options]", *map(str, positionals)])
        return f"{usage} ('{self.prog} --help' for the rest)"

    def _unrecognized(self, extras: list[str]) -> None:
        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        unknown = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), "")
        hint = did_you_mean(unknown, options) if unknown else ""
        self._fail(f"unrecognized arguments: {' '.join(extras)}{hint}")

    def _extras_when_nothing_is_required(self) -> list[str]:
        """What this parser would leave over from its arguments if no option were required."""
        required = [action for action in self._actions if action.required]
        for action in required:
            action.required = False
        try:
            return super().parse_known_args(getattr(self, "_given", []), None)[1]
        finally:
            for action in required:
                action.required = True

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            hint = did_you_mean(value, [str(c) for c in action.choices]) if isinstance(value, str) else ""
            raise argparse.ArgumentError(action, exc.message + hint) from None


def build_parser(commands: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The ``r2med`` parser with the subcommands ``commands`` (default all; ``main`` registers only the one it runs,
    so that a command imports nothing another command needs)."""
    # -q/-v work before and after the subcommand; SUPPRESS keeps a subcommand from resetting them
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only errors on stderr, no progress bars")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="more detail on stderr")
    parser = CliParser(prog="r2med", description="Run the R2MED benchmark end to end, exactly as published.", parents=[common])
    parser.add_argument("--version", action="version", version=f"r2med {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in commands:
        importlib.import_module(f"r2med.cli.{module}").register(sub, common)
    return parser


class _CliHandler(logging.StreamHandler):
    """The one handler the CLI puts on the ``r2med`` logger (replaced on every call)."""


def _configure_logging(level: int) -> None:
    for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
        logger.removeHandler(handler)
    handler = _CliHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("r2med: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first argument that is not -q/-v), or None (``--help``, ``--version``, a
    misspelt command: those need every subcommand's parser).

    >>> _command_of(["-q", "run", "--data-dir", "x"]), _command_of(["--help"]), _command_of(["rnu"])
    ('run', None, None)
    """
    for arg in argv:
        if arg in ("-q", "--quiet", "-v", "--verbose"):
            continue
        return arg if arg in COMMAND_MODULES else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    parser = build_parser((command,) if command is not None else COMMAND_MODULES)
    args = parser.parse_args(argv)
    args.argv = list(argv)  # what --dry-run shows as the command that runs the plan
    # -q/-v are absent from the namespace unless given (see build_parser)
    args.quiet, args.verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    saved = (logger.level, logger.propagate)
    _configure_logging(logging.ERROR if args.quiet else logging.INFO if args.verbose else logging.WARNING)
    previous = _stop_on_sigterm()
    added = _set_environment()
    try:
        if args.quiet or getattr(args, "json", False):  # no bar at all: r2med's are off (progress=False), and these
            from r2med.io.progress import library_bars_off

            with library_bars_off():  # ...the hub's download bars and transformers' "Loading weights"
                return _dispatch(parser, args)
        return _dispatch(parser, args)
    finally:  # called in-process (tests, notebooks): leave the r2med logger, the SIGTERM handler and the environment
        for name in added:
            os.environ.pop(name, None)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
            logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _set_environment() -> list[str]:
    """Add ``Settings.cli_environment()`` to the process environment (matplotlib's folders under R2MED_HOME, before
    any command imports matplotlib); the names added, to take away when ``main`` returns."""
    from r2med.settings import get_settings

    added = get_settings().cli_environment()
    os.environ.update(added)
    return list(added)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> Any:
    """Make SIGTERM (``kill``, a job scheduler's stop) interrupt like Ctrl-C, so that what is running stops cleanly
    (worker processes terminated, atomic writes rolled back); returns the handler to restore, or ``None`` when
    none was installed (not the main thread, or no SIGTERM on this platform)."""
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)
    return previous if previous is not None else signal.SIG_DFL  # None: set outside Python; restore the default


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr if args.command is None else sys.stdout)
        return 2
    try:
        return int(args.func(args) or 0)
    except R2MedError as exc:
        print(f"r2med: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("r2med: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # the last resort: a file system or network failure nothing above turned into an R2MedError
        if args.verbose:
            import traceback

            traceback.print_exc(file=sys.stderr)
        hint = "" if args.verbose else " (run with -v for the traceback)"
        print(f"r2med: error: {os_error_message(exc)}{hint}", file=sys.stderr)
        return 4 if isinstance(exc, FileNotFoundError) else 6


def os_error_message(exc: OSError) -> str:
    """``<reason>: <file>`` (``<file> -> <file2>`` for a rename) of an ``OSError``.

    >>> os_error_message(PermissionError(13, "Permission denied", "/data/x.json"))
    'Permission denied: /data/x.json'
    >>> os_error_message(OSError("connection reset"))
    'connection reset'
    """
    where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason}: {where}" if where else reason

