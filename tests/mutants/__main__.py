"""`python -m tests.mutants` (`make mutate`): plant every mutant of tests/mutants/catalog.py, one at a time,
in a scratch copy of the SDK, run the tests that must kill it, print the table; exit 1 if any survived."""

from __future__ import annotations

import argparse
import sys
import time

from tests.mutants.catalog import MUTANTS, Mutant
from tests.mutants.runner import Outcome, baseline, plant, short, table


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.mutants",
        description=(
            "Plant each bug of tests/mutants/catalog.py in a scratch copy of the SDK, run the tests named to "
            "kill it against that copy, and fail if one survives. First, the same tests run on an unchanged "
            "copy and must pass."
        ),
    )
    parser.add_argument("--only", action="append", metavar="NAME", help="plant only this mutant (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the run of the named tests on an unchanged copy"
    )
    return parser.parse_args(argv)


def _selected(arguments: argparse.Namespace) -> list[Mutant]:
    chosen = list(MUTANTS)
    if arguments.only:
        unknown = set(arguments.only) - {m.name for m in MUTANTS}
        if unknown:
            raise SystemExit(f"no such mutant: {', '.join(sorted(unknown))} (see --list)")
        chosen = [m for m in chosen if m.name in arguments.only]
    return chosen


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(argv)
    mutants = _selected(arguments)
    if arguments.list:
        for mutant in mutants:
            print(f"{mutant.name:32} {mutant.where}\n{'':32} {mutant.bug}")
            for node in mutant.killed_by:
                print(f"{'':34}{short(node)}")
        return 0
    started = time.monotonic()
    if not arguments.no_baseline:
        code, output, seconds = baseline(mutants)
        if code != 0:
            print(output)
            print(
                f"FAIL  the named tests do not pass on the unchanged SDK (exit {code}): no kill would mean anything"
            )
            return 1
        print(f"baseline: the named tests pass on an unchanged copy ({seconds:.0f} s)", flush=True)
    outcomes: list[Outcome] = []
    for number, mutant in enumerate(mutants, 1):
        outcome = plant(mutant)
        outcomes.append(outcome)
        print(
            f"[{number}/{len(mutants)}] {mutant.name}: {outcome.status} ({outcome.seconds:.0f} s)", flush=True
        )
        if not outcome.killed:
            print(outcome.output[-4000:])
    print()
    print(table(outcomes))
    print()
    alive = [o.mutant.name for o in outcomes if not o.killed]
    elapsed = time.monotonic() - started
    if alive:
        print(
            f"FAIL  {len(alive)} of {len(outcomes)} mutants not killed: {', '.join(alive)} ({elapsed:.0f} s)"
        )
        return 1
    print(f"PASS  {len(outcomes)} of {len(outcomes)} mutants killed ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
