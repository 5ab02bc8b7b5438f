"""A fork/join chart with durable timers, driven by hand through the interpreter, each store and its
transport.

No worker: the test does what a worker does, one call at a time, against the backends' own API — claim an
execution, step its pending events, commit them with the claim, create the children and deliver the outbox
the commit wrote; timers are fired by the claims themselves — so what it proves is the backends' part: nothing
they are given is lost, doubled, reordered or early, on the server's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harel.app import Registry
from harel.chart import load_chart
from harel.executions.records import RelayWork, StepRecord
from harel.interpreter import step
from harel.model import TIMER_EVENT, Execution, ExecutionStatus, start_event
from harel.transport.base import SendOutcome
from tests.conformance.backends import Harness

PACK, LABEL, COOL = 0.3, 0.6, 0.2
SETTLE_TIMEOUT = 20.0
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
                        "states": {"packing": {"after": {f"{PACK}s": "packed"}}, "packed": {"final": True}},
                    },
                    "label": {
                        "initial": "printing",
                        "states": {
                            "printing": {"after": {f"{LABEL}s": "printed"}},
                            "printed": {"final": True},
                        },
                    },
                },
                "on_done": "cooling",
            },
            "cooling": {"after": {f"{COOL}s": "shipped"}},
            "shipped": {"final": True},
        },
    }
)
CHARTS = ["shipment@1"]


class Hand:
    """The worker's loop, by hand: every read and write goes through the backend under test."""

    def __init__(self, harness: Harness) -> None:
        self.store = harness.store
        self.transport = harness.transport
        self.fired: list[tuple[str, str, float, float]] = []
        self.created: list[str] = []
        self.applied: dict[str, list[str]] = {}

    def work(self) -> None:
        """Claim and apply until nothing is due."""
        while (claim := self.transport.claim(CHARTS, 30.0, time.time() + 3600)) is not None:
            exe = claim.execution
            records, steps = [], []
            for n, pending in enumerate(claim.pending):
                if pending.event.name == TIMER_EVENT:
                    timer = pending.event.data
                    self.fired.append(
                        (claim.execution_id, timer["path"], timer["fire_at"], claim.server_time)
                    )
                result = step(
                    CHART,
                    exe.model_copy(update={"version": claim.execution.version + n}),
                    pending.event,
                    claim.server_time,
                    registry=Registry(),
                )
                exe = result.execution
                steps.append(result)
                records.append(StepRecord(pending.id, result.emits, result.spawns, result.trace))
                self.applied.setdefault(claim.execution_id, []).append(pending.event.name)
            parts = self.store.commit_claim(
                claim,
                exe,
                records,
                applied=list(claim.pending),
                timers_changed=any(s.timers for s in steps),
            )
            self.relay(RelayWork(parts.execution_id, parts.outbox_entries(), parts.spawn_entries()))

    def relay(self, work: RelayWork) -> None:
        assert self.store.create_children(work.spawns, now=time.time()) == []
        self.created += [s.child_id for s in work.spawns]
        for entry in work.outbox:
            assert (
                self.transport.send(entry.target_id, entry.event, source=entry.source_id)
                is SendOutcome.QUEUED
            )
        self.store.ack_relay(
            work.execution_id, [e.seq for e in work.outbox], [s.seq for s in work.spawns], retry_in=1.0
        )

    def until(self, done: Callable[[], bool], timeout: float) -> None:
        """Work until `done` (what happened is read from the store and the trace afterwards, never from how
        long the loop ran: on a loaded machine one pass may take longer than a timer)."""
        deadline = time.time() + timeout
        while not done():
            assert time.time() < deadline, f"not done within {timeout:.0f}s"
            self.work()
            time.sleep(0.01)


def test_fork_join_with_durable_timers_through_the_backends(harness: Harness) -> None:
    hand = Hand(harness)
    started = time.time()
    root = Execution(id="r", definition_id="shipment", definition_version=1, created_at=started)
    assert hand.store.create(root, [start_event("r", started)], now=started)
    hand.work()
    parent = hand.store.load("r")
    assert parent.configuration == ["fork"] and len(parent.children) == 2
    assert len(hand.created) == 2, "one child per region, created from the spawn entries"
    hand.work()
    assert all(hand.store.load(c).configuration for c in hand.created), "each child started from its mailbox"

    hand.until(lambda: hand.store.load("r").status is ExecutionStatus.COMPLETED, SETTLE_TIMEOUT)

    fired = [path for _, path, _, _ in hand.fired]
    assert fired == ["fork.pack.packing", "fork.label.printing", "cooling"], "each timer once, when due"
    assert all(at >= fire for _, _, fire, at in hand.fired), "no timer fired early by the server's clock"
    trace = hand.store.read_trace("r")
    assert [s["event"] for s in trace if s["handled"]] == [
        "harel.start",
        "harel.done",
        "harel.done",
        "harel.timer",
    ]
    joins = [s for s in trace if any(t["source"] == "fork" for t in s["transitions"])]
    dones = [s for s in trace if s["event"] == "harel.done"]
    assert len(joins) == 1, "the join fires exactly once"
    assert joins[0]["index"] == dones[1]["index"], "one region done: no join yet; both done: the join"
    assert [t["target"] for t in joins[0]["transitions"]] == ["cooling"]
    for child_id in hand.created:
        assert hand.store.load(child_id).status is ExecutionStatus.COMPLETED
    parent = hand.store.load("r")
    assert parent.configuration == ["shipped"]
    assert harness.raw("r")["next_fire_at"] is None, "no timer is left armed"
    assert sorted(hand.created) == sorted(set(hand.created)), "every child created once"
    assert hand.applied["r"] == ["harel.start", "harel.done", "harel.done", "harel.timer"]
    assert hand.transport.pending_count() == 0 and hand.store.pending_outbox() == []
