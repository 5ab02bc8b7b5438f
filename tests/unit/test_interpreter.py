"""The pure step, one rule at a time: entering and exiting, guards, timers, fork/join, sends, cancel.

Each test names the statements of docs/semantics.md it backs (`@pytest.mark.semantics`)."""

from __future__ import annotations

from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, Registry, Send
from harel.chart import Chart, load_chart
from harel.errors import InvalidSend, UnknownAction
from harel.interpreter import Step, step
from harel.model import (
    CANCEL_EVENT,
    DONE_EVENT,
    FAIL_EVENT,
    START_EVENT,
    TIMER_EVENT,
    ChildRef,
    ChildSeed,
    Event,
    Execution,
    ExecutionStatus,
    SpawnEntry,
    TimerOp,
)

TRACE_KEYS = {
    "event",
    "event_id",
    "at",
    "from",
    "to",
    "handled",
    "disposition",
    "forwarded_to",
    "reason",
    "transitions",
    "actions",
    "internal",
    "timers",
    "emits",
    "spawns",
    "status",
}

NESTED = load_chart(
    {
        "id": "nested",
        "version": 1,
        "initial": "a",
        "states": {
            "a": {
                "entry": ["enter_a"],
                "exit": ["exit_a"],
                "initial": "a1",
                "on": {"jump": "b", "poke": {"actions": ["poked"]}},
                "states": {
                    "a1": {
                        "entry": ["enter_a1"],
                        "exit": ["exit_a1"],
                        "after": {"10s": "a2"},
                        "on": {"next": {"target": "a2", "actions": ["move"]}},
                    },
                    "a2": {
                        "entry": ["enter_a2"],
                        "exit": ["exit_a2"],
                        "on": {
                            "jump": {"target": "a1", "guard": "allow"},
                            "stay": {"target": "a1", "guard": "allow"},
                        },
                    },
                },
            },
            "b": {
                "entry": ["enter_b"],
                "initial": "b1",
                "after": {"1m": "a"},
                "states": {"b1": {"on": {"finish": "b_done"}}, "b_done": {"final": True}},
                "on_done": {"target": "c", "actions": ["joined"]},
            },
            "c": {"final": True},
        },
    }
)

TIMED = load_chart(
    {
        "id": "timed",
        "version": 1,
        "initial": "wait",
        "states": {
            "wait": {
                "after": {"5s": {"target": "timeout", "guard": "may_time_out"}},
                "on": {"again": {"target": "wait", "reenter": True}, "leave": "elsewhere"},
            },
            "elsewhere": {"on": {"back": "wait"}},
            "timeout": {"final": True},
        },
    }
)

FORK = load_chart(
    {
        "id": "fork",
        "version": 1,
        "initial": "idle",
        "states": {
            "idle": {"on": {"go": "split"}},
            "split": {
                "entry": ["prepare"],
                "exit": ["leave_split"],
                "parallel": {
                    "left": {
                        "initial": "working",
                        "states": {
                            "working": {"entry": ["greet"], "on": {"finish": "done"}},
                            "done": {"final": True},
                        },
                    },
                    "right": {
                        "initial": "waiting",
                        "states": {
                            "waiting": {"after": {"3s": "done"}, "on": {"hello": {"actions": ["ack"]}}},
                            "done": {"final": True, "status": "failed"},
                        },
                    },
                },
                "on_done": {"target": "joined", "actions": ["after_join"]},
                "on": {"abort": "aborted"},
            },
            "joined": {"final": True},
            "aborted": {"final": True, "status": "failed"},
        },
    }
)


def make_registry(calls: list[tuple[str, str]] | None = None) -> Registry:
    """Every action the charts above name; each records (name, state) and some return results."""
    registry = Registry()
    log = calls if calls is not None else []

    def recorder(name: str, result: ActionResult | None = None) -> None:
        def action(ctx: ActionContext) -> ActionResult | None:
            log.append((name, ctx.state))
            return result

        registry.actions[name] = action

    for name in [
        "enter_a",
        "exit_a",
        "enter_a1",
        "exit_a1",
        "enter_a2",
        "exit_a2",
        "move",
        "poked",
        "enter_b",
        "joined",
        "leave_split",
        "after_join",
        "ack",
    ]:
        recorder(name)
    recorder("prepare", ActionResult(context={"prepared": True}))
    recorder("greet", ActionResult(send=[Send("hello", to="sibling:right", data={"from": "left"})]))
    registry.guards["allow"] = lambda ctx: bool(ctx.context.get("allow"))
    registry.guards["may_time_out"] = lambda ctx: ctx.context.get("may_time_out", True)
    return registry


