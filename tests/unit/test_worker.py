"""The worker runtime, driven step by step on the mongomock backend whose deployment clock is the tests'
fake clock (so leases and timers are decided on a clock the test moves)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import bson
import pytest
from rich.console import Console

from harel.app import ActionContext, ActionResult, App, Send
from harel.backend import Backend, open_backend
from harel.cli.views import status_view
from harel.client import cancel_execution, send_event, start_execution, wait_for_execution
from harel.errors import CommitOutcomeUnknown, MailboxFull, StoreConflict, UnreadableExecution
from harel.executions.fields import INBOX_LIMIT_BYTES
from harel.heartbeat import MongoHeartbeats
from harel.inspection import UNDELIVERED_AFTER_SECONDS, undelivered_of
from harel.model import TIMER_EVENT, Event, Execution, ExecutionStatus, timer_event
from harel.servertime import ServerClock
from harel.smoke import FORK, REGIONS, check, gather, register_smoke, run_smoke
from harel.store.mongo import MongoStore
from harel.transport.base import SendOutcome
from harel.transport.mongo import MongoTransport
from harel.worker import RELAY_RETRY_SECONDS, Worker, WorkerConfig
from harel_dev.embedded import EmbeddedClient
from tests.unreadable import KINDS, RELAY_KINDS, TIMER_KINDS


class Clock:
    """The deployment's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


FLOW = {
    "id": "flow",
    "version": 1,
    "initial": "idle",
    "states": {
        "idle": {"on": {"go": "split", "poison": {"target": "idle", "actions": ["explode"]}}},
        "split": {
            "parallel": {
                "left": {
                    "initial": "waiting",
                    "states": {"waiting": {"after": {"5s": "done"}}, "done": {"final": True}},
                },
                "right": {
                    "initial": "waiting",
                    "states": {
                        "waiting": {"entry": ["hello"], "on": {"hi": "done"}},
                        "done": {"final": True},
                    },
                },
            },
            "on_done": "finished",
        },
        "finished": {"final": True},
    },
}

LOOP = {
    "id": "loop",
    "version": 1,
    "initial": "a",
    "states": {
        "a": {
            "after": {"10s": "b"},
            "on": {
                "skip": "b",
                "bump": {"actions": ["bump"]},
                "poison": {"actions": ["explode"]},
                "lost": {"actions": ["send_nowhere"]},
                "tell": {"actions": ["tell"]},
            },
        },
        "b": {"on": {"back": "a", "bump": {"actions": ["bump"]}}},
    },
}

# The first issue's chart: e1's action is slow, so with several consumers e2 could overtake it.
ORDERED = {
    "id": "ordered",
    "version": 1,
    "initial": "S0",
    "states": {
        "S0": {"on": {"e1": {"target": "S1", "actions": ["slow"]}}},
        "S1": {"on": {"e2": "S2"}},
        "S2": {},
    },
}


def make_app(slow: float = 0.0) -> App:
    app = App("test")
    app.chart(FLOW)
    app.chart(LOOP)
    app.chart(ORDERED)
    register_smoke(app, region_timer=0.05, final_timer=0.05)

    @app.action("hello")
    def hello(ctx: ActionContext) -> ActionResult:
        return ActionResult(send=[Send("hi", to="self")])

    @app.action("explode")
    def explode(ctx: ActionContext) -> ActionResult:
        raise RuntimeError("card declined")

    @app.action("bump")
    def bump(ctx: ActionContext) -> ActionResult:
        seen = [*ctx.context.get("seen", []), ctx.event.id]
        return ActionResult(context={"n": ctx.context.get("n", 0) + 1, "seen": seen})

    @app.action("send_nowhere")
    def send_nowhere(ctx: ActionContext) -> ActionResult:
        return ActionResult(send=[Send("ping", to="nobody-at-all")])

    @app.action("tell")
    def tell(ctx: ActionContext) -> ActionResult:
        return ActionResult(send=[Send("bump", to=ctx.event.data["to"])])

    @app.action("slow")
    def slow_action(ctx: ActionContext) -> ActionResult:
        time.sleep(slow)
        return ActionResult()

    return app


@dataclass
class Deployment:
    """A backend whose deployment clock is `clock`."""

    store: Any
    transport: Any
    clock: Clock
    client: Any

    def worker(self, app: App, **config: Any) -> Worker:
        return Worker(self.store, self.transport, app, config=WorkerConfig(**config))


def deployment(clock: Clock) -> Deployment:
    client = EmbeddedClient(clock)
    transport = MongoTransport(client, clock=ServerClock(local=clock, monotonic=clock), watch=False)
    return Deployment(MongoStore(client), transport, clock, client)


@pytest.fixture
def backend() -> Deployment:
    return deployment(Clock())


@pytest.fixture
def live_backend() -> Iterator[Backend]:
    """The embedded backend on the real clock, for workers running their own threads."""
    b = open_backend("mongomock://")
    yield b
    b.close()


def pump(*workers: Worker, rounds: int = 200) -> None:
    """Run every worker's consume and relay until nothing moves (a claim fires the timers that are due)."""
    for _ in range(rounds):
        moved = False
        for w in workers:
            moved |= w.process_one()
            moved |= w.relay_once() > 0
        if not moved:
            return
    raise AssertionError("the system did not quiesce")


def send(backend: Deployment, execution_id: str, event_id: str, name: str, **data: Any) -> None:
    assert (
        backend.transport.send(execution_id, Event(id=event_id, name=name, data=data)) is SendOutcome.QUEUED
    )


def test_fork_join_with_timer_completes_and_children_once(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    _, created = start_execution(backend.store, backend.transport, app, "flow", execution_id="f1")
    assert created
    pump(w)
    send(backend, "f1", "go-1", "go")
    pump(w)
    parent = backend.store.load("f1")
    assert parent is not None and parent.configuration == ["split"]
    assert len(parent.children) == 2
    clock.now += 4.9
    pump(w)
    assert backend.store.load("f1").status is ExecutionStatus.RUNNING, "the 5s timer must not fire early"
    clock.now += 0.2
    pump(w)
    parent = backend.store.load("f1")
    assert parent.status is ExecutionStatus.COMPLETED
    assert parent.configuration == ["finished"]
    spawned = [c for step in backend.store.read_trace("f1") for c in step["spawns"]]
    assert len(spawned) == 2
    page = backend.store.list_executions(limit=10)
    assert sorted(s.id for s in page.items) == sorted(["f1", *spawned])
    assert all(backend.store.load(c).status is ExecutionStatus.COMPLETED for c in spawned)


def test_start_with_id_is_idempotent(backend: Deployment) -> None:
    app = make_app()
    first, created = start_execution(backend.store, backend.transport, app, "loop", execution_id="same")
    second, created_again = start_execution(
        backend.store, backend.transport, app, "loop", execution_id="same"
    )
    assert created and not created_again and second.id == first.id
    pump(backend.worker(app))
    trace = backend.store.read_trace("same")
    assert [s["event"] for s in trace if s["handled"]] == ["harel.start"], "the start took effect once"


def test_events_to_one_execution_apply_in_the_order_sent(backend: Deployment) -> None:
    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="o1")
    for n in range(30):
        send(backend, "o1", f"b{n:02}", "bump")
    pump(w)
    exe = backend.store.load("o1")
    assert exe.context["seen"] == [f"b{n:02}" for n in range(30)]
    assert [s["index"] for s in backend.store.read_trace("o1")] == list(range(1, 32)), "one step per version"


