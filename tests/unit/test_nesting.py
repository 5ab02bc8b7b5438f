"""Values nest at most MAX_NESTING levels deep, wherever they enter: a start context, event data, an action's
result. At the limit an execution is stored and read back whole; past it the value is refused by name, so
nothing is stored that a worker could not read again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, App
from harel.backend import Backend, open_backend
from harel.client import send_event, start_execution
from harel.errors import InvalidContext
from harel.ids import MAX_NESTING, check_context, check_json
from harel.worker import Worker, WorkerConfig

DEEP = {
    "id": "deep",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"grow": {"target": "open", "actions": ["grow"]}}}},
}


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"k": value}
    return value


@pytest.fixture
def backend() -> Iterator[Backend]:
    opened = open_backend("mongomock://")
    yield opened
    opened.close()


def deep_app() -> App:
    app = App("deep")
    app.chart(DEEP)

    @app.action("grow")
    def grow(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"tree": {"k": ctx.context["tree"]}})

    return app


def drain(worker: Worker) -> None:
    while worker.process_one():
        pass


@pytest.mark.semantics("sem-context-json")
@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 5000])
def test_a_value_nested_past_the_limit_is_refused_with_its_key_path(levels: int) -> None:
    with pytest.raises(InvalidContext, match=f"nests deeper than {MAX_NESTING} levels") as caught:
        check_context(nested(levels), "start context")
    assert str(caught.value).startswith("start context at 'k.k.k.")
    check_context(nested(MAX_NESTING), "start context")
    check_json([nested(MAX_NESTING - 1)], "event data")
    with pytest.raises(InvalidContext):
        check_json([nested(MAX_NESTING)], "event data")


@pytest.mark.semantics("sem-context-json")
def test_a_context_at_the_limit_is_stored_and_read_back_and_an_action_going_past_it_parks_at_once(
    backend: Backend,
) -> None:
    app = deep_app()
    worker = Worker(backend.store, backend.transport, app, config=WorkerConfig())
    at_limit = {"tree": nested(MAX_NESTING - 1)}  # the context object itself is one level
    with pytest.raises(InvalidContext, match="start context"):
        start_execution(backend.store, backend.transport, app, "deep", context={"tree": nested(MAX_NESTING)})
    start_execution(backend.store, backend.transport, app, "deep", execution_id="d", context=at_limit)
    with pytest.raises(InvalidContext, match="event data"):
        send_event(backend.store, backend.transport, app, "d", "grow", data={"x": nested(MAX_NESTING)})
    drain(worker)
    assert backend.store.load("d").context == at_limit, "stored and read back whole"

    send_event(backend.store, backend.transport, app, "d", "grow", event_id="g-1")
    drain(worker)

    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == ("d", "g-1", 1), "parked at once"
    assert "InvalidContext: action 'grow' returned a context at 'tree.k.k." in parked.error
    assert backend.store.load("d").context == at_limit, "nothing of the refused step was written"