def new_execution(chart: Chart, exe_id: str = "e1", **fields: Any) -> Execution:
    return Execution(id=exe_id, definition_id=chart.id, definition_version=chart.version, **fields)


def event(name: str, event_id: str | None = None, **data: Any) -> Event:
    return Event(id=event_id or f"ev-{name}", name=name, data=data)


def committed(result: Step) -> Execution:
    """What the store holds after committing the step: the same execution, one version on."""
    exe = result.execution.model_copy(deep=True)
    exe.version += 1
    return exe


def run(
    chart: Chart, exe: Execution, name: str, now: float, registry: Registry | None = None, **data: Any
) -> Step:
    return step(chart, exe, event(name, **data), now, registry=registry or make_registry())


def started(chart: Chart, now: float = 0.0, registry: Registry | None = None, **fields: Any) -> Execution:
    return committed(run(chart, new_execution(chart, **fields), START_EVENT, now, registry))


def timer(exe: Execution, path: str, now: float, registry: Registry | None = None) -> Step:
    fire_at = exe.timers.get(path, 0.0)
    return step(
        exe_chart(exe),
        exe,
        event(TIMER_EVENT, f"t-{path}@{fire_at}", path=path, fire_at=fire_at),
        now,
        registry=registry or make_registry(),
    )


def exe_chart(exe: Execution) -> Chart:
    return {chart.id: chart for chart in (NESTED, TIMED, FORK)}[exe.definition_id]


# --- start, entry and exit ------------------------------------------------------------------------------


@pytest.mark.semantics("sem-start", "sem-timers-armed", "sem-trace")
def test_start_enters_the_initial_configuration_outer_to_inner_and_arms_timers() -> None:
    calls: list[tuple[str, str]] = []
    exe = new_execution(NESTED)
    result = step(NESTED, exe, event(START_EVENT, "s1"), 100.0, registry=make_registry(calls))
    assert result.handled
    assert result.execution.configuration == ["a.a1"]
    assert calls == [("enter_a", "a"), ("enter_a1", "a.a1")]
    assert result.timers == [TimerOp("schedule", "a.a1", 110.0)]
    assert result.execution.timers == {"a.a1": 110.0}
    assert result.execution.version == 0
    assert result.execution.updated_at == 100.0
    assert (result.emits, result.spawns) == ([], [])
    assert result.trace == {
        "event": START_EVENT,
        "event_id": "s1",
        "at": 100.0,
        "from": [],
        "to": ["a.a1"],
        "handled": True,
        "disposition": "handled",
        "forwarded_to": [],
        "reason": None,
        "transitions": [{"source": None, "target": "a", "via": "start"}],
        "actions": ["enter_a", "enter_a1"],
        "internal": [],
        "timers": [{"op": "schedule", "path": "a.a1", "fire_at": 110.0}],
        "emits": [],
        "spawns": [],
        "status": "running",
    }


@pytest.mark.semantics("sem-start")
def test_a_second_start_and_events_before_the_start_are_ignored() -> None:
    exe = started(NESTED)
    again = run(NESTED, exe, START_EVENT, 1.0)
    assert not again.handled
    assert again.trace["reason"] == "execution already started"
    assert again.execution.configuration == exe.configuration
    assert again.timers == []
    early = run(NESTED, new_execution(NESTED), "jump", 1.0)
    assert not early.handled
    assert early.trace["reason"] == "execution has not started"
    assert early.execution.configuration == []


