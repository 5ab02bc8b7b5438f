"""The fault suite: each scenario says what "nothing lost" means for it, and asserts exactly that.

Faults are injected the way a real replica set would produce them: the server's `failCommand` fail point
(`configureFailPoint`, so the same tests run on a deployment started with `enableTestCommands=1`, and are
skipped, saying why, where it is refused), SIGKILL of a worker process, and — for "applied, then the
connection was lost", which no fail point produces — the fake server's test-only hook (skipped in real
mode). Fail points are confined by appName to the clients under test; the `admin` client is never caught.

The fine-grained scenarios drive workers in this process one `process_one` / `relay_once` at a time on the
tally chart (tests/wire/in_process.py); the process scenarios and the smoke runs check a whole fork/join
workflow with the smoke checker: completed, every child created and started once, every timer fired
once and not early, the join after every region, no event taking effect twice.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect

from harel.aio_store import AsyncMongoStore
from harel.app import App
from harel.client import start_execution
from harel.connection import connect_async
from harel.errors import StoreConflict
from harel.model import START_EVENT, Execution, ExecutionStatus
from harel.smoke import REGIONS, SMOKE_CHART_ID, check, gather, register_smoke, run_smoke
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, start_event_id
from tests.accounting import CommandAccounting
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.fixtures import Deployment
from tests.wire.in_process import (
    SMOKE_TIMEOUT,
    Seam,
    Seams,
    Tally,
    bump,
    handled_events,
    loaded,
    process_until,
    running,
    smoke_app,
    start_tally,
    tally_app,
)
from tests.wire.processes import WorkerProcesses, wait_until, with_app_name

pytestmark = pytest.mark.wire

RETRYABLE = ["RetryableWriteError"]
HOST_UNREACHABLE = 6  # retryable, but not a "not primary" error: the driver raises OperationFailure
MAX_TIME_MS_EXPIRED = 50  # not retryable
NOT_WRITABLE_PRIMARY = 10107
APPLIED_THEN_LOST = "no server fail point applies a write and then drops the connection"
REDELIVERY_TIMEOUT = 10.0


BUMP = "bump-1"


@pytest.fixture
def tally() -> Tally:
    return tally_app()


@dataclass
class PendingBump:
    """A started tally execution with one `bump` queued, the worker (its own clients) that will handle it,
    the stored document before it does, and an accounting of that worker's commands from then on."""

    seam: Seam
    worker: Worker
    execution_id: str
    before: dict[str, Any]
    accounting: CommandAccounting

    def commits(self) -> tuple[int, int]:
        """Commit updates sent since the bump was queued, and how many of them failed."""
        updates = self.accounting.tally(collection="executions", command="update")
        return updates.commands, updates.failures

    def unknown_outcomes(self) -> float:
        value = self.worker.metrics.registry.get_sample_value("harel_unknown_commit_outcomes_total")
        return value or 0.0

    def message(self, admin: MongoClient[Any], db_name: str) -> dict[str, Any]:
        found = admin[db_name].queue.find_one({"_id": BUMP})
        assert found is not None, "the bump's message is not queued"
        return found

    def process_under_fault(
        self, admin: MongoClient[Any], times: int, command: str, code: int, labels: list[str] | None = None
    ) -> None:
        """Handle the bump while the store's next `times` `command`s fail with `code` (and `labels`)."""
        labels_option = {} if labels is None else {"errorLabels": labels}
        with fail_command(
            admin,
            {"times": times},
            failCommands=[command],
            errorCode=code,
            appName=self.seam.store_app,
            **labels_option,
        ):
            assert self.worker.process_one()

    def assert_took_effect_once(self) -> None:
        """One commit, one count, one trace step, one dedupe mark; the message is gone from the queue."""
        exe = loaded(self.seam, self.execution_id)
        assert exe.version == self.before["version"] + 1
        assert exe.context["count"] == 1
        assert handled_events(self.seam, self.execution_id).count(BUMP) == 1
        document = self.seam.store.document(self.execution_id)
        assert document is not None
        assert document["processed"].count(BUMP) == 1
        assert self.seam.transport.depth() == 0

    def assert_untouched(self) -> None:
        """The stored document is exactly as it was, and the message waits in the queue."""
        assert self.seam.store.document(self.execution_id) == self.before
        assert not self.seam.store.is_processed(self.execution_id, BUMP)
        assert self.seam.transport.depth() == 1


