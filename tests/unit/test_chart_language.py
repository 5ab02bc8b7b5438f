"""The chart language's richer constructs, one rule at a time, in the pure step and at load: event
descriptors and patterns, transitions that do or do not re-enter their source, state guards, history
states, one region's done, events to self through the mailbox, delayed sends, and the chart's own `send:`
and `cancel:` actions.

Each test names the statements of docs/semantics.md it backs (`@pytest.mark.semantics`)."""

from __future__ import annotations

from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, App, Cancel, Registry, Send
from harel.calls import user_event
from harel.chart import Chart, descriptor_matches, load_chart
from harel.errors import ChartError, InvalidSend, UnknownEvent
from harel.ids import child_id
from harel.interpreter import Step, step
from harel.model import CANCEL_EVENT, DONE_EVENT, START_EVENT, Event, Execution, ExecutionStatus, TimerOp


def chart(states: dict[str, Any], initial: str | None = None) -> Chart:
    return load_chart(
        {"id": "lang", "version": 1, "initial": initial or next(iter(states)), "states": states}
    )


def refusal(states: dict[str, Any], initial: str | None = None) -> list[str]:
    with pytest.raises(ChartError) as caught:
        chart(states, initial)
    return caught.value.problems


class Calls:
    """A registry with every action and guard the chart names: actions record (name, state, event);
    guards answer from `allowed`."""

    def __init__(self, subject: Chart, allowed: frozenset[str] = frozenset()) -> None:
        self.log: list[tuple[str, str, str]] = []
        self.registry = Registry()
        for kind, name in subject.references():
            if kind == "action":
                self.registry.actions[name] = self._recorder(name)
            else:
                self.registry.guards[name] = lambda ctx, name=name: name in allowed

    def _recorder(self, name: str) -> Any:
        def action(ctx: ActionContext) -> None:
            self.log.append((name, ctx.state, ctx.event.name))

        return action

    def names(self) -> list[str]:
        return [name for name, _, _ in self.log]


def committed(result: Step) -> Execution:
    exe = result.execution.model_copy(deep=True)
    exe.version += 1
    return exe


def feed(
    subject: Chart, exe: Execution, name: str, registry: Registry, now: float = 1.0, **data: Any
) -> Step:
    return step(
        subject, exe, Event(id=f"ev-{name}-{exe.version}", name=name, data=data), now, registry=registry
    )


def begin(subject: Chart, registry: Registry, **fields: Any) -> Execution:
    exe = Execution(id="e1", definition_id=subject.id, definition_version=subject.version, **fields)
    return committed(feed(subject, exe, START_EVENT, registry, now=0.0))


def walk(subject: Chart, registry: Registry, *names: str) -> Execution:
    exe = begin(subject, registry)
    for name in names:
        exe = committed(feed(subject, exe, name, registry))
    return exe


# --- event descriptors -----------------------------------------------------------------------------------


@pytest.mark.semantics("sem-event-patterns", "sem-diff-event-names")
def test_a_pattern_matches_its_prefix_token_by_token_and_a_plain_name_only_itself() -> None:
    assert all(descriptor_matches("*", name) for name in ("a", "key.a", "x.y.z"))
    assert [
        n
        for n in ("key", "key.a", "key.shift.a", "keys", "keyx.a", "a.key")
        if descriptor_matches("key.*", n)
    ] == [
        "key",
        "key.a",
        "key.shift.a",
    ]
    assert descriptor_matches("key.shift.*", "key.shift.a") and not descriptor_matches("key.shift.*", "key.a")
    assert descriptor_matches("error", "error") and not descriptor_matches("error", "error.send")


KEYS = chart(
    {
        "idle": {
            "initial": "typing",
            "on": {
                "key.enter": {"target": "sent", "actions": ["outer_enter"]},
                "*": {"actions": ["outer_any"]},
            },
            "states": {
                "typing": {
                    "on": {
                        "submit key.enter": {"actions": ["inner_submit"]},
                        "key.*": {"actions": ["inner_key"]},
                        "key.a": {"actions": ["never"]},
                    }
                }
            },
        },
        "sent": {"final": True},
    }
)


@pytest.mark.semantics("sem-event-patterns", "sem-event-patterns-order", "sem-select-innermost")
def test_the_first_matching_key_in_document_order_of_the_innermost_state_wins() -> None:
    calls = Calls(KEYS)
    exe = begin(KEYS, calls.registry)
    for name in ("key.a", "key.enter", "submit", "mouse.move"):
        result = feed(KEYS, exe, name, calls.registry)
        assert result.handled, name
    assert calls.names() == ["inner_key", "inner_submit", "inner_submit", "outer_any"]
    assert calls.log[-1] == ("outer_any", "idle", "mouse.move")


@pytest.mark.semantics("sem-event-patterns")
def test_the_engine_events_never_reach_a_wildcard() -> None:
    subject = chart({"a": {"on": {"*": {"actions": ["any"]}}}})
    calls = Calls(subject)
    exe = begin(subject, calls.registry)
    cancelled = feed(subject, exe, CANCEL_EVENT, calls.registry)
    assert cancelled.execution.status is ExecutionStatus.CANCELLED
    assert calls.names() == []


REGIONS_WITH_PATTERNS = chart(
    {
        "split": {
            "parallel": {
                "left": {"initial": "l", "states": {"l": {"on": {"ping.*": "l2"}}, "l2": {"final": True}}},
                "right": {"initial": "r", "states": {"r": {"on": {"pong": "r2"}}, "r2": {"final": True}}},
            }
        }
    }
)


@pytest.mark.semantics("sem-event-patterns-order", "sem-region-forward")
def test_an_event_a_region_matches_by_pattern_is_forwarded_to_it() -> None:
    exe = begin(REGIONS_WITH_PATTERNS, Registry())
    result = feed(REGIONS_WITH_PATTERNS, exe, "ping.now", Registry())
    assert result.disposition == "forwarded"
    assert result.forwarded_to == (child_id("e1", "split.left", 0),)
    assert not feed(REGIONS_WITH_PATTERNS, exe, "pingpong", Registry()).handled