@pytest.mark.semantics("sem-order-exit-actions-entry", "sem-domain", "sem-timers-armed")
def test_a_transition_exits_inner_to_outer_runs_its_actions_then_enters_outer_to_inner() -> None:
    calls: list[tuple[str, str]] = []
    exe = started(NESTED)
    result = run(NESTED, exe, "jump", 5.0, make_registry(calls))
    assert calls == [("exit_a1", "a.a1"), ("exit_a", "a"), ("enter_b", "b")]
    assert result.execution.configuration == ["b.b1"]
    assert result.timers == [TimerOp("cancel", "a.a1"), TimerOp("schedule", "b", 65.0)]
    assert result.execution.timers == {"b": 65.0}
    assert result.trace["transitions"] == [{"source": "a", "target": "b", "via": "on:jump"}]

    calls.clear()
    moved = run(NESTED, exe, "next", 5.0, make_registry(calls))
    assert calls == [("exit_a1", "a.a1"), ("move", "a.a1"), ("enter_a2", "a.a2")]
    assert moved.execution.configuration == ["a.a2"]


@pytest.mark.semantics("sem-select-innermost", "sem-domain", "sem-ignored")
def test_the_innermost_enabled_transition_wins_and_a_false_guard_falls_through_to_outer_states() -> None:
    in_a2 = committed(run(NESTED, started(NESTED), "next", 1.0))
    allowed = in_a2.model_copy(update={"context": {"allow": True}})
    inner = run(NESTED, allowed, "jump", 2.0)
    assert inner.trace["transitions"] == [{"source": "a.a2", "target": "a.a1", "via": "on:jump"}]
    assert inner.trace["actions"] == ["exit_a2", "enter_a1"]  # `a` encloses both ends: not exited
    assert inner.execution.configuration == ["a.a1"]

    outer = run(NESTED, in_a2, "jump", 2.0)
    assert outer.trace["transitions"] == [{"source": "a", "target": "b", "via": "on:jump"}]
    assert outer.execution.configuration == ["b.b1"]

    refused = run(NESTED, in_a2, "stay", 2.0)
    assert not refused.handled
    assert (
        refused.trace["reason"] == "no enabled transition for 'stay': guard 'allow' on 'a.a2' returned false"
    )
    assert refused.execution.configuration == ["a.a2"]


@pytest.mark.semantics("sem-guards-see")
def test_guards_see_the_source_state_the_event_and_the_context() -> None:
    seen: list[ActionContext] = []
    registry = make_registry()

    def allow(ctx: ActionContext) -> bool:
        seen.append(ctx)
        return True

    registry.guards["allow"] = allow
    in_a2 = committed(run(NESTED, started(NESTED), "next", 1.0))
    in_a2 = in_a2.model_copy(update={"context": {"total": 3}})
    step(NESTED, in_a2, event("jump", "j1", why="test"), 7.0, registry=registry)
    [ctx] = seen
    assert (ctx.execution_id, ctx.state, ctx.now) == ("e1", "a.a2", 7.0)
    assert ctx.event == event("jump", "j1", why="test")
    assert dict(ctx.context) == {"total": 3}


@pytest.mark.semantics("sem-internal-transition")
def test_an_internal_transition_runs_its_actions_only() -> None:
    exe = started(NESTED)
    result = run(NESTED, exe, "poke", 3.0)
    assert result.handled
    assert result.trace["actions"] == ["poked"]
    assert result.trace["transitions"] == [{"source": "a", "target": None, "via": "on:poke"}]
    assert result.timers == []
    assert result.execution.configuration == ["a.a1"]
    assert result.execution.timers == exe.timers


@pytest.mark.semantics("sem-final-nested")
def test_a_compound_state_with_a_final_child_fires_its_on_done() -> None:
    in_b = committed(run(NESTED, started(NESTED), "jump", 1.0))
    result = run(NESTED, in_b, "finish", 2.0)
    assert result.trace["transitions"] == [
        {"source": "b.b1", "target": "b.b_done", "via": "on:finish"},
        {"source": "b", "target": "c", "via": "on_done"},
    ]
    assert result.trace["actions"] == ["joined"]
    assert result.timers == [TimerOp("cancel", "b")]
    assert result.execution.configuration == ["c"]
    assert result.execution.status is ExecutionStatus.COMPLETED
    assert result.execution.timers == {}