def test_pending_events_are_applied_in_one_claim_and_one_commit(backend: Deployment) -> None:
    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="batch")
    for n in range(5):
        send(backend, "batch", f"b{n}", "bump")
    assert w.process_one()
    exe = backend.store.load("batch")
    assert exe.context["n"] == 5 and exe.version == 7, (
        "created at 1; start and five bumps: six steps, one commit"
    )
    assert not w.process_one()


def test_an_expired_lease_is_taken_over_and_the_late_commit_refused(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app, lease_seconds=5)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="l1")
    pump(w)
    send(backend, "l1", "bump-1", "bump")
    stalled = backend.transport.claim(w.charts, 5, clock.now + 60)  # claims, then stalls past its lease
    assert stalled is not None and [p.id for p in stalled.pending] == ["bump-1"]
    assert not w.process_one(), "leased: nobody else steps it"
    clock.now += 6
    pump(w)  # the lease ran out: the worker takes the execution over and applies the event
    assert backend.store.load("l1").context["n"] == 1
    assert w.metrics.lease_steals._value.get() == 1
    with pytest.raises(StoreConflict):
        backend.store.commit_claim(
            stalled, stalled.execution, [], applied=list(stalled.pending), timers_changed=False
        )
    assert backend.transport.send("l1", Event(id="bump-1", name="bump")) is SendOutcome.DUPLICATE
    pump(w)
    assert backend.store.load("l1").context["n"] == 1, "a redelivered event takes effect once"


def test_timer_for_a_state_already_left_is_ignored(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="l2")
    pump(w)
    armed = backend.store.load("l2").timers["a"]
    send(backend, "l2", "skip-1", "skip")
    pump(w)
    assert backend.store.load("l2").timers == {}
    # a sweep that read the timer before it was cancelled delivers it late
    late = timer_event("l2", "a", armed, clock.now)
    assert backend.transport.send("l2", late) is SendOutcome.QUEUED
    pump(w)
    assert backend.store.load("l2").configuration == ["b"]
    [step] = [s for s in backend.store.read_trace("l2") if s["event_id"] == late.id]
    assert not step["handled"]


def test_rearmed_timer_ignores_the_older_arming(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="l3")
    pump(w)
    first = backend.store.load("l3").timers["a"]
    send(backend, "l3", "skip", "skip")
    pump(w)
    clock.now += 1
    send(backend, "l3", "back", "back")
    pump(w)
    second = backend.store.load("l3").timers["a"]
    assert second > first
    assert backend.transport.send("l3", timer_event("l3", "a", first, clock.now)) is SendOutcome.QUEUED
    pump(w)
    assert backend.store.load("l3").configuration == ["a"], "the older arming must not fire"
    clock.now = second
    pump(w)
    assert backend.store.load("l3").configuration == ["b"]


def test_cancel_cascades_to_children(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "flow", execution_id="c1")
    send(backend, "c1", "go", "go")
    pump(w)
    children = list(backend.store.load("c1").children)
    assert len(children) == 2
    cancel_execution(backend.store, backend.transport, "c1")
    pump(w)
    assert backend.store.load("c1").status is ExecutionStatus.CANCELLED
    left = next(c for c in children if ".left@" in c)
    assert backend.store.load(left).status is ExecutionStatus.CANCELLED
    assert backend.store.load(left).timers == {}
    clock.now += 60
    pump(w)
    assert backend.store.due_timers(clock.now + 3600) == [], "no timer of a cancelled tree stays armed"
    assert [backend.store.document(c)["next_fire_at"] for c in children] == [None, None]


def test_a_poison_event_parks_its_execution_and_later_events_wait(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="p1")
    pump(w)
    send(backend, "p1", "poison-1", "poison")
    send(backend, "p1", "after-1", "bump")
    for _ in range(backend.transport.max_attempts + 2):
        pump(w)
        clock.now += 60
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == (
        "p1",
        "poison-1",
        backend.transport.max_attempts,
    )
    assert "RuntimeError: card declined" in parked.error
    assert parked.waiting == 2, "the bump, and the 10s timer that fired meanwhile"
    assert w.counters["dead_lettered"] == 1
    assert backend.store.load("p1").context == {}, "the bump behind the poison did not overtake it"
    assert backend.transport.drop("p1", "poison-1")
    pump(w)
    exe = backend.store.load("p1")
    assert exe.context["seen"] == ["after-1"] and exe.configuration == ["b"], "then the timer"


def test_a_failure_mid_batch_commits_what_came_before(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="m1")
    send(backend, "m1", "ok", "bump")
    send(backend, "m1", "bad", "poison")
    send(backend, "m1", "later", "bump")
    assert w.process_one()
    exe = backend.store.load("m1")
    assert exe.context["seen"] == ["ok"], "start and the first bump committed"
    document = backend.store.document("m1")
    assert [entry["id"] for entry in document["inbox"]] == ["bad", "later"]
    assert document["attempts"] == 1
    clock.now += 1
    assert w.process_one(), "retried after its backoff"
    assert backend.store.document("m1")["attempts"] == 2


class _ClaimsRefused:
    """A transport that notes a claim coming back empty while `execution_id` is leased, with events waiting,
    to a worker inside an action (`stepping`): another consumer wanted it, and the lease kept it out."""

    def __init__(self, transport: Any, store: Any, execution_id: str) -> None:
        self._transport = transport
        self._store = store
        self._execution_id = execution_id
        self.stepping = threading.Event()
        self.refused = threading.Event()
        self.sent = threading.Event()  # the test sent more events while the execution was leased
        self.tried_since = threading.Event()  # and a claim started after that came back

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def claim(self, charts: Any, lease: float, bound: float) -> Any:
        after_sending = self.sent.is_set()
        found = self._transport.claim(charts, lease, bound)
        if after_sending:
            self.tried_since.set()
        if found is None and self.stepping.is_set():
            document = self._store.document(self._execution_id) or {}
            if document.get("lease") is not None and document.get("inbox"):
                self.refused.set()
        return found


