"""`python -m bench [--quick]`: run the benchmarks, print one markdown table.

The full run (what `make bench` does) also writes the table to bench/results/latest.md; the quick run
(small sizes, what the tests run) only prints it.
"""

from __future__ import annotations

import argparse
import sys

from bench.report import RESULTS, progress, render
from bench.sizes import FULL, QUICK
from bench.suite import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes; print only, write nothing")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    results = run(sizes)
    table = render(results.rows(), mode=sizes.name, targets=results.targets)
    print(table, end="")
    if not args.quick:
        RESULTS.write_text(table, encoding="utf-8")
        progress(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