@pytest.mark.semantics("sem-final-top")
def test_a_failed_final_state_fails_the_execution() -> None:
    in_split = committed(run(FORK, started(FORK), "go", 1.0))
    result = run(FORK, in_split, "abort", 2.0)
    assert result.execution.status is ExecutionStatus.FAILED
    assert result.trace["status"] == "failed"
    assert result.execution.configuration == ["aborted"]


# --- purity ---------------------------------------------------------------------------------------------


@pytest.mark.semantics("sem-step-pure")
def test_the_same_inputs_give_an_equal_step_and_the_input_is_not_touched() -> None:
    exe = started(FORK).model_copy(update={"context": {"items": {"nested": [1, 2]}}})
    before = exe.model_dump()
    first = step(FORK, exe, event("go"), 4.0, registry=make_registry())
    second = step(FORK, exe, event("go"), 4.0, registry=make_registry())
    assert first == second
    assert first.spawns
    assert exe.model_dump() == before
    # copy on write: the new context is a new object; the values the step did not change are shared
    assert first.execution.context == {"items": {"nested": [1, 2]}, "prepared": True}
    assert first.execution.context is not exe.context
    assert first.execution.context["items"] is exe.context["items"]
    assert first.execution.timers is exe.timers  # no timer changed
    assert first.execution.children is not exe.children


@pytest.mark.semantics("sem-ignored", "sem-trace")
def test_an_unknown_event_is_ignored_traced_and_changes_nothing_else() -> None:
    exe = started(NESTED)
    result = run(NESTED, exe, "nobody-listens", 9.0)
    assert not result.handled
    assert result.trace["reason"] == "no active state handles 'nobody-listens'"
    assert (result.disposition, result.trace["disposition"]) == ("ignored", "ignored")
    assert result.trace["from"] == result.trace["to"] == ["a.a1"]
    assert result.execution == exe.model_copy(update={"updated_at": 9.0})
    assert (result.emits, result.spawns, result.timers) == ([], [], [])
    assert set(result.trace) == TRACE_KEYS


@pytest.mark.semantics("sem-versions-pinned")
def test_the_chart_must_be_the_one_the_execution_pinned() -> None:
    with pytest.raises(ValueError, match="runs chart 'nested' version 1, not 'timed' version 1"):
        step(TIMED, new_execution(NESTED), event(START_EVENT), 0.0)


# --- timers ---------------------------------------------------------------------------------------------


@pytest.mark.semantics("sem-timers-armed")
def test_a_due_timer_takes_its_transition_and_disarms() -> None:
    exe = started(TIMED, now=10.0)
    assert exe.timers == {"wait": 15.0}
    result = timer(exe, "wait", 15.0)
    assert result.handled
    assert result.timers == [TimerOp("cancel", "wait")]
    assert result.execution.timers == {}
    assert result.execution.configuration == ["timeout"]
    assert result.execution.status is ExecutionStatus.COMPLETED
    assert result.trace["timer_fire_at"] == 15.0
    assert set(result.trace) == TRACE_KEYS | {"timer_fire_at"}


@pytest.mark.semantics("sem-timers-rearm", "sem-timers-stale")
def test_reentering_rearms_and_the_older_arming_is_stale() -> None:
    exe = started(TIMED, now=0.0)
    rearmed = run(TIMED, exe, "again", 2.0)
    assert rearmed.timers == [TimerOp("cancel", "wait"), TimerOp("schedule", "wait", 7.0)]
    exe = committed(rearmed)
    assert exe.timers == {"wait": 7.0}
    stale = step(
        TIMED, exe, event(TIMER_EVENT, "old", path="wait", fire_at=5.0), 5.0, registry=make_registry()
    )
    assert not stale.handled
    assert stale.trace["reason"] == "stale timer: state 'wait' is armed for 7.0, not 5.0"
    assert stale.execution.timers == {"wait": 7.0}
    assert stale.timers == []
    assert stale.trace["timer_fire_at"] == 5.0
    assert timer(exe, "wait", 7.0).execution.configuration == ["timeout"]


