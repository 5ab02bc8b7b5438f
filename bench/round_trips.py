"""Benchmark 1: database round trips per processed event in the smoke workflow, over the wire.

One Worker (one consumer thread, so the hot-path counts do not depend on thread timing) runs the built-in
fork/join smoke workflow against a real PyMongo client with the command accounting listener. Its store,
transport and heartbeats are wrapped in `Labelled`, so every command is tallied under the worker loop and
the method that sent it; the rows below map those to the phases of one event:

    claim           consume:claim           queue findAndModify that delivered a message
    load_for_event  consume:load_for_event  executions aggregate (the execution + "already processed?")
    commit          consume:commit          executions update carrying the version CAS
    counters        consume:commit          counters findAndModify (only for a step that emits or spawns)
    ack             consume:ack             queue delete

Everything else is reported beside it: the relays (outbox and spawn), the timer sweep, idle polling
(claims that found nothing, `next_visible_at`), heartbeats, and unlabelled commands (the queue's change
stream attempt). The client's own commands (starting the run, waiting for it, reading it back) are not
counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bench import smoke_workload
from bench.deployments import Target, client_for, scratch_database
from bench.labels import CLIENT, Labelled
from bench.report import Row
from harel.app import App
from harel.heartbeat import MongoHeartbeats
from harel.smoke import check, gather, run_smoke
from harel.store._documents import COUNTERS, EXECUTIONS
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.accounting import UNLABELLED, CommandAccounting

SMOKE_TIMEOUT = 60.0
HOT_PATH = ("claim", "load_for_event", "commit", "counters", "ack")
REPORTED_ELSEWHERE = ("relay", "sweep", "idle", "heartbeat", "other")
# The figure a comparable MongoDB-backed workflow engine reports for itself; not measured here.
REPORTED_COMMANDS_PER_STEP = 11


@dataclass(frozen=True)
class RoundTrips:
    target: str
    passed: bool
    failures: list[str]
    processed: int
    # steps whose commit needs seqs (they emitted or spawned), read back from the run's traces
    commits_with_seqs: int
    commands: Counter[str]
    relay_entries: int
    timers_fired: int

    def per_event(self, category: str) -> float:
        return self.commands[category] / self.processed

    @property
    def hot_path(self) -> int:
        return sum(self.commands[c] for c in HOT_PATH)

    @property
    def total(self) -> int:
        return sum(self.commands.values())

    @property
    def target_per_event(self) -> float:
        """claim + load_for_event + commit + ack for every event, plus one counters call per commit."""
        return (4 * self.processed + self.commands["commit"]) / self.processed


def category(phase: str, collection: str | None, command: str) -> str | None:
    """Which row a command belongs to; None for the client's own commands."""
    loop, _, method = phase.partition(":")
    if phase == UNLABELLED:
        return "other"
    if loop == CLIENT:
        return None
    if loop != "consume":
        return loop
    if method == "commit":
        if collection == COUNTERS:
            return "counters"
        return "commit" if (collection, command) == (EXECUTIONS, "update") else "commit: conflict re-read"
    if method == "next_visible_at":
        return "idle"
    return method


