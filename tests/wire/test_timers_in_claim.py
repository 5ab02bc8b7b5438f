"""Timers over the wire: a due timer is fired by the claim that takes its execution, in the claim's own
command, with no sweep command at all; every command the worker sent is seen by a command listener on its
real PyMongo clients."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pymongo import monitoring

from harel.app import App
from harel.client import start_execution
from harel.model import TIMER_EVENT, ExecutionStatus
from tests.wire.in_process import Seams, running
from tests.wire.processes import wait_until

pytestmark = pytest.mark.wire

TIMER_SECONDS = 0.3
CHART = {
    "id": "timers.in.claim",
    "version": 1,
    "initial": "waiting",
    "states": {"waiting": {"after": {f"{TIMER_SECONDS}s": "done"}}, "done": {"final": True}},
}


class Commands(monitoring.CommandListener):
    """Every command started on the clients, with its body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            self.seen.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _mentions(value: Any, field: str) -> bool:
    if isinstance(value, dict):
        return field in value or any(_mentions(v, field) for v in value.values())
    if isinstance(value, list):
        return any(_mentions(v, field) for v in value)
    return False


def test_a_due_timer_is_fired_by_the_claim_with_no_sweep_command(seams: Seams) -> None:
    app = App("timers")
    app.chart(CHART)
    commands = Commands()
    worker_seam = seams.open("timer-worker", (commands,))
    client = seams.open("timer-client")
    worker = worker_seam.worker(app, concurrency=1)
    with running([worker]):
        start_execution(client.store, client.transport, app, CHART["id"], execution_id="t1")
        wait_until(
            lambda: (exe := client.store.load("t1")) is not None and exe.status is ExecutionStatus.COMPLETED,
            20.0,
            "the timer to take effect",
        )
    [step] = [s for s in client.store.read_trace("t1") if s["event"] == TIMER_EVENT]
    assert step["handled"] and step["at"] >= step["timer_fire_at"], "fired once, not early"
    sweeps = [
        (name, body)
        for name, body in commands.seen
        if (name == "find" and _mentions(body.get("filter"), "next_fire_at"))
        or (name == "update" and any(_mentions(u.get("q"), "timers") for u in body.get("updates", [])))
    ]
    assert sweeps == [], "no sweep: no read of due timers, no update guarded on the timers"
    claims = [body for name, body in commands.seen if name == "findAndModify" and "wake_at" in body["query"]]
    assert claims and all(body["update"][0] == claims[0]["update"][0] for body in claims)
    assert _mentions(claims[0]["update"][0], "$objectToArray"), "the claim's first stage fires due timers"