@pytest.mark.semantics("sem-timers-armed", "sem-timers-stale")
def test_leaving_a_state_cancels_its_timer_and_a_late_timer_event_is_ignored() -> None:
    exe = started(TIMED, now=0.0)
    left = run(TIMED, exe, "leave", 1.0)
    assert left.timers == [TimerOp("cancel", "wait")]
    assert left.execution.timers == {}
    late = step(
        TIMED,
        committed(left),
        event(TIMER_EVENT, "t", path="wait", fire_at=5.0),
        5.0,
        registry=make_registry(),
    )
    assert not late.handled
    assert late.trace["reason"] == "stale timer: state 'wait' is not active"
    back = run(TIMED, committed(left), "back", 8.0)
    assert back.timers == [TimerOp("schedule", "wait", 13.0)]


@pytest.mark.semantics("sem-timers-guarded", "sem-diff-guarded-after")
def test_a_timer_whose_guard_refuses_is_spent() -> None:
    exe = started(TIMED, now=0.0).model_copy(update={"context": {"may_time_out": False}})
    result = timer(exe, "wait", 5.0)
    assert not result.handled
    assert result.trace["reason"] == "guard 'may_time_out' on 'wait' returned false; the timer is spent"
    assert result.timers == [TimerOp("cancel", "wait")]
    assert result.execution.timers == {}
    assert result.execution.configuration == ["wait"]


@pytest.mark.semantics("sem-timers-ancestor")
def test_the_timer_of_an_active_ancestor_fires_from_a_descendant() -> None:
    in_b = committed(run(NESTED, started(NESTED), "jump", 1.0))
    assert in_b.timers == {"b": 61.0}
    result = timer(in_b, "b", 61.0)
    assert result.trace["transitions"] == [{"source": "b", "target": "a", "via": "after"}]
    assert result.execution.configuration == ["a.a1"]
    assert result.execution.timers == {"a.a1": 71.0}


# --- fork and join --------------------------------------------------------------------------------------


def in_split(version: int = 4) -> tuple[Execution, Step]:
    exe = started(FORK).model_copy(update={"version": version, "id": "root"})
    forked = run(FORK, exe, "go", 10.0)
    return committed(forked), forked


def child_of(parent: Execution, spawn: tuple[str, str, dict[str, Any]], now: float = 11.0) -> Execution:
    child_id, root_path, seed = spawn
    entry = SpawnEntry(seq=1, parent_id=parent.id, child_id=child_id, root_path=root_path, context=seed)
    return ChildSeed.model_validate(seed).to_execution(entry, now)


@pytest.mark.semantics("sem-region-children", "sem-ids-deterministic")
def test_entering_a_parallel_state_forks_one_child_per_region_with_deterministic_ids() -> None:
    parent, forked = in_split(version=4)
    siblings = {"left": "root/split.left@4", "right": "root/split.right@4"}
    seed = {
        "definition_id": "fork",
        "definition_version": 1,
        "context": {"prepared": True},
        "siblings": siblings,
    }
    assert forked.spawns == [
        ("root/split.left@4", "split.left", seed),
        ("root/split.right@4", "split.right", seed),
    ]
    assert forked.execution.children == {
        "root/split.left@4": ChildRef(root_path="split.left", fork="split"),
        "root/split.right@4": ChildRef(root_path="split.right", fork="split"),
    }
    assert forked.execution.configuration == ["split"]
    assert forked.trace["spawns"] == ["root/split.left@4", "root/split.right@4"]
    assert parent.configuration == ["split"]


@pytest.mark.semantics("sem-region-addressing", "sem-ids-deterministic")
def test_a_child_starts_in_its_region_and_sends_to_a_sibling() -> None:
    parent, forked = in_split()
    left = child_of(parent, forked.spawns[0])
    assert (left.parent_id, left.root_path, left.context) == ("root", "split.left", {"prepared": True})
    result = run(FORK, left, START_EVENT, 12.0)
    assert result.execution.configuration == ["split.left.working"]
    assert result.trace["transitions"] == [{"source": None, "target": "split.left.working", "via": "start"}]
    [(target, hello)] = result.emits
    assert target == "root/split.right@4"
    assert hello == Event(
        id="root/split.left@4@0#0",
        name="hello",
        data={"from": "left"},
        source_id="root/split.left@4",
        created_at=12.0,
    )
    assert result.trace["emits"] == [
        {"target": "root/split.right@4", "event": "hello", "id": "root/split.left@4@0#0"}
    ]


