"""The worker runtime, driven step by step with a fake clock on the in-memory and mongomock backends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, App, Send
from harel.backend import Backend, open_backend
from harel.client import cancel_execution, start_execution
from harel.errors import StoreConflict
from harel.model import TIMER_EVENT, Event, ExecutionStatus
from harel.smoke import check, gather, register_smoke, run_smoke
from harel.transport.memory import MemoryTransport
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig, start_event_id


class Clock:
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
        "a": {"after": {"10s": "b"}, "on": {"skip": "b", "bump": {"actions": ["bump"]}}},
        "b": {"on": {"back": "a"}},
    },
}


def make_app(fail: dict[str, int] | None = None) -> App:
    app = App("test")
    app.chart(FLOW)
    app.chart(LOOP)
    register_smoke(app, region_timer=0.05, final_timer=0.05)

    @app.action("hello")
    def hello(ctx: ActionContext) -> ActionResult:
        return ActionResult(send=[Send("hi", to="self")])

    @app.action("explode")
    def explode(ctx: ActionContext) -> ActionResult:
        raise RuntimeError("card declined")

    @app.action("bump")
    def bump(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"n": ctx.context.get("n", 0) + 1})

    return app


CLOCK = Clock()


@pytest.fixture(params=["memory://", "mongomock://"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The production backends, with the transport on the tests' fake clock (the store keeps no time)."""
    b = open_backend(request.param)
    if request.param == "memory://":
        b.transport = MemoryTransport(clock=CLOCK)
    else:
        b.transport = MongoTransport(b.client, clock=CLOCK, watch=False)
    yield b
    b.close()


@pytest.fixture(params=["memory://", "mongomock://"])
def live_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The production backends on the real clock, for workers running their own threads."""
    b = open_backend(request.param)
    yield b
    b.close()


@pytest.fixture(autouse=True)
def reset_clock() -> None:
    CLOCK.now = 1_000_000.0


def worker(backend: Backend, app: App, clock: Clock, **config: Any) -> Worker:
    return Worker(backend.store, backend.transport, app, config=WorkerConfig(**config), clock=clock)


def pump(*workers: Worker, rounds: int = 200) -> None:
    """Run every worker's consume, relay and sweep until nothing moves."""
    for _ in range(rounds):
        moved = False
        for w in workers:
            moved |= w.process_one()
            moved |= w.relay_once() > 0
            moved |= w.sweep_once() > 0
        if not moved:
            return
    raise AssertionError("the system did not quiesce")