def test_two_workers_racing_never_step_one_execution_at_once(backend: Deployment) -> None:
    """Four consumers on two workers, 40 bumps sent to one execution: every bump applied once, in the
    order sent, no version conflict (one stepper at a time), one step per version. The race is forced: the
    first bump's action returns only once a rival's claim was refused while the execution was leased, the
    last 20 bumps were sent meanwhile, and a rival claimed again (a send must not make a leased execution
    claimable)."""
    app = make_app()
    bump_action = app.registry.actions["bump"]
    claims = _ClaimsRefused(backend.transport, backend.store, "r1")

    def bump_after_a_refusal(ctx: ActionContext) -> ActionResult:
        claims.stepping.set()
        claims.refused.wait(10)
        claims.tried_since.wait(10)
        return bump_action(ctx)

    app.registry.actions["bump"] = bump_after_a_refusal
    w1, w2 = backend.worker(app), backend.worker(app)
    w1.transport = w2.transport = claims  # type: ignore[assignment]
    start_execution(backend.store, backend.transport, app, "loop", execution_id="r1")
    barrier = threading.Barrier(4)

    def run(w: Worker) -> None:
        barrier.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not w.process_one() and backend.store.load("r1").context.get("n") == 40:
                return

    threads = [threading.Thread(target=run, args=(w,)) for w in (w1, w2, w1, w2)]
    for t in threads:
        t.start()
    for n in range(20):
        send(backend, "r1", f"b{n:02}", "bump")
    assert claims.refused.wait(10), "no consumer ever found the execution leased: there was no race"
    for n in range(20, 40):
        send(backend, "r1", f"b{n:02}", "bump")
    claims.sent.set()
    assert claims.tried_since.wait(10), "no rival claimed after the sends"
    for t in threads:
        t.join(30)
    exe = backend.store.load("r1")
    assert exe.context["n"] == 40 and exe.context["seen"] == [f"b{n:02}" for n in range(40)]
    assert w1.counters["conflicts"] + w2.counters["conflicts"] == 0, "the lease kept the steppers apart"
    assert [s["index"] for s in backend.store.read_trace("r1")] == list(range(1, 42))


def test_a_rival_commit_loses_nothing(backend: Deployment) -> None:
    """Someone else advances the version during a claim (the CAS safety net): the claim's commit is
    refused, changes nothing, and the events wait for the next claim."""
    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="k1")
    pump(w)
    original = backend.store.commit_claim
    interfered: list[bool] = []

    def rival_first(claim: Any, *args: Any, **kwargs: Any) -> Any:
        if not interfered:
            interfered.append(True)
            rival = backend.store.load(claim.execution_id)
            backend.store.commit(rival, processed_event_id="rival")
        return original(claim, *args, **kwargs)

    backend.store.commit_claim = rival_first  # type: ignore[method-assign]
    send(backend, "k1", "bump", "bump")
    assert w.process_one()
    assert w.counters["conflicts"] == 1
    assert backend.store.load("k1").context == {}
    assert backend.store.document("k1")["lease"] is None, "the refused claim gave the execution back"
    pump(w)
    assert backend.store.load("k1").context["n"] == 1


@pytest.mark.parametrize("applied", [True, False], ids=["applied-then-lost", "lost-before-applying"])
def test_an_unknown_commit_outcome_is_resolved(backend: Deployment, applied: bool) -> None:
    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="u1")
    pump(w)
    original = backend.store.commit_claim
    calls: list[bool] = []

    def reply_lost(*args: Any, **kwargs: Any) -> Any:
        calls.append(True)
        if len(calls) == 1:
            if applied:
                original(*args, **kwargs)
            raise CommitOutcomeUnknown(
                "u1", "AutoReconnect", "connection closed; the write may or may not have been applied"
            )
        return original(*args, **kwargs)

    backend.store.commit_claim = reply_lost  # type: ignore[method-assign]
    send(backend, "u1", "bump", "bump")
    assert w.process_one()
    backend.store.commit_claim = original  # type: ignore[method-assign]
    assert backend.store.load("u1").context["n"] == 1, "applied once either way"
    assert len(calls) == (1 if applied else 2), "sent again only when it had not been applied"
    assert backend.store.document("u1")["lease"] is None
    assert w.metrics.unknown_outcomes._value.get() == 1


class _HeldAfterTheFork:
    """A store that holds the consumer which committed `root_id`'s fork until the test is about to stop the
    worker: the stop comes right after the fork, however fast or slow the machine."""

    def __init__(self, store: Any, root_id: str) -> None:
        self._store = store
        self._root_id = root_id
        self.forked = threading.Event()
        self.stopping = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def commit_claim(self, claim: Any, exe: Execution, *args: Any, **kwargs: Any) -> Any:
        parts = self._store.commit_claim(claim, exe, *args, **kwargs)
        if exe.id == self._root_id and exe.configuration == [FORK]:
            self.forked.set()
            self.stopping.wait(10)
        return parts


def test_stop_after_the_fork_loses_nothing_and_a_new_worker_finishes(live_backend: Backend) -> None:
    """The worker is stopped right after the root's fork committed (its children not yet done): the stop
    drains without losing anything, and a new worker finishes the workflow."""
    app = make_app()
    store = _HeldAfterTheFork(live_backend.store, "s1")
    w = Worker(store, live_backend.transport, app, config=WorkerConfig(concurrency=2, drain_seconds=2))
    w.start()
    start_execution(live_backend.store, live_backend.transport, app, "harel.smoke-50-50", execution_id="s1")
    assert store.forked.wait(10), "the root never forked"
    store.stopping.set()
    w.stop()
    root = live_backend.store.load("s1")
    assert root.configuration == [FORK] and len(root.children) == len(REGIONS), "stopped after the fork"
    assert root.status is ExecutionStatus.RUNNING and not all(c.done for c in root.children.values())
    w2 = Worker(live_backend.store, live_backend.transport, app, config=WorkerConfig(concurrency=2))
    w2.start()
    try:
        deadline = time.time() + 20
        while live_backend.store.load("s1").status is ExecutionStatus.RUNNING and time.time() < deadline:
            time.sleep(0.02)
    finally:
        w2.stop()
    report = check(gather(live_backend.store, "s1", 20))
    assert report.passed, report.failures


def test_smoke_workflow_passes_with_three_workers(live_backend: Backend) -> None:
    app = make_app()
    workers = [
        Worker(live_backend.store, live_backend.transport, app, config=WorkerConfig(concurrency=2))
        for _ in range(3)
    ]
    for w in workers:
        w.start()
    try:
        report = run_smoke(
            live_backend.store, live_backend.transport, app, chart_id="harel.smoke-50-50", timeout=20
        )
    finally:
        for w in workers:
            w.stop()
    assert report.passed, report.failures
    assert {row["lane"] for row in report.timeline} == {"root", "alpha", "beta", "gamma"}


ORDERING_RUNS = 100
CREATED_VERSION = 1  # an execution is created at version 1; each applied event, handled or not, adds one


def running_workers(backend: Backend, *apps: App, count: int = 1) -> list[Worker]:
    """`count` started workers for each app, two consumers each, polling briskly."""
    workers = [
        Worker(backend.store, backend.transport, app, config=WorkerConfig(concurrency=2, idle_poll_max=0.05))
        for app in apps
        for _ in range(count)
    ]
    for w in workers:
        w.start()
    return workers


def settle(backend: Backend, done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Until `done()`, polled (the store is the only witness); AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)


