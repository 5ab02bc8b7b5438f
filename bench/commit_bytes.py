"""Benchmark 2: bytes one commit sends as one execution's history grows, next to a whole-document write.

One execution of a two-state chart takes `flip` events one after another through MongoStore over the wire;
the command accounting measures the request bytes of each commit's `update` command (the BSON the driver
sends, session and write-concern fields included). At every checkpoint (the 10th, 100th, ... event) the
same step is also committed by the whole-document baseline (bench.whole_document) to a copy of the same
stored document, and the two stored documents are compared afterwards: they must be equal, so both
commits wrote the same thing and only the way of writing it differs.

The document grows with its history until the dedupe window (1,000 event ids) and the trace ring (200
steps) are full, so the baseline's cost grows up to those caps and then stays there; the partial update
sends this step's changes only, whatever the document holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import bson

from bench.deployments import Target, client_for, scratch_database
from bench.report import Row, number
from bench.whole_document import WholeDocumentWrites
from harel.chart import load_chart
from harel.executions.fields import EXECUTIONS
from harel.interpreter import step
from harel.model import START_EVENT, Event, Execution
from harel.store.mongo import MongoStore
from tests.accounting import CommandAccounting

TOGGLE_CHART: dict[str, Any] = {
    "id": "bench.toggle",
    "version": 1,
    "initial": "off",
    "states": {"off": {"on": {"flip": "on"}}, "on": {"on": {"flip": "off"}}},
}
EXECUTION_ID = "bench-history"
BASELINE_ID = "bench-history-replaced"
# Whole seconds from a fixed epoch: every `updated_at` serializes to the same number of characters, so
# a change in bytes comes from the document, not from the clock.
EPOCH = 1_700_000_000.0


@dataclass(frozen=True)
class Checkpoint:
    events: int
    ours: int
    baseline: int
    document: int
    same_document: bool


@dataclass(frozen=True)
class CommitBytes:
    target: str
    checkpoints: list[Checkpoint]


def event_for(n: int) -> Event:
    """The n-th event of the history (1-based): the start, then flips; ids of one width so sizes compare."""
    return Event(id=f"event-{n:06d}", name=START_EVENT if n == 1 else "flip")


def measure(target: Target, checkpoints: tuple[int, ...]) -> CommitBytes:
    accounting = CommandAccounting()
    chart = load_chart(TOGGLE_CHART)
    measured: list[Checkpoint] = []
    with client_for(target.url, event_listeners=[accounting]) as client, scratch_database(client) as db_name:
        store = MongoStore(client, db_name)
        executions = client[db_name][EXECUTIONS]
        baseline = WholeDocumentWrites(
            executions, trace_max=store.trace_max, dedupe_window=store.dedupe_window
        )
        exe = Execution(
            id=EXECUTION_ID,
            definition_id=chart.id,
            definition_version=chart.version,
            created_at=EPOCH,
            updated_at=EPOCH,
        )
        store.commit(exe)
        for n in range(1, max(checkpoints) + 1):
            event = event_for(n)
            result = step(chart, exe, event, EPOCH + n)
            if n in checkpoints:
                stored = executions.find_one({"_id": EXECUTION_ID})
                copied = {**stored, "_id": BASELINE_ID}
                executions.replace_one({"_id": BASELINE_ID}, copied, upsert=True)
                with accounting.phase(f"baseline@{n}"):
                    baseline.commit(copied, result.execution, result.timers, event.id, result.trace)
            with accounting.phase(f"ours@{n}" if n in checkpoints else "history"):
                store.commit(
                    result.execution, timers=result.timers, processed_event_id=event.id, trace=result.trace
                )
            exe = result.execution
            if n in checkpoints:
                measured.append(_checkpoint(n, accounting, executions))
    return CommitBytes(target.label, measured)


def _checkpoint(n: int, accounting: CommandAccounting, executions: Any) -> Checkpoint:
    ours = executions.find_one({"_id": EXECUTION_ID})
    theirs = executions.find_one({"_id": BASELINE_ID})
    return Checkpoint(
        events=n,
        ours=accounting.tally(phase=f"ours@{n}", command="update").request_bytes,
        baseline=accounting.tally(phase=f"baseline@{n}", command="update").request_bytes,
        document=len(bson.encode(ours)),
        same_document={**theirs, "_id": EXECUTION_ID} == ours,
    )


def rows(result: CommitBytes) -> list[Row]:
    listed = []
    for point in result.checkpoints:
        note = f"stored document {number(point.document)} B"
        if not point.same_document:
            note += "; THE TWO WRITES LEFT DIFFERENT DOCUMENTS"
        listed.append(
            Row(
                2,
                f"bytes sent per commit, history of {number(point.events)} events",
                f"{number(point.ours)} B (partial update)",
                f"{number(point.baseline)} B (whole-document replace_one)",
                note,
            )
        )
    listed[0] = Row(
        2, listed[0].figure, listed[0].harel, listed[0].baseline, f"{listed[0].note}; on the {result.target}"
    )
    return listed