@pytest.mark.semantics("sem-final-top", "sem-region-results", "sem-region-failed")
def test_a_child_reaching_a_final_state_completes_and_tells_its_parent() -> None:
    parent, forked = in_split()
    left = committed(run(FORK, child_of(parent, forked.spawns[0]), START_EVENT, 12.0))
    result = run(FORK, left, "finish", 13.0)
    assert result.execution.status is ExecutionStatus.COMPLETED
    assert result.execution.configuration == ["split.left.done"]
    assert result.emits == [
        (
            "root",
            Event(
                id="root/split.left@4@1#0",
                name=DONE_EVENT,
                data={
                    "child_id": "root/split.left@4",
                    "root_path": "split.left",
                    "state": "done",
                    "status": "completed",
                    "result": None,
                    "context": {"prepared": True},
                },
                source_id="root/split.left@4",
                created_at=13.0,
            ),
        )
    ]
    right = committed(run(FORK, child_of(parent, forked.spawns[1]), START_EVENT, 12.0))
    timed_out = timer(right, "split.right.waiting", 15.0)
    assert timed_out.execution.status is ExecutionStatus.FAILED
    [(_, failed)] = timed_out.emits
    assert (failed.name, failed.data["status"], failed.data["state"]) == (DONE_EVENT, "failed", "done")


def done(child_id: str, event_id: str | None = None) -> Event:
    return Event(
        id=event_id or f"done-{child_id}", name=DONE_EVENT, data={"child_id": child_id, "root_path": "x"}
    )


@pytest.mark.semantics("sem-region-join", "sem-region-results")
def test_the_join_fires_once_when_every_region_is_done() -> None:
    parent, _ = in_split()
    first = step(FORK, parent, done("root/split.left@4"), 20.0, registry=make_registry())
    assert first.handled
    assert first.trace["transitions"] == []
    assert first.execution.children["root/split.left@4"].done
    assert first.execution.configuration == ["split"]
    parent = committed(first)

    duplicate = step(FORK, parent, done("root/split.left@4", "again"), 21.0, registry=make_registry())
    assert not duplicate.handled
    assert duplicate.trace["reason"] == "child 'root/split.left@4' is already done"
    assert duplicate.trace["transitions"] == []

    stranger = step(FORK, parent, done("someone-else"), 21.0, registry=make_registry())
    assert not stranger.handled
    assert (
        stranger.trace["reason"] == "done from 'someone-else', which is not a running child of this execution"
    )

    joined = step(FORK, parent, done("root/split.right@4"), 22.0, registry=make_registry())
    assert joined.handled
    assert joined.trace["transitions"] == [{"source": "split", "target": "joined", "via": "on_done"}]
    assert joined.trace["actions"] == ["leave_split", "after_join"]
    assert joined.execution.children == {}
    assert joined.emits == []  # both children were done: nobody to cancel
    assert joined.execution.configuration == ["joined"]
    assert joined.execution.status is ExecutionStatus.COMPLETED

    late = step(FORK, committed(joined), done("root/split.right@4", "late"), 23.0, registry=make_registry())
    assert not late.handled
    assert late.trace["reason"] == "execution is completed"


@pytest.mark.semantics("sem-region-cancel", "sem-diff-parallel-exit-order")
def test_leaving_a_parallel_state_cancels_the_children_still_running() -> None:
    parent, _ = in_split()
    parent = committed(step(FORK, parent, done("root/split.left@4"), 20.0, registry=make_registry()))
    result = run(FORK, parent, "abort", 21.0)
    assert result.execution.children == {}
    assert [(target, e.name, e.id) for target, e in result.emits] == [
        ("root/split.right@4", CANCEL_EVENT, "root@6#0")
    ]
    assert result.execution.configuration == ["aborted"]