@pytest.mark.semantics("sem-event-patterns")
def test_a_client_may_send_any_event_some_key_matches() -> None:
    exe = begin(KEYS, Calls(KEYS).registry)
    assert user_event(exe, KEYS, "key.shift.a").name == "key.shift.a"
    assert user_event(exe, KEYS, "anything").name == "anything"  # `*`
    exact = chart({"a": {"on": {"key.*": "b"}}, "b": {}})
    with pytest.raises(UnknownEvent):
        user_event(begin(exact, Registry()), exact, "keys")


def test_a_misplaced_wildcard_or_a_reserved_name_in_a_key_is_refused() -> None:
    problems = refusal({"a": {"on": {"a*b": "a", "x.*.y": "a", ".*": "a", "ok harel.*": "a", "  ": "a"}}})
    assert problems == [
        "states.a.on.a*b: 'a*b': a wildcard is '*' alone or '.*' ending a name ('mouse.*')",
        "states.a.on.x.*.y: 'x.*.y': a wildcard is '*' alone or '.*' ending a name ('mouse.*')",
        "states.a.on..*: '.*': a wildcard is '*' alone or '.*' ending a name ('mouse.*')",
        "states.a.on.ok harel.*: event names starting with 'harel.' are reserved for the engine",
        "states.a.on: an event name cannot be empty",
    ]


# --- re-entering the source ------------------------------------------------------------------------------

PLAYER = chart(
    {
        "playing": {
            "entry": ["enter_playing"],
            "exit": ["exit_playing"],
            "after": {"10s": "stopped"},
            "initial": "normal",
            "states": {
                "normal": {"entry": ["enter_normal"], "exit": ["exit_normal"], "on": {"same": "normal"}},
                "fast": {"entry": ["enter_fast"], "exit": ["exit_fast"]},
            },
            "on": {
                "speed_up": "playing.fast",
                "rewind": "playing",
                "restart": {"target": "playing", "reenter": True},
                "jump": {"target": "playing.fast", "reenter": True},
            },
        },
        "stopped": {"on": {"again": "stopped", "again_reentering": {"target": "stopped", "reenter": True}}},
    }
)


@pytest.mark.semantics("sem-domain", "sem-order-exit-actions-entry")
def test_a_transition_into_its_own_source_does_not_leave_it() -> None:
    calls = Calls(PLAYER)
    exe = begin(PLAYER, calls.registry)
    calls.log.clear()
    faster = feed(PLAYER, exe, "speed_up", calls.registry)
    assert calls.names() == ["exit_normal", "enter_fast"]
    assert faster.timers == [] and faster.execution.timers == exe.timers
    assert faster.execution.configuration == ["playing.fast"]

    calls.log.clear()
    rewound = feed(PLAYER, committed(faster), "rewind", calls.registry)
    assert calls.names() == ["exit_fast", "enter_normal"], "to itself: back to its initial state"
    assert rewound.trace["transitions"] == [{"source": "playing", "target": "playing", "via": "on:rewind"}]
    assert rewound.timers == []

    calls.log.clear()
    same = feed(PLAYER, exe, "same", calls.registry)
    assert same.handled and calls.names() == [] and same.execution.configuration == ["playing.normal"]


@pytest.mark.semantics("sem-reenter", "sem-timers-rearm")
def test_reenter_exits_and_enters_the_source_again() -> None:
    calls = Calls(PLAYER)
    exe = begin(PLAYER, calls.registry)
    calls.log.clear()
    restarted = feed(PLAYER, exe, "restart", calls.registry, now=4.0)
    assert calls.names() == ["exit_normal", "exit_playing", "enter_playing", "enter_normal"]
    assert restarted.timers == [TimerOp("cancel", "playing"), TimerOp("schedule", "playing", 14.0)]

    calls.log.clear()
    jumped = feed(PLAYER, exe, "jump", calls.registry)
    assert calls.names() == ["exit_normal", "exit_playing", "enter_playing", "enter_fast"]
    assert jumped.execution.configuration == ["playing.fast"]


@pytest.mark.semantics("sem-domain", "sem-reenter")
def test_an_atomic_state_to_itself_keeps_its_timer_unless_it_reenters() -> None:
    subject = chart(
        {"a": {"after": {"5s": "b"}, "on": {"stay": "a", "again": {"target": "a", "reenter": True}}}, "b": {}}
    )
    exe = begin(subject, Registry())
    assert feed(subject, exe, "stay", Registry(), now=3.0).timers == []
    assert feed(subject, exe, "again", Registry(), now=3.0).timers == [
        TimerOp("cancel", "a"),
        TimerOp("schedule", "a", 8.0),
    ]


PARALLEL_SELF = chart(
    {
        "split": {
            "parallel": {"only": {"initial": "x", "states": {"x": {}}}},
            "on": {"stay": "split", "restart": {"target": "split", "reenter": True}},
        }
    }
)


@pytest.mark.semantics("sem-domain", "sem-reenter", "sem-region-cancel")
def test_a_parallel_state_to_itself_keeps_its_regions_unless_it_reenters() -> None:
    exe = begin(PARALLEL_SELF, Registry())
    stayed = feed(PARALLEL_SELF, exe, "stay", Registry())
    assert stayed.spawns == [] and stayed.emits == [] and stayed.execution.children == exe.children
    restarted = feed(PARALLEL_SELF, exe, "restart", Registry())
    old = child_id("e1", "split.only", 0)
    assert [(target, e.name) for target, e in restarted.emits] == [(old, CANCEL_EVENT)]
    assert [child for child, _, _ in restarted.spawns] == [child_id("e1", "split.only", 1)]


def test_reenter_without_a_target_is_refused() -> None:
    assert refusal({"a": {"on": {"x": {"actions": ["go"], "reenter": True}}}}) == [
        "states.a.on.x.reenter: a transition without a target enters nothing again"
    ]


# --- state guards ----------------------------------------------------------------------------------------

