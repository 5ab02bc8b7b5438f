"""The store-wide audit: what "nothing lost, nothing doubled, nothing early, nothing left" means, read from
the `executions` collection alone after a run under faults.

For every execution document the audit checks:

- it finished (`completed`), unless the caller names it as one that keeps running (a sink);
- nothing waits: no pending event (`inbox`), no lease, no parked event, no outbox entry, no spawn, no relay
  work (`relay_at`), no armed timer (`timers`, `next_fire_at`) on a finished execution;
- its trace holds every step it took (indexes 1 .. version-1, so no step escaped the audit), no event id
  took effect twice, and the dedupe window holds no id twice;
- every timer step happened at or after the timer's `fire_at` (the trace's `at` is the server's time of
  the claim plus the time the worker spent since; a timer fired early by the server's clock shows here);
- every child its trace spawned exists once, names it as its parent and was started exactly once, and no
  other document names it as parent.

Timer lateness (`at - fire_at`, seconds) is collected for printing; it is never asserted.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harel.model import START_EVENT, TIMER_EVENT

FINISHED = "completed"


@dataclass
class Audit:
    executions: int = 0
    steps: int = 0
    timers: int = 0
    failures: list[str] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def percentile(self, p: float) -> float | None:
        if not self.lateness:
            return None
        if len(self.lateness) == 1:
            return self.lateness[0]
        return statistics.quantiles(self.lateness, n=100, method="inclusive")[round(p) - 1]

    def summary(self) -> str:
        p50, p99 = self.percentile(50), self.percentile(99)
        late = "no timer fired" if p50 is None or p99 is None else f"p50 {p50:.3f}s, p99 {p99:.3f}s"
        return (
            f"{self.executions} executions, {self.steps} steps, {self.timers} timers "
            f"(lateness {late}), {len(self.failures)} failures"
        )


def audit(documents: Iterable[Mapping[str, Any]], *, running: Collection[str] = ()) -> Audit:
    """Audit every execution document given; `running` names executions that are meant to stay running."""
    documents = list(documents)
    by_id = {d["_id"]: d for d in documents}
    result = Audit()
    # `_id` is unique per shard only: a document stored twice is on two shards, its `p` computed two ways
    stored = Counter(d["_id"] for d in documents)
    result.failures += [f"{i}: stored {n} times (on {n} shards?)" for i, n in sorted(stored.items()) if n > 1]
    parents: Counter[str] = Counter(d.get("parent_id") for d in by_id.values() if d.get("parent_id"))
    for execution_id, document in sorted(by_id.items()):
        result.executions += 1
        result.failures += _left_behind(execution_id, document, finished=execution_id not in running)
        trace = list(document.get("trace") or [])
        result.steps += len(trace)
        result.failures += _steps(execution_id, document, trace)
        for step in trace:
            if step.get("handled") and step.get("event") == TIMER_EVENT:
                result.timers += 1
                lateness = float(step["at"]) - float(step["timer_fire_at"])
                result.lateness.append(lateness)
                if lateness < 0:
                    result.failures.append(
                        f"{execution_id}: timer {step['event_id']} fired {-lateness:.3f}s before its fire_at "
                        "by the server's clock"
                    )
        result.failures += _children(execution_id, trace, by_id, parents)
    return result


def _left_behind(execution_id: str, document: Mapping[str, Any], *, finished: bool) -> list[str]:
    failures = []
    if "data" not in document:
        return [f"{execution_id}: a document without data (a trace or mailbox of nothing)"]
    if finished and document.get("status") != FINISHED:
        failures.append(f"{execution_id}: status {document.get('status')!r}, expected {FINISHED!r}")
    waiting = {
        "inbox": [e.get("id") for e in document.get("inbox") or ()],
        "outbox": [e.get("seq") for e in document.get("outbox") or ()],
        "spawns": [e.get("child_id") for e in document.get("spawns") or ()],
        "lease": document.get("lease"),
        "parked": document.get("parked"),
        "relay_at": document.get("relay_at"),
        "inbox_at": document.get("inbox_at"),
        "last_error": document.get("last_error"),
    }
    if finished:
        waiting["timers"] = document.get("timers") or None
        waiting["next_fire_at"] = document.get("next_fire_at")
    failures += [f"{execution_id}: {name} left: {value!r}" for name, value in waiting.items() if value]
    return failures


def _steps(execution_id: str, document: Mapping[str, Any], trace: list[Mapping[str, Any]]) -> list[str]:
    failures = []
    indexes = [step.get("index") for step in trace]
    # Creation stores version 1 with no step; each step is traced under the version it started from.
    if indexes != list(range(1, int(document.get("version", 0)))):
        failures.append(
            f"{execution_id}: the trace does not hold every step (indexes {indexes[:3]}..{indexes[-3:]}, "
            f"version {document.get('version')})"
        )
    handled = Counter(step["event_id"] for step in trace if step.get("handled"))
    failures += [f"{execution_id}: event {i} took effect {n} times" for i, n in handled.items() if n > 1]
    processed = Counter(document.get("processed") or ())
    failures += [
        f"{execution_id}: {i} is {n} times in the dedupe window" for i, n in processed.items() if n > 1
    ]
    return failures


def _children(
    execution_id: str,
    trace: list[Mapping[str, Any]],
    by_id: Mapping[str, Mapping[str, Any]],
    parents: Counter[str],
) -> list[str]:
    spawned = Counter(child for step in trace for child in step.get("spawns") or ())
    failures = [f"{execution_id}: child {c} spawned by {n} steps" for c, n in spawned.items() if n > 1]
    if parents[execution_id] != len(spawned):
        failures.append(
            f"{execution_id}: {parents[execution_id]} documents name it as parent, its trace spawned "
            f"{len(spawned)}"
        )
    for child_id in spawned:
        child = by_id.get(child_id)
        if child is None:
            failures.append(f"{execution_id}: child {child_id} was never created")
            continue
        if child.get("parent_id") != execution_id:
            failures.append(f"{child_id}: parent {child.get('parent_id')!r}, spawned by {execution_id}")
        starts = [s for s in child.get("trace") or () if s.get("handled") and s.get("event") == START_EVENT]
        if len(starts) != 1:
            failures.append(f"{child_id}: started {len(starts)} times, expected once")
    return failures


@dataclass(frozen=True)
class Lease:
    """One lease as the store recorded it (`lease` of an execution), and the length its worker asked for."""

    execution_id: str
    owner: str
    at: float
    until: float
    previous: str | None
    seconds: float


def leases_taken_early(leases: Iterable[Lease]) -> list[str]:
    """Every lease whose claim time is not the server's, or that took over another lease before that one
    expired by the server's clock. The server's time of a claim is `until - seconds` (`until` is computed
    in the command from `$$NOW`); `at` must be that time."""
    observed = list(leases)
    by_owner = {lease.owner: lease for lease in observed}
    failures = []
    for lease in observed:
        claimed = lease.until - lease.seconds
        if abs(lease.at - claimed) > 0.002:
            failures.append(
                f"{lease.execution_id}: lease {lease.owner} records its claim at {lease.at:.3f}, the server's "
                f"time of the claim was {claimed:.3f}"
            )
        earlier = by_owner.get(lease.previous) if lease.previous else None
        if earlier is not None and claimed < earlier.until:
            failures.append(
                f"{lease.execution_id}: lease {lease.owner} taken over {earlier.until - claimed:.3f}s before "
                f"lease {earlier.owner} expired by the server's clock"
            )
    return failures
