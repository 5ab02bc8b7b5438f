"""A fork/join chart with durable timers, driven by hand through the interpreter and each store backend.

No worker and no transport: the test does what they do, one call at a time, against the store's own API —
commit every step, create children from the spawn entries, deliver the outbox, and fire timers only from
`due_timers(now)` — so what it proves is the store's part: nothing it is given is lost, doubled or early.
"""

from __future__ import annotations

from collections import deque

from harel.app import Registry
from harel.chart import load_chart
from harel.errors import StoreConflict
from harel.interpreter import step
from harel.model import START_EVENT, TIMER_EVENT, ChildSeed, Event, Execution, ExecutionStatus
from tests.conformance.backends import Harness

CHART = load_chart(
    {
        "id": "shipment",
        "version": 1,
        "initial": "fork",
        "states": {
            "fork": {
                "parallel": {
                    "pack": {
                        "initial": "packing",
                        "states": {"packing": {"after": {"2s": "packed"}}, "packed": {"final": True}},
                    },
                    "label": {
                        "initial": "printing",
                        "states": {"printing": {"after": {"5s": "printed"}}, "printed": {"final": True}},
                    },
                },
                "on_done": "cooling",
            },
            "cooling": {"after": {"1s": "shipped"}},
            "shipped": {"final": True},
        },
    }
)


class Hand:
    """The worker's loop, by hand: every write goes through the store under test."""

    def __init__(self, harness: Harness) -> None:
        self.store = harness.store
        self.now = 100.0
        self.inbox: deque[tuple[str, Event]] = deque()
        self.fired: list[tuple[str, str, float, float]] = []
        self.created: list[str] = []

    def deliver(self) -> None:
        while self.inbox:
            target, event = self.inbox.popleft()
            exe, seen = self.store.load_for_event(target, event.id)
            assert exe is not None
            if seen:
                continue
            result = step(CHART, exe, event, self.now, registry=Registry())
            self.store.commit(
                result.execution, result.emits, result.spawns, result.timers, event.id, result.trace
            )
            self.relay()

    def relay(self) -> None:
        for spawn in self.store.pending_spawns():
            child = ChildSeed.model_validate(spawn.context).to_execution(spawn, self.now)
            try:
                self.store.commit(child)
                self.created.append(child.id)
            except StoreConflict:
                pass
            self.inbox.append((child.id, Event(id=f"{child.id}:start", name=START_EVENT)))
            self.store.ack_spawn(spawn.seq)
        for entry in self.store.pending_outbox():
            self.inbox.append((entry.target_id, entry.event))
            self.store.ack_outbox(entry.seq)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for due in self.store.due_timers(self.now):
            self.fired.append((due.execution_id, due.path, due.fire_at, self.now))
            event = Event(
                id=f"{due.execution_id}:t:{due.path}@{due.fire_at}", name=TIMER_EVENT, data=due._asdict()
            )
            self.inbox.append((due.execution_id, event))
            self.store.delete_timer(due.execution_id, due.path, due.fire_at)
        self.deliver()


def test_fork_join_with_durable_timers_through_the_store(harness: Harness) -> None:
    hand = Hand(harness)
    hand.store.commit(Execution(id="r", definition_id="shipment", definition_version=1, created_at=100.0))
    hand.inbox.append(("r", Event(id="r:start", name=START_EVENT)))
    hand.deliver()
    parent = hand.store.load("r")
    assert parent.configuration == ["fork"] and len(parent.children) == 2
    assert len(hand.created) == 2, "one child per region, created from the spawn entries"

    hand.advance(1.999)
    assert hand.fired == [], "no timer fires before its fire_at"
    hand.advance(0.001)
    assert [(p, at >= fire) for _, p, fire, at in hand.fired] == [("fork.pack.packing", True)]
    assert hand.store.load("r").configuration == ["fork"], "one region done: no join yet"

    hand.advance(3.0)
    assert len(hand.fired) == 2
    parent = hand.store.load("r")
    assert parent.configuration == ["cooling"], "the join fired once every region was final"
    joins = [s for s in hand.store.read_trace("r") if any(t["source"] == "fork" for t in s["transitions"])]
    assert len(joins) == 1, "the join fires exactly once"
    for child_id in hand.created:
        assert hand.store.load(child_id).status is ExecutionStatus.COMPLETED

    hand.relay()  # a relay running again finds nothing left to do
    hand.advance(0.5)
    assert hand.store.load("r").status is ExecutionStatus.RUNNING
    hand.advance(0.5)
    parent = hand.store.load("r")
    assert parent.status is ExecutionStatus.COMPLETED and parent.configuration == ["shipped"]
    assert hand.store.next_timer_at() is None, "no timer is left armed"
    assert sorted(hand.created) == sorted(set(hand.created)), "every child created once"
    assert all(at >= fire for _, _, fire, at in hand.fired), "no timer fired early"
