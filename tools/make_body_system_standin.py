"""Write the body-system stand-in of docs/leaderboard.md: four tiny datasets under R2MED's names and two systems' results.

    python tools/make_body_system_standin.py [ROOT]     # ROOT/data and ROOT/results (default: the current folder)

The R2MED data is not reachable offline, so the page's ``--by body-system`` example runs on the test suite's
stand-in (``make_standin`` of ``tests/reporting/test_breakdown.py``, whose docstring works out every value): query
files that carry ``body_system`` and results in r2med's layout with chosen per-query nDCG@10 values. It prints the
two folders it wrote.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "reporting")]

from test_breakdown import make_standin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path("."), help="where data/ and results/ go")
    args = parser.parse_args(argv)
    taken = [p for p in (args.root / "data", args.root / "results") if p.exists()]
    if taken:
        print(f"make_body_system_standin: {taken[0]} exists; remove it or pick another ROOT", file=sys.stderr)
        return 5
    data, results = make_standin(args.root)
    print(f"{data}\n{results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
