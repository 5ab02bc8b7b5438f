"""The smoke checker: it passes a real run, and fails — saying why — on runs broken on purpose."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from harel.app import App
from harel.backend import open_backend
from harel.model import DONE_EVENT, TIMER_EVENT, ExecutionStatus
from harel.smoke import FORK, SmokeRun, check, gather, register_smoke, render, run_smoke, smoke_chart
from harel.worker import Worker, WorkerConfig


@pytest.fixture(scope="module")
def good_run() -> Iterator[SmokeRun]:
    backend = open_backend("mongomock://")
    app = App()
    chart_id = register_smoke(app, region_timer=0.05, final_timer=0.05)
    workers = [
        Worker(backend.store, backend.transport, app, config=WorkerConfig(concurrency=2)) for _ in range(2)
    ]
    for w in workers:
        w.start()
    try:
        report = run_smoke(backend.store, backend.transport, app, chart_id=chart_id, timeout=20)
    finally:
        for w in workers:
            w.stop()
    assert report.passed, report.failures
    yield gather(backend.store, report.root_id, 20)


def broken(run: SmokeRun) -> SmokeRun:
    return copy.deepcopy(run)


def lane_id(run: SmokeRun, lane: str) -> str:
    return next(i for i, e in run.executions.items() if e.root_path and e.root_path.endswith(lane))


def test_a_real_run_passes_and_renders_a_timeline(good_run: SmokeRun) -> None:
    report = check(broken(good_run))
    assert report.passed, report.failures
    text = render(report)
    assert "PASS" in text
    for lane in ("root", "alpha", "beta", "gamma"):
        assert f" {lane} " in text
    assert '"passed": true' in report.to_json()


def test_a_timer_firing_early_fails(good_run: SmokeRun) -> None:
    run = broken(good_run)
    beta = lane_id(run, "beta")
    step = next(s for s in run.traces[beta] if s["event"] == TIMER_EVENT and s["handled"])
    step["at"] = step["timer_fire_at"] - 0.5
    report = check(run)
    assert not report.passed
    assert any("beta: a timer fired 0.500s before its fire_at" in f for f in report.failures), report.failures


def test_a_join_before_a_region_ended_fails(good_run: SmokeRun) -> None:
    run = broken(good_run)
    join = next(
        s for s in run.traces[run.root_id] if any(t.get("source") == FORK for t in s.get("transitions", []))
    )
    gamma = lane_id(run, "gamma")
    final = next(s for s in run.traces[gamma] if s.get("status") == ExecutionStatus.COMPLETED.value)
    final["at"] = join["at"] + 1.0
    report = check(run)
    assert not report.passed
    assert any("before gamma reached its final state" in f for f in report.failures), report.failures


def test_a_join_without_the_done_event_fails(good_run: SmokeRun) -> None:
    run = broken(good_run)
    join = next(
        s for s in run.traces[run.root_id] if any(t.get("source") == FORK for t in s.get("transitions", []))
    )
    # a region whose done event the parent handled before the join step (not the one that triggered it)
    for lane in ("alpha", "beta", "gamma"):
        final = next(
            s for s in run.traces[lane_id(run, lane)] if s.get("status") == ExecutionStatus.COMPLETED.value
        )
        done_ids = {e["id"] for e in final["emits"] if e["event"] == DONE_EVENT}
        if join["event_id"] not in done_ids:
            break
    run.traces[run.root_id] = [s for s in run.traces[run.root_id] if s["event_id"] not in done_ids]
    report = check(run)
    assert any(f"before the parent handled the done event of {lane}" in f for f in report.failures), (
        report.failures
    )


def test_an_event_taking_effect_twice_fails(good_run: SmokeRun) -> None:
    run = broken(good_run)
    alpha = lane_id(run, "alpha")
    greeting = next(s for s in run.traces[alpha] if s["event"] == "greeting")
    run.traces[alpha].append({**greeting, "index": greeting["index"] + 100})
    report = check(run)
    assert not report.passed
    assert any("took effect twice" in f for f in report.failures), report.failures


def test_a_child_spawned_twice_fails(good_run: SmokeRun) -> None:
    run = broken(good_run)
    fork = next(s for s in run.traces[run.root_id] if s["spawns"])
    fork["spawns"] = [*fork["spawns"], fork["spawns"][0]]
    report = check(run)
    assert any("spawned more than once" in f for f in report.failures), report.failures


def test_an_unfinished_run_fails_and_says_so(good_run: SmokeRun) -> None:
    run = broken(good_run)
    run.executions[run.root_id] = run.executions[run.root_id].model_copy(
        update={"status": ExecutionStatus.RUNNING, "configuration": ["cooling"]}
    )
    report = check(run)
    assert not report.passed
    assert any("did not complete within" in f and "cooling" in f for f in report.failures)
    assert "FAIL" in render(report)


def test_non_default_timers_get_their_own_chart_id() -> None:
    assert smoke_chart()["id"] == "harel.smoke"
    assert smoke_chart(0.2, 0.3)["id"] == "harel.smoke-200-300"
