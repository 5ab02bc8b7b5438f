"""Reading an execution's stored document: its mailbox, a dead letter and what became of one event. The
documents come from the real stores, moved by a real worker."""

from __future__ import annotations

import pytest

from harel.client import start_execution
from harel.inspection import (
    Disposition,
    Stage,
    disposition_of,
    event_fate,
    mailbox_of,
)
from harel.model import Event
from tests.unit.test_worker import Clock, Deployment, deployment, make_app, pump


@pytest.fixture
def backend() -> Deployment:
    return deployment(Clock())


def test_the_mailbox_lists_what_waits_in_order(backend: Deployment) -> None:
    app = make_app()
    start_execution(backend.store, backend.transport, app, "loop", execution_id="m1")
    backend.transport.send("m1", Event(id="b1", name="bump"))

    box = mailbox_of(backend.store.document("m1"))

    assert box.chart == "loop@1"
    assert [(p.id, p.event.name) for p in box.pending] == [("m1:start", "harel.start"), ("b1", "bump")]
    assert (box.attempts, box.last_error, box.parked, box.leased) == (0, None, None, False)
    assert event_fate(backend.store.document("m1"), "b1").stage is Stage.WAITING


def test_a_failed_attempt_then_a_dead_letter(backend: Deployment) -> None:
    app, clock = make_app(), backend.clock
    worker = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="m2")
    pump(worker)
    backend.transport.send("m2", Event(id="poison-1", name="poison"))
    backend.transport.send("m2", Event(id="b2", name="bump"))
    pump(worker)

    box = mailbox_of(backend.store.document("m2"))
    assert box.attempts == 1 and box.last_error == "RuntimeError: card declined"
    fate = event_fate(backend.store.document("m2"), "poison-1")
    assert (fate.stage, fate.attempts, fate.error) == (Stage.WAITING, 1, "RuntimeError: card declined")
    assert event_fate(backend.store.document("m2"), "b2").attempts == 0, "only the head has attempts"

    for _ in range(backend.transport.max_attempts):
        clock.now += 60
        pump(worker)

    document = backend.store.document("m2")
    box = mailbox_of(document)
    assert box.parked is not None and box.parked.event_id == "poison-1"
    assert box.parked.attempts == backend.transport.max_attempts
    fate = event_fate(document, "poison-1")
    assert (fate.stage, fate.error) == (Stage.DEAD, "RuntimeError: card declined")
    assert event_fate(document, "b2").stage is Stage.WAITING, "it waits behind the dead letter"


def test_an_applied_event_says_how_it_was_taken(backend: Deployment) -> None:
    app = make_app()
    worker = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "loop", execution_id="m3")
    backend.transport.send("m3", Event(id="skip-1", name="skip"))
    backend.transport.send("m3", Event(id="skip-2", name="skip"))
    pump(worker)
    document = backend.store.document("m3")

    handled, ignored = event_fate(document, "skip-1"), event_fate(document, "skip-2")

    assert handled.stage is Stage.APPLIED and handled.disposition is Disposition.HANDLED
    assert handled.step is not None and handled.step["to"] == ["b"]
    assert ignored.disposition is Disposition.IGNORED
    assert ignored.step is not None and ignored.step["reason"] == "no active state handles 'skip'"
    assert event_fate(document, "never-sent").stage is Stage.UNKNOWN


def test_the_recorded_disposition_wins_over_handled() -> None:
    forwarded = {"handled": True, "disposition": "forwarded", "forwarded_to": ["c/a@1", "c/b@1"]}

    assert disposition_of(forwarded) is Disposition.FORWARDED
    assert disposition_of({"handled": True}) is Disposition.HANDLED
    assert disposition_of({"handled": False}) is Disposition.IGNORED
    fate = event_fate({"_id": "c", "trace": [{**forwarded, "event_id": "e"}], "processed": ["e"]}, "e")
    assert fate.disposition is Disposition.FORWARDED and fate.forwarded_to == ("c/a@1", "c/b@1")


def test_an_applied_event_without_a_trace_step_has_no_disposition() -> None:
    fate = event_fate({"_id": "c", "trace": [], "processed": ["e"]}, "e")

    assert fate.stage is Stage.APPLIED and fate.disposition is None