@pytest.mark.semantics("sem-order-per-sender")
def test_a_slow_action_does_not_let_a_later_event_overtake_it(live_backend: Backend) -> None:
    """Three workers x two consumers, 100 runs: e1's action takes 20 ms, e2 is sent right after; every
    run ends in S2 (had e2 been stepped first, it would be ignored in S0 and the run end in S1)."""
    app = make_app(slow=0.02)
    workers = running_workers(live_backend, app, count=3)
    ids = [f"o{run}" for run in range(ORDERING_RUNS)]
    try:
        for execution_id in ids:
            start_execution(
                live_backend.store, live_backend.transport, app, "ordered", execution_id=execution_id
            )
            send_event(live_backend.store, live_backend.transport, app, execution_id, "e1")
            send_event(live_backend.store, live_backend.transport, app, execution_id, "e2")
        settle(
            live_backend,
            lambda: all(live_backend.store.load(i).version == CREATED_VERSION + 3 for i in ids),
            "every run's three events",
        )
    finally:
        for w in workers:
            w.stop()
    ends = [live_backend.store.load(i).configuration for i in ids]
    assert ends == [["S2"]] * ORDERING_RUNS, f"{sum(e != ['S2'] for e in ends)} of {ORDERING_RUNS} overtaken"


def ticket_app(name: str) -> App:
    """An app of its own chart `<name>`: open --close--> closed (final)."""
    app = App(name)
    app.chart(
        {
            "id": name,
            "version": 1,
            "initial": "open",
            "states": {"open": {"on": {"close": "closed"}}, "closed": {"final": True}},
        }
    )
    return app


def test_two_apps_on_one_database_each_run_their_own_50_executions_without_a_failed_attempt(
    live_backend: Backend,
) -> None:
    """A worker of `orders` and a worker of `billing` (two consumers each) on one database, 50 executions
    each: every one completes with no failed attempt, and each worker processed exactly its own events."""
    apps = {name: ticket_app(name) for name in ("orders", "billing")}
    workers = dict(zip(apps, running_workers(live_backend, *apps.values()), strict=True))
    every: list[str] = []
    try:
        for n in range(50):
            for name, app in apps.items():
                exe, _ = start_execution(
                    live_backend.store, live_backend.transport, app, name, execution_id=f"{name}-{n:02d}"
                )
                send_event(live_backend.store, live_backend.transport, app, exe.id, "close")
                every.append(exe.id)
        settle(
            live_backend,
            lambda: all(live_backend.store.load(i).status is ExecutionStatus.COMPLETED for i in every),
            "both apps' executions to complete",
        )
    finally:
        for w in workers.values():
            w.stop()
    for execution_id in every:
        document = live_backend.store.document(execution_id)
        assert document["attempts"] == 0 and document.get("last_error") is None, execution_id
    for name, w in workers.items():
        assert w.counters["processed"] == 50 * 2, f"{name}: its own starts and closes, no more"
        assert w.metrics.registry.get_sample_value("harel_event_failures_total") == 0


def test_a_worker_claims_only_its_own_charts(backend: Deployment) -> None:
    """Two apps on one database: each worker touches only its own charts; an execution nobody serves
    waits without a single attempt."""
    orders, billing = App("orders"), App("billing")
    orders.chart(LOOP)
    billing.chart({**LOOP, "id": "billing"})
    for app in (orders, billing):
        app.registry.actions["bump"] = lambda ctx: ActionResult(context={"n": ctx.context.get("n", 0) + 1})
        app.registry.actions["explode"] = lambda ctx: None
    start_execution(backend.store, backend.transport, orders, "loop", execution_id="order-1")
    start_execution(backend.store, backend.transport, billing, "billing", execution_id="bill-1")
    orders_worker = backend.worker(orders)
    pump(orders_worker)
    assert backend.store.load("order-1").started
    assert not backend.store.load("bill-1").started, "not served: not touched"
    assert backend.store.document("bill-1")["attempts"] == 0
    pump(backend.worker(billing))
    assert backend.store.load("bill-1").started


@pytest.mark.semantics("sem-versions-pinned")
def test_a_new_chart_version_does_not_strand_running_executions(backend: Deployment) -> None:
    v1 = {
        "id": "doc",
        "version": 1,
        "initial": "draft",
        "states": {"draft": {"on": {"publish": "live"}}, "live": {}},
    }
    v2 = {
        "id": "doc",
        "version": 2,
        "initial": "draft",
        "states": {"draft": {"on": {"submit": "review"}}, "review": {"on": {"publish": "live"}}, "live": {}},
    }
    app = App("versions")
    app.chart(v1)
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "doc", execution_id="old")
    pump(w)
    app.chart(v2)  # deployed while "old" runs; a worker that serves both versions:
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "doc", execution_id="new")
    pump(w)
    assert backend.store.load("old").definition_version == 1
    assert backend.store.load("new").definition_version == 2
    send(backend, "old", "p-old", "publish")
    send(backend, "new", "s-new", "submit")
    pump(w)
    assert backend.store.load("old").configuration == ["live"], "the old execution finishes on version 1"
    assert backend.store.load("new").configuration == ["review"]


def test_an_unreadable_execution_does_not_stop_the_consumers() -> None:
    """A document whose data cannot be parsed is logged and left to its lease; the consumer keeps
    running and other work completes."""
    live = open_backend("mongomock://")
    live.client["harel"]["executions"].insert_one(
        {"_id": "junk", "data": "{not json", "version": 1, "chart": "loop@1", "inbox": [], "inbox_at": 0.0}
    )
    app = make_app()
    w = Worker(live.store, live.transport, app, config=WorkerConfig(concurrency=1))
    w.start()
    try:
        start_execution(live.store, live.transport, app, "loop", execution_id="after-junk")
        deadline = time.time() + 10
        while not live.store.load("after-junk").started and time.time() < deadline:
            time.sleep(0.02)
        assert live.store.load("after-junk").started
        assert w.alive()
    finally:
        w.stop(drain_seconds=1)
        live.close()


def test_heartbeats_name_the_charts_a_worker_serves() -> None:
    live = open_backend("mongomock://")
    app = make_app()
    w = Worker(
        live.store,
        live.transport,
        app,
        config=WorkerConfig(concurrency=1, heartbeat_seconds=0.05),
        heartbeats=MongoHeartbeats(live.client),
        worker_id="w-1",
    )
    w.start()
    try:
        deadline = time.time() + 5
        while live.client["harel"]["workers"].find_one({"_id": "w-1"}) is None and time.time() < deadline:
            time.sleep(0.01)
        beat = live.client["harel"]["workers"].find_one({"_id": "w-1"})
        assert beat is not None and sorted(beat["charts"]) == sorted(w.charts)
    finally:
        w.stop(drain_seconds=1)
    assert live.client["harel"]["workers"].find_one({"_id": "w-1"}) is None, (
        "a drained worker removes its beat"
    )
    live.close()