# --- cancel and finished executions ---------------------------------------------------------------------


@pytest.mark.semantics("sem-cancel")
def test_cancel_exits_everything_disarms_timers_and_cascades_to_running_children() -> None:
    parent, _ = in_split()
    result = run(FORK, parent, CANCEL_EVENT, 30.0)
    assert result.handled
    assert result.execution.status is ExecutionStatus.CANCELLED
    assert result.execution.configuration == []
    assert result.execution.children == {}
    assert result.trace["actions"] == ["leave_split"]
    assert [(target, e.name) for target, e in result.emits] == [
        ("root/split.left@4", CANCEL_EVENT),
        ("root/split.right@4", CANCEL_EVENT),
    ]
    cancelled = run(NESTED, started(NESTED), CANCEL_EVENT, 1.0)
    assert cancelled.trace["actions"] == ["exit_a1", "exit_a"]
    assert cancelled.timers == [TimerOp("cancel", "a.a1")]
    assert cancelled.execution.timers == {}


@pytest.mark.semantics("sem-cancel")
def test_an_execution_can_be_cancelled_before_it_starts() -> None:
    result = run(NESTED, new_execution(NESTED), CANCEL_EVENT, 1.0)
    assert result.handled
    assert result.execution.status is ExecutionStatus.CANCELLED
    assert result.trace["actions"] == []


@pytest.mark.semantics("sem-engine-fail")
def test_the_engine_fails_an_execution_it_cannot_carry_on() -> None:
    parent, _ = in_split()
    result = run(FORK, parent, FAIL_EVENT, 30.0, reason="region left: child id taken")
    assert result.handled
    assert result.execution.status is ExecutionStatus.FAILED
    assert result.execution.reason == "region left: child id taken"
    assert result.execution.configuration == [] and result.execution.children == {}
    assert [e.name for _, e in result.emits] == [CANCEL_EVENT, CANCEL_EVENT], "its running regions cancelled"
    parent, forked = in_split()
    child = committed(run(FORK, child_of(parent, forked.spawns[0]), START_EVENT, 11.0))
    failed = run(FORK, child, FAIL_EVENT, 12.0, reason="event to nobody could not be delivered")
    [(target, done)] = failed.emits
    assert (target, done.name) == ("root", DONE_EVENT)
    assert done.data["status"] == "failed" and done.data["reason"] == "event to nobody could not be delivered"
    assert not run(FORK, failed.execution, FAIL_EVENT, 13.0, reason="again").handled, "once finished"


@pytest.mark.semantics("sem-cancel")
@pytest.mark.parametrize("name", [START_EVENT, CANCEL_EVENT, "jump", TIMER_EVENT, DONE_EVENT])
def test_finished_executions_ignore_every_event(name: str) -> None:
    for status in (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED):
        exe = started(NESTED).model_copy(update={"status": status})
        result = run(NESTED, exe, name, 5.0)
        assert not result.handled
        assert result.trace["reason"] == f"execution is {status.value}"
        assert result.execution.status is status
        assert (result.emits, result.timers) == ([], [])


# --- actions --------------------------------------------------------------------------------------------

ACTING = load_chart(
    {
        "id": "acting",
        "version": 1,
        "initial": "s",
        "states": {"s": {"on": {"go": {"actions": ["first", "second"]}, "bad": {"actions": ["nope"]}}}},
    }
)


def acting(
    first: Any, second: Any = None, *, parent_id: str | None = "p", siblings: dict[str, str] | None = None
) -> Step:
    registry = Registry()
    registry.actions["first"] = first
    registry.actions["second"] = second or (lambda ctx: None)
    exe = new_execution(ACTING, "me", parent_id=parent_id, siblings=siblings or {}, version=7)
    exe = committed(step(ACTING, exe, event(START_EVENT), 0.0, registry=registry))
    return step(ACTING, exe, event("go"), 1.0, registry=registry)


