"""The store-wide audit (tests/audit.py) that the crash-window, clock-skew and chaos tests rest on: it passes
a clean run and names each kind of loss, doubling, earliness or leftover."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.audit import Lease, audit, leases_taken_early


def _step(index: int, event: str, event_id: str, at: float, **extra: Any) -> dict[str, Any]:
    return {"index": index, "event": event, "event_id": event_id, "at": at, "handled": True, **extra}


def _clean() -> list[dict[str, Any]]:
    """A root that spawned one child; the child's timer fired 0.1 s late; both completed."""
    idle = {
        "inbox": [],
        "outbox": [],
        "spawns": [],
        "lease": None,
        "parked": None,
        "relay_at": None,
        "inbox_at": None,
        "last_error": None,
        "timers": {},
        "next_fire_at": None,
        "status": "completed",
        "data": "{}",
    }
    root = {
        "_id": "root",
        "parent_id": None,
        "version": 3,
        "processed": ["root:start", "child@2#0"],
        "trace": [
            _step(1, "harel.start", "root:start", 10.0, spawns=["child"]),
            _step(2, "harel.done", "child@2#0", 11.5),
        ],
        **idle,
    }
    child = {
        "_id": "child",
        "parent_id": "root",
        "version": 3,
        "processed": ["child:start", "child:timer"],
        "trace": [
            _step(1, "harel.start", "child:start", 10.1),
            _step(2, "harel.timer", "child:timer", 11.2, timer_fire_at=11.1),
        ],
        **idle,
    }
    return [root, child]


def test_a_clean_run_passes_and_its_lateness_is_collected() -> None:
    result = audit(_clean())
    assert result.passed, result.failures
    assert (result.executions, result.steps, result.timers) == (2, 4, 1)
    assert result.lateness == pytest.approx([0.1])


Mutation = Callable[[list[dict[str, Any]]], None]


def _early_timer(docs: list[dict[str, Any]]) -> None:
    docs[1]["trace"][1]["at"] = 11.0


def _applied_twice(docs: list[dict[str, Any]]) -> None:
    docs[0]["trace"].append(_step(3, "harel.done", "child@2#0", 11.6))
    docs[0]["version"] = 4


def _left_in_the_mailbox(docs: list[dict[str, Any]]) -> None:
    docs[0]["inbox"] = [{"id": "late"}]


def _relay_left(docs: list[dict[str, Any]]) -> None:
    docs[0]["spawns"] = [{"child_id": "other"}]
    docs[0]["relay_at"] = 12.0


def _started_twice(docs: list[dict[str, Any]]) -> None:
    docs[1]["trace"].append(_step(3, "harel.start", "child:start-again", 11.3))
    docs[1]["version"] = 4


def _child_missing(docs: list[dict[str, Any]]) -> None:
    del docs[1]


def _not_finished(docs: list[dict[str, Any]]) -> None:
    docs[1]["status"] = "running"
    docs[1]["timers"] = {"waiting": 12.0}


def _steps_missing(docs: list[dict[str, Any]]) -> None:
    docs[0]["version"] = 5


def _twice_in_the_window(docs: list[dict[str, Any]]) -> None:
    docs[1]["processed"].append("child:start")


MUTATIONS: list[tuple[Mutation, str]] = [
    (_early_timer, "before its fire_at"),
    (_applied_twice, "took effect 2 times"),
    (_left_in_the_mailbox, "inbox left"),
    (_relay_left, "spawns left"),
    (_started_twice, "started 2 times"),
    (_child_missing, "never created"),
    (_not_finished, "status 'running'"),
    (_steps_missing, "does not hold every step"),
    (_twice_in_the_window, "2 times in the dedupe window"),
]


@pytest.mark.parametrize(("mutate", "named"), MUTATIONS, ids=[m.__name__.strip("_") for m, _ in MUTATIONS])
def test_each_kind_of_damage_is_named(mutate: Mutation, named: str) -> None:
    documents = copy.deepcopy(_clean())
    mutate(documents)
    result = audit(documents)
    assert not result.passed
    assert any(named in failure for failure in result.failures), result.failures


def test_executions_meant_to_keep_running_may() -> None:
    documents = _clean()
    documents[1]["status"] = "running"
    assert audit(documents, running={"child"}).passed


def test_a_lease_taken_over_before_it_expired_is_named() -> None:
    first = Lease("x", "a", at=100.0, until=102.0, previous=None, seconds=2.0)
    on_time = Lease("x", "b", at=102.5, until=104.5, previous="a", seconds=2.0)
    assert leases_taken_early([first, on_time]) == []
    early = Lease("x", "b", at=101.0, until=103.0, previous="a", seconds=2.0)
    assert "before lease a expired" in leases_taken_early([first, early])[0]
    claimed_on_its_own_clock = Lease("x", "b", at=102.5, until=103.0, previous="a", seconds=2.0)
    failures = leases_taken_early([first, claimed_on_its_own_clock])
    assert any("the server's time of the claim was 101.000" in f for f in failures)