def pending_bump(seams: Seams, tally: Tally, name: str, **config: Any) -> PendingBump:
    accounting = CommandAccounting()
    seam = seams.open(name, listeners=(accounting,))
    worker = seam.worker(tally.app, **config)
    execution_id = start_tally(seam, tally, worker)
    bump(seam, tally, execution_id, BUMP)
    before = seam.store.document(execution_id)
    assert before is not None
    accounting.clear()
    return PendingBump(seam, worker, execution_id, before, accounting)


# --- the reply of a commit lost after the server applied it ------------------------------------------


def test_commit_applied_then_connection_lost_is_answered_by_the_driver_retry(
    replica_set: Deployment, seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the bump takes effect once. The server applied the commit and closed
    the connection before replying; PyMongo retried the same write (same session and txnNumber), and the
    server answered the retry with the recorded outcome instead of applying it again."""
    server = replica_set.require_fake(APPLIED_THEN_LOST)
    pending = pending_bump(seams, tally, "lost-reply")
    server.fail_after_apply("update", app_name=pending.seam.store_app)

    assert pending.worker.process_one()

    pending.assert_took_effect_once()
    assert pending.commits() == (2, 1)
    assert pending.unknown_outcomes() == 0


def test_commit_applied_then_both_replies_lost_is_resolved_by_the_dedupe_mark(
    replica_set: Deployment, seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the bump takes effect once and its message is acked. The commit was
    applied and the connection closed, and the driver's retry (answered from the record) lost its reply
    too: the outcome is unknown to the worker, which reads the dedupe mark, finds the commit there, and
    acks without committing again."""
    server = replica_set.require_fake(APPLIED_THEN_LOST)
    pending = pending_bump(seams, tally, "lost-replies")
    server.fail_after_apply("update", times=2, app_name=pending.seam.store_app)

    assert pending.worker.process_one()

    pending.assert_took_effect_once()
    assert pending.unknown_outcomes() == 1
    assert pending.commits() == (2, 2)  # no third commit: the mark said it was applied
    assert pending.worker.counters["processed"] == 2  # the start and the bump


# --- the counters' findAndModify ------------------------------------------------------------------------


def test_counters_call_with_a_retryable_error_is_retried_and_draws_once(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the bump takes effect once and its outbox entry has seq 1. The
    counters' findAndModify failed with NotWritablePrimary (not executed) and PyMongo's retry drew the
    block: the counter moved by exactly one."""
    pending = pending_bump(seams, tally, "counters-retry")

    pending.process_under_fault(admin, 1, "findAndModify", NOT_WRITABLE_PRIMARY, RETRYABLE)

    pending.assert_took_effect_once()
    draws = pending.accounting.tally(collection="counters", command="findAndModify")
    assert (draws.commands, draws.failures) == (2, 1)
    assert admin[replica_set.db_name].counters.find_one({"_id": "seq"}) == {"_id": "seq", "n": 1}
    assert [entry.seq for entry in pending.seam.store.pending_outbox()] == [1]


def test_counters_call_failing_fails_the_attempt_and_the_redelivery_takes_effect_once(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost: the counters' findAndModify failed with a non-retryable error, so the commit stopped
    before its update — the execution is untouched and the message is nacked, not dropped. It is
    redelivered after its backoff and takes effect once."""
    pending = pending_bump(seams, tally, "counters-fail")

    pending.process_under_fault(admin, 1, "findAndModify", MAX_TIME_MS_EXPIRED)

    pending.assert_untouched()
    message = pending.message(admin, replica_set.db_name)
    assert message["attempts"] == 1
    assert message["last_error"].startswith("ExecutionTimeout")
    process_until(pending.worker, REDELIVERY_TIMEOUT, "the nacked bump's redelivery")
    pending.assert_took_effect_once()


# --- NotWritablePrimary and friends on the commit ---------------------------------------------------------


def test_not_writable_primary_is_retried_once_by_the_driver(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the commit's update failed with NotWritablePrimary and the
    RetryableWriteError label, PyMongo retried it once and the retry succeeded; the worker never saw it."""
    pending = pending_bump(seams, tally, "not-primary")

    pending.process_under_fault(admin, 1, "update", NOT_WRITABLE_PRIMARY, RETRYABLE)

    pending.assert_took_effect_once()
    assert pending.commits() == (2, 1)
    assert pending.unknown_outcomes() == 0


def test_both_attempts_failing_surfaces_the_error_and_the_redelivery_takes_effect_once(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost: both the commit and PyMongo's retry failed (HostUnreachable, retryable). The error
    reached the worker, the execution is exactly as it was, and the message was nacked with the error;
    it is redelivered after its backoff and takes effect once."""
    pending = pending_bump(seams, tally, "both-fail")

    pending.process_under_fault(admin, 2, "update", HOST_UNREACHABLE, RETRYABLE)

    assert pending.commits() == (2, 2)
    pending.assert_untouched()
    message = pending.message(admin, replica_set.db_name)
    assert message["attempts"] == 1
    assert message["last_error"].startswith("OperationFailure")
    assert "HostUnreachable" in message["last_error"]
    process_until(pending.worker, REDELIVERY_TIMEOUT, "the nacked bump's redelivery")
    pending.assert_took_effect_once()


def test_not_writable_primary_on_both_attempts_is_resolved_by_the_dedupe_mark(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: both attempts of the commit failed with NotWritablePrimary, which
    the driver raises as a connection-class error, so the worker treats the outcome as unknown: it reads
    the dedupe mark, finds the commit absent, steps again and commits once."""
    pending = pending_bump(seams, tally, "not-primary-twice")

    pending.process_under_fault(admin, 2, "update", NOT_WRITABLE_PRIMARY, RETRYABLE)

    pending.assert_took_effect_once()
    assert pending.unknown_outcomes() == 1
    assert pending.commits() == (3, 2)


def test_not_writable_primary_outlasting_the_attempts_nacks_with_that_error(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost: every attempt the worker makes fails with NotWritablePrimary (a primary that stays
    away). The execution is untouched, the message is nacked with the driver's error as its last error,
    and once the primary is back the redelivery takes effect once."""
    pending = pending_bump(seams, tally, "not-primary-long", conflict_retries=2)

    pending.process_under_fault(
        admin, 4, "update", NOT_WRITABLE_PRIMARY, RETRYABLE
    )  # two worker attempts, each a commit and the driver's retry

    pending.assert_untouched()
    assert pending.message(admin, replica_set.db_name)["last_error"].startswith("NotPrimaryError")
    process_until(pending.worker, REDELIVERY_TIMEOUT, "the nacked bump's redelivery")
    pending.assert_took_effect_once()


# --- a lease expiring while a slow action runs --------------------------------------------------------------


def test_lease_expiring_during_a_slow_action_is_absorbed_by_dedupe(seams: Seams) -> None:
    """Nothing doubled: the slow worker's lease ran out while its action ran, so a second worker claimed
    the same message, ran the action and committed. The action ran twice (delivery is at least once), the
    bump took effect once: the slow worker's late commit lost the CAS, it reloaded, found the dedupe mark
    and counted a redelivery; its ack was refused, the message being gone."""
    tally = tally_app(slow_first_call=1.5)
    fast_seam, slow_seam = seams.open("lease-fast"), seams.open("lease-slow")
    fast = fast_seam.worker(tally.app)
    slow = slow_seam.worker(tally.app, lease_seconds=0.3)
    execution_id = start_tally(fast_seam, tally, fast)
    bump(fast_seam, tally, execution_id, BUMP)

    slow_run = threading.Thread(target=slow.process_one)
    slow_run.start()
    try:
        wait_until(lambda: len(tally.calls) == 1, 10.0, "the slow worker to enter the action")
        process_until(fast, REDELIVERY_TIMEOUT, "the message whose lease expired")
    finally:
        slow_run.join()

    assert tally.calls == [BUMP, BUMP]
    assert loaded(fast_seam, execution_id).context["count"] == 1
    assert handled_events(fast_seam, execution_id).count(BUMP) == 1
    assert fast_seam.transport.depth() == 0
    assert fast.counters["processed"] == 2  # the start and the bump
    assert slow.counters == {"processed": 0, "conflicts": 1, "redeliveries": 1, "dead_lettered": 0}


# --- a relay stopping between send and ack_outbox ----------------------------------------------------------


def test_relay_stopping_between_send_and_ack_outbox_resends_and_dedupe_absorbs_it(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the relay sent the outbox event, then lost its connection on both
    attempts of ack_outbox — where a crash would leave it. The entry stays pending; the event is
    consumed; a relay run again (as a restarted worker's would) sends it a second time and acks it; the
    second delivery is recognised by the dedupe mark. `bumped` took effect once."""
    seam = seams.open("relay")
    worker = seam.worker(tally.app)
    execution_id = start_tally(seam, tally, worker)
    bump(seam, tally, execution_id, BUMP)
    assert worker.process_one()
    [entry] = seam.store.pending_outbox()

    with (
        fail_command(
            admin, {"times": 2}, failCommands=["update"], closeConnection=True, appName=seam.store_app
        ),
        pytest.raises(AutoReconnect),
    ):
        worker.relay_once()

    assert seam.store.pending_outbox() == [entry]
    assert worker.process_one()  # the first delivery of `bumped`
    assert loaded(seam, execution_id).context["received"] == 1
    restarted = seams.open("relay-restarted").worker(tally.app)
    assert restarted.relay_once() == 1
    assert seam.store.pending_outbox() == []
    assert worker.process_one()  # the second delivery

    assert worker.counters["redeliveries"] == 1
    assert loaded(seam, execution_id).context["received"] == 1
    assert handled_events(seam, execution_id).count(entry.event.id) == 1
    assert seam.transport.depth() == 0


# --- concurrent compare-and-set through the store -----------------------------------------------------------

WRITERS = 4
ROUNDS = 15


def test_concurrent_commits_over_the_wire_have_one_winner_per_version(seams: Seams) -> None:
    """Nothing lost, nothing doubled: in every round all writers load the same version and commit at
    once, each from its own client and connection; exactly one commit lands (its mark, its trace step),
    every other gets StoreConflict naming the version it found, and the version counts the rounds."""
    stores = [seams.open(f"cas-{n}").store for n in range(WRITERS)]
    stores[0].commit(Execution(id="cas", definition_id="d", definition_version=1))
    # A timeout breaks the barriers if a writer dies, so the others fail instead of waiting forever.
    loaded_all, committed_all = (threading.Barrier(WRITERS, timeout=30) for _ in range(2))
    wins: Counter[int] = Counter()
    conflicts: list[StoreConflict] = []
    lock = threading.Lock()

    def writer(number: int) -> None:
        store = stores[number]
        for round_number in range(ROUNDS):
            exe = store.load("cas")
            assert exe is not None
            loaded_all.wait()
            try:
                store.commit(
                    exe, processed_event_id=f"r{round_number}-w{number}", trace={"round": round_number}
                )
            except StoreConflict as conflict:
                with lock:
                    conflicts.append(conflict)
            else:
                with lock:
                    wins[round_number] += 1
            committed_all.wait()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert wins == dict.fromkeys(range(ROUNDS), 1)
    assert len(conflicts) == ROUNDS * (WRITERS - 1)
    # Each loser expected the version of its round and found the one its winner made.
    assert all(conflict.found == conflict.expected + 1 for conflict in conflicts)
    document = stores[0].document("cas")
    assert document is not None
    assert document["version"] == 1 + ROUNDS
    rounds_marked = [int(mark[1 : mark.index("-")]) for mark in document["processed"]]
    assert sorted(rounds_marked) == list(range(ROUNDS))
    assert [step["round"] for step in stores[0].read_trace("cas")] == list(range(ROUNDS))


def test_concurrent_async_commits_have_one_winner_per_version(replica_set: Deployment) -> None:
    """The same with AsyncMongoStore on PyMongo's AsyncMongoClient: two stores, two clients, the commits of
    each round awaited together — one lands, the other gets StoreConflict."""

    async def scenario() -> int:
        clients = [
            await connect_async(replica_set.url, app_name=f"cas-async-{n}", deadline=15.0) for n in range(2)
        ]
        stores = [AsyncMongoStore(client, replica_set.db_name) for client in clients]
        try:
            await stores[0].commit(Execution(id="cas-async", definition_id="d", definition_version=1))
            for round_number in range(ROUNDS):
                loaded_executions = [await store.load("cas-async") for store in stores]
                outcomes = await asyncio.gather(
                    *(
                        store.commit(exe, processed_event_id=f"r{round_number}-w{n}")
                        for n, (store, exe) in enumerate(zip(stores, loaded_executions, strict=True))
                    ),
                    return_exceptions=True,
                )
                assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "StoreConflict"], outcomes
            final = await stores[0].load("cas-async")
            assert final is not None
            return final.version
        finally:
            for store in stores:
                await store.close()

    assert asyncio.run(scenario()) == 1 + ROUNDS


# --- the smoke workflow under each fault ----------------------------------------------------------------


Arm = Callable[[MongoClient[Any], Deployment, str], AbstractContextManager[Any]]


@dataclass(frozen=True)
class SmokeFault:
    """A fault armed for the workers' store clients (`app`) while the smoke workflow runs."""

    name: str
    arm: Arm
    caught: str | None  # the command whose failures show the fault struck; None for a delay
    lease_seconds: float = 30.0
    # A delay past the lease: another worker takes the message over and the late one finds the mark.
    redelivers: bool = False


@contextmanager
def _applied_then_lost(replica_set: Deployment, app: str) -> Iterator[None]:
    replica_set.require_fake(APPLIED_THEN_LOST).fail_after_apply("update", times=4, app_name=app)
    yield


def failing(times: int, commands: list[str], **data: Any) -> Arm:
    """Arm `failCommand` for the workers' store clients: the next `times` of `commands` fail with `data`."""
    return lambda admin, _, app: fail_command(
        admin, {"times": times}, failCommands=commands, appName=app, **data
    )


SMOKE_FAULTS = [
    SmokeFault(
        "not-writable-primary",
        failing(4, ["update"], errorCode=NOT_WRITABLE_PRIMARY, errorLabels=RETRYABLE),
        "update",
    ),
    SmokeFault(
        "both-attempts-fail",
        failing(4, ["update"], errorCode=HOST_UNREACHABLE, errorLabels=RETRYABLE),
        "update",
    ),
    SmokeFault(
        "counters-find-and-modify",
        failing(3, ["findAndModify"], errorCode=MAX_TIME_MS_EXPIRED),
        "findAndModify",
    ),
    SmokeFault("connection-closed", failing(4, ["update", "insert"], closeConnection=True), "update"),
    SmokeFault(
        "applied-then-lost", lambda _, replica_set, app: _applied_then_lost(replica_set, app), "update"
    ),
    SmokeFault(
        "slow-load-past-the-lease",
        failing(2, ["aggregate"], blockConnection=True, blockTimeMS=1500),
        None,
        lease_seconds=0.3,
        redelivers=True,
    ),
]


@pytest.mark.parametrize("fault", SMOKE_FAULTS, ids=[fault.name for fault in SMOKE_FAULTS])
def test_smoke_workflow_under_fault(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, fault: SmokeFault
) -> None:
    """Nothing lost: with the fault striking the three workers' store clients, the fork/join workflow
    still passes the smoke checker — completed, every child created and started once, every timer
    fired once and not early, the join after every region, no event taking effect twice."""
    accounting = CommandAccounting()
    app, chart_id = smoke_app()
    # The three workers share one appName, so the fail point strikes whichever of them runs next.
    struck = [seams.open("smoke-fault", listeners=(accounting,)) for _ in range(3)]
    workers = [seam.worker(app, lease_seconds=fault.lease_seconds) for seam in struck]
    client = seams.open("smoke-client")

    with fault.arm(admin, replica_set, struck[0].store_app), running(workers) as run:
        report = run_smoke(client.store, client.transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)

    assert report.passed, report.failures
    if fault.caught is not None:
        assert accounting.tally(command=fault.caught).failures >= 1, "the fault never struck"
    if fault.redelivers:
        assert run.counter("redeliveries") >= 1, "no message outlived its lease"


# --- SIGKILL of a worker process ----------------------------------------------------------------------------

VICTIM_LEASE_SECONDS = 3.0
BLOCK_MS = 1500
WORKFLOW_TIMEOUT = 60.0


def _smoke_seams(admin: MongoClient[Any]) -> tuple[MongoStore, MongoTransport, App]:
    """The store and queue the worker processes use (database `harel`), read through the admin client."""
    app = App("smoke")
    register_smoke(app)
    return MongoStore(admin, "harel"), MongoTransport(admin, "harel", watch=False), app


def _finish_with_survivors(
    url: str, admin: MongoClient[Any], worker_processes: WorkerProcesses, root_id: str
) -> None:
    survivors = [worker_processes.harel_worker(url) for _ in range(2)]
    for survivor in survivors:
        survivor.wait_registered(admin)
    store = MongoStore(admin, "harel")

    def finished() -> bool:
        root = store.load(root_id)
        return root is not None and root.status is not ExecutionStatus.RUNNING

    wait_until(finished, WORKFLOW_TIMEOUT, f"the smoke workflow {root_id} to finish", poll=0.1)
    report = check(gather(store, root_id, WORKFLOW_TIMEOUT))
    assert report.passed, report.failures
    starts = [s for s in store.read_trace(root_id) if s.get("handled") and s["event"] == START_EVENT]
    assert len(starts) == 1
    children = admin.harel.executions.count_documents({"_id": {"$regex": f"^{re.escape(root_id)}/"}})
    assert children == len(REGIONS)


def _seq(admin: MongoClient[Any]) -> int:
    counter = admin.harel.counters.find_one({"_id": "seq"})
    return int(counter["n"]) if counter else 0


def test_kill_9_mid_commit(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """Nothing lost: a worker process is killed (SIGKILL) while its commit of the root's start — the
    fork, spawning three children — is in flight at the server. Two fresh worker processes take over once
    the victim's lease runs out, and the workflow passes the smoke checker: the start took effect once,
    each child was created once and started once, each timer fired once."""
    victim_app = f"victim-{uuid.uuid4().hex[:8]}"
    victim = worker_processes.short_lease_worker(
        with_app_name(replica_set.url, victim_app), VICTIM_LEASE_SECONDS
    )
    victim.wait_registered(admin)
    store, transport, app = _smoke_seams(admin)
    drawn = _seq(admin)
    root_id = f"smoke-kill-commit-{uuid.uuid4().hex[:8]}"

    with fail_command(
        admin,
        {"times": 1},
        failCommands=["update"],
        blockConnection=True,
        blockTimeMS=BLOCK_MS,
        appName=victim_app,
    ):
        start_execution(store, transport, app, SMOKE_CHART_ID, execution_id=root_id)
        # The fork's commit draws three seqs, then sends its update, which the fail point holds.
        wait_until(lambda: _seq(admin) >= drawn + len(REGIONS), 20.0, "the victim to enter its commit")
        assert admin.harel.queue.find_one({"_id": start_event_id(root_id)}), "the commit was not held"
        victim.kill()

    _finish_with_survivors(replica_set.url, admin, worker_processes, root_id)


def test_kill_9_mid_relay(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """Nothing lost: a worker process is killed (SIGKILL) in its spawn relay, after it created the first
    child and while it sends that child's start event — before it could acknowledge the spawn. Two fresh
    worker processes relay the spawns again (the existing child is not created twice, the start event is
    deduplicated) and the workflow passes the smoke checker."""
    victim_app = f"victim-{uuid.uuid4().hex[:8]}"
    victim = worker_processes.short_lease_worker(
        with_app_name(replica_set.url, victim_app), VICTIM_LEASE_SECONDS
    )
    victim.wait_registered(admin)
    store, transport, app = _smoke_seams(admin)
    root_id = f"smoke-kill-relay-{uuid.uuid4().hex[:8]}"

    def first_child_created() -> bool:
        return admin.harel.executions.find_one({"_id": {"$regex": f"^{re.escape(root_id)}/"}}) is not None

    # The victim's first two inserts are the relay's: the first child, then its start event.
    with fail_command(
        admin,
        {"times": 2},
        failCommands=["insert"],
        blockConnection=True,
        blockTimeMS=BLOCK_MS,
        appName=victim_app,
    ):
        start_execution(store, transport, app, SMOKE_CHART_ID, execution_id=root_id)
        wait_until(first_child_created, 20.0, "the victim's relay to create the first child")
        victim.kill()

    pending = [spawn for spawn in store.pending_spawns() if spawn.parent_id == root_id]
    assert len(pending) == len(REGIONS), "the victim acknowledged a spawn before it was killed"
    _finish_with_survivors(replica_set.url, admin, worker_processes, root_id)
