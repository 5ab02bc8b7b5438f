"""Deliberately broken stores and transports: each breaks one contract the conformance suites must catch.

They reuse MongoStore's and MongoTransport's own document builders and change only the broken step, so a
check that fails on them fails because of that step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harel.commands import only
from harel.executions import commits, replies, writes
from harel.executions.records import Claim, Emit, Spawn, StepRecord
from harel.model import DueTimer, Execution, TimerOp
from harel.servertime import NOW
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport, new_owner_token


class _PlannedCommit(MongoStore):
    def _plan(
        self,
        exe: Execution,
        emits: Sequence[Emit],
        spawns: Sequence[Spawn],
        timers: Sequence[TimerOp],
        processed_event_id: str | None,
        trace: dict[str, Any] | None,
    ) -> commits.Commit:
        record = StepRecord(processed_event_id, emits, spawns, trace)
        return commits.step_commit(exe, record, bool(timers), self.trace_max, self.dedupe_window)


class NoVersionFilterStore(_PlannedCommit):
    """Updates by `_id` alone: a writer holding an old version overwrites the newer one."""

    def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        write = self._plan(exe, emits, spawns, timers, processed_event_id, trace)
        if write.creates:
            self._write(write)
        else:
            self._executions.update_one({"_id": exe.id}, write.write.update)
        exe.version = write.version


class SplitCommitStore(_PlannedCommit):
    """Advances the execution in one update and writes its outbox, spawns, dedupe mark, timers and trace
    in a second: a failure between the two leaves an advance without its bookkeeping."""

    ADVANCE = frozenset(
        {"definition_id", "status", "parent_id", "created_at", "updated_at", "version", "data"}
    )

    def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        write = self._plan(exe, emits, spawns, timers, processed_event_id, trace)
        if write.creates:
            self._write(write)
        else:
            fields = write.write.update[0]["$set"]
            advance = {name: value for name, value in fields.items() if name in self.ADVANCE}
            if self._executions.update_one(write.write.filter, [{"$set": advance}]).matched_count != 1:
                self._raise_conflict(write, None)
            bookkeeping = {name: value for name, value in fields.items() if name not in self.ADVANCE}
            if bookkeeping:
                self._executions.update_one({"_id": exe.id}, [{"$set": bookkeeping}])
        exe.version = write.version


class FireAtBlindStore(MongoStore):
    """Reports every armed timer as due, whatever its fire time."""

    def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer]:
        armed = self._executions.find({"next_fire_at": {"$ne": None}}, only("timers", "next_fire_at"))
        return replies.parse_due(armed)[:limit]


class CallerClockTransport(MongoTransport):
    """Leases on the caller's clock: a claim takes whatever is due by the worker's own estimate (its bound)
    instead of the server's `$$NOW`, so a worker whose clock runs ahead takes leases before they expire."""

    def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        def stages(fire: dict[str, Any], leased: dict[str, Any]) -> list[dict[str, Any]]:
            held = leased["$set"]
            return [fire, {"$set": {**held, "lease": {**held["lease"], "at": bound}}}]

        return _claimed_by_the_callers_clock(self, charts, lease, bound, stages)


class CallerClockTimersTransport(MongoTransport):
    """Timers on the caller's clock: the claim takes an execution for due, and fires its timers, when the
    worker's own estimate (its bound) has passed them instead of the server's `$$NOW`, so a worker ahead
    fires timers early."""

    def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        def stages(fire: dict[str, Any], leased: dict[str, Any]) -> list[dict[str, Any]]:
            return [_on_the_callers_clock(fire, bound), leased]

        return _claimed_by_the_callers_clock(self, charts, lease, bound, stages)


def _claimed_by_the_callers_clock(
    transport: MongoTransport,
    charts: Sequence[str],
    lease: float,
    bound: float,
    stages: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]],
) -> Claim | None:
    """The claim's write without its `$$NOW` test (what is due by `bound` is taken), its two stages (the
    timers fired, the lease taken) as `stages` makes them."""
    owner = new_owner_token()
    write = writes.claim_write(charts, owner, lease, bound)
    caller_clock = {key: value for key, value in write.filter.items() if key != "$expr"}
    fire, leased = write.update
    found = transport._executions.find_one_and_update(
        caller_clock,
        stages(fire, leased),
        sort=list(write.sort),
        projection=write.projection,
        return_document=True,
    )
    return transport._claimed(found, owner)


def _on_the_callers_clock(expression: Any, bound: float) -> Any:
    """`expression` with every `$$NOW` replaced by the caller's `bound`."""
    if expression == NOW:
        return {"$literal": bound}
    if isinstance(expression, dict):
        return {key: _on_the_callers_clock(value, bound) for key, value in expression.items()}
    if isinstance(expression, list):
        return [_on_the_callers_clock(value, bound) for value in expression]
    return expression
