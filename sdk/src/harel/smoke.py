"""The built-in smoke workflow: a fork/join with durable timers, and the checker that proves a run.

The chart forks three regions. Each region runs a registered action that greets the next region (a ring:
alpha → beta → gamma → alpha), waits for the greeting from the previous one, then waits on a durable timer
and ends. The join fires when all three ended; a last durable timer runs before completion.

The checker reads the executions and their traces (so workers must record traces, the default) and
verifies: the run completed within the timeout; every timer fired at or after its `fire_at` and exactly
once; the join came after every region's final state; no event took effect twice; every child was
created once and completed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from harel.app import ActionContext, ActionResult, App, Send
from harel.client import start_execution
from harel.model import DONE_EVENT, START_EVENT, TIMER_EVENT, Execution, ExecutionStatus
from harel.store.base import ExecutionStore
from harel.transport.base import Transport

SMOKE_CHART_ID = "harel.smoke"
REGIONS = ("alpha", "beta", "gamma")
FORK = "fork"
DEFAULT_REGION_TIMER = 1.0
DEFAULT_FINAL_TIMER = 1.0
# Clocks of different hosts may differ slightly; ordering checks across executions allow this much.
CLOCK_TOLERANCE = 0.05


def smoke_chart(
    region_timer: float = DEFAULT_REGION_TIMER, final_timer: float = DEFAULT_FINAL_TIMER
) -> dict[str, Any]:
    """The smoke chart as data. Non-default timers give the chart its own id, so both can be registered."""
    default = (region_timer, final_timer) == (DEFAULT_REGION_TIMER, DEFAULT_FINAL_TIMER)
    chart_id = (
        SMOKE_CHART_ID
        if default
        else f"{SMOKE_CHART_ID}-{int(region_timer * 1000)}-{int(final_timer * 1000)}"
    )
    region = {
        "initial": "working",
        "states": {
            "working": {"entry": ["smoke.greet"], "on": {"greeting": "resting"}},
            "resting": {"after": {f"{int(region_timer * 1000)}ms": "finished"}},
            "finished": {"final": True},
        },
    }
    return {
        "id": chart_id,
        "version": 1,
        "description": "harel smoke check: a three-region fork/join with durable timers",
        "initial": FORK,
        "states": {
            FORK: {"parallel": dict.fromkeys(REGIONS, region), "on_done": "cooling"},
            "cooling": {"entry": ["smoke.joined"], "after": {f"{int(final_timer * 1000)}ms": "completed"}},
            "completed": {"final": True},
        },
    }


def greet(ctx: ActionContext) -> ActionResult:
    region = ctx.state.split(".")[1]
    following = REGIONS[(REGIONS.index(region) + 1) % len(REGIONS)]
    return ActionResult(
        context={"greeted": following},
        send=[Send("greeting", to=f"sibling:{following}", data={"from": region})],
    )


def joined(ctx: ActionContext) -> ActionResult:
    return ActionResult(context={"joined_at": ctx.now})


def register_smoke(
    app: App, region_timer: float = DEFAULT_REGION_TIMER, final_timer: float = DEFAULT_FINAL_TIMER
) -> str:
    """Register the smoke chart and its actions; returns the chart id to start."""
    app.registry.actions.setdefault("smoke.greet", greet)
    app.registry.actions.setdefault("smoke.joined", joined)
    return app.chart(smoke_chart(region_timer, final_timer)).id


# --- a run, as read back from the store ---------------------------------------------------------------


@dataclass
class SmokeRun:
    """Everything the checker reads: the executions of one run and their traces, by execution id."""

    root_id: str
    started_at: float
    timeout: float
    executions: dict[str, Execution]
    traces: dict[str, list[dict[str, Any]]]


@dataclass
class SmokeReport:
    passed: bool
    root_id: str
    failures: list[str]
    elapsed: float | None
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)


def gather(store: ExecutionStore, root_id: str, timeout: float) -> SmokeRun:
    """Read one run back; times in the report are relative to the root's creation."""
    root = store.load(root_id)
    started_at = root.created_at if root is not None else 0.0
    executions: dict[str, Execution] = {}
    traces: dict[str, list[dict[str, Any]]] = {}
    if root is not None:
        executions[root_id] = root
        traces[root_id] = store.read_trace(root_id)
        for child_id in _spawned(traces[root_id]):
            child = store.load(child_id)
            if child is not None:
                executions[child_id] = child
            traces[child_id] = store.read_trace(child_id)
    return SmokeRun(root_id, started_at, timeout, executions, traces)


