"""The conformance suites can fail: each broken store or transport fails the checks aimed at what it
breaks, while the same checks, built the same way, pass on MongoStore and MongoTransport."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.conformance import test_mailbox_conformance as mailbox_checks
from tests.conformance import test_store_conformance as checks
from tests.conformance.backends import BACKENDS, Harness, HarnessPool, StoreOptions
from tests.conformance.broken import (
    CallerClockTimersTransport,
    CallerClockTransport,
    FireAtBlindStore,
    NoVersionFilterStore,
    SplitCommitStore,
)

Check = Callable[[Harness], None]

CAUGHT_BY: list[tuple[type[MongoStore] | type[MongoTransport], Check]] = [
    (NoVersionFilterStore, checks.test_stale_commit_conflicts_and_changes_nothing),
    (NoVersionFilterStore, checks.test_one_writer_per_version),
    (SplitCommitStore, checks.test_commit_is_all_or_nothing_when_a_round_trip_fails),
    (FireAtBlindStore, checks.test_due_timers_are_due_on_the_servers_clock),
    (CallerClockTransport, mailbox_checks.test_leases_run_on_the_servers_clock),
    (
        CallerClockTimersTransport,
        mailbox_checks.test_a_claim_fires_each_due_timer_once_and_leaves_the_others_armed,
    ),
]


def run_on(broken: type[MongoStore] | type[MongoTransport] | None, check: Check) -> None:
    [mongomock] = [backend for backend in BACKENDS if backend.name == "mongomock"]
    pool = HarnessPool(mongomock)
    options = StoreOptions()
    if broken is not None and issubclass(broken, MongoTransport):
        options.transport_class = broken
    elif broken is not None:
        options.store_class = broken
    try:
        check(pool.open(options))
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("broken", "check"),
    CAUGHT_BY,
    ids=[f"{broken.__name__}-{check.__name__}" for broken, check in CAUGHT_BY],
)
def test_check_fails_on_the_broken_backend(
    broken: type[MongoStore] | type[MongoTransport], check: Check
) -> None:
    run_on(None, check)
    with pytest.raises(AssertionError):
        run_on(broken, check)
