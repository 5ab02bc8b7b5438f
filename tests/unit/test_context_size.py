"""An execution's size, on the mongomock backend: the warning past 256 KiB of state (one log line, the
metrics), the refusal past 8 MiB (ContextTooLarge, the execution parked, nothing lost), and a fork's
arithmetic (a copy of the context per region: the start-up warning, the refusal that explains it)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from harel import ContextTooLarge, ExecutionTooLarge
from harel.app import ActionContext, ActionResult, App
from harel.backend import Backend, open_backend
from harel.chart import load_chart
from harel.client import start_execution
from harel.executions.commits import STATE_LIMIT_BYTES, STATE_WARN_BYTES, commit_parts, plan_commit
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, SAFE_COMMIT_BYTES
from harel.executions.records import StepRecord
from harel.fanout import FORK_VERSION, ROOT_ID_SUFFIX, fork_commit_bytes, forks, oversized_forks
from harel.interpreter import step
from harel.model import Event, Execution
from harel.worker import Worker
from tests.unit.test_worker import Clock, Deployment, deployment, pump, send

KIB = 1024
LARGE_LOG = "execution state is large"
FORK_LOG = "a fork copies the context"

GROW = {
    "id": "grow",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"add": {"actions": ["add"]}, "fork": "split"}}, "split": {"final": True}},
}


def fan(regions: int) -> dict[str, Any]:
    """A chart whose `go` enters a parallel state of `regions` regions."""
    region = {
        "initial": "working",
        "states": {"working": {"on": {"finish": "finished"}}, "finished": {"final": True}},
    }
    return {
        "id": f"fan{regions}",
        "version": 1,
        "initial": "idle",
        "states": {
            "idle": {"on": {"go": "split"}},
            "split": {"parallel": {f"r{n:03d}": region for n in range(regions)}, "on_done": "done"},
            "done": {"final": True},
        },
    }


def make_app(*charts: dict[str, Any]) -> App:
    app = App("sizes")
    app.chart(GROW)
    for chart in charts:
        app.chart(chart)

    @app.action("add")
    def add(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={ctx.event.id: "x" * int(ctx.event.data["kib"] * KIB)})

    return app


@pytest.fixture
def backend() -> Deployment:
    return deployment(Clock())


def started(
    backend: Deployment, app: App, execution_id: str, context_kib: float, chart: str = "grow"
) -> None:
    context = {"blob": "x" * int(context_kib * KIB)}
    start_execution(backend.store, backend.transport, app, chart, execution_id=execution_id, context=context)


def oversized(worker: Worker) -> float:
    return worker.metrics.registry.get_sample_value("harel_oversized_states_total") or 0.0


def observed(worker: Worker) -> float:
    return worker.metrics.registry.get_sample_value("harel_execution_state_bytes_count") or 0.0


def warnings_of(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    return [r.__dict__ for r in caplog.records if r.getMessage().startswith(message)]


# --- the warning -------------------------------------------------------------------------------------------


@pytest.mark.semantics("sem-context-size")
def test_a_commit_that_takes_the_state_past_256_kib_warns_once_and_counts_every_such_commit(
    backend: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    w = backend.worker(app)
    started(backend, app, "g", 200)
    with caplog.at_level(logging.WARNING, logger="harel.worker"):
        pump(w)
        assert (oversized(w), observed(w), warnings_of(caplog, LARGE_LOG)) == (0, 1, []), "200 KiB: quiet"
        send(backend, "g", "a1", "add", kib=100)
        pump(w)
        [warned] = warnings_of(caplog, LARGE_LOG)
        send(backend, "g", "a2", "add", kib=1)
        pump(w)
    assert warned["levelno"] == logging.WARNING
    assert warned["execution_id"] == "g"
    assert STATE_WARN_BYTES < warned["state_bytes"] < STATE_WARN_BYTES + 60 * KIB
    assert (warned["warn_bytes"], warned["limit_bytes"]) == (STATE_WARN_BYTES, STATE_LIMIT_BYTES)
    assert len(warnings_of(caplog, LARGE_LOG)) == 1, "a state already past the threshold warns no more"
    assert oversized(w) == 2, "both commits past the threshold are counted"
    assert observed(w) == 3
    below = w.metrics.registry.get_sample_value("harel_execution_state_bytes_bucket", {"le": "262144.0"})
    assert below == 1, "the start's commit, under 256 KiB"


def test_an_execution_created_past_256_kib_warns_at_its_first_step(
    backend: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    w = backend.worker(app)
    started(backend, app, "big", 300)
    with caplog.at_level(logging.WARNING, logger="harel.worker"):
        pump(w)
    [warned] = warnings_of(caplog, LARGE_LOG)
    assert warned["execution_id"] == "big" and warned["state_bytes"] > 300 * KIB
    assert oversized(w) == 1


# --- the refusal -------------------------------------------------------------------------------------------


@pytest.mark.semantics("sem-context-size")
def test_a_step_that_would_take_the_state_past_8_mib_is_refused_and_parks_the_execution_losing_nothing(
    backend: Deployment,
) -> None:
    app = make_app()
    w = backend.worker(app)
    started(backend, app, "g", 7.5 * KIB)
    pump(w)
    before = backend.store.load("g")
    send(backend, "g", "small", "add", kib=1)
    send(backend, "g", "huge", "add", kib=1024)
    send(backend, "g", "later", "add", kib=1)
    pump(w)
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == ("g", "huge", 1), "parked at once"
    assert parked.error.startswith("ContextTooLarge: execution 'g': its state")
    assert f"{STATE_LIMIT_BYTES}-byte limit" in parked.error and "store a reference" in parked.error
    assert parked.waiting == 1, "the event behind it waits, unapplied"
    after = backend.store.load("g")
    assert after.version == before.version + 1, "the step before it was committed alone"
    assert set(after.context) == {"blob", "small"}, "nothing of the refused step was written"


def test_the_refusal_names_the_execution_the_size_and_the_limit_and_writes_nothing(
    backend: Deployment,
) -> None:
    app = make_app()
    exe = Execution(
        id="g", definition_id="grow", definition_version=1, context={"blob": "x" * STATE_LIMIT_BYTES}
    )
    with pytest.raises(ContextTooLarge) as refused:
        backend.store.commit(exe)
    assert isinstance(refused.value, ExecutionTooLarge), "parked as any execution too large is"
    assert refused.value.execution_id == "g"
    assert STATE_LIMIT_BYTES < refused.value.size < STATE_LIMIT_BYTES + KIB
    assert refused.value.limit == STATE_LIMIT_BYTES
    with pytest.raises(ContextTooLarge):
        started(backend, app, "s", 8 * KIB + 1)
    assert backend.store.list_executions().items == [], "neither was created"
    exe.context["blob"] = "x" * (STATE_LIMIT_BYTES - KIB)
    backend.store.commit(exe)
    assert backend.store.load("g") is not None, "just under the limit commits"


# --- a fork: a copy of the context per region ---------------------------------------------------------------


def a_fork_commit(chart: dict[str, Any], context_bytes: int) -> int:
    """The commit a worker makes entering the chart's parallel state, with its trace: its size, refused
    or not."""
    loaded = load_chart(chart)
    exe = Execution(
        id=loaded.id + ROOT_ID_SUFFIX,
        definition_id=loaded.id,
        definition_version=1,
        version=FORK_VERSION,
        configuration=["idle"],
        context={"blob": "x" * context_bytes},
    )
    stepped = step(loaded, exe, Event(id="go-1", name="go"), 1.0)
    record = StepRecord("go-1", stepped.emits, stepped.spawns, stepped.trace)
    parts = commit_parts(stepped.execution, [record], expected=FORK_VERSION, timers_changed=False)
    try:
        return plan_commit(parts, DEFAULT_TRACE_MAX, DEFAULT_DEDUPE_WINDOW).size
    except ExecutionTooLarge as refused:
        return refused.size


@pytest.mark.semantics("sem-region-fork-size")
@pytest.mark.parametrize(
    ("regions", "context_bytes"), [(2, 0), (50, 100_000), (200, 100_000), (14, 1_000_000)]
)
def test_a_forks_commit_grows_as_its_regions_times_the_context_and_the_regions_ids(
    regions: int, context_bytes: int
) -> None:
    chart = fan(regions)
    estimate = fork_commit_bytes(load_chart(chart), "split", context_bytes)
    real = a_fork_commit(chart, context_bytes)
    assert abs(real - estimate) < 1 * KIB, "the estimate is the worker's commit but for the trace's details"
    per_region = (real - a_fork_commit(chart, 0)) / context_bytes if context_bytes else 0
    assert per_region == 0 or round(per_region) == regions + 1, "a copy per region and the parent's own"


@pytest.mark.semantics("sem-region-fork-size")
def test_the_documented_fan_out_limits_hold() -> None:
    def budget(regions: int) -> int:
        [fork] = forks(load_chart(fan(regions)))
        return fork.context_budget

    assert budget(145) > 100_000 > budget(147), "about 145 regions at 100 KB"
    assert budget(14) > 1_000_000 > budget(15), "14 regions at 1 MB"
    assert budget(580) > 0 and budget(600) == 0, "under 600 with an empty context: the ids alone"
    assert budget(58) > STATE_WARN_BYTES > budget(59), "warned at start-up from 59 regions"


@pytest.mark.semantics("sem-region-fork-size")
def test_a_fork_at_its_context_budget_commits_and_past_it_is_refused_with_the_arithmetic(
    backend: Deployment,
) -> None:
    chart = fan(70)
    [fork] = forks(load_chart(chart))
    assert a_fork_commit(chart, fork.context_budget - KIB) < SAFE_COMMIT_BYTES
    assert a_fork_commit(chart, fork.context_budget + KIB) >= SAFE_COMMIT_BYTES
    app = make_app(chart)
    w = backend.worker(app)
    wide = "fan70" + ROOT_ID_SUFFIX  # the id the budget is reckoned with; the fork is at a lower version
    started(backend, app, wide, (fork.context_budget + 4 * KIB) / KIB, chart="fan70")
    pump(w)
    send(backend, wide, "go", "go")
    pump(w)
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == (wide, "go", 1), "parked at once"
    assert parked.error.startswith(f"ExecutionTooLarge: execution {wide!r}")
    assert "the fork's 70 spawns" in parked.error and "regions x (context + regions' ids)" in parked.error
    assert backend.store.load(wide).configuration == ["idle"], "nothing of the fork was written"


def test_a_worker_warns_at_start_of_each_fork_refused_below_the_state_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    narrow, wide = fan(10), fan(70)
    app = make_app(narrow, wide)
    assert [(f.chart, f.state, f.regions) for f in oversized_forks(app.charts)] == [("fan70@1", "split", 70)]
    live: Backend = open_backend("mongomock://")
    try:
        worker = Worker(live.store, live.transport, app)
        with caplog.at_level(logging.WARNING, logger="harel.worker"):
            worker.start()
            worker.stop(drain_seconds=0.0)
    finally:
        live.close()
    [warned] = warnings_of(caplog, FORK_LOG)
    assert (warned["chart"], warned["state"], warned["regions"]) == ("fan70@1", "split", 70)
    assert 0 < warned["context_budget"] < STATE_WARN_BYTES
    assert warned["limit_bytes"] == SAFE_COMMIT_BYTES
    assert "grows" in warned["msg"], "the context's growth is the caveat"


def test_a_fork_nested_in_a_region_is_sized_from_the_regions_execution() -> None:
    nested = fan(3)
    nested["states"] = {
        "outer": {"parallel": {"a": {"initial": "idle", "states": nested["states"]}}, "on_done": "over"},
        "over": {"final": True},
    }
    nested["initial"] = "outer"
    chart = load_chart(nested)
    sized = {fork.state: fork for fork in forks(chart)}
    assert set(sized) == {"outer", "outer.a.split"}
    assert (sized["outer"].regions, sized["outer.a.split"].regions) == (1, 3)
    flat = fork_commit_bytes(load_chart(fan(3)), "split", 0)
    # run by the region's child, whose id (and so each grandchild's) is longer than a root's
    assert fork_commit_bytes(chart, "outer.a.split", 0) > flat