DOCUMENT = chart(
    {
        "open": {
            "initial": "draft",
            "states": {
                "draft": {"on": {"submit": "review"}},
                "review": {"on": {"approve": "approved"}},
                "approved": {},
            },
            "on": {
                "close": [{"target": "archived", "guard": {"in": "open.approved"}}, {"target": "discarded"}]
            },
        },
        "archived": {"final": True},
        "discarded": {"final": True},
    }
)


@pytest.mark.semantics("sem-state-guard", "sem-select-alternatives")
def test_a_state_guard_is_true_while_its_state_is_active() -> None:
    approved = walk(DOCUMENT, Registry(), "submit", "approve")
    assert feed(DOCUMENT, approved, "close", Registry()).execution.configuration == ["archived"]
    draft = begin(DOCUMENT, Registry())
    assert feed(DOCUMENT, draft, "close", Registry()).execution.configuration == ["discarded"]
    assert DOCUMENT.references() == [], "a state guard calls no code"


@pytest.mark.semantics("sem-state-guard", "sem-ignored")
def test_an_ancestor_counts_as_active_and_a_refused_state_guard_is_named_in_the_trace() -> None:
    subject = chart(
        {
            "a": {
                "initial": "a1",
                "states": {
                    "a1": {"on": {"go": {"target": "a2", "guard": {"in": "a"}}}},
                    "a2": {"on": {"back": {"target": "a1", "guard": {"in": "b"}}}},
                },
            },
            "b": {},
        }
    )
    moved = feed(subject, begin(subject, Registry()), "go", Registry())
    assert moved.execution.configuration == ["a.a2"]
    refused = feed(subject, committed(moved), "back", Registry())
    assert (
        refused.trace["reason"]
        == "no enabled transition for 'back': guard {in: 'b'} on 'a.a2' returned false"
    )


@pytest.mark.semantics("sem-state-guard-scope")
def test_a_state_guard_across_a_region_border_is_refused_at_load() -> None:
    problems = refusal(
        {
            "split": {
                "parallel": {
                    "left": {
                        "initial": "l",
                        "states": {
                            "l": {
                                "on": {
                                    "up": {"target": "l", "guard": {"in": "other"}},
                                    "side": {"target": "l", "guard": {"in": "split.right.r"}},
                                }
                            }
                        },
                    },
                    "right": {"initial": "r", "states": {"r": {}}},
                },
                "on": {
                    "peek": {"target": "other", "guard": {"in": "split.left.l"}},
                    "region": {"target": "other", "guard": {"in": "split.left"}},
                    "nothing": {"target": "other", "guard": {"in": "nowhere"}},
                },
            },
            "other": {},
        }
    )
    assert problems == [
        "states.split.on.peek.guard.in: 'split.left.l' is in the region 'split.left', which runs as another "
        "execution: a guard sees only its own execution's configuration (send an event across instead)",
        "states.split.on.region.guard.in: 'split.left' is a region; name a state",
        "states.split.on.nothing.guard.in: no state named 'nowhere'",
        "states.split.parallel.left.states.l.on.up.guard.in: 'other' is in the parent execution, which runs as "
        "another execution: a guard sees only its own execution's configuration (send an event across instead)",
        "states.split.parallel.left.states.l.on.side.guard.in: 'split.right.r' is in the region 'split.right', "
        "which runs as another execution: a guard sees only its own execution's configuration (send an event "
        "across instead)",
    ]


# --- history ---------------------------------------------------------------------------------------------

WIZARD = chart(
    {
        "form": {
            "exit": ["exit_form"],
            "initial": "name",
            "states": {
                "name": {"on": {"next": "address"}},
                "address": {
                    "initial": "street",
                    "states": {
                        "street": {"entry": ["enter_street"], "on": {"next": "city"}},
                        "city": {"entry": ["enter_city"]},
                    },
                },
                "deep": {"history": "deep"},
                "shallow": {"history": "shallow"},
                "to_city": {"history": "shallow", "target": "form.address.city"},
            },
            "on": {"pause": "paused"},
        },
        "paused": {"on": {"deep": "form.deep", "shallow": "form.shallow", "to_city": "form.to_city"}},
    }
)


@pytest.mark.semantics("sem-history-remember", "sem-history-restore")
def test_shallow_history_enters_the_child_left_and_deep_history_the_leaf() -> None:
    calls = Calls(WIZARD)
    paused = walk(WIZARD, calls.registry, "next", "next", "pause")
    assert paused.history == {
        "form.deep": "form.address.city",
        "form.shallow": "form.address",
        "form.to_city": "form.address",
    }
    calls.log.clear()
    deep = feed(WIZARD, paused, "deep", calls.registry)
    assert deep.execution.configuration == ["form.address.city"]
    assert calls.names() == ["enter_city"]
    assert deep.trace["transitions"] == [{"source": "paused", "target": "form.deep", "via": "on:deep"}]
    calls.log.clear()
    shallow = feed(WIZARD, paused, "shallow", calls.registry)
    assert shallow.execution.configuration == ["form.address.street"], (
        "the child left, from its initial state"
    )
    assert calls.names() == ["enter_street"]


@pytest.mark.semantics("sem-history-remember")
def test_each_exit_records_again_and_a_cancel_records_nothing() -> None:
    registry = Calls(WIZARD).registry
    again = walk(WIZARD, registry, "next", "next", "pause", "deep", "pause")
    assert again.history["form.deep"] == "form.address.city"
    back_at_name = walk(WIZARD, registry, "pause", "shallow", "pause")
    assert back_at_name.history == {
        "form.deep": "form.name",
        "form.shallow": "form.name",
        "form.to_city": "form.name",
    }
    cancelled = feed(WIZARD, walk(WIZARD, registry, "next"), CANCEL_EVENT, registry)
    assert cancelled.execution.history == {}