def test_fork_join_with_timer_completes_and_children_once(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    _, created = start_execution(backend.store, backend.transport, app, "flow", execution_id="f1")
    assert created
    pump(w)
    backend.transport.send("f1", Event(id="go-1", name="go"))
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


def test_start_with_id_is_idempotent(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    first, created = start_execution(backend.store, backend.transport, app, "loop", execution_id="same")
    second, created_again = start_execution(
        backend.store, backend.transport, app, "loop", execution_id="same"
    )
    assert created and not created_again and second.id == first.id
    pump(worker(backend, app, clock))
    trace = backend.store.read_trace("same")
    assert [s["event"] for s in trace if s["handled"]] == ["harel.start"], "the start took effect once"


def test_expired_lease_redelivers_and_the_event_takes_effect_once(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock, lease_seconds=5)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="l1")
    pump(w)
    backend.transport.send("l1", Event(id="bump-1", name="bump"))
    slow = backend.transport.claim(lease=5)  # a consumer that claims, then stalls past its lease
    assert slow is not None and slow.id == "bump-1"
    clock.now += 6
    pump(w)  # the lease ran out: another consumer takes the message and applies it
    assert backend.store.load("l1").context == {"n": 1}
    assert not backend.transport.ack(slow), "the stalled consumer's late ack is refused"
    backend.transport.send("l1", Event(id="bump-1", name="bump"))  # a relay re-sends the same event
    pump(w)
    exe = backend.store.load("l1")
    assert exe.context == {"n": 1}, "a redelivered event takes effect once"
    assert w.counters["redeliveries"] == 1


def test_timer_for_a_state_already_left_is_ignored(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="l2")
    pump(w)
    armed = backend.store.load("l2").timers["a"]
    backend.transport.send("l2", Event(id="skip-1", name="skip"))
    pump(w)
    assert backend.store.load("l2").timers == {}
    # a sweep that read the timer before it was cancelled delivers it late
    backend.transport.send("l2", Event(id="late", name=TIMER_EVENT, data={"path": "a", "fire_at": armed}))
    pump(w)
    exe = backend.store.load("l2")
    assert exe.configuration == ["b"]
    late = [s for s in backend.store.read_trace("l2") if s["event_id"] == "late"]
    assert len(late) == 1 and not late[0]["handled"]


def test_rearmed_timer_ignores_the_older_arming(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="l3")
    pump(w)
    first = backend.store.load("l3").timers["a"]
    backend.transport.send("l3", Event(id="skip", name="skip"))
    pump(w)
    clock.now += 1
    backend.transport.send("l3", Event(id="back", name="back"))
    pump(w)
    second = backend.store.load("l3").timers["a"]
    assert second > first
    backend.transport.send("l3", Event(id="old", name=TIMER_EVENT, data={"path": "a", "fire_at": first}))
    pump(w)
    assert backend.store.load("l3").configuration == ["a"], "the older arming must not fire"
    clock.now = second
    pump(w)
    assert backend.store.load("l3").configuration == ["b"]


def test_cancel_cascades_to_children(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "flow", execution_id="c1")
    backend.transport.send("c1", Event(id="go", name="go"))
    pump(w)
    children = list(backend.store.load("c1").children)
    assert len(children) == 2
    cancel_execution(backend.store, backend.transport, "c1")
    pump(w)
    assert backend.store.load("c1").status is ExecutionStatus.CANCELLED
    for child_id in children:
        child = backend.store.load(child_id)
        assert child.status in (ExecutionStatus.CANCELLED, ExecutionStatus.COMPLETED)
    left = next(c for c in children if ".left@" in c)
    assert backend.store.load(left).status is ExecutionStatus.CANCELLED
    assert backend.store.load(left).timers == {}
    clock.now += 60
    pump(w)
    assert backend.store.next_timer_at() is None, "no timer of a cancelled tree stays armed"


def test_poison_event_is_dead_lettered_after_max_attempts(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "flow", execution_id="p1")
    pump(w)
    backend.transport.send("p1", Event(id="poison-1", name="poison"))
    for _ in range(backend.transport.max_attempts + 2):
        pump(w)
        clock.now += 60
    [letter] = backend.transport.dead_letters()
    assert letter.id == "poison-1" and letter.attempts == backend.transport.max_attempts
    assert "RuntimeError: card declined" in letter.last_error
    assert w.counters["dead_lettered"] == 1
    assert backend.store.load("p1").configuration == ["idle"], "a failed attempt changed nothing"


def test_two_workers_racing_commit_one_winner_per_version(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w1, w2 = worker(backend, app, clock), worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="r1")
    pump(w1)
    for n in range(20):
        backend.transport.send("r1", Event(id=f"b{n}", name="bump"))
    barrier = threading.Barrier(2)

    def run(w: Worker) -> None:
        barrier.wait()
        while w.process_one():
            pass

    threads = [threading.Thread(target=run, args=(w,)) for w in (w1, w2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    pump(w1, w2)
    exe = backend.store.load("r1")
    assert exe.context == {"n": 20}, "every bump took effect exactly once"
    trace = backend.store.read_trace("r1")
    versions = [s["index"] for s in trace]
    assert len(versions) == len(set(versions)), "one commit per version"


def test_commit_conflict_is_retried_by_reloading(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="k1")
    pump(w)
    original = backend.store.commit
    interfered = []

    def commit_after_interference(exe: Any, *args: Any, **kwargs: Any) -> None:
        if not interfered:
            interfered.append(True)
            rival = backend.store.load(exe.id)
            original(rival)  # someone else advances the version first
        original(exe, *args, **kwargs)

    backend.store.commit = commit_after_interference  # type: ignore[method-assign]
    backend.transport.send("k1", Event(id="bump", name="bump"))
    pump(w)
    assert backend.store.load("k1").context == {"n": 1}
    assert w.counters["conflicts"] == 1


def test_unknown_commit_outcome_is_resolved_by_the_dedupe_mark(backend: Backend) -> None:
    from pymongo.errors import AutoReconnect

    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="u1")
    pump(w)
    original = backend.store.commit

    def applied_then_lost(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        raise AutoReconnect("connection closed after the server applied the write")

    backend.store.commit = applied_then_lost  # type: ignore[method-assign]
    backend.transport.send("u1", Event(id="bump", name="bump"))
    pump(w)
    backend.store.commit = original  # type: ignore[method-assign]
    assert backend.store.load("u1").context == {"n": 1}, "resolved as applied, not applied twice"
    assert backend.transport.depth() == 0


def test_stop_mid_run_loses_nothing_and_a_new_worker_finishes(live_backend: Backend) -> None:
    app = make_app()
    w = Worker(
        live_backend.store, live_backend.transport, app, config=WorkerConfig(concurrency=2, drain_seconds=2)
    )
    w.start()
    start_execution(live_backend.store, live_backend.transport, app, "harel.smoke-50-50", execution_id="s1")
    time.sleep(0.05)
    w.stop()
    assert live_backend.store.load("s1").status is ExecutionStatus.RUNNING, "stopped mid-run"
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


def test_conflict_retries_exhausted_fails_the_attempt(backend: Backend) -> None:
    app, clock = make_app(), CLOCK
    w = worker(backend, app, clock, conflict_retries=2)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="x1")
    pump(w)

    def always_conflict(exe: Any, *args: Any, **kwargs: Any) -> None:
        raise StoreConflict(exe.id, exe.version, exe.version + 1)

    original = backend.store.commit
    backend.store.commit = always_conflict  # type: ignore[method-assign]
    backend.transport.send("x1", Event(id="bump", name="bump"))
    assert w.process_one()
    backend.store.commit = original  # type: ignore[method-assign]
    assert backend.transport.depth() == 1, "the message stays queued for a later attempt"
    clock.now += 60
    pump(w)
    assert backend.store.load("x1").context == {"n": 1}


def test_start_event_id_is_deterministic() -> None:
    assert start_event_id("abc") == "abc:start"


@pytest.mark.semantics("sem-versions-pinned")
def test_a_new_chart_version_does_not_strand_running_executions(backend: Backend) -> None:
    clock = CLOCK
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
    w = worker(backend, app, clock)
    start_execution(backend.store, backend.transport, app, "doc", execution_id="old")
    pump(w)
    app.chart(v2)  # deployed while "old" runs
    start_execution(backend.store, backend.transport, app, "doc", execution_id="new")
    pump(w)
    assert backend.store.load("old").definition_version == 1
    assert backend.store.load("new").definition_version == 2
    backend.transport.send("old", Event(id="p-old", name="publish"))
    backend.transport.send("new", Event(id="s-new", name="submit"))
    pump(w)
    assert backend.store.load("old").configuration == ["live"], "the old execution finishes on version 1"
    assert backend.store.load("new").configuration == ["review"]


def test_an_unreadable_message_does_not_stop_the_consumers() -> None:
    """A queue document whose event cannot be parsed (only a MongoDB queue can hold one the transport did
    not write) is logged and left to its lease; the consumer keeps running and other work completes."""
    live_backend = open_backend("mongomock://")
    live_backend.client["harel"]["queue"].insert_one(
        {
            "_id": "junk",
            "target_id": "x",
            "event": "{not json",
            "visible_at": 0.0,
            "attempts": 0,
            "owner": None,
            "lease_until": None,
            "enqueued_at": 0.0,
            "last_error": None,
        }
    )
    app = make_app()
    w = Worker(live_backend.store, live_backend.transport, app, config=WorkerConfig(concurrency=1))
    w.start()
    try:
        start_execution(live_backend.store, live_backend.transport, app, "loop", execution_id="after-junk")
        deadline = time.time() + 10
        while not live_backend.store.load("after-junk").started and time.time() < deadline:
            time.sleep(0.02)
        assert live_backend.store.load("after-junk").started
        assert w.alive()
    finally:
        w.stop(drain_seconds=1)
        live_backend.close()
