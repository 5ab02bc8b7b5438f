"""`harel_db_commands`: each command counted once, under the loop whose pass sent it (`harel.sent`).

The listener is driven here without a server: `Commanding` calls it the way PyMongo does, on the sending
thread, once per database method a worker calls. The wire tier checks the same counter on a real client.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from pymongo import monitoring

from harel.app import App
from harel.client import start_execution
from harel.heartbeat import Beat
from harel.metrics import Metrics
from harel.sent import CONSUMER, HEARTBEAT, IDLE, OTHER, RELAY, CommandCounter, sending
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from harel_dev.embedded import EmbeddedClient

EVENT = monitoring.CommandStartedEvent({"ping": 1}, "admin", 1, ("localhost", 27017), 1)
CHART = {
    "id": "count",
    "version": 1,
    "initial": "a",
    "states": {"a": {"on": {"go": "b"}}, "b": {"final": True}},
}
# Methods that talk to the deployment without sending a command: waiting for a wake-up, and the clock.
NOT_COMMANDS = frozenset({"wait_hint", "wake", "clock"})


def count(metrics: Metrics, loop: str) -> float:
    return metrics.registry.get_sample_value("harel_db_commands_total", {"loop": loop}) or 0.0


def test_a_pass_counts_its_commands_under_its_loop_when_it_ends() -> None:
    metrics = Metrics()
    counter = CommandCounter(metrics)
    with sending(RELAY):
        counter.started(EVENT)
        counter.started(EVENT)
        assert count(metrics, RELAY) == 0, "counted when the pass ends, under the name it ends with"
    assert count(metrics, RELAY) == 2
    counter.started(EVENT)
    assert count(metrics, OTHER) == 1, "a command outside any pass is counted at once"


def test_a_pass_renamed_before_it_ends_is_counted_under_the_new_name() -> None:
    metrics = Metrics()
    counter = CommandCounter(metrics)
    with sending(CONSUMER) as current:
        counter.started(EVENT)
        current.loop = IDLE
    assert (count(metrics, CONSUMER), count(metrics, IDLE)) == (0, 1)


def test_concurrent_passes_on_other_threads_never_count_into_each_other() -> None:
    metrics = Metrics()
    counter = CommandCounter(metrics)
    inside = threading.Barrier(2)

    def run(loop: str, commands: int) -> None:
        with sending(loop):
            inside.wait()  # both passes are open at once
            for _ in range(commands):
                counter.started(EVENT)
            inside.wait()

    threads = [
        threading.Thread(target=run, args=(RELAY, 3)),
        threading.Thread(target=run, args=(HEARTBEAT, 5)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (count(metrics, RELAY), count(metrics, HEARTBEAT), count(metrics, OTHER)) == (3, 5, 0)


class Commanding:
    """A store, transport or heartbeats whose every database method sends one command to `counter`, on the
    calling thread; it records which thread called what, and whether the call found nothing."""

    def __init__(self, target: Any, counter: CommandCounter, calls: list[tuple[str, str, bool]]) -> None:
        self._target = target
        self._counter = counter
        self._calls = calls
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if name in NOT_COMMANDS or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counter.started(EVENT)
            result = attribute(*args, **kwargs)
            with self._lock:
                self._calls.append((threading.current_thread().name, name, result is None))
            return result

        return call


class Beats:
    def beat(
        self, worker_id: str, info: dict[str, Any], counters: dict[str, int], *, paused: bool = False
    ) -> Beat:
        return Beat(None)

    def join_pause(self, worker_id: str) -> bool:
        return False

    def remove(self, worker_id: str) -> None:
        pass


def expected_loop(thread: str, method: str, found_nothing: bool) -> str:
    """The loop a call belongs to, from the thread the worker ran it on."""
    if thread.startswith("harel-consumer-"):
        return IDLE if method == "claim" and found_nothing else CONSUMER
    return {"harel-relay": RELAY, "harel-heartbeat": HEARTBEAT}.get(thread, OTHER)


@pytest.mark.parametrize("executions", [1, 12])
def test_a_worker_counts_each_command_under_the_loop_that_sent_it(executions: int) -> None:
    client = EmbeddedClient()
    store, transport = MongoStore(client), MongoTransport(client, watch=False)
    app = App("test")
    app.chart(CHART)
    ids = [
        start_execution(store, transport, app, "count", execution_id=f"x{n}")[0].id for n in range(executions)
    ]
    metrics = Metrics()
    counter = CommandCounter(metrics)
    calls: list[tuple[str, str, bool]] = []
    worker = Worker(
        Commanding(store, counter, calls),
        Commanding(transport, counter, calls),
        app,
        config=WorkerConfig(concurrency=2, idle_poll_max=0.01),
        metrics=metrics,
        heartbeats=Commanding(Beats(), counter, calls),  # type: ignore[arg-type]
    )
    worker.start()
    try:
        # every start event applied, then a consumer pass that found nothing left, and every background loop
        # has sent at least one command (the heartbeat's first may come after the last event on a busy machine)
        deadline = time.monotonic() + 30
        while not (
            worker.counters["processed"] == executions
            and all(count(metrics, loop) > 0 for loop in (IDLE, RELAY, HEARTBEAT))
        ):
            assert time.monotonic() < deadline, f"not done: {worker.counters}"
            time.sleep(0.01)
    finally:
        worker.stop(drain_seconds=5)
    assert all((exe := store.load(i)) is not None and exe.configuration == ["a"] for i in ids)
    expected = Counter(expected_loop(*call) for call in calls)
    assert {loop: count(metrics, loop) for loop in expected} == expected
    assert all(expected[loop] > 0 for loop in (CONSUMER, IDLE, RELAY, HEARTBEAT)), expected
    assert expected[CONSUMER] <= 2 * executions, "one claim and one commit per start event"