@pytest.mark.semantics("sem-time")
def test_a_timer_event_is_never_early_on_the_deployments_clock(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="t1")
    pump(w)
    fire_at = backend.store.load("t1").timers["a"]
    clock.now = fire_at - 0.001
    pump(w)
    assert backend.store.load("t1").configuration == ["a"]
    clock.now = fire_at + 0.001
    pump(w)
    [step] = [s for s in backend.store.read_trace("t1") if s["event"] == TIMER_EVENT]
    assert step["handled"] and step["at"] >= fire_at


def test_each_applied_event_is_one_info_line_with_its_duration(
    backend: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(slow=0.02)
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "ordered", execution_id="logged")
    send(backend, "logged", "e1-1", "e1")
    with caplog.at_level(logging.INFO, logger="harel.worker"):
        pump(w)

    applied = [r.__dict__ for r in caplog.records if r.getMessage() == "event applied"]
    assert [(r["execution_id"], r["event"], r["from"], r["to"]) for r in applied] == [
        ("logged", "harel.start", "-", "S0"),
        ("logged", "e1", "S0", "S1"),
    ]
    assert applied[1]["duration_ms"] >= 20.0, "the step's time, its slow action included"


def test_a_client_refuses_ids_and_contexts_the_store_would_misread(backend: Deployment) -> None:
    from harel.errors import InvalidContext, InvalidExecutionId

    app = make_app()
    for reserved in ("", "order-1/fulfilling.payment@3"):
        with pytest.raises(InvalidExecutionId):
            start_execution(backend.store, backend.transport, app, "loop", execution_id=reserved)
    with pytest.raises(InvalidContext, match="total"):
        start_execution(backend.store, backend.transport, app, "loop", context={"total": float("nan")})
    start_execution(backend.store, backend.transport, app, "loop", execution_id="fine")
    with pytest.raises(InvalidContext, match="amount"):
        send_event(backend.store, backend.transport, app, "fine", "bump", data={"amount": float("inf")})
    assert backend.store.list_executions().items[0].id == "fine", "nothing else was created"


def test_a_heartbeat_is_on_the_servers_clock_and_expires() -> None:
    from harel.heartbeat import EXPIRE_SECONDS

    server = Clock()
    server.now = round(time.time(), 3)  # a millisecond date, as the server's; mongomock's TTL uses real time
    client = EmbeddedClient(server)
    beats = MongoHeartbeats(client)
    beats.ensure_indexes()
    assert beats.beat("w-1", {"charts": ["loop@1"]}, {"processed": 3}).server_time == server.now
    stored = client["harel"]["workers"].find_one({"_id": "w-1"})
    assert stored["beat_at"] == server.now and stored["charts"] == ["loop@1"]
    ttl = client["harel"]["workers"].index_information()["last_beat_ttl"]
    assert ttl["expireAfterSeconds"] == EXPIRE_SECONDS and ttl["key"] == [("last_beat", 1)]
    assert beats.served_charts(server.now, 5.0) == {"loop@1"}
    server.now += 16.0  # more than three beats missed: no longer live
    assert beats.served_charts(server.now, 5.0) == set()


def test_an_oversized_fan_out_is_refused_at_its_step_with_the_size_named(backend: Deployment) -> None:
    app = make_app()
    w = backend.worker(app)
    big = "x" * (6 * 1024 * 1024)  # copied into each of two regions: more than a document holds
    start_execution(backend.store, backend.transport, app, "flow", execution_id="big", context={"blob": big})
    pump(w)
    send(backend, "big", "go", "go")
    pump(w)
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == ("big", "go", 1), "parked at once"
    assert "ExecutionTooLarge" in parked.error and "bytes" in parked.error
    assert backend.store.load("big").configuration == ["idle"], "nothing of the fork was written"


def test_a_region_whose_child_id_is_taken_fails_its_parent_with_the_reason(backend: Deployment) -> None:
    from harel.ids import child_id

    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "flow", execution_id="p")
    pump(w)
    version = backend.store.load("p").version
    squatter = Execution(id=child_id("p", "split.left", version), definition_id="loop", definition_version=1)
    assert backend.store.create(squatter, now=backend.clock.now)  # bypassing the clients' id check
    send(backend, "p", "go", "go")
    pump(w)
    parent = backend.store.load("p")
    assert parent.status is ExecutionStatus.FAILED
    assert parent.reason is not None and squatter.id in parent.reason and "taken" in parent.reason
    assert parent.children == {}, "it left the parallel state"
    right = child_id("p", "split.right", version)
    assert backend.store.load(right).status is not ExecutionStatus.RUNNING, "the region that started ended"


def sent_to_nobody(backend: Deployment) -> tuple[App, Worker]:
    """Execution "s", whose step sent an event to an execution that does not exist ("nobody-at-all")."""
    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="s")
    pump(w)
    send(backend, "s", "lost-1", "lost")
    pump(w)
    return app, w


def test_an_event_to_an_execution_that_never_exists_fails_its_sender(backend: Deployment) -> None:
    from harel.worker import UNDELIVERABLE_AFTER_SECONDS

    _, w = sent_to_nobody(backend)
    clock = backend.clock
    assert backend.store.load("s").status is ExecutionStatus.RUNNING, "kept and retried for a while"
    assert [e.target_id for e in backend.store.pending_outbox()] == ["nobody-at-all"]
    clock.now += UNDELIVERABLE_AFTER_SECONDS + 2
    pump(w)
    sender = backend.store.load("s")
    assert sender.status is ExecutionStatus.FAILED
    assert "could not be delivered" in (sender.reason or "") and "nobody-at-all" in (sender.reason or "")
    assert backend.store.pending_outbox() == []


def test_a_worker_that_has_not_read_the_servers_clock_yet_fails_no_sender(backend: Deployment) -> None:
    """Whether an event waited too long for its target is judged on the deployment's clock: a worker whose
    own clock runs ten minutes ahead and that has not heard the server's time yet only postpones."""
    from harel.worker import UNDELIVERABLE_AFTER_SECONDS

    app, _ = sent_to_nobody(backend)
    clock = backend.clock
    ahead = ServerClock(local=lambda: clock.now + 2 * UNDELIVERABLE_AFTER_SECONDS, monotonic=clock)
    transport = MongoTransport(backend.client, clock=ahead, watch=False)
    fresh = Worker(backend.store, transport, app, config=WorkerConfig())
    clock.now += 2 * WorkerConfig().lease_seconds  # the committer's hold on its relay work is over
    assert not ahead.known
    assert fresh.relay_once() == 0, "nothing could be delivered"
    assert backend.store.load("s").status is ExecutionStatus.RUNNING, "the sender is not failed"
    assert [e.target_id for e in backend.store.pending_outbox()] == ["nobody-at-all"]


