"""Deliberately broken stores: each breaks one contract the conformance suite must catch.

They reuse MongoStore's own document builders and change only the broken step, so a check that fails
on them fails because of that step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harel.model import DueTimer, Execution, TimerOp
from harel.store import _documents as doc
from harel.store.base import Emit, Spawn
from harel.store.mongo import MongoStore


class _PlannedCommit(MongoStore):
    def _plan(
        self,
        exe: Execution,
        emits: Sequence[Emit],
        spawns: Sequence[Spawn],
        timers: Sequence[TimerOp],
        processed_event_id: str | None,
        trace: dict[str, Any] | None,
    ) -> doc.CommitWrite:
        count = doc.seq_count(emits, spawns)
        first_seq = self._allocate(doc.SEQ_COUNTER, count) if count else 0
        parts = doc.commit_parts(exe, first_seq, emits, spawns, timers, processed_event_id, trace)
        return doc.plan_commit(exe, parts, self.trace_max, self.dedupe_window)


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
            self._executions.insert_one(write.document)
        else:
            self._executions.update_one({"_id": exe.id}, write.update)
        exe.version = write.version


class SplitCommitStore(_PlannedCommit):
    """Advances the execution in one update and writes its outbox, spawns, dedupe mark, timers and trace
    in a second: a failure between the two leaves an advance without its bookkeeping."""

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
            self._executions.insert_one(write.document)
        else:
            advance = {"$set": write.update["$set"]}
            if self._executions.update_one(write.cas_filter, advance).matched_count != 1:
                self._raise_conflict(write)
            bookkeeping = {op: fields for op, fields in write.update.items() if op != "$set"}
            if bookkeeping:
                self._executions.update_one({"_id": exe.id}, bookkeeping)
        exe.version = write.version


class FireAtBlindStore(MongoStore):
    """Reports every armed timer as due, whatever its fire time."""

    def due_timers(self, now: float, limit: int = 100) -> list[DueTimer]:
        armed = self._executions.find({"timers": {"$ne": {}}}, doc.only("timers"))
        return doc.parse_due(armed, float("inf"), limit)
