"""Benchmark 1: database round trips per processed event in the smoke workflow, over the wire.

One Worker (one consumer thread, so the hot-path counts do not depend on thread timing) runs the built-in
fork/join smoke workflow against a real PyMongo client with the command accounting listener. Its store,
transport and heartbeats are wrapped in `Labelled`, so every command is tallied under the worker loop and
the method that sent it; the rows below map those to the phases of the path:

    claim           consume:claim          executions findAndModify that leased an execution and
                                           returned it with its pending events
    commit          consume:commit_claim   executions update: every step of the claim, the mailbox settled
    conflict read   consume:commit_claim   the version read of a refused commit (none in a clean run)

The hot path is those, per processed event. Everything else is reported beside it: the relay of what a
commit wrote (children in one bulk write, one send per event; the acknowledgement rides on the execution's
next commit, or on one bulk acknowledgement of several executions), the background relay, idle waiting
(claims that found nothing, the looks for the next wake-up), heartbeats, and unlabelled commands. Timers
have no row: the claim that takes their execution fires them. The client's own commands (starting the
run, waiting for it, reading it back) are not counted.

The fork figure runs one chart whose parallel state has N regions, each final at once (a child is
created, claimed, committed and sends its `done`), and counts every worker command per region, against a
floor of three: the child's claim, its commit, its `done`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient

from bench import smoke_workload
from bench.deployments import Target, client_for, fresh_db_name
from bench.labels import CLIENT, Labelled
from bench.report import Row
from harel.app import App
from harel.client import start_execution
from harel.heartbeat import MongoHeartbeats
from harel.model import ExecutionStatus
from harel.smoke import check, gather, run_smoke
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.accounting import UNLABELLED, CommandAccounting

# The run takes well under a second; one that has not completed by then fails the benchmark at once.
SMOKE_TIMEOUT = 15.0
HOT_PATH = ("claim", "commit", "conflict read")
REPORTED_ELSEWHERE = ("relay", "background relay", "idle", "heartbeat", "other")
# The figure a comparable MongoDB-backed workflow engine reports for itself; not measured here.
REPORTED_COMMANDS_PER_STEP = 11
HOT_PATH_TARGET = 2.0
ALL_COMMANDS_TARGET = 3.0
FORK_TARGET = 3.2  # commands per region
FORK_TIMEOUT = 60.0
WATCH_OPEN_TIMEOUT = 5.0
SETTLE_SECONDS = 0.2


@dataclass(frozen=True)
class RoundTrips:
    target: str
    passed: bool
    failures: list[str]
    processed: int
    claims: int
    commands: Counter[str]
    relay_entries: int
    timers_fired: int
    acknowledgements: int  # bulk acknowledgements of delivered work (the relay loop's and the stop's)

    def per_event(self, category: str) -> float:
        return self.commands[category] / self.processed

    @property
    def hot_path(self) -> int:
        return sum(self.commands[c] for c in HOT_PATH)

    @property
    def total(self) -> int:
        return sum(self.commands.values())


CONSUMER_RELAY = frozenset({"send", "create_children", "ack_relay"})


def category(phase: str, collection: str | None, command: str) -> str | None:
    """Which row a command belongs to; None for the client's own commands."""
    loop, _, method = phase.partition(":")
    if phase == UNLABELLED:
        return "other"
    if method == "ack_delivered":  # the relay loop's, or the stop's, acknowledgement of committed work
        return "relay"
    if loop in (CLIENT, "leaving"):  # the client's, and the stop's releases and heartbeat removal
        return None
    if loop == "lease":  # a running step's lease extended: the claim's heartbeat
        return "heartbeat"
    if loop == "relay":
        return "background relay"
    if loop != "consume":
        return loop
    if method == "commit_claim":
        return "commit" if command == "update" else "conflict read"
    if method in CONSUMER_RELAY:
        return "relay"
    if method == "plan_next_wake":
        return "idle"
    return method


@dataclass(frozen=True)
class Scratch:
    """A fresh database on the target, its store and transport, and the accounting of every command."""

    accounting: CommandAccounting
    client: MongoClient[dict[str, Any]]
    db_name: str
    store: MongoStore
    transport: MongoTransport


@contextmanager
def scratch(target: Target) -> Iterator[Scratch]:
    accounting = CommandAccounting()
    with client_for(target.url, event_listeners=[accounting]) as client:
        db_name = fresh_db_name()
        store, transport = MongoStore(client, db_name), MongoTransport(client, db_name)
        try:
            store.ensure_indexes()
            transport.ensure_indexes()
            yield Scratch(accounting, client, db_name, store, transport)
        finally:
            client.drop_database(db_name)
            transport.close()  # its change-stream watcher stops before the client closes under it