@pytest.mark.semantics("sem-history-restore", "sem-history-durable")
def test_with_nothing_recorded_the_default_target_or_the_parents_initial_state_is_entered() -> None:
    calls = Calls(WIZARD)
    # as an execution stored before history states existed would load: no `history` field at all
    stored = begin(WIZARD, calls.registry).model_dump(mode="json")
    stored.update(configuration=["paused"])
    del stored["history"]
    old = Execution.model_validate(stored)
    assert old.history == {}
    assert feed(WIZARD, old, "to_city", calls.registry).execution.configuration == ["form.address.city"]
    assert feed(WIZARD, old, "shallow", calls.registry).execution.configuration == ["form.name"]
    assert feed(WIZARD, old, "deep", calls.registry).execution.configuration == ["form.name"]


def test_the_step_shares_the_history_it_did_not_change() -> None:
    registry = Calls(WIZARD).registry
    paused = walk(WIZARD, registry, "next", "pause")
    resumed = feed(WIZARD, paused, "deep", registry)
    assert resumed.execution.history is paused.history


HISTORY_OF_A_FORK = chart(
    {
        "outer": {
            "initial": "split",
            "states": {
                "split": {
                    "parallel": {"only": {"initial": "x", "states": {"x": {"on": {"n": "y"}}, "y": {}}}}
                },
                "back": {"history": "deep"},
            },
            "on": {"leave": "away"},
        },
        "away": {"on": {"resume": "outer.back"}},
    }
)


@pytest.mark.semantics("sem-history-regions")
def test_a_deep_history_that_recorded_a_parallel_state_starts_its_regions_afresh() -> None:
    away = walk(HISTORY_OF_A_FORK, Registry(), "leave")
    assert away.history == {"outer.back": "outer.split"}
    resumed = feed(HISTORY_OF_A_FORK, away, "resume", Registry())
    assert resumed.execution.configuration == ["outer.split"]
    [(child, region, _)] = resumed.spawns
    assert (child, region) == (child_id("e1", "outer.split.only", away.version), "outer.split.only")


@pytest.mark.semantics("sem-history-regions")
def test_a_history_inside_a_region_works_within_its_child_execution() -> None:
    subject = chart(
        {
            "split": {
                "parallel": {
                    "r": {
                        "initial": "work",
                        "states": {
                            "work": {
                                "initial": "a",
                                "states": {"a": {"on": {"n": "b"}}, "b": {}, "h": {"history": "shallow"}},
                                "on": {"pause": "rest"},
                            },
                            "rest": {"on": {"resume": "split.r.work.h"}},
                        },
                    }
                }
            }
        }
    )
    region_child = Execution(
        id=child_id("e1", "split.r", 0),
        definition_id="lang",
        definition_version=1,
        parent_id="e1",
        root_path="split.r",
    )
    exe = committed(feed(subject, region_child, START_EVENT, Registry()))
    for name in ("n", "pause", "resume"):
        exe = committed(feed(subject, exe, name, Registry()))
    assert exe.configuration == ["split.r.work.b"]
    assert exe.history == {"split.r.work.h": "split.r.work.b"}


def test_a_history_state_is_refused_where_it_could_not_remember_or_with_other_keys() -> None:
    problems = refusal(
        {
            "top": {"history": "deep"},
            "c": {
                "initial": "h",
                "states": {
                    "h": {"history": "shallow", "entry": ["x"]},
                    "a": {"target": "b"},
                    "far": {"history": "deep", "target": "other"},
                },
            },
            "split": {"parallel": {"r": {"initial": "x", "states": {"x": {}, "rh": {"history": "shallow"}}}}},
            "other": {},
        },
        initial="other",
    )
    assert problems == [
        "states.top: a history state belongs in a compound state; the top level is never left, so it has nothing "
        "to remember",
        "states.c.initial: 'h' is a history state; the initial state is a real state (a history state's default "
        "`target` is where it goes with nothing remembered)",
        "states.c.states.h: a history state has only `history` and a default `target`; remove entry",
        "states.c.states.a.target: only a history state has a target of its own (`history: shallow`); a "
        "transition's target goes under on, after, always or on_done",
        "states.split.parallel.r.states.rh: a history state cannot be at the top of the region 'split.r': a region "
        "runs as a child execution that starts afresh, at its initial state, every time the parallel state is "
        "entered, so there is nothing to remember; put the history in a compound state inside the region",
        "states.c.states.far.target: a history state's default target is a state inside its parent 'c', not "
        "'other'",
    ]


# --- one region done -------------------------------------------------------------------------------------

SHIPMENT = chart(
    {
        "preparing": {
            "parallel": {
                "payment": {
                    "initial": "charging",
                    "states": {
                        "charging": {},
                        "paid": {"final": True},
                        "refused": {"final": True, "status": "failed"},
                    },
                },
                "warehouse": {"initial": "packing", "states": {"packing": {}, "packed": {"final": True}}},
            },
            "on_region_done": {
                "payment": [
                    {"target": "cancelled", "guard": "payment_failed"},
                    {"actions": ["email_receipt"]},
                ],
                "warehouse": {"actions": ["tell_carrier"]},
            },
            "on_done": {"target": "shipped", "actions": ["joined"]},
        },
        "shipped": {"final": True},
        "cancelled": {"final": True},
    }
)


def region_done(parallel: str, region: str, status: str = "completed") -> Event:
    child = child_id("e1", f"{parallel}.{region}", 0)
    data = {
        "child_id": child,
        "root_path": f"{parallel}.{region}",
        "state": "x",
        "status": status,
        "result": None,
        "context": {},
    }
    return Event(id=f"done-{region}", name=DONE_EVENT, data=data)


class FailedPayment(Calls):
    def __init__(self) -> None:
        super().__init__(SHIPMENT)
        self.registry.guards["payment_failed"] = lambda ctx: (
            ctx.context["regions"]["payment"]["status"] == "failed"
        )


