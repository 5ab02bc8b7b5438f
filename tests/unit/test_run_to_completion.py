"""The chart language inside one execution: guarded alternatives, eventless transitions, events sent to
self (run to completion), final states, `on_done` alternatives, timer order, and what an action may return."""

from __future__ import annotations

import math
from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, Registry, Send
from harel.chart import Chart, load_chart
from harel.errors import InvalidContext, StepLimitExceeded
from harel.interpreter import MAX_EVENTLESS, MAX_INTERNAL, Step, step
from harel.model import DONE_EVENT, START_EVENT, TIMER_EVENT, Event, Execution, ExecutionStatus


class Recorder:
    """A registry whose actions log their name (and can update the context or send), whose guards read
    `context[<guard name>]` (default false), and which records what each guard saw."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.calls: list[str] = []
        self.guard_events: list[tuple[str, str]] = []
        self.results: dict[str, ActionResult] = {}

    def chart(self, states: dict[str, Any], initial: str | None = None) -> Chart:
        chart = load_chart(
            {"id": "t", "version": 1, "initial": initial or next(iter(states)), "states": states}
        )
        for kind, name in chart.references():
            if kind == "action":
                self.registry.actions[name] = self._action(name)
            else:
                self.registry.guards[name] = self._guard(name)
        return chart

    def _action(self, name: str) -> Any:
        def action(ctx: ActionContext) -> ActionResult | None:
            self.calls.append(name)
            return self.results.get(name)

        return action

    def _guard(self, name: str) -> Any:
        def guard(ctx: ActionContext) -> bool:
            self.guard_events.append((name, ctx.event.name))
            return bool(ctx.context.get(name, False))

        return guard


def new(chart: Chart, **fields: Any) -> Execution:
    return Execution(id="e", definition_id=chart.id, definition_version=chart.version, **fields)


def committed(result: Step) -> Execution:
    exe = result.execution.model_copy(deep=True)
    exe.version += 1
    return exe


def send(chart: Chart, exe: Execution, name: str, rec: Recorder, now: float = 1.0, **data: Any) -> Step:
    return step(chart, exe, Event(id=f"ev-{name}", name=name, data=data), now, registry=rec.registry)


def start(chart: Chart, rec: Recorder, **fields: Any) -> Step:
    return send(chart, new(chart, **fields), START_EVENT, rec, 0.0)


def vias(result: Step) -> list[tuple[str | None, str | None, str]]:
    return [(t["source"], t["target"], t["via"]) for t in result.trace["transitions"]]


# --- guarded alternatives -------------------------------------------------------------------------------


@pytest.mark.semantics("sem-select-alternatives")
def test_the_first_enabled_alternative_in_document_order_wins() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "s": {
                "on": {
                    "go": [
                        {"target": "a", "guard": "to_a", "actions": ["took_a"]},
                        {"target": "b", "guard": "to_b", "actions": ["took_b"]},
                        {"target": "c", "actions": ["took_c"]},
                    ]
                }
            },
            "a": {},
            "b": {},
            "c": {},
        }
    )
    exe = committed(start(chart, rec))
    both = exe.model_copy(update={"context": {"to_a": True, "to_b": True}})
    assert send(chart, both, "go", rec).execution.configuration == ["a"]
    only_b = exe.model_copy(update={"context": {"to_b": True}})
    assert send(chart, only_b, "go", rec).execution.configuration == ["b"]
    rec.calls.clear()
    rec.guard_events.clear()
    fallback = send(chart, exe, "go", rec)
    assert fallback.execution.configuration == ["c"]
    assert rec.guard_events == [("to_a", "go"), ("to_b", "go")]  # tried in order, the last has no guard
    assert rec.calls == ["took_c"]


@pytest.mark.semantics("sem-select-alternatives")
def test_an_unguarded_alternative_written_first_wins_over_a_later_guard_that_passes() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "s": {
                "on": {
                    "go": [
                        {"target": "plain", "actions": ["took_plain"]},
                        {"target": "guarded", "guard": "to_guarded", "actions": ["took_guarded"]},
                    ]
                }
            },
            "plain": {},
            "guarded": {},
        }
    )
    exe = committed(start(chart, rec))
    rec.calls.clear()
    result = send(chart, exe.model_copy(update={"context": {"to_guarded": True}}), "go", rec)
    assert result.execution.configuration == ["plain"]
    assert rec.calls == ["took_plain"]
    assert rec.guard_events == [], "the alternatives after the one taken are not evaluated"


@pytest.mark.semantics("sem-select-alternatives")
def test_an_unguarded_alternative_between_guards_is_taken_where_it_is_written() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "s": {
                "on": {
                    "go": [
                        {"target": "first", "guard": "to_first"},
                        {"target": "plain"},
                        {"target": "last", "guard": "to_last"},
                    ]
                }
            },
            "first": {},
            "plain": {},
            "last": {},
        }
    )
    exe = committed(start(chart, rec))
    result = send(chart, exe.model_copy(update={"context": {"to_last": True}}), "go", rec)
    assert result.execution.configuration == ["plain"]
    assert rec.guard_events == [("to_first", "go")]


@pytest.mark.semantics("sem-select-alternatives", "sem-select-innermost")
def test_the_inner_state_alternatives_come_before_the_outer_state_ones() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "outer": {
                "initial": "inner",
                "on": {"go": [{"target": "x", "guard": "outer_1"}, {"target": "y"}]},
                "states": {"inner": {"on": {"go": [{"target": "z", "guard": "inner_1"}]}}, "z": {}},
            },
            "x": {},
            "y": {},
        }
    )
    exe = committed(start(chart, rec))
    refused = send(chart, exe, "go", rec)
    assert rec.guard_events == [("inner_1", "go"), ("outer_1", "go")]
    assert refused.execution.configuration == ["y"]
    inner = send(chart, exe.model_copy(update={"context": {"inner_1": True, "outer_1": True}}), "go", rec)
    assert inner.execution.configuration == ["outer.z"]


@pytest.mark.semantics("sem-ignored")
def test_when_every_alternative_is_refused_the_reason_names_each_guard() -> None:
    rec = Recorder()
    chart = rec.chart(
        {"s": {"on": {"go": [{"target": "a", "guard": "g1"}, {"target": "a", "guard": "g2"}]}}, "a": {}}
    )
    result = send(chart, committed(start(chart, rec)), "go", rec)
    assert not result.handled
    assert result.trace["reason"] == (
        "no enabled transition for 'go': guard 'g1' on 's', guard 'g2' on 's' returned false"
    )


# --- eventless transitions ------------------------------------------------------------------------------

DECIDE = {
    "idle": {"on": {"check": {"target": "deciding", "actions": ["checking"]}, "poke": None}},
    "deciding": {
        "entry": ["enter_deciding"],
        "always": [
            {"target": "high", "guard": "is_high", "actions": ["chose_high"]},
            {"target": "low", "actions": ["chose_low"]},
        ],
    },
    "high": {"entry": ["enter_high"]},
    "low": {"entry": ["enter_low"], "always": {"target": "idle", "guard": "back_to_idle"}},
}


@pytest.mark.semantics("sem-rtc-eventless")
def test_eventless_transitions_run_in_the_same_step_after_the_event_transition() -> None:
    rec = Recorder()
    chart = rec.chart(DECIDE)
    exe = committed(start(chart, rec))
    high = send(chart, exe.model_copy(update={"context": {"is_high": True}}), "check", rec)
    assert high.execution.configuration == ["high"]
    assert vias(high) == [("idle", "deciding", "on:check"), ("deciding", "high", "always")]
    assert high.trace["actions"] == ["checking", "enter_deciding", "chose_high", "enter_high"]
    assert rec.guard_events[0] == ("is_high", "check")  # the guard sees the event of the step
    low = send(chart, exe, "check", rec)
    assert low.execution.configuration == ["low"]
    assert vias(low)[-1] == ("deciding", "low", "always")


@pytest.mark.semantics("sem-rtc-eventless")
def test_eventless_transitions_are_evaluated_after_every_step_even_an_ignored_event() -> None:
    rec = Recorder()
    chart = rec.chart(DECIDE)
    in_low = committed(send(chart, committed(start(chart, rec)), "check", rec))
    assert in_low.configuration == ["low"]
    ignored = send(chart, in_low.model_copy(update={"context": {"back_to_idle": True}}), "nobody", rec)
    assert ignored.disposition == "ignored"
    assert ignored.trace["reason"] == "no active state handles 'nobody'"
    assert ignored.execution.configuration == ["idle"]
    assert vias(ignored) == [("low", "idle", "always")]


@pytest.mark.semantics("sem-rtc-eventless")
def test_eventless_transitions_run_after_the_start_and_innermost_first() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "outer": {
                "initial": "inner",
                "always": {"target": "elsewhere", "guard": "outer_go"},
                "states": {"inner": {"always": {"target": "sibling", "guard": "inner_go"}}, "sibling": {}},
            },
            "elsewhere": {},
        }
    )
    both = start(chart, rec, context={"outer_go": True, "inner_go": True})
    assert vias(both) == [
        (None, "outer", "start"),
        ("outer.inner", "outer.sibling", "always"),
        ("outer", "elsewhere", "always"),
    ]
    assert both.execution.configuration == ["elsewhere"]


@pytest.mark.semantics("sem-rtc-eventless", "sem-select-alternatives")
def test_an_unguarded_eventless_alternative_written_first_wins_over_a_later_guard_that_passes() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "deciding": {"always": [{"target": "plain"}, {"target": "guarded", "guard": "to_guarded"}]},
            "plain": {},
            "guarded": {},
        }
    )
    result = start(chart, rec, context={"to_guarded": True})
    assert vias(result)[-1] == ("deciding", "plain", "always")
    assert rec.guard_events == []


# The limit as docs/semantics.md states it: more than 100 eventless transitions in a row fail the step.
EVENTLESS_LIMIT = 100


def eventless_chain(rec: Recorder, transitions: int) -> Chart:
    """States s0 .. s<transitions>, each with an unguarded `always` to the next; the last is final, so a
    start runs exactly `transitions` eventless transitions in a row."""
    states: dict[str, Any] = {f"s{n}": {"always": {"target": f"s{n + 1}"}} for n in range(transitions)}
    states[f"s{transitions}"] = {"final": True}
    return rec.chart(states, initial="s0")


@pytest.mark.semantics("sem-rtc-limit")
def test_an_eventless_chain_of_exactly_the_limit_comes_to_rest() -> None:
    rec = Recorder()
    result = start(eventless_chain(rec, EVENTLESS_LIMIT), rec)
    assert result.execution.status is ExecutionStatus.COMPLETED
    assert result.execution.configuration == [f"s{EVENTLESS_LIMIT}"]
    assert [via for _, _, via in vias(result)] == ["start"] + ["always"] * EVENTLESS_LIMIT


@pytest.mark.semantics("sem-rtc-limit")
def test_an_eventless_chain_one_past_the_limit_is_refused() -> None:
    rec = Recorder()
    chart = eventless_chain(rec, EVENTLESS_LIMIT + 1)
    with pytest.raises(StepLimitExceeded) as caught:
        start(chart, rec)
    assert (caught.value.limit, caught.value.execution_id) == (EVENTLESS_LIMIT, "e")


@pytest.mark.semantics("sem-rtc-limit")
def test_an_eventless_loop_fails_the_step_with_the_transitions_that_loop() -> None:
    rec = Recorder()
    chart = rec.chart(
        {"a": {"always": {"target": "b", "guard": "loop"}}, "b": {"always": {"target": "a", "guard": "loop"}}}
    )
    with pytest.raises(StepLimitExceeded) as caught:
        start(chart, rec, context={"loop": True})
    assert caught.value.limit == MAX_EVENTLESS
    assert caught.value.execution_id == "e"
    assert str(caught.value) == (
        f"execution 'e': more than {MAX_EVENTLESS} eventless (always) transitions in one step, "
        "last: b -> a, a -> b, b -> a, a -> b, b -> a"
    )


# --- events sent to self --------------------------------------------------------------------------------

PING = {
    "a": {
        "on": {
            "go": {"target": "b", "actions": ["send_two"]},
            "first": {"actions": ["got_first"]},
            "second": {"target": "c", "actions": ["got_second"]},
        }
    },
    "b": {"always": {"target": "a", "actions": ["back_in_a"]}},
    "c": {},
}


def ping(rec: Recorder) -> Chart:
    chart = rec.chart(PING)
    rec.results["send_two"] = ActionResult(send=[Send("first", to="self"), Send("second", to="self")])
    return chart


@pytest.mark.semantics("sem-rtc-internal-first", "sem-rtc-eventless-before-internal")
def test_events_sent_to_self_are_processed_in_the_same_step_in_order_after_eventless_transitions() -> None:
    rec = Recorder()
    chart = ping(rec)
    result = send(chart, committed(start(chart, rec)), "go", rec)
    assert result.emits == []  # nothing leaves through the outbox
    assert result.trace["actions"] == ["send_two", "back_in_a", "got_first", "got_second"]
    assert vias(result) == [
        ("a", "b", "on:go"),
        ("b", "a", "always"),  # eventless first: the internal events find `a` active again
        ("a", None, "on:first"),
        ("a", "c", "on:second"),
    ]
    assert result.trace["internal"] == [
        {"event": "first", "id": "e@1#0", "disposition": "handled"},
        {"event": "second", "id": "e@1#1", "disposition": "handled"},
    ]
    assert result.execution.configuration == ["c"]


@pytest.mark.semantics("sem-rtc-internal-first")
def test_an_action_sees_the_internal_event_it_runs_for() -> None:
    seen: list[tuple[str, str, str | None]] = []
    rec = Recorder()
    chart = ping(rec)
    rec.registry.actions["got_first"] = lambda ctx: seen.append(
        (ctx.event.name, ctx.event.id, ctx.event.source_id)
    )
    send(chart, committed(start(chart, rec)), "go", rec)
    assert seen == [("first", "e@1#0", "e")]


@pytest.mark.semantics("sem-rtc-internal-first")
def test_sending_to_the_own_id_is_sending_to_self() -> None:
    rec = Recorder()
    chart = rec.chart({"a": {"on": {"go": {"actions": ["loopback"]}, "back": "b"}}, "b": {}})
    rec.results["loopback"] = ActionResult(send=[Send("back", to="e")])
    result = send(chart, committed(start(chart, rec)), "go", rec)
    assert (result.emits, result.execution.configuration) == ([], ["b"])


@pytest.mark.semantics("sem-rtc-limit")
def test_a_flood_of_events_to_self_fails_the_step() -> None:
    rec = Recorder()
    chart = rec.chart({"a": {"on": {"go": {"actions": ["again"]}, "tick": {"actions": ["again"]}}}})
    rec.results["again"] = ActionResult(send=[Send("tick", to="self")])
    with pytest.raises(StepLimitExceeded, match=f"more than {MAX_INTERNAL} events sent to self in one step"):
        send(chart, committed(start(chart, rec)), "go", rec)


@pytest.mark.semantics("sem-rtc-final-drops", "sem-final-top")
def test_events_sent_to_self_after_the_execution_ended_are_dropped() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "a": {"on": {"go": {"target": "end", "actions": ["send_two"]}, "first": "a"}},
            "end": {"final": True},
        }
    )
    rec.results["send_two"] = ActionResult(send=[Send("first", to="self")])
    result = send(chart, committed(start(chart, rec)), "go", rec)
    assert result.execution.status is ExecutionStatus.COMPLETED
    assert result.trace["internal"] == [
        {"event": "first", "id": "e@1#0", "disposition": "ignored", "reason": "execution is completed"}
    ]


# --- final states and on_done ---------------------------------------------------------------------------


@pytest.mark.semantics("sem-final-top")
def test_the_top_final_state_runs_its_exit_actions_when_the_execution_ends() -> None:
    rec = Recorder()
    chart = rec.chart(
        {"a": {"on": {"go": "end"}}, "end": {"final": True, "entry": ["hello"], "exit": ["bye"]}}
    )
    result = send(chart, committed(start(chart, rec)), "go", rec)
    assert result.trace["actions"] == ["hello", "bye"]
    assert result.execution.status is ExecutionStatus.COMPLETED
    assert result.execution.configuration == ["end"]


@pytest.mark.semantics("sem-final-top", "sem-region-results")
def test_a_region_final_state_runs_its_exit_actions_before_the_done_is_sent() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "p": {
                "parallel": {
                    "r": {
                        "initial": "w",
                        "states": {
                            "w": {"on": {"go": "end"}},
                            "end": {"final": True, "exit": ["summarise"], "result": {"vote": "yes"}},
                        },
                    }
                }
            }
        }
    )
    rec.results["summarise"] = ActionResult(context={"summary": 3}, send=[Send("note", to="parent")])
    child = new(chart, parent_id="root", root_path="p.r").model_copy(update={"id": "root/p.r@1"})
    child = committed(send(chart, child, START_EVENT, rec))
    result = send(chart, child, "go", rec)
    assert result.trace["actions"] == ["summarise"]
    assert [(target, e.name) for target, e in result.emits] == [("root", "note"), ("root", DONE_EVENT)]
    assert result.emits[1][1].data == {
        "child_id": "root/p.r@1",
        "root_path": "p.r",
        "state": "end",
        "status": "completed",
        "result": {"vote": "yes"},
        "context": {"summary": 3},
    }


@pytest.mark.semantics("sem-final-nested", "sem-on-done-once")
def test_on_done_takes_its_first_enabled_alternative_once_and_a_nested_final_exits_when_left() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "job": {
                "initial": "run",
                "states": {"run": {"on": {"finish": "ok"}}, "ok": {"final": True, "exit": ["leave_ok"]}},
                "on_done": [{"target": "good", "guard": "passed"}, {"target": "bad", "guard": "failed"}],
                "on": {"retry": "job"},
            },
            "good": {},
            "bad": {},
        }
    )
    exe = committed(start(chart, rec))
    stuck = send(chart, exe, "finish", rec)
    assert stuck.execution.configuration == ["job.ok"]  # no alternative enabled: the state stays
    assert vias(stuck) == [("job.run", "job.ok", "on:finish")]
    later = send(chart, committed(stuck).model_copy(update={"context": {"passed": True}}), "nothing", rec)
    assert later.execution.configuration == ["job.ok"]  # not evaluated again on a later event
    rec.calls.clear()
    retried = send(chart, committed(stuck), "retry", rec)
    assert rec.calls == ["leave_ok"]  # the final state's exit runs when a transition leaves it
    assert retried.execution.configuration == ["job.run"]
    passed = send(chart, exe.model_copy(update={"context": {"passed": True}}), "finish", rec)
    assert passed.execution.configuration == ["good"]
    assert vias(passed)[-1] == ("job", "good", "on_done")


@pytest.mark.semantics("sem-diff-on-done-immediate")
def test_a_compound_on_done_is_taken_before_eventless_transitions_and_pending_internal_events() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "top": {
                "initial": "job",
                "always": {"target": "other", "guard": "leave"},
                "states": {
                    "job": {
                        "initial": "run",
                        "states": {
                            "run": {"on": {"finish": {"target": "ok", "actions": ["ping_self"]}}},
                            "ok": {"final": True},
                        },
                        "on_done": "after",
                    },
                    "after": {"on": {"ping": "pinged"}},
                    "pinged": {},
                },
            },
            "other": {},
        }
    )
    rec.results["ping_self"] = ActionResult(send=[Send("ping", to="self")])
    exe = committed(start(chart, rec)).model_copy(update={"context": {"leave": False}})
    result = send(chart, exe, "finish", rec)
    assert vias(result) == [
        ("top.job.run", "top.job.ok", "on:finish"),
        ("top.job", "top.after", "on_done"),
        ("top.after", "top.pinged", "on:ping"),
    ]


# --- timers ---------------------------------------------------------------------------------------------

NESTED_TIMERS = {
    "outer": {
        "initial": "inner",
        "after": {"5s": {"target": "gone", "actions": ["outer_fired"]}},
        "states": {
            "inner": {"after": {"5s": {"target": "next", "actions": ["inner_fired"]}}},
            "next": {"entry": ["in_next"]},
        },
    },
    "gone": {},
}


def timer_event(path: str, fire_at: float) -> Event:
    return Event(id=f"t-{path}", name=TIMER_EVENT, data={"path": path, "fire_at": fire_at})


@pytest.mark.semantics("sem-timers-order", "sem-diff-timer-ties")
@pytest.mark.parametrize("arrives_first", ["outer", "outer.inner"])
def test_timers_due_at_the_same_instant_fire_innermost_first_whichever_event_arrives_first(
    arrives_first: str,
) -> None:
    rec = Recorder()
    chart = rec.chart(NESTED_TIMERS)
    exe = committed(start(chart, rec))
    assert exe.timers == {"outer": 5.0, "outer.inner": 5.0}
    result = step(chart, exe, timer_event(arrives_first, 5.0), 5.0, registry=rec.registry)
    assert result.trace["actions"] == ["inner_fired", "in_next", "outer_fired"]
    assert result.execution.configuration == ["gone"]
    other = "outer.inner" if arrives_first == "outer" else "outer"
    late = step(chart, committed(result), timer_event(other, 5.0), 5.1, registry=rec.registry)
    assert not late.handled
    assert late.trace["reason"].startswith("stale timer")


@pytest.mark.semantics("sem-timers-order")
def test_an_overdue_earlier_timer_fires_before_the_later_one_that_arrived_first() -> None:
    rec = Recorder()
    chart = rec.chart(
        {
            "outer": {
                "initial": "inner",
                "after": {"10s": {"target": "gone", "actions": ["outer_fired"]}},
                "states": {
                    "inner": {"after": {"2s": {"target": "next", "actions": ["inner_fired"]}}},
                    "next": {},
                },
            },
            "gone": {},
        }
    )
    exe = committed(start(chart, rec))
    result = step(chart, exe, timer_event("outer", 10.0), 10.5, registry=rec.registry)
    assert result.trace["actions"] == ["inner_fired", "outer_fired"]


@pytest.mark.semantics("sem-timers-guarded")
def test_a_timer_takes_its_first_enabled_alternative() -> None:
    rec = Recorder()
    chart = rec.chart(
        {"wait": {"after": {"1s": [{"target": "a", "guard": "prefer_a"}, {"target": "b"}]}}, "a": {}, "b": {}}
    )
    exe = committed(start(chart, rec))
    assert step(chart, exe, timer_event("wait", 1.0), 1.0, registry=rec.registry).execution.configuration == [
        "b"
    ]


# --- what an action may return --------------------------------------------------------------------------


def acting(result: ActionResult) -> Step:
    rec = Recorder()
    chart = rec.chart({"a": {"on": {"go": {"actions": ["act"]}}}})
    rec.results["act"] = result
    return send(chart, committed(start(chart, rec)), "go", rec)


@pytest.mark.semantics("sem-context-json")
@pytest.mark.parametrize(
    ("context", "key_path", "reason"),
    [
        ({"total": math.nan}, "total", "nan is not a JSON number (JSON has no NaN or Infinity)"),
        ({"order": {"items": [1, math.inf]}}, "order.items.1", "inf is not a JSON number"),
        ({"when": (1, 2)}, "when", "tuple is not a JSON value"),
        ({"big": 2**70}, "big", "does not fit in 64 bits"),
        ({"keys": {1: "x"}}, "keys.1", "key 1 is a int; JSON object keys are strings"),
    ],
)
def test_an_action_result_that_is_not_strict_json_names_the_action_and_the_key(
    context: dict[str, Any], key_path: str, reason: str
) -> None:
    with pytest.raises(InvalidContext) as caught:
        acting(ActionResult(context=context))
    assert caught.value.origin == "action 'act' returned a context"
    assert caught.value.key_path == key_path
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"action 'act' returned a context at {key_path!r}: ")


@pytest.mark.semantics("sem-context-json")
def test_send_data_must_be_json_and_the_regions_key_belongs_to_the_engine() -> None:
    with pytest.raises(InvalidContext, match=r"action 'act' sent 'x' with data at 'v': nan is not a JSON"):
        acting(ActionResult(send=[Send("x", to="elsewhere", data={"v": math.nan})]))
    with pytest.raises(InvalidContext, match="the key is written by the engine"):
        acting(ActionResult(context={"regions": {}}))
    ok = acting(ActionResult(context={"a": [1, 2.5, "x", None, True, {"b": []}]}))
    assert ok.execution.context == {"a": [1, 2.5, "x", None, True, {"b": []}]}
