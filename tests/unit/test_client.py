"""The sync client (`harel.client`): start, send, cancel, status and wait on one deployment, and the waiting
it shares with its async twin `harel.aio` (tested over the wire in tests/wire/test_aio_over_wire.py; here only
its refusal of the in-process stores, which needs no server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from harel import aio, calls
from harel.app import App
from harel.backend import open_backend
from harel.client import Client
from harel.errors import (
    EventTooLarge,
    ExecutionFinished,
    ExecutionIdTaken,
    InvalidContext,
    InvalidEventId,
    InvalidURL,
    UnknownChart,
    UnknownEvent,
    UnknownExecution,
    WaitTimedOut,
)
from harel.metrics import Metrics
from harel.model import ExecutionStatus
from harel.serve import start_worker
from harel.worker import WorkerConfig

TICKET = {
    "id": "ticket",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"close": "closed"}}, "closed": {"final": True}},
}


def tickets() -> App:
    app = App("tickets")
    app.chart(TICKET)
    return app


@pytest.fixture
def client() -> Iterator[Client]:
    app = tickets()
    backend = open_backend("mongomock://")
    worker = start_worker(backend, app, WorkerConfig(concurrency=1), Metrics())
    yield Client(backend.store, backend.transport, app)
    worker.stop(drain_seconds=1)
    backend.close()


def test_connect_gives_a_client_of_the_deployment() -> None:
    with Client.connect("mongomock://", tickets()) as client:
        assert client.start("ticket", execution_id="c-1").definition_id == "ticket"
    with Client.connect("mongomock://") as bare, pytest.raises(UnknownChart):
        bare.start("ticket")  # nothing registered, and nothing published in this new store


def test_the_async_client_refuses_an_in_process_store_and_says_what_to_use() -> None:
    with pytest.raises(InvalidURL) as refused:
        asyncio.run(aio.Client.connect("mongomock://", tickets(), deadline=1))

    assert refused.value.url == "mongomock://"
    assert str(refused.value) == (
        "invalid store URL mongomock://: harel.aio needs a deployment, and mongomock:// is a synchronous in-process "
        "store; give a mongodb:// or mongodb+srv:// URL (`harel dev` serves one on this machine), or use the "
        "sync harel.client.Client, which runs on it"
    )


def test_start_send_wait(client: Client) -> None:
    started = client.start("ticket", execution_id="t-1", context={"who": "ann"})
    again = client.start("ticket", execution_id="t-1", context={"who": "ann"})
    assert started.id == again.id == "t-1", "an idempotency key"

    event = client.send("t-1", "close", data={"why": "done"})
    finished = client.wait("t-1", timeout=10)

    assert finished.status is ExecutionStatus.COMPLETED and finished.configuration == ["closed"]
    assert client.status("t-1").version == finished.version
    assert any(step["event_id"] == event.id for step in client.store.read_trace("t-1"))


def test_cancel_then_nothing_more(client: Client) -> None:
    client.start("ticket", execution_id="t-2")
    client.cancel("t-2")

    assert client.wait("t-2", timeout=10).status is ExecutionStatus.CANCELLED
    with pytest.raises(ExecutionFinished, match="'t-2' has finished \\(cancelled\\)"):
        client.send("t-2", "close")
    with pytest.raises(ExecutionFinished):
        client.cancel("t-2")


def test_refusals_name_what_is_wrong(client: Client) -> None:
    client.start("ticket", execution_id="t-3")

    with pytest.raises(UnknownExecution):
        client.status("nobody")
    with pytest.raises(UnknownEvent, match="known: close"):
        client.send("t-3", "reopen")
    with pytest.raises(UnknownChart):
        client.start("nothing")


def test_a_wait_gives_up_after_its_timeout(client: Client) -> None:
    client.start("ticket", execution_id="t-4")

    started = time.monotonic()
    with pytest.raises(WaitTimedOut, match=r"execution 't-4' is still running after 0\.3s"):
        client.wait("t-4", timeout=0.3)
    assert time.monotonic() - started >= 0.3, "not before its timeout"


def test_pauses_grow_and_never_pass_the_timeout() -> None:
    waiting = calls.Waiting(timeout=None)
    pauses = [waiting.next_pause("x") for _ in range(6)]
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]

    bounded = calls.Waiting(timeout=0.12, started=time.monotonic())
    assert bounded.next_pause("x") == 0.05
    assert bounded.next_pause("x") <= 0.12
    bounded.started -= 1.0
    with pytest.raises(WaitTimedOut, match=r"x after 0\.12s"):
        bounded.next_pause("x")


def test_an_event_id_of_the_engines_forms_is_refused_and_the_execution_goes_on(client: Client) -> None:
    client.start("ticket", execution_id="c-ids")
    for taken in ("c-ids:start", "c-ids/fork.a@1@2#0", ""):
        with pytest.raises(InvalidEventId):
            client.send("c-ids", "close", event_id=taken)
    client.send("c-ids", "close", event_id="close-1")
    assert client.wait("c-ids", timeout=10).status is ExecutionStatus.COMPLETED


def test_a_start_under_a_taken_id_with_another_context_or_chart_is_refused(client: Client) -> None:
    client.app.chart({**TICKET, "id": "other"})
    client.start("ticket", execution_id="t-taken", context={"who": "ann"})
    for chart, context in (("ticket", {"who": "bob"}), ("ticket", None), ("other", {"who": "ann"})):
        with pytest.raises(ExecutionIdTaken, match="'t-taken' already exists, started on chart 'ticket'"):
            client.start(chart, execution_id="t-taken", context=context)
    assert client.status("t-taken").context == {"who": "ann"}


def test_a_start_context_may_not_hold_the_regions_key_the_engine_writes(client: Client) -> None:
    with pytest.raises(InvalidContext, match=r"regions.*written by the engine"):
        client.start("ticket", context={"regions": {}})


def test_an_event_larger_than_a_whole_mailbox_is_refused_as_too_large_not_as_full(client: Client) -> None:
    client.start("ticket", execution_id="t-big")
    with pytest.raises(EventTooLarge, match="more than a mailbox holds") as caught:
        client.send("t-big", "close", data={"blob": "x" * (5 * 1024 * 1024)})
    assert caught.value.size > caught.value.limit
    client.send("t-big", "close")  # the mailbox was never full
    assert client.wait("t-big", timeout=10).status is ExecutionStatus.COMPLETED


def test_sending_the_engines_cancel_event_points_to_cancel(client: Client) -> None:
    client.start("ticket", execution_id="t-cancel")
    with pytest.raises(UnknownEvent, match="to cancel the execution, use `harel cancel t-cancel`"):
        client.send("t-cancel", "harel.cancel")