@pytest.mark.semantics("sem-region-done-each", "sem-region-results")
def test_each_region_done_takes_its_transition_then_the_last_one_joins() -> None:
    calls = FailedPayment()
    exe = begin(SHIPMENT, calls.registry)
    paid = step(SHIPMENT, exe, region_done("preparing", "payment"), 1.0, registry=calls.registry)
    assert calls.names() == ["email_receipt"]
    assert paid.execution.configuration == ["preparing"]
    assert paid.trace["transitions"] == [
        {"source": "preparing", "target": None, "via": "on_region_done:payment"}
    ]
    packed = step(
        SHIPMENT, committed(paid), region_done("preparing", "warehouse"), 2.0, registry=calls.registry
    )
    assert calls.names() == ["email_receipt", "tell_carrier", "joined"]
    assert packed.execution.configuration == ["shipped"]


@pytest.mark.semantics("sem-region-done-each", "sem-region-cancel")
def test_a_region_done_that_leaves_the_parallel_state_cancels_the_others_and_skips_the_join() -> None:
    calls = FailedPayment()
    exe = begin(SHIPMENT, calls.registry)
    refused = step(SHIPMENT, exe, region_done("preparing", "payment", "failed"), 1.0, registry=calls.registry)
    assert refused.execution.configuration == ["cancelled"]
    assert calls.names() == []
    assert [(target, e.name) for target, e in refused.emits] == [
        (child_id("e1", "preparing.warehouse", 0), CANCEL_EVENT)
    ]


def test_on_region_done_outside_a_parallel_state_or_for_an_unknown_region_is_refused() -> None:
    problems = refusal(
        {
            "a": {"on_region_done": {"x": "b"}},
            "split": {
                "parallel": {"r": {"initial": "x", "states": {"x": {}}}},
                "on_region_done": {"q": "b", "r": []},
            },
            "b": {},
        }
    )
    assert problems == [
        "states.a.on_region_done: only a parallel state has regions to be done; remove on_region_done",
        "states.split.on_region_done.q: no region named 'q' (regions: r)",
        "states.split.on_region_done.r: an empty list; give at least one transition",
    ]


# --- events to self, both ways ---------------------------------------------------------------------------

TURNS = chart({"waiting": {"on": {"go": {"actions": ["ask"]}, "now later": {"actions": ["seen"]}}}})


def sending(*sends: Send) -> Registry:
    registry = Registry()
    registry.actions["ask"] = lambda ctx: ActionResult(send=list(sends))
    registry.actions["seen"] = lambda ctx: None
    return registry


@pytest.mark.semantics("sem-rtc-external-self", "sem-rtc-internal-first")
def test_an_external_event_to_self_leaves_through_the_outbox_and_an_internal_one_does_not() -> None:
    registry = sending(Send("now", to="self"), Send("later", to="self", queue="external"))
    result = feed(TURNS, begin(TURNS, registry), "go", registry)
    assert [record["event"] for record in result.trace["internal"]] == ["now"]
    assert [(target, e.name, e.id) for target, e in result.emits] == [("e1", "later", "e1@1#1")]


@pytest.mark.semantics("sem-rtc-external-self")
@pytest.mark.parametrize(
    ("send", "reason"),
    [
        (Send("x", to="parent", queue="internal"), "only an event to self can be internal"),
        (Send("x", to="self", queue="later"), "queue 'later' is neither 'internal' nor 'external'"),
    ],
)
def test_an_internal_event_to_another_execution_or_an_unknown_queue_fails_the_step(
    send: Send, reason: str
) -> None:
    registry = sending(send)
    with pytest.raises(InvalidSend, match=reason):
        feed(TURNS, begin(TURNS, registry), "go", registry)


# --- several timers per state ----------------------------------------------------------------------------

TYPING = chart(
    {
        "typing": {
            "on": {"key": {"target": "typing", "reenter": True}, "leave": "away"},
            "after": {"300ms": {"actions": ["show_paused"]}, "900ms": "idle", "0.3s": {"actions": ["also"]}},
        },
        "idle": {"final": True},
        "away": {"after": {"5s": "idle"}},
    }
)


def timer_event(exe: Execution, key: str) -> Event:
    fire_at = exe.timers[key]
    return Event(id=f"t-{key}@{fire_at}", name="harel.timer", data={"path": key, "fire_at": fire_at})


@pytest.mark.semantics("sem-timers-armed", "sem-timers-rearm")
def test_each_timer_of_a_state_is_armed_on_entry_under_its_own_key_and_cancelled_on_exit() -> None:
    calls = Calls(TYPING)
    exe = begin(TYPING, calls.registry)
    assert exe.timers == {"typing#300ms": 0.3, "typing#900ms": 0.9, "typing#0.3s": 0.3}
    rearmed = feed(TYPING, exe, "key", calls.registry, now=0.5)
    assert rearmed.execution.timers == {"typing#300ms": 0.8, "typing#900ms": 1.4, "typing#0.3s": 0.8}
    left = feed(TYPING, exe, "leave", calls.registry, now=0.5)
    assert left.timers == [
        TimerOp("cancel", "typing#300ms"),
        TimerOp("cancel", "typing#900ms"),
        TimerOp("cancel", "typing#0.3s"),
        TimerOp("schedule", "away", 5.5),
    ]
    assert left.execution.timers == {"away": 5.5}, "a state's only timer keeps its path as key"


@pytest.mark.semantics("sem-timers-armed", "sem-timers-order")
def test_a_targetless_timer_leaves_the_other_timers_armed_and_ties_fire_in_document_order() -> None:
    calls = Calls(TYPING)
    exe = begin(TYPING, calls.registry)
    first = step(TYPING, exe, timer_event(exe, "typing#0.3s"), 0.31, registry=calls.registry)
    assert calls.names() == ["show_paused", "also"], "due together: in the order written"
    assert first.execution.timers == {"typing#900ms": 0.9}
    assert first.execution.configuration == ["typing"]


