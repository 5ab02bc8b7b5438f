"""Benchmark 6: what an event costs as the context grows — worker CPU and bytes per claim and commit.

The execution's state (`data`: the whole Execution, its context with it) is read whole by every claim and
rewritten whole by every commit, so an event's cost grows with the context, whatever the event changes. One
execution of a two-state chart starts with a context of about 1 KB, 100 KB or 1 MB of JSON (a list of small
records, as an order's lines would be) and takes `flip` events one at a time over the wire: the benchmark
sends one, then one `Worker.process_one` on this thread claims it (one findAndModify returning the state and
the mailbox) and commits it (one update). The worker's store and transport are wrapped (`bench.labels`),
so the command accounting tallies the claim's reply bytes and the commit's request bytes; the worker's CPU
is the benchmark thread's CPU time across `process_one` (parsing the state, the step, building and encoding
the commit, the driver's work), the median over the events. The test double's own CPU is in another process
and not counted. The 1 KB figures are the baseline of the others.

The worker's warning (a commit storing a state over STATE_WARN_BYTES) is read from its metrics: the 1 MB
context passes it, the others do not; a state over STATE_LIMIT_BYTES would be refused (ContextTooLarge).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.deployments import Target, client_for, scratch_database
from bench.labels import CLIENT, Labelled
from bench.report import Row, number
from harel.app import App
from harel.client import start_execution
from harel.executions.commits import STATE_LIMIT_BYTES, STATE_WARN_BYTES
from harel.model import Event
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.accounting import CommandAccounting

CONTEXT_BYTES = (1_000, 100_000, 1_000_000)
TOGGLE_CHART: dict[str, Any] = {
    "id": "bench.context",
    "version": 1,
    "initial": "off",
    "states": {"off": {"on": {"flip": "on"}}, "on": {"on": {"flip": "off"}}},
}
CLAIM_PHASE = f"{CLIENT}:claim"
COMMIT_PHASE = f"{CLIENT}:commit_claim"


@dataclass(frozen=True)
class ContextCost:
    context_bytes: int  # the context's JSON, as started
    events: int
    claims: int
    commits: int
    cpu_seconds: float  # median worker CPU per claim + commit
    read_per_claim: int  # bytes of the claim's reply
    written_per_commit: int  # bytes of the commit's update command
    state_bytes: int  # the stored state after the last commit
    warned: int  # of the measured commits, those the worker counted over STATE_WARN_BYTES


@dataclass(frozen=True)
class ContextSize:
    target: str
    costs: list[ContextCost]


def context_of(size: int) -> dict[str, Any]:
    """At least `size` bytes of compact JSON (as the state stores it): records of about 60 bytes each."""
    lines: list[dict[str, Any]] = []
    length = len(_compact({"lines": lines}))
    while length < size:
        n = len(lines)
        line = {"sku": f"sku-{n:06d}", "qty": n % 7 + 1, "price": 9.99, "note": "gift wrap"}
        length += len(_compact(line)) + (1 if lines else 0)  # and its comma
        lines.append(line)
    return {"lines": lines}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def measure(target: Target, events: int) -> ContextSize:
    return ContextSize(target.label, [_measure_one(target, size, events) for size in CONTEXT_BYTES])


def _measure_one(target: Target, size: int, events: int) -> ContextCost:
    accounting = CommandAccounting()
    app = App("bench-context")
    app.chart(TOGGLE_CHART)
    context = context_of(size)
    with client_for(target.url, event_listeners=[accounting]) as client, scratch_database(client) as db_name:
        store, transport = MongoStore(client, db_name), MongoTransport(client, db_name, watch=False)
        store.ensure_indexes()
        transport.ensure_indexes()
        root, _ = start_execution(store, transport, app, TOGGLE_CHART["id"], context=context)
        worker = Worker(
            Labelled(store, accounting),
            Labelled(transport, accounting),
            app,
            config=WorkerConfig(concurrency=1),
        )
        worker.process_one()  # the start event, not measured
        accounting.clear()
        warned_before = _oversized(worker)
        cpu: list[float] = []
        for n in range(events):
            transport.send(root.id, Event(id=f"flip-{n:06d}", name="flip"))
            started = time.thread_time()
            worker.process_one()
            cpu.append(time.thread_time() - started)
        claims = accounting.tally(phase=CLAIM_PHASE, command="findAndModify")
        commits = accounting.tally(phase=COMMIT_PHASE, command="update")
        stored = client[db_name]["executions"].find_one({"_id": root.id})
    return ContextCost(
        context_bytes=len(_compact(context)),
        events=worker.counters["processed"] - 1,
        claims=claims.commands,
        commits=commits.commands,
        cpu_seconds=statistics.median(cpu),
        read_per_claim=claims.reply_bytes // max(1, claims.commands),
        written_per_commit=commits.request_bytes // max(1, commits.commands),
        state_bytes=len(stored["data"].encode()),
        warned=_oversized(worker) - warned_before,
    )


def _oversized(worker: Worker) -> int:
    return int(worker.metrics.registry.get_sample_value("harel_oversized_states_total") or 0)


def _size(value: int) -> str:
    return f"{value / 1_000_000:.0f} MB" if value >= 1_000_000 else f"{value / 1_000:.0f} KB"


def rows(result: ContextSize) -> list[Row]:
    baseline = result.costs[0]
    listed = []
    for cost in result.costs:
        state = f"stored state {number(cost.state_bytes)} B: " + (
            "warned (over 256 KiB)" if cost.warned else "under the 256 KiB warning"
        )
        listed.append(
            Row(
                6,
                f"worker CPU per event (one claim + one commit), {_size(cost.context_bytes)} context",
                f"{cost.cpu_seconds * 1000:.1f} ms; writes {number(cost.written_per_commit)} B per commit, "
                f"reads {number(cost.read_per_claim)} B per claim",
                ""
                if cost is baseline
                else f"{baseline.cpu_seconds * 1000:.1f} ms; {number(baseline.written_per_commit)} B, "
                f"{number(baseline.read_per_claim)} B (the {_size(baseline.context_bytes)} context)",
                f"{state}; median of {cost.events} events, {cost.claims} claims, {cost.commits} commits",
            )
        )
    listed.append(
        Row(
            6,
            "state size: warning, refusal",
            f"{number(STATE_WARN_BYTES)} B (log line, harel_oversized_states); "
            f"{number(STATE_LIMIT_BYTES)} B (ContextTooLarge, the execution parked)",
            note=f"on the {result.target}; keep references to large data in the context, not the data",
        )
    )
    return listed
