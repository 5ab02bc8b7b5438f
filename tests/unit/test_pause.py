"""The engine's pause (`harel.pausing`), in process on the embedded backend: a worker hears of it through its
heartbeat, stops claiming once its step in flight has committed, acknowledges, and claims again once resumed;
a worker that starts while a pause stands starts paused. The commands' shapes (what the backup script's mongosh
sends too) and the liveness rule are checked on the documents they leave."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from harel.app import ActionContext, ActionResult, App
from harel.backend import Backend, open_backend
from harel.client import send_event, start_execution
from harel.heartbeat import MongoHeartbeats
from harel.pausing import MongoPauses
from harel.worker import Worker, WorkerConfig

BEAT = 0.05
CHART = {
    "id": "steps",
    "version": 1,
    "initial": "s0",
    "states": {
        "s0": {"on": {"slow": {"target": "s1", "actions": ["slow"]}}},
        "s1": {"on": {"next": "s2"}},
        "s2": {},
    },
}


class Gate:
    """The slow action: it says when it started and waits until the test lets it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()


def make_app(gate: Gate) -> App:
    app = App("pause")
    app.chart(CHART)

    @app.action("slow")
    def slow(ctx: ActionContext) -> ActionResult:
        gate.started.set()
        assert gate.finish.wait(10), "the test did not let the step finish"
        return ActionResult()

    return app


@pytest.fixture
def live() -> Iterator[Backend]:
    backend = open_backend("mongomock://")
    yield backend
    backend.close()


def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def start_worker(live: Backend, app: App, worker_id: str) -> Worker:
    worker = Worker(
        live.store,
        live.transport,
        app,
        config=WorkerConfig(concurrency=2, heartbeat_seconds=BEAT, idle_poll_max=0.05),
        heartbeats=MongoHeartbeats(live.client),
        worker_id=worker_id,
    )
    worker.start()
    return worker


def state(live: Backend, execution_id: str) -> list[str]:
    execution = live.store.load(execution_id)
    assert execution is not None
    return execution.configuration


def test_a_pause_lets_the_step_in_flight_commit_then_stops_claims_until_resumed(live: Backend) -> None:
    gate = Gate()
    app = make_app(gate)
    pauses = MongoPauses(live.client, heartbeat_seconds=BEAT)
    worker = start_worker(live, app, "w-1")
    try:
        start_execution(live.store, live.transport, app, "steps", execution_id="x")
        until(lambda: state(live, "x") == ["s0"], "the start event")
        send_event(live.store, live.transport, app, "x", "slow")
        assert gate.started.wait(10)

        request = pauses.request("backup")
        until(lambda: worker.pause_requested, "the beat to carry it")
        time.sleep(5 * BEAT)
        assert not worker.paused, "a step is in flight: the worker has not paused"
        assert [w.worker_id for w in pauses.status().waiting] == ["w-1"]

        gate.finish.set()
        until(lambda: pauses.status().complete, "the worker's acknowledgement")
        assert worker.paused
        assert state(live, "x") == ["s1"], "the step in flight committed before the worker paused"
        [acknowledged] = pauses.status().acknowledged
        assert acknowledged.worker_id == "w-1" and acknowledged.paused_at is not None
        assert acknowledged.paused_at >= request.requested_at

        send_event(live.store, live.transport, app, "x", "next")
        time.sleep(20 * BEAT)
        assert state(live, "x") == ["s1"], "a paused worker claims nothing"
        assert worker.alive(), "a paused worker is alive"

        lifted = pauses.resume()
        assert lifted == request
        until(lambda: state(live, "x") == ["s2"], "the worker to claim again")
        until(lambda: not worker.paused, "the worker to resume")
        stored = live.client["harel"]["workers"].find_one({"_id": "w-1"})
        assert stored is not None and "pause_requested" not in stored
        until(
            lambda: "paused_at" not in (live.client["harel"]["workers"].find_one({"_id": "w-1"}) or {}),
            "the acknowledgement to go",
        )
        assert pauses.status().request is None
    finally:
        gate.finish.set()
        worker.stop(drain_seconds=1)


def test_a_worker_started_during_a_pause_starts_paused(live: Backend) -> None:
    gate = Gate()
    gate.finish.set()
    app = make_app(gate)
    pauses = MongoPauses(live.client, heartbeat_seconds=BEAT)
    pauses.request("restore")
    start_execution(live.store, live.transport, app, "steps", execution_id="y")
    worker = start_worker(live, app, "w-2")
    try:
        until(lambda: pauses.status().complete and pauses.status().workers != (), "the acknowledgement")
        time.sleep(10 * BEAT)
        execution = live.store.load("y")
        assert execution is not None and not execution.started, "its start event waits"
        pauses.resume()
        until(lambda: state(live, "y") == ["s0"], "the start event once resumed")
    finally:
        worker.stop(drain_seconds=1)


def test_a_worker_whose_document_is_flagged_after_it_looked_pauses_at_its_next_beat(live: Backend) -> None:
    gate = Gate()
    gate.finish.set()
    app = make_app(gate)
    pauses = MongoPauses(live.client, heartbeat_seconds=BEAT)
    worker = start_worker(live, app, "w-3")
    try:
        until(lambda: not worker.pause_requested, "the start's look")
        # the request written, but the flag set only later (as when the writer's flag missed this document)
        live.client["harel"]["harel_meta"].insert_one({"_id": "pause", "requested_at": 1.0, "reason": "late"})
        time.sleep(10 * BEAT)
        assert not worker.pause_requested, "the worker learns of a pause from its own document"
        assert pauses.flag() == 1
        until(lambda: worker.paused, "the pause")
        assert pauses.flag() == 0, "flagging again changes nothing"
    finally:
        worker.stop(drain_seconds=1)


def test_a_pause_that_stands_keeps_its_time_and_reason_and_only_live_workers_count(live: Backend) -> None:
    pauses = MongoPauses(live.client, heartbeat_seconds=BEAT)
    workers = live.client["harel"]["workers"]
    first = pauses.request("backup")
    time.sleep(0.01)
    assert pauses.request("another") == first
    beats = MongoHeartbeats(live.client)
    beats.beat("fresh", {"host": "h", "pid": 7}, {})
    workers.insert_one({"_id": "gone", "beat_at": first.requested_at - 3600, "host": "h", "pid": 8})
    assert pauses.flag() == 2, "every worker document is flagged, live or not"
    status = pauses.status()
    assert [(w.worker_id, w.host, w.pid, w.acknowledged) for w in status.workers] == [
        ("fresh", "h", 7, False)
    ]
    assert not status.complete
    beat = beats.beat("fresh", {"host": "h", "pid": 7}, {}, paused=True)
    assert beat.pause_requested
    assert pauses.status().complete
    assert pauses.resume() == first
    assert pauses.resume() is None, "nothing to lift"
    assert all("pause_requested" not in w and "paused_at" not in w for w in workers.find())
    beats.beat("fresh", {"host": "h", "pid": 7}, {}, paused=True)
    assert "paused_at" not in (workers.find_one({"_id": "fresh"}) or {}), (
        "no acknowledgement without a request"
    )


def test_with_no_live_worker_a_pause_is_complete_at_once(live: Backend) -> None:
    pauses = MongoPauses(live.client)
    assert not pauses.status().complete, "no pause stands"
    pauses.request("backup")
    status = pauses.status()
    assert status.complete and status.workers == ()
