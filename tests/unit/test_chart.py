"""Chart loading and validation: the format, the target rules, and every problem a chart can have."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harel.chart import After, Edge, load_chart, parse_duration
from harel.errors import ChartError, InvalidDuration
from harel.model import ExecutionStatus

ORDER_YAML = """\
id: order
version: 1
initial: placed
states:
  placed:
    on:
      approve: {target: fulfilling, guard: order_is_valid}
      reject: rejected
  fulfilling:
    parallel:                      # orthogonal regions: each runs as a child execution
      payment:
        initial: charging
        states:
          charging:
            entry: [charge_card]   # actions by registered name
            on: {charged: paid}
            after: {30s: failed}   # a durable timer: armed on entry, cancelled on exit
          paid: {final: true}
          failed: {final: true}
      shipping:
        initial: packing
        states:
          packing: {after: {2s: shipped}}
          shipped: {final: true}
    on_done: delivered             # the join: fires once, when every region is final
  delivered: {final: true}
  rejected: {final: true}
"""


def chart_dict(states: dict[str, Any], initial: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "t", "version": 1, "initial": initial or next(iter(states)), "states": states, **extra}


def problems_of(source: Any) -> list[str]:
    with pytest.raises(ChartError) as caught:
        load_chart(source)
    return caught.value.problems


def region(states: dict[str, Any], initial: str | None = None) -> dict[str, Any]:
    return {"initial": initial or next(iter(states)), "states": states}


# --- the ARCHITECTURE.md chart -----------------------------------------------------------------------


def test_the_order_chart_loads_with_every_target_resolved() -> None:
    chart = load_chart(ORDER_YAML)
    assert (chart.id, chart.version, chart.initial) == ("order", 1, "placed")
    assert chart.node("placed").on["approve"] == (Edge("placed", "fulfilling", "order_is_valid"),)
    assert chart.node("placed").on["reject"] == (Edge("placed", "rejected"),)
    fulfilling = chart.node("fulfilling")
    assert fulfilling.kind == "parallel"
    assert fulfilling.children == ("fulfilling.payment", "fulfilling.shipping")
    assert fulfilling.on_done == (Edge("fulfilling", "delivered"),)
    charging = chart.node("fulfilling.payment.charging")
    assert charging.scope == "fulfilling.payment"
    assert charging.entry == ("charge_card",)
    assert charging.on["charged"][0].target == "fulfilling.payment.paid"
    [timer] = charging.after
    assert timer.seconds == 30.0
    assert timer.key == "fulfilling.payment.charging", "a state's only timer is keyed by its path"
    assert timer.edges[0].target == "fulfilling.payment.failed"
    assert chart.node("fulfilling.shipping.packing").after == (
        After(
            2.0,
            (Edge("fulfilling.shipping.packing", "fulfilling.shipping.shipped"),),
            "2s",
            "fulfilling.shipping.packing",
        ),
    )
    assert chart.node("delivered").kind == "final"
    assert chart.node("delivered").final_status is ExecutionStatus.COMPLETED


def test_the_order_chart_helpers() -> None:
    chart = load_chart(ORDER_YAML)
    assert chart.references() == [("guard", "order_is_valid"), ("action", "charge_card")]
    assert chart.event_names() == ("approve", "charged", "reject")
    assert chart.initial_state() == "placed"
    assert chart.initial_state("fulfilling.shipping") == "fulfilling.shipping.packing"
    payment = chart.region("fulfilling.payment")
    assert payment.kind == "region"
    assert payment.parent == "fulfilling"
    assert payment.children == (
        "fulfilling.payment.charging",
        "fulfilling.payment.paid",
        "fulfilling.payment.failed",
    )
    with pytest.raises(KeyError, match="not a region"):
        chart.region("fulfilling")
    with pytest.raises(KeyError, match="no state or region at 'nowhere'"):
        chart.node("nowhere")


def test_yaml_json_dict_and_files_give_equal_charts(tmp_path: Path) -> None:
    # Plain YAML 1.1 reads the key `on` as True; quoting it gives the data a JSON or dict author writes.
    data = yaml.safe_load(re.sub(r"(?m)^(\s+)on:", r"\1'on':", ORDER_YAML))
    assert "on" in data["states"]["placed"]
    json_text = json.dumps(data)
    (tmp_path / "order.yaml").write_text(ORDER_YAML)
    (tmp_path / "order.yml").write_text(ORDER_YAML)
    (tmp_path / "order.json").write_text(json_text)
    from_yaml = load_chart(ORDER_YAML)
    sources: list[Any] = [
        data,
        json_text,
        tmp_path / "order.yaml",
        str(tmp_path / "order.yml"),
        tmp_path / "order.json",
    ]
    for source in sources:
        assert load_chart(source) == from_yaml
    assert load_chart({**data, "version": 2}) != from_yaml


def test_yaml_keeps_on_yes_and_no_as_strings() -> None:
    chart = load_chart(
        "id: t\nversion: 1\ninitial: a\nstates:\n  a: {on: {yes: b, no: a, off: b}}\n  b: {final: true}\n"
    )
    assert sorted(chart.node("a").on) == ["no", "off", "yes"]


def test_optional_description() -> None:
    chart = load_chart(chart_dict({"a": {}}, description="one state"))
    assert chart.description == "one state"


# --- durations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("2s", 2.0),
        ("1.5s", 1.5),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("3d", 259200.0),
        ("3", 3.0),
        ("0.5", 0.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "-1s", "1.s", "s", "2 s", "1w", "1e3", "2S"])
def test_bad_durations_are_rejected_by_name(text: str) -> None:
    with pytest.raises(InvalidDuration) as caught:
        parse_duration(text)
    assert caught.value.text == text
    assert isinstance(caught.value, ValueError)


def test_plain_number_keys_in_yaml_are_seconds() -> None:
    chart = load_chart(
        "id: t\nversion: 1\ninitial: a\nstates:\n  a: {after: {5: b}}\n  b: {after: {1.5: a}}\n"
    )
    assert chart.node("a").after == (After(5.0, (Edge("a", "b"),), "5", "a"),)
    assert chart.node("b").after == (After(1.5, (Edge("b", "a"),), "1.5", "b"),)


# --- targets -----------------------------------------------------------------------------------------


def test_bare_names_prefer_siblings_then_enclosing_levels_and_dots_are_absolute() -> None:
    chart = load_chart(
        chart_dict(
            {
                "outer": {
                    "initial": "x",
                    "states": {
                        "x": {"on": {"near": "y", "far": "done", "abs": "outer.y", "top": "x"}},
                        "y": {},
                        "done": {},
                    },
                },
                "done": {"final": True},
                "y": {},
            }
        )
    )
    on = chart.node("outer.x").on
    assert on["near"][0].target == "outer.y"
    assert on["far"][0].target == "outer.done"
    assert on["abs"][0].target == "outer.y"
    assert on["top"][0].target == "outer.x"
    chart = load_chart(
        chart_dict({"outer": {"initial": "x", "states": {"x": {"on": {"go": "done"}}}}, "done": {}})
    )
    assert chart.node("outer.x").on["go"][0].target == "done"


def test_internal_transitions_have_no_target() -> None:
    chart = load_chart(chart_dict({"a": {"on": {"ping": None, "log": {"actions": ["note"]}}}}))
    assert chart.node("a").on["ping"] == (Edge("a", None),)
    assert chart.node("a").on["log"] == (Edge("a", None, None, ("note",)),)


def test_references_are_deduplicated_in_document_order() -> None:
    chart = load_chart(
        chart_dict(
            {
                "a": {
                    "entry": ["e1"],
                    "exit": ["x1"],
                    "on": {"go": {"target": "b", "guard": "g1", "actions": ["t1", "e1"]}},
                    "after": {"1s": {"target": "b", "guard": "g2", "actions": ["t2"]}},
                },
                "b": {
                    "initial": "c",
                    "states": {"c": {"final": True}},
                    "on_done": {"target": "a", "actions": ["d1"]},
                },
            }
        )
    )
    assert chart.references() == [
        ("action", "e1"),
        ("action", "x1"),
        ("guard", "g1"),
        ("action", "t1"),
        ("guard", "g2"),
        ("action", "t2"),
        ("action", "d1"),
    ]


# --- validation: every rule, with its message ---------------------------------------------------------


def test_the_documented_example_problem() -> None:
    problems = problems_of(ORDER_YAML.replace("initial: charging", "initial: charing"))
    assert problems == ["states.fulfilling.parallel.payment.initial: no state named 'charing'"]


def test_chart_error_carries_the_chart_id_and_lists_each_problem() -> None:
    with pytest.raises(ChartError) as caught:
        load_chart(chart_dict({"a": {"on": {"go": "nowhere"}}}, initial="missing"))
    assert caught.value.chart_id == "t"
    assert caught.value.problems == [
        "initial: no state named 'missing'",
        "states.a.on.go: no state named 'nowhere'",
    ]
    assert "chart 't' is invalid" in str(caught.value)


def test_unknown_initial_of_a_compound_state_and_a_missing_one() -> None:
    assert problems_of(chart_dict({"a": {"initial": "z", "states": {"b": {}}}})) == [
        "states.a.initial: no state named 'z'"
    ]
    assert problems_of(chart_dict({"a": {"states": {"b": {}}}})) == [
        "states.a.initial: required: the child state a compound state starts in"
    ]


def test_unknown_targets() -> None:
    problems = problems_of(
        chart_dict(
            {
                "a": {"on": {"go": "b", "jump": "x.y"}, "after": {"1s": "zz"}},
                "p": {"initial": "q", "states": {"q": {"final": True}}, "on_done": "gone"},
            }
        )
    )
    assert problems == [
        "states.a.on.go: no state named 'b'",
        "states.a.on.jump: no state at path 'x.y'",
        "states.a.after.1s: no state named 'zz'",
        "states.p.on_done: no state named 'gone'",
    ]


def test_bad_duration() -> None:
    problems = problems_of(chart_dict({"a": {"after": {"2x": "a"}}, "b": {"after": {"1s": "a", "2s": "b"}}}))
    assert problems == [
        "states.a.after.2x: invalid duration '2x': use a number with ms, s, m, h or d (250ms, 2s, 1.5s, 5m, "
        "1h, 3d) "
        "or a plain number of seconds",
    ]


def test_on_done_on_an_atomic_state() -> None:
    assert problems_of(chart_dict({"a": {"on_done": "a"}})) == [
        "states.a.on_done: an atomic state never completes; on_done needs a compound or parallel state"
    ]


def test_final_states_have_no_transitions_or_children() -> None:
    problems = problems_of(
        chart_dict(
            {
                "a": {"final": True, "on": {"go": "a"}, "after": {"1s": "a"}},
                "b": {"final": True, "initial": "c", "states": {"c": {}}},
            }
        )
    )
    assert problems == [
        "states.a: a final state has no transitions or children; remove on, after",
        "states.b: a final state has no transitions or children; remove initial, states",
    ]


def test_status_belongs_to_final_states() -> None:
    chart = load_chart(chart_dict({"a": {"on": {"x": "b"}}, "b": {"final": True, "status": "failed"}}))
    assert chart.node("b").final_status is ExecutionStatus.FAILED
    assert problems_of(chart_dict({"a": {"status": "failed"}})) == [
        "states.a.status: only a final state has a status"
    ]


def test_reserved_and_empty_event_names() -> None:
    assert problems_of(chart_dict({"a": {"on": {"harel.done": "a", "": "a"}}})) == [
        "states.a.on.harel.done: event names starting with 'harel.' are reserved for the engine",
        "states.a.on: an event name cannot be empty",
    ]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "a state name cannot be empty"),
        ("$set", "state name '$set' starts with '$', which MongoDB cannot store as a key"),
        ("a.b", "state name 'a.b' contains '.', the path separator (MongoDB cannot store it in a key)"),
        ("a\uff0eb", "state name 'a\uff0eb' contains U+FF0E '．', which stands for '.' in stored paths"),
        ("a\x00b", "state name 'a\\x00b' contains NUL, which MongoDB cannot store in a key"),
    ],
)
def test_state_and_region_names_mongodb_cannot_store(name: str, why: str) -> None:
    assert problems_of(chart_dict({"ok": {}, name: {}}, initial="ok")) == [f"states.{name}: {why}"]
    parallel = chart_dict({"p": {"parallel": {name: region({"s": {}})}}})
    assert problems_of(parallel) == [f"states.p.parallel.{name}: {why.replace('state name', 'region name')}"]


def test_leaving_a_region_from_the_inside_is_refused_with_the_way_out() -> None:
    problems = problems_of(
        chart_dict(
            {
                "fork": {
                    "parallel": {
                        "left": region({"busy": {"on": {"abort": "aborted", "other": "fork.right.idle"}}}),
                        "right": region({"idle": {}}),
                    },
                    "on_done": "aborted",
                },
                "aborted": {"final": True},
            }
        )
    )
    assert problems == [
        "states.fork.parallel.left.states.busy.on.abort: target 'aborted' is outside the region 'fork.left'; "
        "a region runs as its own child execution and cannot be left from the inside. Send an event to the "
        "parent instead (Send(..., to='parent')) and handle it with a transition on 'fork'",
        "states.fork.parallel.left.states.busy.on.other: target 'fork.right.idle' is outside the region "
        "'fork.left'; a region runs as its own child execution and cannot be left from the inside. Send an "
        "event to the parent instead (Send(..., to='parent')) and handle it with a transition on 'fork'",
    ]


def test_entering_a_region_from_outside_or_targeting_a_region_is_refused() -> None:
    nested = {"parallel": {"inner": region({"deep": {}})}}
    problems = problems_of(
        chart_dict(
            {
                "a": {
                    "on": {
                        "in": "fork.left.busy",
                        "deeper": "fork.left.nest.inner.deep",
                        "whole": "fork.left",
                    }
                },
                "fork": {"parallel": {"left": region({"busy": {}, "nest": nested})}},
            }
        )
    )
    assert problems == [
        "states.a.on.in: target 'fork.left.busy' is inside the region 'fork.left', which cannot be entered "
        "from outside; target the parallel state 'fork' (each region starts at its initial state)",
        "states.a.on.deeper: target 'fork.left.nest.inner.deep' is inside the region 'fork.left', which cannot "
        "be entered from outside; target the parallel state 'fork' (each region starts at its initial state)",
        "states.a.on.whole: 'fork.left' is a region of the parallel state 'fork', not a state; target 'fork' to "
        "start all of its regions",
    ]


def test_transitions_inside_a_region_and_nested_regions_are_fine() -> None:
    chart = load_chart(
        chart_dict(
            {
                "fork": {
                    "parallel": {
                        "left": region(
                            {
                                "busy": {"on": {"next": "nest", "abs": "fork.left.done"}},
                                "nest": {
                                    "parallel": {"inner": region({"deep": {"on": {"x": "end"}}, "end": {}})},
                                    "on_done": "done",
                                },
                                "done": {"final": True},
                            }
                        )
                    }
                }
            }
        )
    )
    assert chart.node("fork.left.busy").on["next"][0].target == "fork.left.nest"
    assert chart.node("fork.left.nest.inner.deep").on["x"][0].target == "fork.left.nest.inner.end"
    assert chart.node("fork.left.nest.inner.deep").scope == "fork.left.nest.inner"
    assert chart.node("fork.left.nest").on_done == (Edge("fork.left.nest", "fork.left.done"),)


def test_shape_problems_unknown_keys_and_types_are_all_reported() -> None:
    problems = problems_of(
        chart_dict(
            {
                "a": {"onn": {}, "on": {"go": {"target": 3}}, "entry": "not-a-list"},
                "b": {"parallel": {"r": {"states": {}}}},
            },
            colour="blue",
        )
    )
    assert problems == [
        "states.a.entry: Input should be a valid tuple",
        "states.a.on.go.target: Input should be a valid string",
        "states.a.onn: unknown key",
        "states.b.parallel.r.initial: required",
        "colour: unknown key",
    ]


def test_parallel_and_compound_do_not_mix() -> None:
    assert problems_of(
        chart_dict({"a": {"initial": "b", "states": {"b": {}}, "parallel": {"r": region({"s": {}})}}})
    ) == ["states.a: a state is either compound (initial, states) or parallel, not both"]


def test_a_chart_needs_states() -> None:
    assert problems_of({"id": "t", "version": 1, "initial": "a", "states": {}}) == [
        "states: a chart needs at least one state"
    ]


@pytest.mark.parametrize(
    ("states", "problem"),
    [
        ({"a": {"parallel": {}}}, "states.a.parallel: a parallel state needs at least one region"),
        (
            {"a": {"initial": "b", "states": {}}},
            "states.a.states: a compound state needs at least one child state",
        ),
        (
            {"a": {"parallel": {"r": {"initial": "x", "states": {}}}}},
            "states.a.parallel.r.states: a region needs at least one state",
        ),
    ],
)
def test_empty_containers_are_refused(states: dict[str, Any], problem: str) -> None:
    assert problems_of(chart_dict(states)) == [problem]


def test_version_must_be_a_positive_integer() -> None:
    assert problems_of({**chart_dict({"a": {}}), "version": 0}) == [
        "version: Input should be greater than or equal to 1"
    ]
    assert problems_of({**chart_dict({"a": {}}), "version": "1"}) == [
        "version: Input should be a valid integer"
    ]


# --- sources that are not charts ----------------------------------------------------------------------


def test_unreadable_sources(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "absent.yaml")[0].startswith(
        f"{tmp_path / 'absent.yaml'}: cannot read the file"
    )
    (tmp_path / "chart.txt").write_text("id: t")
    assert problems_of(tmp_path / "chart.txt") == [
        f"{tmp_path / 'chart.txt'}: a chart file ends in .yaml, .yml, .json"
    ]
    (tmp_path / "bad.json").write_text("{not json")
    assert problems_of(tmp_path / "bad.json")[0].startswith(f"{tmp_path / 'bad.json'}: not valid JSON")
    (tmp_path / "bad.yaml").write_text("states: [unclosed")
    assert problems_of(tmp_path / "bad.yaml")[0].startswith(f"{tmp_path / 'bad.yaml'}: not valid YAML")
    assert problems_of("- a\n- list\n") == ["chart text: a chart is a mapping, got list"]
    assert problems_of("charts/order") == [
        "chart text: a chart is a mapping, got str; a file path must end in .yaml, .yml or .json"
    ]


# --- alternatives, always, results, duplicate keys -----------------------------------------------------


def test_an_event_may_list_guarded_alternatives_in_document_order() -> None:
    chart = load_chart(
        chart_dict(
            {
                "a": {"on": {"go": [{"target": "b", "guard": "g"}, "c", None, {"actions": ["log"]}]}},
                "b": {},
                "c": {},
            }
        )
    )
    assert chart.node("a").on["go"] == (
        Edge("a", "b", "g"),
        Edge("a", "c"),
        Edge("a", None),
        Edge("a", None, None, ("log",)),
    )
    assert problems_of(chart_dict({"a": {"on": {"go": []}}})) == [
        "states.a.on.go: an empty list; give at least one transition"
    ]


def test_problems_inside_a_list_of_alternatives_name_the_alternative() -> None:
    problems = problems_of(
        chart_dict(
            {"a": {"on": {"go": [{"target": "b", "guard": "g"}, {"target": "zz"}, {"tagret": "b"}]}}, "b": {}}
        )
    )
    assert problems == ["states.a.on.go.2.tagret: unknown key"]
    assert problems_of(chart_dict({"a": {"on": {"go": [{"target": "b", "guard": "g"}, "zz"]}}, "b": {}})) == [
        "states.a.on.go.1: no state named 'zz'"
    ]


def test_always_holds_eventless_alternatives_and_on_done_takes_guards() -> None:
    chart = load_chart(
        chart_dict(
            {
                "a": {"always": [{"target": "b", "guard": "ready"}, {"actions": ["wait"], "guard": "slow"}]},
                "b": {
                    "initial": "c",
                    "states": {"c": {"final": True}},
                    "on_done": [{"target": "a", "guard": "again"}, "d"],
                },
                "d": {"always": "a"},
            }
        )
    )
    assert chart.node("a").always == (Edge("a", "b", "ready"), Edge("a", None, "slow", ("wait",)))
    assert chart.node("b").on_done == (Edge("b", "a", "again"), Edge("b", "d"))
    assert chart.node("d").always == (Edge("d", "a"),)
    assert problems_of(chart_dict({"a": {"always": {"actions": ["spin"]}}})) == [
        "states.a.always: an eventless transition with neither guard nor target would fire forever; "
        "give it a guard or a target"
    ]
    assert problems_of(chart_dict({"a": {"on": {"x": "b"}}, "b": {"final": True, "always": "a"}})) == [
        "states.b: a final state has no transitions or children; remove always"
    ]


def test_a_final_state_may_carry_a_json_result_and_exit_actions() -> None:
    chart = load_chart(
        chart_dict(
            {"a": {"on": {"x": "b"}}, "b": {"final": True, "result": {"vote": [1, "yes"]}, "exit": ["bye"]}}
        )
    )
    assert chart.node("b").result == {"vote": [1, "yes"]}
    assert chart.node("b").exit == ("bye",)
    assert problems_of(chart_dict({"a": {"result": 1}})) == [
        "states.a.result: only a final state has a result"
    ]
    assert problems_of(chart_dict({"a": {"final": True, "result": {"x": [float("nan")]}}})) == [
        "states.a.result.x.0: nan is not a JSON number (JSON has no NaN or Infinity)"
    ]


DUPLICATE_YAML = """\
id: t
version: 1
initial: a
states:
  a:
    on:
      go: {target: b, guard: g}
      go: c
  b: {}
  a: {}
  c: {}
