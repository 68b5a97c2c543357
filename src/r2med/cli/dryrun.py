"""``--dry-run``: the one printer of a plan (``r2med.planning.Plan``) for every command that runs stages.

``run``, ``rerank``, ``expand`` and ``agent`` take ``--dry-run`` (with ``--json``: the plan as JSON): the plan is
made as for a real run (every problem reported at once, with its exit code), printed, and nothing is loaded, read
beyond file names and stored manifests, or contacted. The command line shown is the one given, without
``--dry-run``: run it to do what the plan says.
"""

from __future__ import annotations

import argparse
import sys

DRY_RUN = "--dry-run"


def add_dry_run(parser: argparse.ArgumentParser) -> None:
    """``--dry-run`` on ``parser`` (the same words in every command)."""
    parser.add_argument(DRY_RUN, action="store_true",
                        help="show the plan (each stage, its result files, which stored results are reused, what it "
                             "needs, the command that runs it) and exit; nothing is loaded or contacted (--json: as JSON)")


def command_of(args: argparse.Namespace) -> list[str]:
    """The argv that runs this command's plan: the one given (``main`` keeps it), without ``--dry-run``."""
    return [arg for arg in getattr(args, "argv", None) or [] if arg != DRY_RUN]


def show_plan(plan, *, as_json: bool, title: str | None = None) -> int:
    """Print ``plan`` (``r2med.planning.describe``; ``--json``: ``Plan.to_json()``) on stdout; returns 0."""
    from r2med.cli.args import emit_json
    from r2med.planning import describe

    if as_json:
        emit_json(plan.to_json())
    else:
        print(describe(plan, title=title))
    sys.stdout.flush()
    return 0
