"""The conformance suite can fail: each broken store fails the checks aimed at what it breaks, while
the same checks, built the same way, pass on MongoStore."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harel.store.mongo import MongoStore
from tests.conformance import test_store_conformance as checks
from tests.conformance.backends import BACKENDS, Harness, HarnessPool, StoreOptions
from tests.conformance.broken import FireAtBlindStore, NoVersionFilterStore, SplitCommitStore

Check = Callable[[Harness], None]

CAUGHT_BY: list[tuple[type[MongoStore], Check]] = [
    (NoVersionFilterStore, checks.test_stale_commit_conflicts_and_changes_nothing),
    (NoVersionFilterStore, checks.test_one_writer_per_version),
    (SplitCommitStore, checks.test_commit_is_all_or_nothing_when_a_round_trip_fails),
    (FireAtBlindStore, checks.test_due_timers_respect_fire_at),
]


def run_on(store_class: type[MongoStore], check: Check) -> None:
    [mongomock] = [backend for backend in BACKENDS if backend.name == "mongomock"]
    pool = HarnessPool(mongomock)
    try:
        check(pool.open(StoreOptions(store_class=store_class)))
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("broken", "check"),
    CAUGHT_BY,
    ids=[f"{broken.__name__}-{check.__name__}" for broken, check in CAUGHT_BY],
)
def test_check_fails_on_the_broken_store(broken: type[MongoStore], check: Check) -> None:
    run_on(MongoStore, check)
    with pytest.raises(AssertionError):
        run_on(broken, check)
