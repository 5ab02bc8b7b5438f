"""How much each benchmark does: the full run behind `make bench`, and the quick one the tests run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    name: str
    # benchmark 1: the regions of each fork measured
    fork_regions: tuple[int, ...]
    # benchmark 2: the events at which a commit's bytes are measured
    history_checkpoints: tuple[int, ...]
    # benchmark 3: executions holding a timer, and how many of those are due
    idle_executions: int
    idle_due: int
    # benchmark 4: runs of the parallel chart per interpreter
    interpreter_runs: int
    # benchmark 5: smoke runs under load and how many of them are in flight at a time, then runs started
    # one at a time, and the worker counts
    end_to_end_runs: int
    end_to_end_in_flight: int
    end_to_end_paced_runs: int
    end_to_end_workers: tuple[int, ...]
    # benchmark 6: events taken at each context size
    context_events: int


# mongomock (under both the embedded default and the fake replica set) has no indexes: a claim reads every
# execution and copies each one that is due, so its cost grows with the backlog. Keeping 8 runs in flight
# bounds the backlog (enough to keep 8 single-consumer workers busy: each run forks regions of its own) while
# 40 runs give 560 events to time. The same load at every worker count: with a load growing with the workers,
# 8 workers' backlog slows the test double on a two-core machine until runs miss the smoke check's 10 s.
FULL = Sizes(
    name="full",
    fork_regions=(10, 50, 200),
    history_checkpoints=(10, 100, 1_000, 10_000),
    idle_executions=100_000,
    idle_due=10,
    interpreter_runs=2_000,
    end_to_end_runs=40,
    end_to_end_in_flight=8,
    end_to_end_paced_runs=10,
    end_to_end_workers=(1, 2, 4, 8),
    context_events=30,
)

QUICK = Sizes(
    name="quick",
    fork_regions=(10,),
    history_checkpoints=(10, 100, 250),
    idle_executions=2_000,
    idle_due=10,
    interpreter_runs=30,
    end_to_end_runs=3,
    end_to_end_in_flight=3,
    end_to_end_paced_runs=2,
    end_to_end_workers=(1, 2),  # the plumbing at one and several workers; scaling is the full run's
    context_events=3,
)
