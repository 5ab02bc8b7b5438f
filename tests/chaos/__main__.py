"""`python -m tests.chaos` (`make chaos`): the chaos run with its figures; exit 1 when the verdict fails."""

from __future__ import annotations

import argparse
import sys

from tests.chaos.runner import ChaosConfig, run

DEFAULTS = ChaosConfig()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos",
        description="Run harel worker processes against the test replica set (its own process, loopback only) "
        "under fork/join load with durable timers, with random kill -9 and restarts, SIGTERM and stalls "
        "(SIGSTOP past the lease); verify from the store that nothing was lost, doubled, early or left "
        "behind; print timer lateness and the faults' counts.",
    )
    parser.add_argument("--workers", type=int, default=DEFAULTS.workers, help="worker processes at a time")
    parser.add_argument("--executions", type=int, default=DEFAULTS.executions, help="fork/join executions")
    parser.add_argument(
        "--kills", type=int, default=DEFAULTS.kills, help="kill -9 of a worker, then a new one"
    )
    parser.add_argument(
        "--sigterms", type=int, default=DEFAULTS.sigterms, help="SIGTERM of a worker, then a new one"
    )
    parser.add_argument(
        "--stalls", type=int, default=DEFAULTS.stalls, help="SIGSTOP of a worker past its lease"
    )
    parser.add_argument(
        "--lease-seconds", type=float, default=DEFAULTS.lease_seconds, help="the workers' lease"
    )
    parser.add_argument(
        "--start-rate", type=float, default=DEFAULTS.start_rate, help="executions started per second"
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULTS.seed, help="seed of the faults' times and victims"
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=DEFAULTS.shards,
        help="run on a fake sharded cluster of this many shards, partitioned (0: the fake replica set)",
    )
    arguments = parser.parse_args(argv)
    config = ChaosConfig(
        workers=arguments.workers,
        executions=arguments.executions,
        kills=arguments.kills,
        sigterms=arguments.sigterms,
        stalls=arguments.stalls,
        lease_seconds=arguments.lease_seconds,
        start_rate=arguments.start_rate,
        seed=arguments.seed,
        shards=arguments.shards,
    )
    report = run(config, progress=lambda line: print(line, flush=True))
    print(report.render(), flush=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
