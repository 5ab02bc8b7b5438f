"""Regions as child executions: events sent to the parent reach them, their results come back at the join,
and what one region sends its parent arrives before its `done`. Driven by hand through `World`."""

from __future__ import annotations

from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, Registry, Send
from harel.chart import load_chart
from harel.interpreter import step
from harel.model import DONE_EVENT, START_EVENT, Event, Execution, ExecutionStatus

from .test_forkjoin_by_hand import World

REVIEW = load_chart(
    {
        "id": "review",
        "version": 1,
        "initial": "idle",
        "states": {
            "idle": {"on": {"submit": "reviewing"}},
            "reviewing": {
                "on": {
                    "withdraw": "withdrawn",
                    "note": {"actions": ["noted"], "guard": "parent_takes_notes"},
                },
                "parallel": {
                    "alice": {
                        "initial": "waiting",
                        "states": {
                            "waiting": {
                                "initial": "reading",
                                "states": {
                                    "reading": {"on": {"approve": "yes", "reject": "no", "note": None}}
                                },
                                "on": {"vote_alice": "yes"},
                            },
                            "yes": {"final": True, "result": "approved"},
                            "no": {"final": True, "result": "rejected"},
                        },
                    },
                    "bob": {
                        "initial": "waiting",
                        "states": {
                            "waiting": {"on": {"approve": "yes", "reject": "no"}},
                            "yes": {"final": True, "result": "approved", "entry": ["tell_parent"]},
                            "no": {"final": True, "result": "rejected", "status": "failed"},
                        },
                    },
                    "audit": {
                        "initial": "logging",
                        "states": {"logging": {"on": {"close": "closed"}}, "closed": {"final": True}},
                    },
                },
                "on_done": [
                    {"target": "approved", "guard": "both_approved", "actions": ["announce"]},
                    {"target": "rejected", "actions": ["announce"]},
                ],
            },
            "approved": {"final": True},
            "rejected": {"final": True},
            "withdrawn": {"final": True},
        },
    }
)
ALICE = "r1/reviewing.alice@1"
BOB = "r1/reviewing.bob@1"
AUDIT = "r1/reviewing.audit@1"


def review_registry(seen: list[dict[str, Any]] | None = None) -> Registry:
    registry = Registry()
    registry.guards["parent_takes_notes"] = lambda ctx: bool(ctx.context.get("takes_notes"))
    registry.actions["noted"] = lambda ctx: None

    def both_approved(ctx: ActionContext) -> bool:
        if seen is not None:
            seen.append(dict(ctx.context["regions"]))
        regions = ctx.context["regions"]
        return all(regions[name]["result"] == "approved" for name in ("alice", "bob"))

    def announce(ctx: ActionContext) -> ActionResult:
        regions = ctx.context["regions"]
        return ActionResult(context={"verdict": {name: regions[name]["result"] for name in ("alice", "bob")}})

    registry.guards["both_approved"] = both_approved
    registry.actions["announce"] = announce
    registry.actions["tell_parent"] = lambda ctx: ActionResult(send=[Send("bob_voted", to="parent")])
    return registry


def submitted(registry: Registry | None = None, **context: Any) -> World:
    world = World(REVIEW, registry or review_registry())
    world.create(Execution(id="r1", definition_id="review", definition_version=1, context=context))
    world.drain()
    world.send("r1", "submit")
    return world


def last(world: World, exe_id: str) -> dict[str, Any]:
    return world.traces[exe_id][-1]


# --- events sent to the parent --------------------------------------------------------------------------


@pytest.mark.semantics("sem-region-forward", "sem-ids-deterministic")
def test_an_event_the_parent_does_not_handle_goes_to_every_running_region_that_handles_it() -> None:
    world = submitted()
    world.send("r1", "approve")
    root_step = next(s for s in world.traces["r1"] if s["event"] == "approve")
    assert root_step["disposition"] == "forwarded"
    assert root_step["forwarded_to"] == [ALICE, BOB]  # not audit: nothing in it handles `approve`
    assert root_step["handled"]
    assert [(e["target"], e["event"], e["id"]) for e in root_step["emits"]] == [
        (ALICE, "approve", "r1@2#0"),
        (BOB, "approve", "r1@2#1"),
    ]
    # alice handles it in a nested state: "somewhere in its region", not only at the top of it
    assert world.executions[ALICE].configuration == ["reviewing.alice.yes"]
    assert world.executions[BOB].configuration == ["reviewing.bob.yes"]