"""


def test_duplicate_keys_in_yaml_are_refused_with_their_path_and_lines(tmp_path: Path) -> None:
    expected = [
        "states.a.on.go: duplicate key 'go' (line 8; first given on line 7)",
        "states.a: duplicate key 'a' (line 10; first given on line 5)",
    ]
    assert problems_of(DUPLICATE_YAML) == [f"chart text: {p}" for p in expected]
    (tmp_path / "dup.yaml").write_text(DUPLICATE_YAML)
    assert problems_of(tmp_path / "dup.yaml") == [f"{tmp_path / 'dup.yaml'}: {p}" for p in expected]


def test_duplicate_keys_in_json_are_refused_with_their_path(tmp_path: Path) -> None:
    text = (
        '{"id": "t", "version": 1, "initial": "a", "states": {'
        '"a": {"on": {"go": {"target": "b", "guard": "g"}, "go": "c"}}, "b": {}, "a": {}, "c": {}}}'
    )
    expected = ["states.a.on.go: duplicate key 'go'", "states.a: duplicate key 'a'"]
    assert problems_of(text) == [f"chart text: {p}" for p in expected]
    (tmp_path / "dup.json").write_text(text)
    assert problems_of(tmp_path / "dup.json") == [f"{tmp_path / 'dup.json'}: {p}" for p in expected]


def test_yaml_merge_keys_may_override_and_json_refuses_nan(tmp_path: Path) -> None:
    chart = load_chart(
        "id: t\nversion: 1\ninitial: a\nstates:\n"
        "  base: &base {on: {go: b}}\n  a: {<<: *base, on: {go: c}}\n  b: {}\n  c: {}\n"
    )
    assert chart.node("a").on["go"][0].target == "c"
    (tmp_path / "nan.json").write_text(
        '{"id": "t", "version": 1, "initial": "a", "states": {"a": {}}, "x": NaN}'
    )
    assert problems_of(tmp_path / "nan.json") == [
        f"{tmp_path / 'nan.json'}: not valid JSON (NaN is not JSON)"
    ]


def test_regions_know_the_events_handled_inside_them_and_where_they_start() -> None:
    chart = load_chart(ORDER_YAML)
    assert chart.region("fulfilling.payment").handles == frozenset({"charged"})
    assert chart.region("fulfilling.shipping").handles == frozenset()
    assert chart.start_states() == ("placed",)
    assert chart.start_states("fulfilling.payment") == ("fulfilling.payment.charging",)
    charging = chart.node("fulfilling.payment.charging")
    assert charging.chain == ("fulfilling.payment.charging",)
    assert chart.node("placed").handlers == {
        "approve": (Edge("placed", "fulfilling", "order_is_valid"),),
        "reject": (Edge("placed", "rejected"),),
    }


@pytest.mark.semantics("sem-diff-unsupported")
def test_what_harel_does_not_support_is_refused_at_load() -> None:
    assert problems_of(chart_dict({"a": {"type": "history"}})) == ["states.a.type: unknown key"]
    assert problems_of(chart_dict({"a": {"on": {"go": {"target": "b", "delay": "1s"}}}, "b": {}})) == [
        "states.a.on.go.delay: unknown key"
    ]
    assert problems_of(
        chart_dict({"a": {"initial": {"target": "b", "actions": ["x"]}, "states": {"b": {}}}})
    ) == ["states.a.initial: Input should be a valid string"]
    assert problems_of(chart_dict({"a": {"history": "deep", "target": "b", "actions": ["x"]}, "b": {}}))[
        -1
    ] == ("states.a.actions: unknown key")
    leaving = chart_dict({"p": {"parallel": {"r": region({"x": {"on": {"out": "q"}}})}}, "q": {}})
    assert "cannot be left from the inside" in problems_of(leaving)[0]