def test_a_commit_made_while_another_worker_relays_takes_the_relay_over_and_delivers_at_once(
    backend: Deployment,
) -> None:
    """A second worker claims while the first still delivers its commit's event, and the first acknowledges
    (its relay loop's acknowledgement of what it delivered) before the second commits: the second commit
    takes the relay work over and delivers it at once, the first's event again (the receiver drops the
    repeat by its id) and then its own, with no background relay; the first's acknowledgement leaves the
    second's hold alone."""
    app = make_app()
    first, second = backend.worker(app), backend.worker(app)
    for execution_id in ("s", "t"):
        start_execution(backend.store, backend.transport, app, "loop", execution_id=execution_id)
    pump(first)
    second_committing, first_acked = threading.Event(), threading.Event()
    store, transport = backend.store, backend.transport
    original_send, original_commit, original_ack = transport.send, store.commit_claim, store.ack_delivered
    rival = threading.Thread(target=second.process_one)
    sent: list[tuple[str, str, str]] = []

    def send_while_the_second_claims(target: str, event: Event, **kwargs: Any) -> Any:
        if target == "t" and not second_committing.is_set():
            send(backend, "s", "tell-2", "tell", to="t")
            rival.start()
            assert second_committing.wait(5), "the second worker claimed and is about to commit"
        outcome = original_send(target, event, **kwargs)
        sent.append((threading.current_thread().name, event.id, outcome.value))
        return outcome

    def commit(claim: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is rival:
            second_committing.set()
            assert first_acked.wait(5)
        return original_commit(claim, *args, **kwargs)

    def ack(*args: Any, **kwargs: Any) -> Any:
        try:
            return original_ack(*args, **kwargs)
        finally:
            first_acked.set()

    transport.send = send_while_the_second_claims  # type: ignore[method-assign]
    store.commit_claim = commit  # type: ignore[method-assign]
    store.ack_delivered = ack  # type: ignore[method-assign]
    send(backend, "s", "tell-1", "tell", to="t")
    assert first.process_one()
    assert first.acknowledge_delivered() == 1, "delivered in full, acknowledged later"
    rival.join(5)
    assert not rival.is_alive() and second_committing.is_set() and first_acked.is_set()
    by_second = [(event_id, outcome) for name, event_id, outcome in sent if name == rival.name]
    assert [outcome for _, outcome in by_second] == ["duplicate", "queued"], "the first's again, then its own"
    assert [(e.target_id, e.event.name) for e in store.pending_outbox()] == [("t", "bump")], "held"
    assert first.relay_once() == 0, "held by the second, which delivered it: nothing for a background relay"
    assert second.acknowledge_delivered() == 1
    assert store.pending_outbox() == []
    pump(first)
    assert store.load("t").context["n"] == 2


class _ClaimedTimers:
    """A transport whose claims are recorded: how many timer events each claim returned."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self.timers: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def claim(self, *args: Any) -> Any:
        claim = self._transport.claim(*args)
        if claim is not None:
            self.timers.append(sum(p.event.name == TIMER_EVENT for p in claim.pending))
        return claim


class _NoSweep:
    """A store whose seed timer sweep must not be used: the claims fire the timers."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in ("due_timers", "fire_timer"):
            raise AssertionError(f"the worker called the store's {name}")
        return getattr(self._store, name)


TICKS = {
    "id": "ticks",
    "version": 1,
    "initial": "one",
    "states": {
        "one": {"after": {"50ms": "two"}},
        "two": {"after": {"50ms": "three"}},
        "three": {"after": {"50ms": "done"}},
        "done": {"final": True},
    },
}


def test_claims_fire_the_timers_and_an_idle_consumer_wakes_for_those_it_armed() -> None:
    """No sweep: each timer is fired by the claim that takes its execution once it is due, and with an idle
    poll longer than the run the consumer still wakes for each timer its own commit armed. One timer at a
    time, each armed by the step its predecessor caused."""
    live = open_backend("mongomock://")
    store = _NoSweep(live.store)
    transport = _ClaimedTimers(live.transport)
    app = App("ticks")
    app.chart(TICKS)
    w = Worker(store, transport, app, config=WorkerConfig(concurrency=1, idle_poll_max=60.0))
    w.start()
    try:
        start_execution(store, live.transport, app, "ticks", execution_id="t")
        done = wait_for_execution(store, "t", timeout=20.0)
    finally:
        w.stop(drain_seconds=1)
        live.close()
    assert done.status is ExecutionStatus.COMPLETED
    assert transport.timers == [0, 1, 1, 1], (
        "the start, then one claim per timer, each with its timer's event"
    )


FAN = {
    "id": "fan",
    "version": 1,
    "initial": "a",
    "states": {
        "a": {"on": {"go": {"target": "b", "actions": ["flood"]}, "note": {"actions": ["note"]}}},
        "b": {"on": {"note": {"actions": ["note"]}}},
    },
}


def fan_app() -> App:
    """`go` sends as many `bump`s to the execution `sink` as its data says, in one step; `note` counts."""
    app = make_app()
    app.chart(FAN)
    app.action("flood")(
        lambda ctx: ActionResult(send=[Send("bump", to="sink") for _ in range(ctx.event.data["count"])])
    )
    app.action("note")(lambda ctx: ActionResult(context={"notes": ctx.context.get("notes", 0) + 1}))
    return app


@pytest.mark.semantics("sem-sends-limit")
def test_a_step_sending_more_than_a_step_may_parks_its_event_with_nothing_of_it_applied(
    backend: Deployment,
) -> None:
    """`go` would send 1001 events: the step is refused as StepTooLarge (naming the count and the limit)
    and the execution is parked at once on it — the event before it in the batch committed, nothing of the
    refused step written or sent, the event behind it waiting; dropped, the execution carries on."""
    from harel.executions.fields import SEQ_STRIDE

    app = fan_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="sink")
    start_execution(backend.store, backend.transport, app, "fan", execution_id="f")
    pump(w)
    send(backend, "f", "n1", "note")
    send(backend, "f", "go", "go", count=SEQ_STRIDE + 1)
    send(backend, "f", "n2", "note")
    pump(w)
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts, parked.waiting) == ("f", "go", 1, 1)
    assert parked.error.startswith("StepTooLarge: ") and f"{SEQ_STRIDE + 1} entries" in parked.error
    assert f"more than the {SEQ_STRIDE}" in parked.error
    fan = backend.store.load("f")
    assert fan.configuration == ["a"] and fan.context == {"notes": 1}, "n1 committed, go not"
    assert not backend.store.document("f").get("outbox"), "nothing of the refused step was written"
    assert not backend.store.document("sink").get("inbox"), "nothing was sent"
    assert backend.transport.pending_count() == 2, "go, parked, and n2 behind it"
    assert backend.transport.drop("f", "go")
    pump(w)
    assert backend.store.load("f").context == {"notes": 2}, "the event behind it was applied"


def test_a_step_sending_as_many_as_a_step_may_is_delivered(backend: Deployment) -> None:
    from harel.executions.fields import SEQ_STRIDE

    app = fan_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="sink")
    start_execution(backend.store, backend.transport, app, "fan", execution_id="f")
    pump(w)
    send(backend, "f", "go", "go", count=SEQ_STRIDE)
    pump(w, rounds=20)
    assert backend.store.load("f").configuration == ["b"] and backend.transport.parked() == []
    assert backend.store.load("sink").context["n"] == SEQ_STRIDE