def start_counting(worker: Worker, run: Scratch, labelled_transport: Labelled) -> None:
    """Start `worker`, let it settle on its change stream, then count from zero."""
    worker.start()
    _settled_on_its_change_stream(run.transport)
    run.accounting.clear()
    labelled_transport.returned_none.clear()


def measure(target: Target) -> RoundTrips:
    with scratch(target) as run:
        return _measure(target, run)


def _measure(target: Target, run: Scratch) -> RoundTrips:
    accounting, store, transport = run.accounting, run.store, run.transport
    app, chart_id = smoke_workload.bench_app()
    labelled_transport = Labelled(transport, accounting)
    worker = Worker(
        Labelled(store, accounting),
        labelled_transport,
        app,
        config=WorkerConfig(concurrency=1),
        heartbeats=Labelled(MongoHeartbeats(run.client, run.db_name), accounting),
    )
    start_counting(worker, run, labelled_transport)
    try:
        with accounting.phase(CLIENT):
            report = run_smoke(store, transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)
    finally:
        worker.stop(drain_seconds=5.0)
    commands = tallied(accounting, labelled_transport)
    empty_claims = labelled_transport.returned_none["claim"]
    with accounting.phase(CLIENT):
        run = gather(store, report.root_id, SMOKE_TIMEOUT)
    checked = check(run)
    relayed = worker.metrics.registry.get_sample_value
    return RoundTrips(
        target=target.label,
        passed=checked.passed,
        failures=checked.failures,
        processed=worker.counters["processed"],
        claims=accounting.tally(phase="consume:claim").commands - empty_claims,
        commands=commands,
        relay_entries=int(
            (relayed("harel_relayed_total", {"kind": "outbox"}) or 0)
            + (relayed("harel_relayed_total", {"kind": "spawn"}) or 0)
        ),
        timers_fired=int(relayed("harel_timers_fired_total") or 0),
        acknowledgements=sum(
            accounting.tally(phase=f"{loop}:ack_delivered").commands for loop in ("relay", "leaving")
        ),
    )


def rows(result: RoundTrips) -> list[Row]:
    n = result.processed
    where = f"smoke workflow on the {result.target}, {n} events processed in {result.claims} claims"
    if not result.passed:
        where += f"; THE SMOKE RUN FAILED: {'; '.join(result.failures)}"
    listed = [
        Row(
            1,
            "round trips per processed event, hot path (claim + commit)",
            f"{result.hot_path / n:.2f}",
            f"~{REPORTED_COMMANDS_PER_STEP} commands per step, as reported by a comparable MongoDB-backed "
            "workflow engine (not measured here)",
            f"{where}; target ≤ {HOT_PATH_TARGET}",
        ),
        Row(
            1,
            "· claim (executions findAndModify that leased an execution)",
            f"{result.per_event('claim'):.2f}",
        ),
        Row(
            1, "· commit (executions update: the steps and the mailbox)", f"{result.per_event('commit'):.2f}"
        ),
        Row(
            1, "· conflict read (a refused commit's version read)", f"{result.per_event('conflict read'):.2f}"
        ),
    ]
    unexpected = sorted(set(result.commands) - set(HOT_PATH) - set(REPORTED_ELSEWHERE))
    listed += [
        Row(1, f"· {name}", f"{result.per_event(name):.2f}", note="off the clean path") for name in unexpected
    ]
    listed += [
        Row(
            1,
            "· relay of each commit's own entries (children, sends; acknowledgements in bulk)",
            f"{result.per_event('relay'):.2f}",
            note=f"{result.commands['relay']} commands moved {result.relay_entries} entries",
        ),
        Row(
            1,
            "· background relay (work a crashed worker left)",
            f"{result.per_event('background relay'):.2f}",
            note="polls every second after a pass that found work, backing off to 5 s; empty in a clean run",
        ),
        Row(
            1,
            "· idle (claims that found nothing, looks for the next wake-up)",
            f"{result.per_event('idle'):.2f}",
            note=(
                f"{result.timers_fired} timers fired by their claims, none by a command of its own; on a change "
                "stream an idle consumer waits for a change or its next wake-up, else it polls, backing off to "
                "0.5 s (timing-dependent)"
            ),
        ),
        Row(
            1,
            "· heartbeat (workers update)",
            f"{result.per_event('heartbeat'):.2f}",
            note="one per worker every 5 s, not per event",
        ),
        Row(
            1,
            "· other (unlabelled)",
            f"{result.per_event('other'):.2f}",
            note=(
                "the mailbox watcher's change stream: the aggregate that opens it, then a getMore that waits "
                "up to 1 s for a new execution or a send that makes one due (timing-dependent)"
            ),
        ),
        Row(
            1,
            "all worker commands per processed event",
            f"{result.total / n:.2f}",
            note=f"target ≤ {ALL_COMMANDS_TARGET}",
        ),
    ]
    return listed