@pytest.mark.semantics("sem-region-forward")
def test_regions_that_are_done_do_not_get_forwarded_events_and_nobody_left_means_ignored() -> None:
    world = submitted()
    world.send(BOB, "reject")  # a region can still be addressed by its id
    world.send("r1", "vote_alice")
    forwarded = next(s for s in world.traces["r1"] if s["event"] == "vote_alice")
    assert forwarded["forwarded_to"] == [ALICE]
    world.send("r1", "approve")  # alice and bob, which handle it, are done; audit does not handle it
    ignored = last(world, "r1")
    assert (ignored["event"], ignored["disposition"], ignored["forwarded_to"]) == ("approve", "ignored", [])
    assert ignored["reason"] == "no active state handles 'approve'"


@pytest.mark.semantics("sem-region-forward", "sem-region-forward-priority", "sem-diff-forward-priority")
def test_the_parent_takes_an_event_it_handles_itself_before_any_region() -> None:
    world = submitted(takes_notes=True)
    world.send("r1", "note")
    taken = last(world, "r1")
    assert (taken["disposition"], taken["forwarded_to"], taken["actions"]) == ("handled", [], ["noted"])
    world = submitted(takes_notes=False)  # its guard refuses: the regions get it
    world.send("r1", "note")
    forwarded = next(s for s in world.traces["r1"] if s["event"] == "note")
    assert (forwarded["disposition"], forwarded["forwarded_to"]) == ("forwarded", [ALICE])


@pytest.mark.semantics("sem-region-forward")
def test_an_event_no_region_handles_is_ignored_with_its_reason() -> None:
    parent = submitted().executions["r1"]
    result = step(REVIEW, parent, Event(id="x", name="submit"), 5.0, registry=review_registry())
    assert (result.disposition, result.handled, result.emits) == ("ignored", False, [])
    assert result.trace["reason"] == "no active state handles 'submit'"


# --- results at the join --------------------------------------------------------------------------------


@pytest.mark.semantics("sem-region-results", "sem-region-join")
def test_each_done_records_the_region_result_before_the_join_guards_and_actions_run() -> None:
    seen: list[dict[str, Any]] = []
    world = submitted(registry=review_registry(seen), customer="c-7")
    world.send(ALICE, "approve")
    after_alice = world.executions["r1"].context["regions"]
    assert after_alice == {
        "alice": {
            "state": "yes",
            "status": "completed",
            "result": "approved",
            "context": {"customer": "c-7"},
        }
    }
    world.send(BOB, "approve")
    assert world.executions["r1"].configuration == ["reviewing"]  # audit is still running
    world.send("r1", "close")
    root = world.executions["r1"]
    assert root.configuration == ["approved"]
    assert set(seen[0]) == {"alice", "bob", "audit"}  # the guard saw every region's result
    assert root.context["verdict"] == {"alice": "approved", "bob": "approved"}


@pytest.mark.semantics("sem-region-failed", "sem-region-join")
def test_a_region_that_fails_still_counts_as_done_and_its_status_is_recorded() -> None:
    world = submitted()
    world.send(ALICE, "approve")
    world.send(BOB, "reject")
    world.send("r1", "close")
    root = world.executions["r1"]
    assert root.context["regions"]["bob"] == {
        "state": "no",
        "status": "failed",
        "result": "rejected",
        "context": {},
    }
    assert root.configuration == ["rejected"]
    assert root.context["verdict"] == {"alice": "approved", "bob": "rejected"}


@pytest.mark.semantics("sem-order-per-sender")
def test_what_a_region_sends_its_parent_before_it_finishes_leaves_before_its_done() -> None:
    world = submitted()
    world.send(BOB, "approve")
    final_step = world.traces[BOB][-1]
    assert [(e["target"], e["event"]) for e in final_step["emits"]] == [
        ("r1", "bob_voted"),
        ("r1", DONE_EVENT),
    ]
    ids = [e["id"] for e in final_step["emits"]]
    assert ids == [f"{BOB}@1#0", f"{BOB}@1#1"]  # numbered in the order sent: the outbox keeps it
    handled_at_root = [s["event"] for s in world.traces["r1"] if s["event"] in ("bob_voted", DONE_EVENT)]
    assert handled_at_root == ["bob_voted", DONE_EVENT]


