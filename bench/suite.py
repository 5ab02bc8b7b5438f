"""All seven benchmarks, in order, against every target; progress on stderr."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from bench import commit_bytes, context_size, end_to_end, idle_claims, interpreter_speed, round_trips, sharded
from bench.deployments import (
    LATENCY_LABEL,
    LATENCY_MS,
    SLOW_LATENCY_LABEL,
    SLOW_LATENCY_MS,
    Target,
    fake_target,
    real_url,
    wire_targets,
)
from bench.report import Row, progress
from bench.sizes import Sizes
from bench.worker_pool import PROCESSES, THREADS

T = TypeVar("T")


@dataclass(frozen=True)
class Results:
    sizes: Sizes
    targets: list[str]
    round_trips: list[round_trips.RoundTrips]
    forks: list[round_trips.ForkCost]
    commit_bytes: list[commit_bytes.CommitBytes]
    idle_claims: idle_claims.IdleClaims
    interpreter: interpreter_speed.InterpreterSpeed
    end_to_end: list[end_to_end.EndToEnd]
    context_size: list[context_size.ContextSize]
    sharded: sharded.ShardedCost

    def rows(self) -> list[Row]:
        listed: list[Row] = []
        for counted in self.round_trips:
            listed += round_trips.rows(counted)
        listed += round_trips.fork_rows(self.forks)
        for sent in self.commit_bytes:
            listed += commit_bytes.rows(sent)
        listed += idle_claims.rows(self.idle_claims)
        listed += interpreter_speed.rows(self.interpreter)
        listed += end_to_end.rows(self.end_to_end)
        for costs in self.context_size:
            listed += context_size.rows(costs)
        listed += sharded.rows(self.sharded)
        return listed


def timed(label: str, work: Callable[[], T]) -> T:
    progress(f"{label} ...")
    started = time.perf_counter()
    result = work()
    progress(f"{label}: {time.perf_counter() - started:.1f} s")
    return result


def run(sizes: Sizes) -> Results:
    with (
        wire_targets() as targets,
        fake_target(LATENCY_LABEL, "--latency-ms", str(LATENCY_MS)) as latency,
        fake_target(SLOW_LATENCY_LABEL, "--latency-ms", str(SLOW_LATENCY_MS)) as slow,
    ):
        counted = [
            timed(f"1/7 round trips on the {t.label}", lambda t=t: round_trips.measure(t)) for t in targets
        ]
        forks = [
            timed(
                f"1/7 a fork of {regions} regions on the {t.label}",
                lambda t=t, regions=regions: round_trips.measure_fork(t, regions),
            )
            for t in targets
            for regions in sizes.fork_regions
        ]
        sent = [
            timed(
                f"2/7 bytes per commit on the {t.label}",
                lambda t=t: commit_bytes.measure(t, sizes.history_checkpoints),
            )
            for t in targets
        ]
        idle = timed(
            f"3/7 claims among {sizes.idle_executions:,} idle executions",
            lambda: idle_claims.measure(sizes.idle_executions, sizes.idle_due, real_url()),
        )
        interpreter = timed(
            f"4/7 interpreter speed, {sizes.interpreter_runs:,} runs each",
            lambda: interpreter_speed.measure(sizes.interpreter_runs),
        )
        setups = end_to_end_setups(latency, slow, targets)
        flows = [
            timed(
                f"5/7 end to end on the {setup.label}, {workers} worker(s)",
                lambda setup=setup, workers=workers: end_to_end.measure(
                    setup,
                    workers,
                    sizes.end_to_end_runs,
                    sizes.end_to_end_in_flight,
                    sizes.end_to_end_paced_runs,
                ),
            )
            for setup in setups
            for workers in sizes.end_to_end_workers
        ]
        contexts = [
            timed(
                f"6/7 context size on the {t.label}",
                lambda t=t: context_size.measure(t, sizes.context_events),
            )
            for t in targets
        ]
        cluster = timed(f"7/7 shard requests per event on {sharded.SHARDS} shards", sharded.measure)
        labels = [t.label for t in targets] + [latency.label, slow.label, end_to_end.EMBEDDED_LABEL]
    return Results(sizes, labels, counted, forks, sent, idle, interpreter, flows, contexts, cluster)


def end_to_end_setups(latency: Target, slow: Target, targets: list[Target]) -> list[end_to_end.Setup]:
    """Benchmark 5's backends: the fake with 1 ms latency (the scaling target) and with 5 ms, a real
    deployment if set, the fake without latency, the embedded default. Over the wire the workers are
    processes."""
    wire = [latency, slow, *(t for t in targets if t.real), *(t for t in targets if not t.real)]
    return [
        end_to_end.Setup(t.label, t.url, PROCESSES, t.process_id, scaling_target=t is latency) for t in wire
    ] + [end_to_end.Setup(end_to_end.EMBEDDED_LABEL, end_to_end.EMBEDDED_URL, THREADS)]