@pytest.mark.semantics("sem-timers-order", "sem-timers-stale")
def test_a_later_timer_event_fires_the_earlier_timers_of_the_state_first() -> None:
    calls = Calls(TYPING)
    exe = begin(TYPING, calls.registry)
    last = step(TYPING, exe, timer_event(exe, "typing#900ms"), 1.0, registry=calls.registry)
    assert calls.names() == ["show_paused", "also"]
    assert last.execution.configuration == ["idle"]
    assert [t["via"] for t in last.trace["transitions"]] == ["after", "after", "after"]
    stale = step(TYPING, committed(last), timer_event(exe, "typing#300ms"), 1.1, registry=calls.registry)
    assert not stale.handled


def test_a_timer_key_that_names_another_timer_or_a_delayed_sends_is_refused() -> None:
    problems = refusal(
        {
            "a": {"after": {"1s": "b", "2s": "b"}},
            "a#1s": {"after": {"3s": "b"}},
            "send:x": {"after": {"1s": "b"}},
            "b": {},
        }
    )
    assert problems == [
        "states.a#1s.after.3s: its timer key 'a#1s' is also the key of the timer of the state 'a'; rename one "
        "of the states",
        "states.send:x.after.1s: its timer key 'send:x' starts with 'send:', the form of a delayed send's timer; "
        "rename the state",
    ]


# --- delayed sends ---------------------------------------------------------------------------------------

REMINDER = chart(
    {
        "waiting": {
            "entry": ["schedule"],
            "on": {
                "remind": {"actions": ["reminded"]},
                "escalate": "escalated",
                "ack": {"actions": ["call_off"]},
            },
        },
        "escalated": {"final": True},
    }
)


def reminder_registry(*sends: Send, cancel: tuple[str, ...] = ()) -> Registry:
    registry = Registry()
    registry.actions["schedule"] = lambda ctx: ActionResult(send=list(sends))
    registry.actions["reminded"] = lambda ctx: None
    registry.actions["call_off"] = lambda ctx: ActionResult(cancel=cancel)
    return registry


def fire(subject: Chart, exe: Execution, key: str, registry: Registry, now: float) -> Step:
    return step(subject, exe, timer_event(exe, key), now, registry=registry)


@pytest.mark.semantics("sem-delayed-send", "sem-delayed-durable")
def test_a_delayed_send_to_self_is_held_by_a_timer_and_processed_when_it_fires() -> None:
    registry = reminder_registry(Send("remind", to="self", delay="2s", id="nudge"))
    exe = begin(REMINDER, registry)
    assert exe.timers == {"send:nudge": 2.0}
    assert [(send_id, held.to, held.event.name, held.event.id) for send_id, held in exe.delayed.items()] == [
        ("nudge", "e1", "remind", "e1@0#0")
    ]
    fired = fire(REMINDER, exe, "send:nudge", registry, now=2.5)
    assert fired.handled and fired.trace["actions"] == ["reminded"]
    assert fired.trace["internal"] == [{"event": "remind", "id": "e1@0#0", "disposition": "handled"}]
    assert fired.execution.timers == {} and fired.execution.delayed == {}
    assert fired.emits == []
    again = fire(REMINDER, exe.model_copy(update={"version": 5}), "send:nudge", registry, now=2.6)
    assert again.handled, "the same stored event, fired from a copy that still holds it"
    stale = step(REMINDER, committed(fired), timer_event(exe, "send:nudge"), 2.7, registry=registry)
    assert not stale.handled and "was cancelled or sent" in stale.trace["reason"]


@pytest.mark.semantics("sem-delayed-send")
def test_a_delayed_send_to_another_execution_leaves_with_the_id_it_was_minted_with() -> None:
    registry = reminder_registry(Send("ping", to="other", delay=1.5), Send("now", to="other"))
    exe = begin(REMINDER, registry)
    [(send_id, held)] = exe.delayed.items()
    assert send_id == held.event.id == "e1@0#0", "without an id, the event's own id names it"
    fired = fire(REMINDER, exe, f"send:{send_id}", registry, now=1.5)
    assert [(target, e.name, e.id) for target, e in fired.emits] == [("other", "ping", "e1@0#0")]


@pytest.mark.semantics("sem-delayed-cancel")
def test_a_cancelled_delayed_send_never_fires_and_a_send_with_a_pending_id_replaces_it() -> None:
    registry = reminder_registry(
        Send("escalate", to="self", delay="1d", id="esc"),
        Send("escalate", to="self", delay="2d", id="esc"),
        cancel=("esc", "unknown"),
    )
    exe = begin(REMINDER, registry)
    assert exe.timers == {"send:esc": 2 * 86400.0}, "the second send replaced the first"
    acked = feed(REMINDER, exe, "ack", registry, now=10.0)
    assert acked.timers == [TimerOp("cancel", "send:esc")]
    assert acked.execution.delayed == {} and acked.execution.timers == {}
    late = step(REMINDER, committed(acked), timer_event(exe, "send:esc"), 2 * 86400.0, registry=registry)
    assert not late.handled and late.execution.configuration == ["waiting"]


@pytest.mark.semantics("sem-delayed-order", "sem-timers-order")
def test_due_together_state_timers_fire_before_delayed_sends_and_sends_in_the_order_sent() -> None:
    subject = chart(
        {
            "waiting": {
                "entry": ["schedule"],
                "after": {"2s": {"actions": ["timed"]}},
                "on": {"a b": {"actions": ["seen"]}},
            }
        }
    )
    registry = Registry()
    registry.actions["schedule"] = lambda ctx: ActionResult(
        send=[Send("b", to="self", delay=2, id="sb"), Send("a", to="self", delay=2, id="sa")]
    )
    seen: list[str] = []

    def timed(ctx: ActionContext) -> None:
        seen.append("timer")

    def seen_event(ctx: ActionContext) -> None:
        seen.append(ctx.event.name)

    registry.actions["timed"] = timed
    registry.actions["seen"] = seen_event
    exe = begin(subject, registry)
    fired = fire(subject, exe, "send:sa", registry, now=2.0)
    assert seen == ["timer", "b", "a"]
    assert fired.execution.timers == {} and fired.execution.delayed == {}