REPEAT = load_chart(
    {
        "id": "repeat",
        "version": 1,
        "initial": "work",
        "states": {
            "work": {
                "parallel": {
                    "a": {
                        "initial": "go",
                        "states": {"go": {"on": {"finish": "end"}}, "end": {"final": True}},
                    },
                    "b": {
                        "initial": "go",
                        "states": {"go": {"on": {"finish": "end"}}, "end": {"final": True}},
                    },
                },
                "on_done": "between",
                "on": {"restart": "work"},
            },
            "between": {"on": {"again": "work"}},
        },
    }
)


@pytest.mark.semantics("sem-region-results-reset", "sem-region-children")
def test_entering_the_parallel_state_again_clears_its_results_and_regions_do_not_inherit_them() -> None:
    world = World(REPEAT, Registry())
    world.create(Execution(id="p", definition_id="repeat", definition_version=1, context={"k": 1}))
    world.drain()
    world.send("p", "finish")  # forwarded to both regions
    assert set(world.executions["p"].context["regions"]) == {"a", "b"}
    assert world.executions["p"].configuration == ["between"]
    world.send("p", "again")
    parent = world.executions["p"]
    assert "regions" in parent.context and parent.context["regions"] == {}
    second_a = next(child for child in parent.children if child.startswith("p/work.a@"))
    assert world.executions[second_a].context == {"k": 1}  # the seed carries no `regions`


@pytest.mark.semantics("sem-region-cancel", "sem-diff-parallel-exit-order")
def test_leaving_a_parallel_state_runs_the_parent_exit_first_then_the_regions_exit_when_cancelled() -> None:
    chart = load_chart(
        {
            "id": "leave",
            "version": 1,
            "initial": "p",
            "states": {
                "p": {
                    "exit": ["exit_p"],
                    "parallel": {"r": {"initial": "w", "states": {"w": {"exit": ["exit_w"]}}}},
                    "on": {"stop": "stopped"},
                },
                "stopped": {"final": True},
            },
        }
    )
    order: list[str] = []
    registry = Registry()
    registry.actions["exit_p"] = lambda ctx: order.append("exit_p")
    registry.actions["exit_w"] = lambda ctx: order.append("exit_w")
    world = World(chart, registry)
    world.create(Execution(id="l", definition_id="leave", definition_version=1))
    world.drain()
    world.send("l", "stop")
    assert order == ["exit_p", "exit_w"]
    assert world.executions["l/p.r@0"].status is ExecutionStatus.CANCELLED


@pytest.mark.semantics("sem-versions-pinned")
def test_children_run_the_chart_version_their_parent_pinned() -> None:
    parent = Execution(id="v", definition_id="review", definition_version=1)
    parent = step(REVIEW, parent, Event(id="s", name=START_EVENT), 0.0, registry=review_registry()).execution
    parent = parent.model_copy(update={"version": 1})
    forked = step(REVIEW, parent, Event(id="x", name="submit"), 1.0, registry=review_registry())
    assert {(seed["definition_id"], seed["definition_version"]) for _, _, seed in forked.spawns} == {
        ("review", 1)
    }


@pytest.mark.semantics("sem-rtc-internal-first", "sem-region-forward")
def test_an_event_the_parent_sends_itself_and_does_not_handle_goes_to_its_regions() -> None:
    registry = review_registry()
    registry.actions["noted"] = lambda ctx: ActionResult(send=[Send("approve", to="self")])
    world = submitted(registry=registry, takes_notes=True)
    world.send("r1", "note")
    step_of_note = next(s for s in world.traces["r1"] if s["event"] == "note")
    assert step_of_note["internal"] == [
        {"event": "approve", "id": "r1@2#0", "disposition": "forwarded", "forwarded_to": [ALICE, BOB]}
    ]
    assert world.executions[ALICE].configuration == ["reviewing.alice.yes"]


@pytest.mark.semantics("sem-region-results")
def test_region_results_are_listed_in_the_chart_order_whatever_order_the_dones_arrive_in() -> None:
    world = submitted()
    world.send("r1", "close")  # audit first
    world.send(BOB, "approve")
    world.send(ALICE, "reject")
    assert list(world.executions["r1"].context["regions"]) == ["alice", "bob", "audit"]