def measure(target: Target) -> RoundTrips:
    accounting = CommandAccounting()
    with client_for(target.url, event_listeners=[accounting]) as client, scratch_database(client) as db_name:
        store, transport = MongoStore(client, db_name), MongoTransport(client, db_name)
        store.ensure_indexes()
        transport.ensure_indexes()
        app = App("bench")
        chart_id = smoke_workload.register(app)
        labelled_transport = Labelled(transport, accounting)
        worker = Worker(
            Labelled(store, accounting),
            labelled_transport,
            app,
            config=WorkerConfig(concurrency=1),
            heartbeats=Labelled(MongoHeartbeats(client, db_name), accounting),
        )
        accounting.clear()
        worker.start()
        try:
            with accounting.phase(CLIENT):
                report = run_smoke(store, transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)
        finally:
            worker.stop(drain_seconds=5.0)
        commands: Counter[str] = Counter()
        for row in accounting.rows():
            found = category(row["phase"], row["collection"], row["command"])
            if found is not None:
                commands[found] += row["commands"]
        empty_claims = labelled_transport.returned_none["claim"]
        commands["claim"] -= empty_claims
        commands["idle"] += empty_claims
        with accounting.phase(CLIENT):
            run = gather(store, report.root_id, SMOKE_TIMEOUT)
        checked = check(run)
        relay_entries = accounting.tally(phase="relay:ack_outbox").commands
        relay_entries += accounting.tally(phase="relay:ack_spawn").commands
        return RoundTrips(
            target=target.label,
            passed=checked.passed,
            failures=checked.failures,
            processed=worker.counters["processed"],
            commits_with_seqs=sum(
                1
                for trace in run.traces.values()
                for step in trace
                if step.get("emits") or step.get("spawns")
            ),
            commands=commands,
            relay_entries=relay_entries,
            timers_fired=accounting.tally(phase="sweep:delete_timer").commands,
        )


def rows(result: RoundTrips) -> list[Row]:
    n = result.processed
    where = f"smoke workflow on the {result.target}, {n} events processed"
    if not result.passed:
        where += f"; THE SMOKE RUN FAILED: {'; '.join(result.failures)}"
    listed = [
        Row(
            1,
            "round trips per processed event, hot path (claim + load_for_event + commit + counters + ack)",
            f"{result.hot_path / n:.2f}",
            f"~{REPORTED_COMMANDS_PER_STEP} commands per step, as reported by a comparable MongoDB-backed "
            "workflow engine (not measured here)",
            f"{where}; target ≤ {result.target_per_event:.2f} (4 per event + at most 1 counters call "
            "per commit)",
        ),
        Row(1, "· claim (queue findAndModify that delivered)", f"{result.per_event('claim'):.2f}"),
        Row(1, "· load_for_event (executions aggregate)", f"{result.per_event('load_for_event'):.2f}"),
        Row(1, "· commit (executions update with the version CAS)", f"{result.per_event('commit'):.2f}"),
        Row(
            1,
            "· counters (counters findAndModify)",
            f"{result.per_event('counters'):.2f}",
            note=f"{result.commands['counters']} calls for {result.commits_with_seqs} commits that emitted "
            f"or spawned, of {result.commands['commit']} commits",
        ),
        Row(1, "· ack (queue delete)", f"{result.per_event('ack'):.2f}"),
    ]
    unexpected = sorted(set(result.commands) - set(HOT_PATH) - set(REPORTED_ELSEWHERE))
    listed += [
        Row(1, f"· {name}", f"{result.per_event(name):.2f}", note="off the clean path") for name in unexpected
    ]
    listed += [
        Row(
            1,
            "· relays: outbox + spawn (find, send, ack; child insert)",
            f"{result.per_event('relay'):.2f}",
            note=f"{result.commands['relay']} commands moved {result.relay_entries} entries, "
            "empty polls included (timing-dependent)",
        ),
        Row(
            1,
            "· timer sweep (due_timers, send, delete_timer, next_timer_at)",
            f"{result.per_event('sweep'):.2f}",
            note=f"{result.commands['sweep']} commands fired {result.timers_fired} timers (timing-dependent)",
        ),
        Row(
            1,
            "· idle polling (claims that found nothing, next_visible_at)",
            f"{result.per_event('idle'):.2f}",
            note="timing-dependent: backs off to 0.5 s while the queue is empty",
        ),
        Row(
            1,
            "· heartbeat (workers update)",
            f"{result.per_event('heartbeat'):.2f}",
            note="one per worker every 5 s, not per event",
        ),
        Row(
            1,
            "· other (unlabelled: the queue's change-stream wake-up)",
            f"{result.per_event('other'):.2f}",
        ),
        Row(1, "all worker commands per processed event", f"{result.total / n:.2f}"),
    ]
    return listed