@pytest.mark.semantics("sem-delayed-end")
def test_an_execution_that_ends_drops_its_pending_sends() -> None:
    registry = reminder_registry(Send("remind", to="self", delay="3d", id="nudge"))
    exe = begin(REMINDER, registry)
    cancelled = feed(REMINDER, exe, CANCEL_EVENT, registry)
    assert cancelled.execution.delayed == {} and cancelled.execution.timers == {}
    assert TimerOp("cancel", "send:nudge") in cancelled.timers


@pytest.mark.semantics("sem-delayed-durable")
def test_an_execution_stored_before_delayed_sends_loads_without_any() -> None:
    stored = begin(REMINDER, reminder_registry()).model_dump(mode="json")
    del stored["delayed"]
    assert Execution.model_validate(stored).delayed == {}


@pytest.mark.semantics("sem-delayed-send")
@pytest.mark.parametrize(
    ("send", "reason"),
    [
        (Send("x", to="self", delay="3d", queue="internal"), "a delayed event is external"),
        (Send("x", to="self", delay="soon"), "invalid duration 'soon'"),
        (Send("x", to="self", delay=-1), "delay -1 is not a duration"),
        (Send("x", to="parent", delay="1s"), "a root execution has no parent"),
        (Send("x", to="self", delay="1s", id=""), "send id '' must be a non-empty string"),
    ],
)
def test_a_delayed_send_that_cannot_be_held_fails_the_step(send: Send, reason: str) -> None:
    with pytest.raises(InvalidSend, match=reason):
        begin(REMINDER, reminder_registry(send))


# --- Cancel(id), and the chart's own send: and cancel: -----------------------------------------------------


def held(exe: Execution) -> dict[str, tuple[str, str, float]]:
    """The pending delayed sends: id -> (target, event, due)."""
    return {i: (d.to, d.event.name, exe.timers[f"send:{i}"]) for i, d in exe.delayed.items()}


@pytest.mark.semantics("sem-delayed-cancel")
@pytest.mark.parametrize(
    ("result", "pending"),
    [
        (ActionResult(send=[Send("x", to="self", delay=5, id="a"), Cancel("a")]), {}),
        (ActionResult(send=[Cancel("a"), Send("x", to="self", delay=5, id="a")]), {"a": ("e1", "x", 5.0)}),
        (ActionResult(send=[Send("x", to="self", delay=5, id="a")], cancel=["a"]), {}),
        (ActionResult(send=[Cancel("nothing pending")]), {}),
    ],
    ids=["send-then-cancel", "cancel-then-send", "cancel-shorthand-after-sends", "unknown-id"],
)
def test_cancels_and_sends_take_effect_in_the_order_an_action_gives_them(
    result: ActionResult, pending: dict[str, tuple[str, str, float]]
) -> None:
    registry = reminder_registry()
    registry.actions["schedule"] = lambda ctx: result
    assert held(begin(REMINDER, registry)) == pending


