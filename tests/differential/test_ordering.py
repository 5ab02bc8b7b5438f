"""Order over the worker: what a region sends its parent before it finishes is applied before its done."""

from __future__ import annotations

import pytest

from harel.app import App
from harel.backend import open_backend
from harel.chart import load_chart
from harel.client import send_event, start_execution
from harel.worker import Worker, WorkerConfig

from .harel_side import HarelRun, JumpClock, wait_until_quiescent
from .vocabulary import harel_registry

VOTES = load_chart(
    {
        "id": "votes",
        "version": 1,
        "initial": "ballot",
        "states": {
            "ballot": {
                "on": {"vote": {"actions": ["inc:votes:ballot"]}},
                "parallel": {
                    name: {
                        "initial": "open",
                        "states": {
                            "open": {"on": {"approve": {"target": "cast", "actions": [f"up:vote:{name}"]}}},
                            "cast": {"final": True},
                        },
                    }
                    for name in ("alice", "bob", "carol")
                },
                "on_done": [{"target": "carried", "guard": "ge:votes:3"}, {"target": "lost"}],
            },
            "carried": {"final": True},
            "lost": {"final": True},
        },
    }
)


@pytest.mark.semantics("sem-order-per-sender", "sem-region-forward", "sem-region-join")
@pytest.mark.parametrize("run", range(5))
def test_every_vote_sent_before_a_region_finished_is_counted_at_the_join(run: int) -> None:
    harel = HarelRun(VOTES, root_id=f"votes-{run}")
    try:
        harel.send("approve")  # forwarded to the three regions; each votes, then finishes
        root = harel.backend.store.load(harel.root_id)
        assert root is not None
        assert root.configuration == ["carried"], root.context
        assert root.context["votes"] == 3
    finally:
        harel.close()


APPROVAL = load_chart(
    {
        "id": "approval",
        "version": 1,
        "initial": "review",
        "states": {
            "review": {
                "parallel": {
                    name: {
                        "initial": "reading",
                        "states": {
                            "reading": {"on": {f"{name}_yes": "yes", f"{name}_no": "no"}},
                            "yes": {"final": True, "result": "approved"},
                            "no": {"final": True, "result": "rejected"},
                        },
                    }
                    for name in ("alice", "bob")
                },
                "on_done": [{"target": "approved", "guard": "results_all:approved"}, {"target": "rejected"}],
            },
            "approved": {"final": True},
            "rejected": {"final": True},
        },
    }
)


@pytest.mark.semantics("sem-region-results", "sem-region-join")
def test_an_approval_join_decides_from_both_results_in_100_of_100_runs_with_3_workers() -> None:
    runs = 100
    backend = open_backend("mongomock://")
    app = App("approvals")
    app.chart(APPROVAL)
    app.registry.guards.update(harel_registry(APPROVAL).guards)
    clock = JumpClock()
    workers = [
        Worker(backend.store, backend.transport, app, config=WorkerConfig(concurrency=2, idle_poll_max=0.02))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    try:
        votes = {
            f"approval-{i}": ("yes" if i % 2 else "no", "yes" if (i // 2) % 2 else "no") for i in range(runs)
        }
        for run_id in votes:
            start_execution(backend.store, backend.transport, app, "approval", execution_id=run_id)
        wait_until_quiescent(backend, clock, timeout=120)
        for run_id, (alice, bob) in votes.items():
            send_event(backend.store, backend.transport, app, run_id, f"bob_{bob}")
            send_event(backend.store, backend.transport, app, run_id, f"alice_{alice}")
        wait_until_quiescent(backend, clock, timeout=120)
        outcomes = {}
        for run_id, (alice, bob) in votes.items():
            root = backend.store.load(run_id)
            assert root is not None
            outcomes[run_id] = (root.configuration, "approved" if alice == bob == "yes" else "rejected")
        wrong = {run_id: got for run_id, (got, expected) in outcomes.items() if got != [expected]}
        assert wrong == {}, f"{len(wrong)} of {runs} runs decided wrongly"
    finally:
        for worker in workers:
            worker.stop(drain_seconds=2.0)
        backend.close()