def _spawned(trace: list[dict[str, Any]]) -> list[str]:
    return [child for step in trace for child in step.get("spawns", [])]


def _handled(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [step for step in trace if step.get("handled")]


def check(run: SmokeRun) -> SmokeReport:
    """Every failure the run shows, each in one sentence a person can act on."""
    failures: list[str] = []
    root = run.executions.get(run.root_id)
    root_trace = run.traces.get(run.root_id, [])
    if root is None:
        return SmokeReport(False, run.root_id, [f"execution {run.root_id} was never created"], None)

    finished_at = max((s["at"] for s in root_trace), default=None)
    elapsed = None if finished_at is None else finished_at - run.started_at
    if root.status is not ExecutionStatus.COMPLETED:
        failures.append(
            f"the workflow did not complete within {run.timeout:.0f}s (status {root.status.value}, "
            f"active {', '.join(root.configuration) or 'nothing'}); are workers running on this URL?"
        )
    elif elapsed is not None and elapsed > run.timeout:
        failures.append(f"the workflow completed after {elapsed:.2f}s, over the {run.timeout:.0f}s timeout")

    children = _spawned(root_trace)
    failures += _check_children(run, children)
    failures += _check_timers(run)
    failures += _check_once(run)
    if root.status is ExecutionStatus.COMPLETED:
        failures += _check_join(run, children)
    return SmokeReport(not failures, run.root_id, failures, elapsed, timeline(run))


def _check_children(run: SmokeRun, children: list[str]) -> list[str]:
    failures = []
    if len(children) != len(REGIONS):
        failures.append(f"expected {len(REGIONS)} children from the fork, the trace shows {len(children)}")
    if len(set(children)) != len(children):
        failures.append("a child was spawned more than once")
    for child_id in children:
        child = run.executions.get(child_id)
        if child is None:
            failures.append(f"child {child_id} was never created")
            continue
        starts = [s for s in _handled(run.traces.get(child_id, [])) if s["event"] == START_EVENT]
        if len(starts) != 1:
            failures.append(f"child {child_id} was started {len(starts)} times, expected once")
        if child.status is not ExecutionStatus.COMPLETED:
            failures.append(f"child {child_id} did not complete (status {child.status.value})")
    return failures


def _check_timers(run: SmokeRun) -> list[str]:
    failures = []
    for exe_id, trace in run.traces.items():
        fired = [s for s in _handled(trace) if s["event"] == TIMER_EVENT]
        for step in fired:
            early = float(step["timer_fire_at"]) - step["at"]
            if early > 0:
                failures.append(f"{_lane(run, exe_id)}: a timer fired {early:.3f}s before its fire_at")
        exe = run.executions.get(exe_id)
        if exe is not None and exe.status is ExecutionStatus.COMPLETED and len(fired) != 1:
            failures.append(
                f"{_lane(run, exe_id)}: its durable timer took effect {len(fired)} times, expected once"
            )
    return failures


def _check_once(run: SmokeRun) -> list[str]:
    failures = []
    for exe_id, trace in run.traces.items():
        seen: set[str] = set()
        for step in _handled(trace):
            if step["event_id"] in seen:
                failures.append(f"{exe_id}: event {step['event_id']} ({step['event']}) took effect twice")
            seen.add(step["event_id"])
        if exe_id != run.root_id:
            greetings = [s for s in _handled(trace) if s["event"] == "greeting"]
            if len(greetings) > 1:
                failures.append(f"{exe_id}: received {len(greetings)} greetings, expected one")
    return failures


def _check_join(run: SmokeRun, children: list[str]) -> list[str]:
    failures = []
    root_trace = _handled(run.traces[run.root_id])
    joins = [s for s in root_trace if any(t.get("source") == FORK for t in s.get("transitions", []))]
    if len(joins) != 1:
        return [f"the join fired {len(joins)} times, expected once"]
    join = joins[0]
    done_from = {
        s.get("event_id"): s for s in root_trace if s["event"] == DONE_EVENT and s["index"] <= join["index"]
    }
    for child_id in children:
        final = next(
            (
                s
                for s in _handled(run.traces.get(child_id, []))
                if s.get("status") == ExecutionStatus.COMPLETED.value
            ),
            None,
        )
        if final is None:
            failures.append(f"the join fired but {_lane(run, child_id)} never reached its final state")
            continue
        if final["at"] > join["at"] + CLOCK_TOLERANCE:
            failures.append(
                f"the join fired at +{join['at'] - run.started_at:.3f}s, before {_lane(run, child_id)} "
                f"reached its final state at +{final['at'] - run.started_at:.3f}s"
            )
        done_ids = {e["id"] for e in final.get("emits", []) if e.get("event") == DONE_EVENT}
        if not done_ids & set(done_from):
            failures.append(
                f"the join fired before the parent handled the done event of {_lane(run, child_id)}"
            )
    return failures


def _lane(run: SmokeRun, exe_id: str) -> str:
    exe = run.executions.get(exe_id)
    if exe is None or exe.root_path is None:
        return "root"
    return exe.root_path.split(".")[-1]


def timeline(run: SmokeRun) -> list[dict[str, Any]]:
    rows = []
    for exe_id, trace in run.traces.items():
        lane = _lane(run, exe_id)
        for step in _handled(trace):
            rows.append(
                {
                    "t": round(step["at"] - run.started_at, 3),
                    "lane": lane,
                    "event": step["event"],
                    "from": step.get("from", []),
                    "to": step.get("to", []),
                }
            )
    return sorted(rows, key=lambda r: (r["t"], r["lane"]))


def render(report: SmokeReport) -> str:
    lines = [f"smoke run {report.root_id}", ""]
    for row in report.timeline:
        before = ",".join(_short(p) for p in row["from"]) or "-"
        after = ",".join(_short(p) for p in row["to"]) or "-"
        lines.append(f"  +{row['t']:7.3f}s  {row['lane']:<6} {row['event']:<12} {before} → {after}")
    lines.append("")
    if report.passed:
        lines.append(f"PASS  fork/join with durable timers completed in {report.elapsed:.2f}s")
        lines.append(
            "      every timer fired once and not early; the join followed every region; "
            "no event took effect twice; every child created once"
        )
    else:
        lines.append("FAIL")
        lines += [f"  - {failure}" for failure in report.failures]
    return "\n".join(lines)


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def run_smoke(
    store: ExecutionStore,
    transport: Transport,
    app: App,
    *,
    chart_id: str = SMOKE_CHART_ID,
    timeout: float = 60.0,
    poll: float = 0.1,
    on_progress: Callable[[Execution, float], None] | None = None,
) -> SmokeReport:
    """Start one smoke execution, wait for it to finish (or the timeout), and check it. `on_progress`
    hears the root execution and the seconds elapsed whenever its version moves."""
    root, _ = start_execution(store, transport, app, chart_id, execution_id=f"smoke-{uuid.uuid4().hex[:12]}")
    started = time.time()
    seen = -1
    while time.time() < started + timeout:
        current = store.load(root.id)
        if current is not None and current.version != seen:
            seen = current.version
            if on_progress is not None:
                on_progress(current, time.time() - started)
        if current is not None and current.status is not ExecutionStatus.RUNNING:
            break
        time.sleep(poll)
    return check(gather(store, root.id, timeout))