@dataclass(frozen=True)
class ForkCost:
    target: str
    regions: int
    completed: bool
    commands: Counter[str]

    @property
    def work(self) -> int:
        """The commands the fork's work costs: claims, commits and relays (not idle waiting, heartbeats, the
        background relay's look for work, the watcher: those follow time, not regions)."""
        return sum(self.commands[c] for c in (*HOT_PATH, "relay"))

    @property
    def per_region(self) -> float:
        return self.work / self.regions


def marginal(costs: list[ForkCost]) -> float | None:
    """Commands per region added between the smallest and the largest fork measured on one target."""
    if len(costs) < 2:
        return None
    small, large = min(costs, key=lambda c: c.regions), max(costs, key=lambda c: c.regions)
    return (large.work - small.work) / (large.regions - small.regions)


def fork_chart(regions: int) -> dict[str, object]:
    """A parallel state of `regions` regions, each final at once, joined into a final state."""
    return {
        "id": f"fork-{regions}",
        "version": 1,
        "initial": "fork",
        "states": {
            "fork": {
                "parallel": {
                    f"r{n}": {"initial": "done", "states": {"done": {"final": True}}} for n in range(regions)
                },
                "on_done": "joined",
            },
            "joined": {"final": True},
        },
    }


def measure_fork(target: Target, regions: int) -> ForkCost:
    """One fork of `regions` regions run to its join by one worker: every worker command, by row."""
    with scratch(target) as run:
        return _measure_fork(target, regions, run)


def _measure_fork(target: Target, regions: int, run: Scratch) -> ForkCost:
    accounting, store, transport = run.accounting, run.store, run.transport
    app = App("bench-fork")
    chart = app.chart(fork_chart(regions))
    labelled_transport = Labelled(transport, accounting)
    worker = Worker(Labelled(store, accounting), labelled_transport, app, config=WorkerConfig(concurrency=1))
    start_counting(worker, run, labelled_transport)
    try:
        with accounting.phase(CLIENT):
            root, _ = start_execution(store, transport, app, chart.id, execution_id=f"fork-{regions}")
            completed = _wait_completed(store, root.id, FORK_TIMEOUT)
    finally:
        worker.stop(drain_seconds=5.0)
    commands = tallied(accounting, labelled_transport)
    return ForkCost(target.label, regions, completed, commands)


def tallied(accounting: CommandAccounting, labelled_transport: Labelled) -> Counter[str]:
    """The worker's commands by row, claims that found nothing counted as idle."""
    commands: Counter[str] = Counter()
    for row in accounting.rows():
        found = category(row["phase"], row["collection"], row["command"])
        if found is not None:
            commands[found] += row["commands"]
    empty_claims = labelled_transport.returned_none["claim"]
    commands["claim"] -= empty_claims
    commands["idle"] += empty_claims
    return commands


def _settled_on_its_change_stream(transport: MongoTransport) -> None:
    """Wait (a few seconds at most) until the worker's change stream is open: the run is counted as a worker
    that has been up a while runs it, not with the polls of one still opening its stream. A deployment
    without change streams never opens one: the run is counted polling."""
    deadline = time.monotonic() + WATCH_OPEN_TIMEOUT
    while not transport.wake_plan.watching and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(SETTLE_SECONDS)  # the claim the opening woke ends before the count starts


def _wait_completed(store: MongoStore, execution_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        execution = store.load(execution_id)
        if execution is not None and execution.status is ExecutionStatus.COMPLETED:
            return True
        time.sleep(0.05)
    return False


def fork_rows(costs: list[ForkCost]) -> list[Row]:
    listed = []
    for cost in costs:
        note = (
            f"{cost.regions} regions on the {cost.target}: per region the child's claim, commit and done (the "
            "floor, 3), plus the fork's fixed part shared by the regions (the root's claim and commit of the "
            "start and of the join, one bulk creation, one bulk acknowledgement)"
        )
        if not cost.completed:
            note += "; THE FORK DID NOT COMPLETE"
        parts = ", ".join(f"{name} {count}" for name, count in sorted(cost.commands.items()) if count)
        listed.append(
            Row(
                1,
                f"fork: worker commands per region, {cost.regions} regions",
                f"{cost.per_region:.2f}",
                note=f"{note}; target ≤ {FORK_TARGET}; all commands: {parts}",
            )
        )
    for target in dict.fromkeys(cost.target for cost in costs):
        added = marginal([cost for cost in costs if cost.target == target])
        if added is not None:
            listed.append(
                Row(
                    1,
                    "fork: commands each further region adds",
                    f"{added:.2f}",
                    note=f"between the smallest and the largest fork on the {target}; floor 3",
                )
            )
    return listed