@pytest.mark.semantics("sem-actions-context")
def test_context_updates_merge_shallowly_and_later_actions_see_them() -> None:
    seen: dict[str, Any] = {}

    def second(ctx: ActionContext) -> ActionResult:
        seen.update(ctx.context)
        return ActionResult(context={"b": 2})

    result = acting(lambda ctx: ActionResult(context={"a": {"x": 1}, "b": 1}), second)
    assert seen == {"a": {"x": 1}, "b": 1}
    assert result.execution.context == {"a": {"x": 1}, "b": 2}


@pytest.mark.semantics(
    "sem-sends", "sem-ids-deterministic", "sem-rtc-internal-first", "sem-diff-sends-external"
)
def test_sends_go_to_parent_self_sibling_or_any_id_with_numbered_ids() -> None:
    sends = [Send("up", to="parent"), Send("me", to="self"), Send("side", to="sibling:other", data={"k": 1})]
    result = acting(
        lambda ctx: ActionResult(send=sends),
        lambda ctx: ActionResult(send=[Send("far", to="elsewhere-42")]),
        siblings={"other": "sib-1"},
    )
    # the event to self stays inside the step (run to completion) but keeps its place in the numbering
    assert [(target, e.name, e.id, e.data, e.source_id) for target, e in result.emits] == [
        ("p", "up", "me@8#0", {}, "me"),
        ("sib-1", "side", "me@8#2", {"k": 1}, "me"),
        ("elsewhere-42", "far", "me@8#3", {}, "me"),
    ]
    assert result.trace["internal"] == [
        {"event": "me", "id": "me@8#1", "disposition": "ignored", "reason": "no active state handles 'me'"}
    ]


@pytest.mark.semantics("sem-sends")
def test_sends_to_a_missing_parent_or_sibling_are_errors() -> None:
    with pytest.raises(InvalidSend, match="cannot send to 'parent': a root execution has no parent"):
        acting(lambda ctx: ActionResult(send=[Send("up")]), parent_id=None)
    with pytest.raises(InvalidSend, match=r"no sibling region 'ghost' \(siblings: other\)"):
        acting(lambda ctx: ActionResult(send=[Send("x", to="sibling:ghost")]), siblings={"other": "o"})


@pytest.mark.semantics("sem-actions-errors")
def test_failing_unknown_and_malformed_actions_raise_out_of_step() -> None:
    def explode(ctx: ActionContext) -> None:
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError, match="card declined"):
        acting(explode)
    with pytest.raises(TypeError, match="action 'first' returned dict; return an ActionResult or None"):
        acting(lambda ctx: {"a": 1})
    exe = new_execution(ACTING, "me").model_copy(update={"configuration": ["s"]})
    with pytest.raises(UnknownAction, match="no action named 'nope' is registered"):
        step(ACTING, exe, event("bad"), 1.0)
    with pytest.raises(UnknownAction, match="no guard named 'allow' is registered"):
        step(NESTED, committed(run(NESTED, started(NESTED), "next", 1.0)), event("stay"), 2.0)


@pytest.mark.semantics("sem-step-pure")
def test_the_models_a_step_builds_are_equal_to_validated_ones() -> None:
    parent, forked = in_split()
    joined = step(
        FORK,
        committed(step(FORK, parent, done("root/split.left@4"), 20.0, registry=make_registry())),
        done("root/split.right@4"),
        21.0,
        registry=make_registry(),
    )
    left = run(FORK, child_of(parent, forked.spawns[0]), START_EVENT, 12.0)
    for result in (forked, joined, left):
        built = result.execution
        assert Execution.model_validate_json(built.model_dump_json()) == built
        assert built.model_copy() == built and built.model_fields_set >= {"configuration", "updated_at"}
        for ref in built.children.values():
            assert ChildRef.model_validate(ref.model_dump()) == ref
        for _, emitted in result.emits:
            assert Event.model_validate_json(emitted.model_dump_json()) == emitted
    before = started(FORK).model_copy(update={"version": 4, "id": "root"})
    after = run(FORK, before, "go", 10.0).execution
    changed = {
        "configuration": ["split"],
        "updated_at": 10.0,
        "context": after.context,
        "children": after.children,
    }
    assert after == before.model_copy(update=changed)
    assert after.model_fields_set == before.model_copy(update=changed).model_fields_set