BLOB = "x" * (1024 * 1024)  # a quarter of a mailbox's budget, and a little more with its envelope


@pytest.mark.semantics("sem-mailbox-full")
def test_a_flood_is_refused_with_mailbox_full_below_the_document_limit_and_loses_nothing(
    backend: Deployment,
) -> None:
    """Ten 1 MiB events sent to one execution as a client should: a send past the 4 MiB budget raises
    MailboxFull (the execution and the limit) and queues nothing, so the document stays far below 16 MiB;
    sent again once a worker caught up, every event is applied once, in order."""
    app = make_app()
    w = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="s")
    pump(w)
    refusals: list[tuple[str, MailboxFull, dict[str, Any]]] = []
    for n in range(10):
        while True:
            try:
                send_event(
                    backend.store, backend.transport, app, "s", "bump", data={"blob": BLOB}, event_id=f"b{n}"
                )
                break
            except MailboxFull as full:
                refusals.append((f"b{n}", full, backend.store.document("s")))
                pump(w)
    pump(w)
    assert [event_id for event_id, _, _ in refusals] == ["b3", "b6", "b9"], "three fit in 4 MiB"
    for event_id, full, document in refusals:
        assert (full.execution_id, full.limit) == ("s", INBOX_LIMIT_BYTES)
        assert event_id not in [entry["id"] for entry in document["inbox"]], "a refused send queues nothing"
        assert document["inbox_bytes"] <= INBOX_LIMIT_BYTES
        assert len(bson.encode(document)) < 16 * 1024 * 1024 // 3
    assert backend.store.load("s").context["seen"] == [f"b{n}" for n in range(10)]


def fill(backend: Deployment, execution_id: str) -> None:
    """Fill a mailbox to the brim: events of shrinking size until not even an empty one fits."""
    for n, size in enumerate([len(BLOB), 64 * 1024, 1024, 0]):
        while (
            backend.transport.send(
                execution_id,
                Event(id=f"fill-{n}-{time.monotonic_ns()}", name="bump", data={"blob": "x" * size}),
            )
            is SendOutcome.QUEUED
        ):
            pass


@pytest.mark.semantics("sem-mailbox-full")
def test_an_event_relayed_to_a_full_mailbox_waits_in_its_senders_outbox_in_order(
    backend: Deployment,
) -> None:
    """`t` tells the sink `s` twice while s's mailbox is full (s's chart is served by another app's
    worker, stopped meanwhile): both bumps stay in t's outbox, in order; once s drained, both arrive, in
    the order t sent them."""
    orders, billing = make_app(), App("billing")
    billing.chart({**LOOP, "id": "billing"})
    billing.registry.actions.update(orders.registry.actions)
    start_execution(backend.store, backend.transport, billing, "billing", execution_id="s")
    start_execution(backend.store, backend.transport, orders, "loop", execution_id="t")
    sender, receiver = backend.worker(orders), backend.worker(billing)
    pump(sender, receiver)
    fill(backend, "s")
    send(backend, "t", "tell-1", "tell", to="s")
    send(backend, "t", "tell-2", "tell", to="s")
    pump(sender)
    waiting = [json.loads(entry["event"])["id"] for entry in backend.store.document("t")["outbox"]]
    assert len(waiting) == 2 and backend.store.load("t").context == {}, "both told, both held back"
    assert not set(waiting) & {e["id"] for e in backend.store.document("s")["inbox"]}
    # `harel status t` names them once they waited UNDELIVERED_AFTER_SECONDS, not while a relay is due anyway.
    held = backend.store.document("t")
    assert undelivered_of(held, backend.clock.now) == ()
    later = backend.clock.now + UNDELIVERED_AFTER_SECONDS
    assert [(u.event_id, u.target_id) for u in undelivered_of(held, later)] == [
        (event_id, "s") for event_id in waiting
    ]
    shown = Console(width=200, record=True)
    shown.print(status_view(backend.store.load("t"), None, None, later, undelivered_of(held, later)))
    sent = [line for line in shown.export_text().splitlines() if "not delivered after" in line]
    assert [line.split()[:4] for line in sent] == [
        ["sent", "bump", f"({waiting[0]})", "to"],
        ["bump", f"({waiting[1]})", "to", "s:"],
    ], sent
    pump(receiver)
    backend.clock.now += RELAY_RETRY_SECONDS
    pump(sender, receiver)
    assert not backend.store.document("t").get("outbox")
    assert undelivered_of(backend.store.document("t"), later) == ()
    assert backend.store.load("s").context["seen"][-2:] == waiting


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_unreadable_execution_is_parked_by_its_first_claim_not_tried_again_at_every_lease(
    backend: Deployment, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """An execution stored past the SDK's checks that this version cannot read (too deep, a field of the wrong
    type, a malformed mailbox entry) is parked by the claim that read it, naming what could not be read, in one
    log line without a traceback. However many leases pass, no claim takes it again, and the worker goes on with
    the other executions."""
    make, said = KINDS[kind]
    w, logged = five_leases_beside_a_bad_document(backend, caplog, make)
    reason = f"UnreadableExecution: execution 'u' cannot be read: {said}"
    assert (logged.__dict__["execution_id"], logged.__dict__["error"].startswith(reason)) == ("u", True)
    assert w.counters["dead_lettered"] == 1
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == ("u", "u:poke", 1)
    assert parked.error == logged.__dict__["error"]
    stored = backend.client["harel"]["executions"].find_one({"_id": "u"})
    assert (stored["last_error"], stored["lease"], stored["inbox_at"]) == (parked.error, None, None)
    assert backend.store.load("ok").configuration == ["idle"], "the worker went on with the others"


def five_leases_beside_a_bad_document(
    backend: Deployment, caplog: pytest.LogCaptureFixture, make: Callable[[str, str], dict[str, Any]]
) -> tuple[Worker, logging.LogRecord]:
    """`make("u", "flow")` stored beside a healthy execution "ok", and a worker run through five leases; the
    worker and its one warning-or-worse line, which must be the park's, structured, without a traceback."""
    app = make_app()
    backend.client["harel"]["executions"].insert_one(make("u", "flow"))
    start_execution(backend.store, backend.transport, app, "flow", execution_id="ok")
    w = backend.worker(app, lease_seconds=1.0)

    with caplog.at_level(logging.INFO, logger="harel.worker"):
        for _ in range(5):
            pump(w)
            backend.clock.now += 10.0  # leases run out: an execution left leased would be claimed again

    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in failures] == [
        "execution unreadable, parked; it waits for `harel dead retry|drop` once its document is repaired"
    ]
    [logged] = failures
    assert logged.exc_info is None, "one structured line, no traceback"
    return w, logged