def test_an_action_that_sends_neither_a_send_nor_a_cancel_fails_the_step() -> None:
    registry = reminder_registry()
    registry.actions["schedule"] = lambda ctx: ActionResult(send=["escalate"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="action 'schedule' sent str; send a Send or a Cancel"):
        begin(REMINDER, registry)


CHART_REMINDER = chart(
    {
        "waiting": {
            "entry": [
                {"send": {"event": "remind", "delay": "2s", "id": "nudge"}},
                {"send": {"event": {"name": "escalate", "data": {"level": 2}}, "delay": 5, "id": "esc"}},
            ],
            "on": {
                "remind": {"actions": ["reminded"]},
                "escalate": "escalated",
                "ack": {"actions": [{"cancel": "esc"}, {"cancel": "unknown"}]},
            },
        },
        "escalated": {"final": True},
    }
)


@pytest.mark.semantics("sem-chart-send", "sem-delayed-send")
def test_a_charts_delayed_send_is_the_send_an_action_returns() -> None:
    """The chart's `send:` and an action's `Send(..., to="self", queue="external")` with the same fields
    make equal executions: the same held events, ids and timers, fired the same way."""
    registry = Registry()
    registry.actions["reminded"] = lambda ctx: None
    written = begin(CHART_REMINDER, registry)
    returned = begin(
        REMINDER,
        reminder_registry(
            Send("remind", to="self", delay="2s", id="nudge", queue="external"),
            Send("escalate", to="self", data={"level": 2}, delay=5, id="esc", queue="external"),
        ),
    )
    assert written.delayed == returned.delayed
    assert written.timers == returned.timers == {"send:nudge": 2.0, "send:esc": 5.0}
    assert written.delayed["esc"].event.data == {"level": 2}
    started = step(
        CHART_REMINDER,
        Execution(id="e1", definition_id="lang", definition_version=1),
        Event(id="s", name=START_EVENT),
        0.0,
        registry=registry,
    )
    assert started.trace["actions"] == ["send:remind", "send:escalate"]
    fired = fire(CHART_REMINDER, written, "send:nudge", registry, now=2.0)
    assert fired.trace["internal"] == [{"event": "remind", "id": "e1@0#0", "disposition": "handled"}]
    assert fired.trace["actions"] == ["reminded"]


@pytest.mark.semantics("sem-chart-send", "sem-delayed-cancel")
def test_a_charts_cancel_calls_off_a_pending_send_and_ignores_an_id_with_nothing_pending() -> None:
    registry = Registry()
    registry.actions["reminded"] = lambda ctx: None
    acked = feed(CHART_REMINDER, begin(CHART_REMINDER, registry), "ack", registry, now=1.0)
    assert acked.trace["actions"] == ["cancel:esc", "cancel:unknown"]
    assert acked.timers == [TimerOp("cancel", "send:esc")]
    assert held(acked.execution) == {"nudge": ("e1", "remind", 2.0)}


@pytest.mark.semantics("sem-chart-send")
def test_a_charts_send_goes_to_self_through_the_mailbox_unless_it_says_internal() -> None:
    subject = chart(
        {
            "idle": {
                "on": {
                    "go": {
                        "actions": [
                            {"send": {"event": "later"}},
                            {"send": {"event": {"name": "now", "data": {"n": 1}}, "queue": "internal"}},
                            {"send": {"event": "ping", "to": "other"}},
                        ]
                    },
                    "now later": {"actions": ["seen"]},
                }
            }
        }
    )
    calls = Calls(subject)
    went = feed(subject, begin(subject, calls.registry), "go", calls.registry)
    assert calls.log == [("seen", "idle", "now")], "only the internal one is processed within the step"
    assert [(target, e.name, e.data) for target, e in went.emits] == [
        ("e1", "later", {}),
        ("other", "ping", {}),
    ]


@pytest.mark.semantics("sem-chart-send")
def test_a_charts_sends_in_a_region_reach_its_parent_and_its_siblings() -> None:
    subject = chart(
        {
            "both": {
                "parallel": {
                    "left": {
                        "initial": "a",
                        "states": {
                            "a": {
                                "entry": [
                                    {"send": {"event": "up", "to": "parent"}},
                                    {"send": {"event": "over", "to": "sibling:right", "delay": "1s"}},
                                ]
                            }
                        },
                    },
                    "right": {"initial": "b", "states": {"b": {"on": {"over": "c"}}, "c": {}}},
                },
                "on": {"up": {"actions": []}},
            }
        }
    )
    parent = begin(subject, Registry())
    children = {ref.root_path: child for child, ref in parent.children.items()}
    left = Execution(
        id=children["both.left"],
        definition_id="lang",
        definition_version=1,
        parent_id="e1",
        root_path="both.left",
        siblings={"left": children["both.left"], "right": children["both.right"]},
    )
    started = feed(subject, left, START_EVENT, Registry(), now=0.0)
    assert [(target, e.name) for target, e in started.emits] == [("e1", "up")]
    assert held(started.execution) == {f"{left.id}@0#1": (children["both.right"], "over", 1.0)}


def test_a_charts_sends_and_cancels_are_not_registered_actions() -> None:
    assert CHART_REMINDER.references() == [("action", "reminded")]
    app = App("lang")
    app.chart(CHART_REMINDER)
    app.registry.actions["reminded"] = lambda ctx: None
    app.validate()


@pytest.mark.semantics("sem-chart-send")
@pytest.mark.parametrize(
    ("action", "problem"),
    [
        ({"send": {"event": "x", "delay": "soon"}}, ".send.delay: invalid duration 'soon'"),
        ({"send": {"event": "x", "delay": -1}}, ".send.delay: delay -1.0 is not a duration"),
        (
            {"send": {"event": "x", "delay": True}},
            ".send.delay: a delay is a duration ('3d', '90s') or seconds",
        ),
        (
            {"send": {"event": "x", "to": "parent"}},
            ".send.to: 'a' is in no region of a parallel state: it runs in",
        ),
        (
            {"send": {"event": "x", "to": "sibling:b"}},
            ".send.to: 'a' is in no region of a parallel state: it has",
        ),
        (
            {"send": {"event": "x", "to": ""}},
            ".send.to: an address is 'self', 'parent', 'sibling:<region>' or an",
        ),
        (
            {"send": {"event": "x", "delay": "1s", "id": ""}},
            ".send.id: send id '' must be a non-empty string",
        ),
        (
            {"send": {"event": "x", "id": "y"}},
            ".send.id: an id names a delayed send for a cancel; give a delay",
        ),
        (
            {"send": {"event": "x", "delay": 1, "queue": "internal"}},
            ".send.queue: a delayed event is external",
        ),
        (
            {"send": {"event": "x", "to": "o", "queue": "internal"}},
            ".send.queue: only an event to self can be",
        ),
        (
            {"send": {"event": "harel.done"}},
            ".send.event: event names starting with 'harel.' are the engine's",
        ),
        ({"send": {"event": ""}}, ".send.event: an event name cannot be empty"),
        (
            {"send": {"event": {"name": "x", "data": {"f": float("nan")}}}},
            ".send.event.data.f: nan is not a JSON",
        ),
        ({"send": {"event": "x", "after": "1s"}}, ".send.after: unknown key"),
        ({"send": {"event": 3}}, ".send.event: Input should be a valid string"),
        ({"cancel": ""}, ".cancel: send id '' must be a non-empty string"),
        ({"raise": "x"}, ": an action is a registered action's name, {send: {...}} or {cancel: <id>}"),
    ],
)
def test_a_charts_send_or_cancel_that_a_step_would_refuse_is_refused_at_load(
    action: dict[str, Any], problem: str
) -> None:
    [found] = refusal({"a": {"entry": [action]}})
    assert found.startswith(f"states.a.entry.0{problem}"), found


@pytest.mark.semantics("sem-chart-send")
def test_two_sends_with_one_id_in_one_list_are_refused_and_in_two_lists_are_not() -> None:
    twice = {"send": {"event": "x", "delay": "1s", "id": "r"}}
    assert refusal({"a": {"on": {"go": {"actions": [twice, {"cancel": "r"}, twice]}}}}) == [
        "states.a.on.go.actions.2.send.id: the send at states.a.on.go.actions.0 has the id 'r' too; a send "
        "replaces a pending one with its id, so the first would never be delivered"
    ]
    chart({"a": {"entry": [twice], "on": {"go": {"actions": [twice]}}}})


def test_diagrams_draw_history_states_state_guards_and_one_regions_done() -> None:
    from harel.diagram import render_dot, render_mermaid

    dot = render_dot(WIZARD)
    assert '"form.deep" [label="H*", shape=circle, tooltip="deep"];' in dot
    assert '"form.shallow" [label="H", shape=circle, tooltip="shallow"];' in dot
    assert '"paused" -> "form.deep" [label="deep"' in dot
    assert '[label="close [in open.approved]"' in render_dot(DOCUMENT)
    assert ": done payment / email_receipt" in render_mermaid(SHIPMENT)
    assert ": after 300ms / show_paused" in render_mermaid(TYPING)
    assert "ack / cancel:esc, cancel:unknown" in render_mermaid(CHART_REMINDER)
