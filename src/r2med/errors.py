"""The r2med error tree: every user-facing failure is one of these.

Each class carries the process exit code of the ``r2med`` command, the one convention every command follows:

====  ==========================  =====================================================================
code  class                       meaning
====  ==========================  =====================================================================
0                                 success
2     ``UsageError``              a wrong name, option or combination of options (argparse's, too)
3     ``MissingExtraError``       an optional dependency is not installed; the message names the extra
4     ``MissingResourceError``    data, a model or a server that is not there (a missing file, too)
5     ``InvalidInputError``       input that cannot be used as it is; a damaged stored file that cannot
                                  be recomputed (``DamagedFileError``)
6     ``ProviderError``           a provider or runtime failure (hub, API, model runtime, another
                                  file-system failure); a results directory another r2med process is
                                  using (``ResultsBusyError``)
2-6   ``PlanError``               several problems found before any work (a plan's, a pipeline file's, a
                                  command line's; ``Problems`` collects them): the smallest exit code among them
130                               interrupted (Ctrl-C or SIGTERM)
====  ==========================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class R2MedError(Exception):
    """Base class of every error r2med raises on purpose."""

    exit_code = 1


class UsageError(R2MedError):
    """A wrong name, option or combination of options (exit 2)."""

    exit_code = 2


class MissingExtraError(R2MedError):
    """An optional dependency is not installed (exit 3)."""

    exit_code = 3

    def __init__(self, module: str, extra: str, purpose: str = "") -> None:
        from r2med.installed import install_command  # (the command for how r2med was installed: one place)

        what = f" for {purpose}" if purpose else ""
        super().__init__(
            f"the Python package '{module}' is needed{what} but is not installed; "
            f"install it with: {install_command(extra)}"
        )
        self.module = module
        self.extra = extra


class MissingResourceError(R2MedError):
    """Data, a model or a server that is not there (exit 4)."""

    exit_code = 4


class HubUnreachableError(MissingResourceError):
    """The Hugging Face hub cannot be reached (no network, DNS, firewall, a closed proxy) while ``HF_HUB_OFFLINE`` is
    unset (exit 4). Raised on the first failed attempt, before any retry loop; the message says what to do."""


class InvalidInputError(R2MedError):
    """Input that cannot be used as it is (exit 5).

    ``problems`` holds every problem found, each already naming its file and line.
    """

    exit_code = 5

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        self.problems = list(problems or [])
        if self.problems:
            shown = "\n".join(f"  - {p}" for p in self.problems[:50])
            more = len(self.problems) - 50
            if more > 0:
                shown += f"\n  ... and {more} more"
            message = f"{message}\n{shown}"
        super().__init__(message)


class DamagedFileError(InvalidInputError):
    """A stored file (result, index, embeddings, scores) that does not match the checksum r2med recorded when it
    wrote it, or cannot be read back (exit 5). Caches and the runner catch it and recompute; it reaches the user
    only where r2med cannot recompute the file itself (a stored run another command made)."""

    def __init__(self, path: object, reason: str, fix: str = "") -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}" + (f"; {fix}" if fix else ""))


class ProviderError(R2MedError):
    """A provider (hub, API, model runtime) failed while working (exit 6)."""

    exit_code = 6


class ResultsBusyError(R2MedError):
    """Another r2med process holds the lock of the results directory (exit 6: a runtime conflict, not bad input)."""

    exit_code = 6


class IncompleteResultError(ProviderError):
    """A stage finished a dataset with some queries failed: what it made is written (an agent's files), its result
    is not stored, the other datasets still run, and the run ends with this error (exit 6); a rerun retries them."""


class PlanError(R2MedError):
    """Several problems found before any work (``r2med.planning``, a pipeline file, a command line): each is an
    R2MedError of its own, all listed in one message; the exit code is the smallest of theirs (a usage mistake first,
    then a missing extra, a missing resource, ...).
    """

    def __init__(self, problems: list[R2MedError]) -> None:
        self.problems = list(problems)
        self.exit_code = min((p.exit_code for p in self.problems), default=1)
        listed = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problems; nothing was run (fix them all, then run again):\n{listed}")


class Problems:
    """Problems collected in the order found, so that one error reports them all (a plan's, a pipeline file's, a
    command line's): :meth:`check` runs a step and keeps its ``R2MedError`` (a ``PlanError``'s each), :meth:`raise_any`
    raises one as it is and several as one :class:`PlanError`. One mistake found twice is listed once.

    >>> found = Problems()
    >>> found.check(lambda: int("7")), found.check(lambda: (_ for _ in ()).throw(UsageError("a")), default=0)
    (7, 0)
    >>> found.add(InvalidInputError("b")); found.add(UsageError("a"))
    >>> [str(p) for p in found.found], PlanError(found.found).exit_code
    (['a', 'b'], 2)
    """

    def __init__(self) -> None:
        self.found: list[R2MedError] = []

    def check(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """``fn()``, or ``default`` when it raised an R2MedError (kept); any other exception propagates."""
        try:
            return fn()
        except PlanError as exc:
            for problem in exc.problems:
                self.add(problem)
        except R2MedError as exc:
            self.add(exc)
        return default

    def add(self, exc: R2MedError) -> None:
        if not any(type(seen) is type(exc) and str(seen) == str(exc) for seen in self.found):
            self.found.append(exc)

    def raise_any(self) -> None:
        """Raise what was found: nothing, the one problem, or a PlanError listing them all."""
        if len(self.found) == 1:
            raise self.found[0]
        if self.found:
            raise PlanError(self.found)
