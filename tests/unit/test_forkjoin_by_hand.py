"""Whole workflows through the interpreter alone: a hand-run stand-in for the store, relays and sweep.

`World` does by hand what the worker does with a store: it commits each step (version + 1), creates the
children a step spawns from their ChildSeed and starts them, delivers emitted events, keeps the timer
table the TimerOps describe, and fires a timer only once the clock has passed its `fire_at`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from harel.app import ActionContext, ActionResult, Registry, Send
from harel.chart import Chart, load_chart
from harel.interpreter import step
from harel.model import (
    CANCEL_EVENT,
    DONE_EVENT,
    START_EVENT,
    TIMER_EVENT,
    ChildSeed,
    Event,
    Execution,
    ExecutionStatus,
    SpawnEntry,
)

from .test_chart import ORDER_YAML


class World:
    def __init__(self, chart: Chart, registry: Registry, *, duplicate_done: bool = False) -> None:
        self.chart = chart
        self.registry = registry
        self.duplicate_done = duplicate_done
        self.now = 0.0
        self.executions: dict[str, Execution] = {}
        self.traces: dict[str, list[dict[str, Any]]] = {}
        self.processed: dict[str, set[str]] = {}
        self.timer_table: dict[tuple[str, str], float] = {}
        self.queue: deque[tuple[str, Event]] = deque()
        self.spawn_seq = 0

    def create(self, exe: Execution) -> None:
        self.executions[exe.id] = exe
        self.traces[exe.id] = []
        self.processed[exe.id] = set()
        self.queue.append((exe.id, Event(id=f"{exe.id}:start", name=START_EVENT)))

    def send(self, target: str, name: str) -> None:
        self.queue.append((target, Event(id=f"{target}:{name}@{self.now}", name=name)))
        self.drain()

    def drain(self) -> None:
        while self.queue:
            target, event = self.queue.popleft()
            exe = self.executions[target]
            if event.id in self.processed[target]:
                continue
            if not exe.started and event.name not in (START_EVENT, CANCEL_EVENT):
                self.queue.append((target, event))  # the worker releases it until the start has run
                continue
            self.apply(exe, event)

    def apply(self, exe: Execution, event: Event) -> None:
        result = step(self.chart, exe, event, self.now, registry=self.registry)
        committed = result.execution.model_copy(deep=True)
        committed.version += 1
        self.executions[exe.id] = committed
        self.processed[exe.id].add(event.id)
        self.traces[exe.id].append(result.trace)
        for op in result.timers:
            if op.action == "schedule":
                self.timer_table[(exe.id, op.path)] = op.fire_at
            else:
                self.timer_table.pop((exe.id, op.path), None)
        assert {p: t for (e, p), t in self.timer_table.items() if e == exe.id} == committed.timers
        for target, emitted in result.emits:
            assert target is not None
            self.queue.append((target, emitted))
            if self.duplicate_done and emitted.name == DONE_EVENT:
                # A copy the dedupe mark cannot catch (another id): the join must still fire once.
                self.queue.append((target, emitted.model_copy(update={"id": f"{emitted.id}:copy"})))
        for child_id, root_path, seed in result.spawns:
            self.spawn_seq += 1
            entry = SpawnEntry(self.spawn_seq, exe.id, child_id, root_path, seed)
            self.create(ChildSeed.model_validate(seed).to_execution(entry, self.now))

    def advance(self, now: float) -> int:
        """Move the clock and fire every due timer (value-guarded delete, as the sweep does)."""
        self.now = now
        due = sorted(((t, e, p) for (e, p), t in self.timer_table.items() if t <= now))
        for fire_at, exe_id, path in due:
            self.queue.append(
                (
                    exe_id,
                    Event(
                        id=f"{exe_id}:timer:{path}@{fire_at}",
                        name=TIMER_EVENT,
                        data={"path": path, "fire_at": fire_at},
                    ),
                )
            )
            if self.timer_table.get((exe_id, path)) == fire_at:
                del self.timer_table[(exe_id, path)]
        self.drain()
        return len(due)

    def handled(self, exe_id: str, name: str) -> list[dict[str, Any]]:
        return [s for s in self.traces[exe_id] if s["handled"] and s["event"] == name]

    def joins(self, exe_id: str, fork: str) -> list[dict[str, Any]]:
        return [s for s in self.traces[exe_id] if any(t["source"] == fork for t in s["transitions"])]


def order_registry(charge_succeeds: bool) -> Registry:
    registry = Registry()
    registry.guards["order_is_valid"] = lambda ctx: ctx.context.get("total", 0) > 0

    def charge_card(ctx: ActionContext) -> ActionResult:
        sends = [Send("charged", to="self")] if charge_succeeds else []
        return ActionResult(context={"charge_tried_at": ctx.now}, send=sends)

    registry.actions["charge_card"] = charge_card
    return registry


ORDER = load_chart(ORDER_YAML)
PAYMENT = "order-1/fulfilling.payment@1"
SHIPPING = "order-1/fulfilling.shipping@1"


def start_order(world: World) -> None:
    world.create(Execution(id="order-1", definition_id="order", definition_version=1, context={"total": 5}))
    world.drain()
    world.advance(1.0)
    world.send("order-1", "approve")


def assert_timers_fired_on_time(world: World) -> None:
    for trace in world.traces.values():
        for entry in trace:
            if entry["event"] == TIMER_EVENT and entry["handled"]:
                assert entry["at"] >= entry["timer_fire_at"]


def test_order_fork_join_with_a_durable_timer() -> None:
    world = World(ORDER, order_registry(charge_succeeds=True))
    start_order(world)

    root = world.executions["order-1"]
    assert root.configuration == ["fulfilling"]
    assert set(root.children) == {PAYMENT, SHIPPING}
    payment = world.executions[PAYMENT]
    assert payment.status is ExecutionStatus.COMPLETED
    assert payment.configuration == ["fulfilling.payment.paid"]
    assert payment.context == {"total": 5, "charge_tried_at": 1.0}
    assert root.children[PAYMENT].done
    assert not root.children[SHIPPING].done
    assert world.timer_table == {
        (SHIPPING, "fulfilling.shipping.packing"): 3.0
    }  # payment's 30s timer cancelled

    assert world.advance(2.999) == 0
    assert world.executions["order-1"].configuration == ["fulfilling"]
    assert world.executions[SHIPPING].configuration == ["fulfilling.shipping.packing"]

    assert world.advance(3.0) == 1
    root = world.executions["order-1"]
    assert root.status is ExecutionStatus.COMPLETED
    assert root.configuration == ["delivered"]
    assert root.children == {}
    assert world.executions[SHIPPING].status is ExecutionStatus.COMPLETED
    assert len(world.joins("order-1", "fulfilling")) == 1
    assert len(world.handled(SHIPPING, TIMER_EVENT)) == 1
    assert world.handled(PAYMENT, TIMER_EVENT) == []
    assert world.timer_table == {}
    assert_timers_fired_on_time(world)
    assert world.advance(100.0) == 0


def test_a_region_that_times_out_and_duplicate_done_events_still_join_once() -> None:
    world = World(ORDER, order_registry(charge_succeeds=False), duplicate_done=True)
    start_order(world)
    world.advance(3.0)
    assert world.executions[SHIPPING].status is ExecutionStatus.COMPLETED
    assert world.executions["order-1"].configuration == ["fulfilling"]

    assert world.advance(30.999) == 0
    assert world.executions[PAYMENT].configuration == ["fulfilling.payment.charging"]
    assert world.advance(31.0) == 1
    assert world.executions[PAYMENT].configuration == ["fulfilling.payment.failed"]

    root = world.executions["order-1"]
    assert root.status is ExecutionStatus.COMPLETED
    assert root.configuration == ["delivered"]
    assert len(world.joins("order-1", "fulfilling")) == 1
    ignored = [s["reason"] for s in world.traces["order-1"] if s["event"] == DONE_EVENT and not s["handled"]]
    assert ignored == [f"child {SHIPPING!r} is already done", "execution is completed"]
    assert_timers_fired_on_time(world)


NESTED_FORK = load_chart(
    {
        "id": "nested-fork",
        "version": 1,
        "initial": "outer",
        "states": {
            "outer": {
                "parallel": {
                    "a": {
                        "initial": "inner",
                        "states": {
                            "inner": {
                                "parallel": {
                                    "x": {
                                        "initial": "x1",
                                        "states": {"x1": {"after": {"1s": "x2"}}, "x2": {"final": True}},
                                    },
                                    "y": {
                                        "initial": "y1",
                                        "states": {"y1": {"after": {"2s": "y2"}}, "y2": {"final": True}},
                                    },
                                },
                                "on_done": "a_done",
                            },
                            "a_done": {"final": True},
                        },
                    },
                    "b": {"initial": "b1", "states": {"b1": {"final": True}}},
                },
                "on_done": "end",
            },
            "end": {"final": True},
        },
    }
)
CHILD_A = "n1/outer.a@0"
GRANDCHILD_X = f"{CHILD_A}/outer.a.inner.x@0"
GRANDCHILD_Y = f"{CHILD_A}/outer.a.inner.y@0"


def test_nested_parallel_states_fork_grandchildren_and_join_level_by_level() -> None:
    world = World(NESTED_FORK, Registry())
    world.create(Execution(id="n1", definition_id="nested-fork", definition_version=1))
    world.drain()
    assert set(world.executions) == {"n1", CHILD_A, "n1/outer.b@0", GRANDCHILD_X, GRANDCHILD_Y}
    assert world.executions["n1/outer.b@0"].status is ExecutionStatus.COMPLETED  # final at once
    child_a = world.executions[CHILD_A]
    assert child_a.configuration == ["outer.a.inner"]
    assert set(child_a.children) == {GRANDCHILD_X, GRANDCHILD_Y}
    assert world.executions[GRANDCHILD_X].siblings == {"x": GRANDCHILD_X, "y": GRANDCHILD_Y}
    assert world.executions[GRANDCHILD_X].parent_id == CHILD_A

    world.advance(1.0)
    assert world.executions[GRANDCHILD_X].status is ExecutionStatus.COMPLETED
    assert world.executions["n1"].status is ExecutionStatus.RUNNING
    world.advance(2.0)
    assert world.executions[CHILD_A].configuration == ["outer.a.a_done"]
    assert world.executions[CHILD_A].status is ExecutionStatus.COMPLETED
    assert len(world.joins(CHILD_A, "outer.a.inner")) == 1
    assert world.executions["n1"].configuration == ["end"]
    assert world.executions["n1"].status is ExecutionStatus.COMPLETED
    assert len(world.joins("n1", "outer")) == 1


def test_cancelling_the_root_cascades_to_children_and_grandchildren() -> None:
    world = World(NESTED_FORK, Registry())
    world.create(Execution(id="n1", definition_id="nested-fork", definition_version=1))
    world.drain()
    world.send("n1", CANCEL_EVENT)
    statuses = {exe_id: exe.status for exe_id, exe in world.executions.items()}
    assert statuses == {
        "n1": ExecutionStatus.CANCELLED,
        CHILD_A: ExecutionStatus.CANCELLED,
        "n1/outer.b@0": ExecutionStatus.COMPLETED,  # done before the cancel: not cancelled again
        GRANDCHILD_X: ExecutionStatus.CANCELLED,
        GRANDCHILD_Y: ExecutionStatus.CANCELLED,
    }
    assert world.timer_table == {}
    assert world.advance(10.0) == 0