@pytest.mark.parametrize("kind", [*RELAY_KINDS, *TIMER_KINDS])
def test_relay_work_or_timers_that_cannot_be_read_park_their_execution_once_not_at_every_pass(
    backend: Deployment, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """A malformed outbox or spawn entry parks its execution by the relay that met it, timers of the wrong
    type by the claim that met them when they were due, in one log line without a traceback; no later pass
    meets them again."""
    make, said = {**RELAY_KINDS, **TIMER_KINDS}[kind]
    w, logged = five_leases_beside_a_bad_document(backend, caplog, make)
    reason = f"UnreadableExecution: execution 'u' cannot be read: {said}"
    assert (logged.__dict__["execution_id"], logged.__dict__["error"].startswith(reason)) == ("u", True)
    assert logged.__dict__.get("by") == ("relay" if kind in RELAY_KINDS else None)
    assert w.counters["dead_lettered"] == 1
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.error, parked.attempts) == ("u", logged.__dict__["error"], 1)
    assert backend.store.load("ok").configuration == ["idle"], "the worker went on with the others"


def test_the_park_of_an_unreadable_execution_is_fenced_by_the_lease_of_the_claim_that_read_it(
    backend: Deployment,
) -> None:
    """A claim whose lease ran out before it parked the execution (another worker took it over) parks
    nothing: the new holder does, once."""
    make, _ = KINDS["nested-199"]
    backend.client["harel"]["executions"].insert_one(make("u", "flow"))
    transport = backend.transport

    def claim() -> UnreadableExecution:
        with pytest.raises(UnreadableExecution) as caught:
            transport.claim(["flow@1"], 1.0, backend.clock.now + 3600)
        return caught.value

    late = claim()
    backend.clock.now += 5.0
    holder = claim()

    assert holder.owner != late.owner
    assert not transport.park_unreadable(late), "its lease is another claim's now"
    assert backend.store.document("u")["parked"] is None
    assert transport.park_unreadable(holder)
    assert [p.execution_id for p in transport.parked()] == ["u"]


def test_a_listing_that_meets_an_unreadable_execution_names_it(backend: Deployment) -> None:
    """Not the parser's error: which execution cannot be read, and what of it."""
    make, said = KINDS["status-a-number"]
    backend.client["harel"]["executions"].insert_one(make("u", "flow"))

    with pytest.raises(UnreadableExecution) as caught:
        backend.store.list_executions(limit=10)

    assert (caught.value.execution_id, caught.value.what.startswith(said)) == ("u", True)


class _Acknowledgements:
    """A store whose acknowledgements are recorded: one entry per command, what it acknowledged."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.sent: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def ack_relay(self, execution_id: str, *args: Any, **kwargs: Any) -> None:
        self.sent.append([execution_id])
        self._store.ack_relay(execution_id, *args, **kwargs)

    def ack_delivered(self, delivered: Any, **kwargs: Any) -> None:
        self.sent.append([d.execution_id for d in delivered])
        self._store.ack_delivered(delivered, **kwargs)


def test_relay_work_delivered_in_full_is_acknowledged_by_the_executions_next_commit(
    backend: Deployment,
) -> None:
    """A commit's own relay work, delivered in full, sends no acknowledgement: it stays held in the document
    until the execution's next commit by the same worker, which trims it in the same update; what no commit
    trimmed is acknowledged for every execution at once, in one command. Nothing is delivered twice."""
    app = make_app()
    store = _Acknowledgements(backend.store)
    w = Worker(store, backend.transport, app, config=WorkerConfig(concurrency=1))
    for execution_id in ("s", "t", "u"):
        start_execution(store, backend.transport, app, "loop", execution_id=execution_id)
    pump(w)
    send(backend, "t", "tell-1", "tell", to="s")
    assert w.process_one()
    held = backend.store.document("t")
    first_seqs = [e["seq"] for e in held["outbox"]]
    assert len(first_seqs) == 1 and held["relay_at"] is not None, "delivered, still held"
    assert store.sent == [], "no acknowledgement of its own"
    assert w.process_one() and backend.store.load("s").context["n"] == 1, "s applied the first"
    send(backend, "t", "tell-2", "tell", to="s")
    send(backend, "u", "tell-3", "tell", to="s")
    pump(w)
    [second] = backend.store.document("t")["outbox"]
    assert second["seq"] not in first_seqs, "the first tell trimmed by the second commit; the second held"
    assert backend.store.load("s").context["n"] == 3, "each tell applied once"
    assert store.sent == []
    assert w.acknowledge_delivered() == 2, "t's second tell and u's, in one command"
    assert sorted(store.sent[0]) == ["t", "u"] and len(store.sent) == 1
    for execution_id in ("t", "u"):
        document = backend.store.document(execution_id)
        assert (document["outbox"], document["relay_at"]) == ([], None)
    pump(w)
    assert backend.store.load("s").context["n"] == 3, "nothing delivered again"


def test_relay_work_not_delivered_in_full_is_acknowledged_at_once_and_never_trimmed(
    backend: Deployment,
) -> None:
    """An entry that cannot be delivered yet (its target does not exist) is not delivered: what was is
    acknowledged at once, the rest waits for the background relay, and the next commit trims nothing."""
    app = make_app()
    store = _Acknowledgements(backend.store)
    w = Worker(store, backend.transport, app, config=WorkerConfig(concurrency=1))
    start_execution(store, backend.transport, app, "loop", execution_id="t")
    pump(w)
    send(backend, "t", "lost-1", "lost")
    assert w.process_one()
    assert store.sent == [["t"]], "acknowledged at once: not delivered in full"
    send(backend, "t", "bump-1", "bump")
    assert w.process_one()
    [waiting] = backend.store.document("t")["outbox"]
    assert waiting["target_id"] == "nobody-at-all", "the undelivered entry waits"


class _CountingRelay(MongoStore):
    """The embedded store, counting the background relay's passes (each takes relay work once at least)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.takes: list[float] = []

    def take_relay_work(self, lease: float, bound: float) -> Any:
        self.takes.append(time.monotonic())
        return super().take_relay_work(lease, bound)


def test_an_idle_relay_loop_backs_off_and_a_postponed_delivery_keeps_it_at_the_retry_pace(
    live_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("harel.worker.RELAY_RETRY_SECONDS", 0.05)
    store = _CountingRelay(live_backend.client)
    worker = Worker(store, live_backend.transport, make_app(), config=WorkerConfig(relay_poll_max=3.0))
    worker.start()
    try:
        time.sleep(1.6)  # at a fixed 0.05 s: 32 passes; backing off 0.05, 0.1, 0.2, 0.4, 0.8, 1.6: 6
        idle = len(store.takes)
        assert 2 <= idle <= 8, f"{idle} passes in 1.6 s"
        worker._postponed.set()  # as a delivery to a missing target does
        postponed = time.monotonic()
        while len(store.takes) == idle:
            # backing off, the next pass would come over 3 s after the last
            assert time.monotonic() - postponed < 1.0, "a postponed delivery brings the next pass at its pace"
            time.sleep(0.01)
    finally:
        worker.stop(drain_seconds=1)
