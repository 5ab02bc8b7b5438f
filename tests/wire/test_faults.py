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
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from harel.aio_store import AsyncMongoStore
from harel.app import ActionContext, ActionResult, App
from harel.client import start_execution
from harel.connection import connect_async
from harel.errors import DeploymentUnavailable, LeaseLost, StoreConflict
from harel.model import START_EVENT, Execution, ExecutionStatus
from harel.smoke import REGIONS, SMOKE_CHART_ID, check, gather, register_smoke, run_smoke
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.accounting import CommandAccounting
from tests.audit import audit
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.fixtures import Deployment
from tests.wire import chaos_app
from tests.wire.in_process import (
    SMOKE_TIMEOUT,
    Phased,
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
from tests.wire.partition import PartitionProxy
from tests.wire.processes import WorkerProcesses, wait_until, with_app_name

pytestmark = pytest.mark.wire

RETRYABLE = ["RetryableWriteError"]
HOST_UNREACHABLE = 6  # retryable, but not a "not primary" error: the driver raises OperationFailure
MAX_TIME_MS_EXPIRED = 50  # not retryable
NOT_WRITABLE_PRIMARY = 10107
APPLIED_THEN_LOST = "no server fail point applies a write and then drops the connection"
REDELIVERY_TIMEOUT = 10.0
# The worker's deadline on each command where a test waits for it to pass (the default is 5 s).
OP_TIMEOUT_SECONDS = 0.5


BUMP = "bump-1"


@pytest.fixture
def tally() -> Tally:
    return tally_app()


@dataclass
class PendingBump:
    """A started tally execution with one `bump` waiting in its mailbox, the worker (its own clients) that
    will handle it, the stored document before it does, and an accounting of that worker's commands."""

    seam: Seam
    worker: Worker
    execution_id: str
    before: dict[str, Any]
    accounting: CommandAccounting

    def commits(self) -> tuple[int, int]:
        """Commit updates sent since the bump was queued, and how many of them failed."""
        updates = self.accounting.tally(phase="client.commit_claim", command="update")
        return updates.commands, updates.failures

    def unknown_outcomes(self) -> float:
        value = self.worker.metrics.registry.get_sample_value("harel_unknown_commit_outcomes_total")
        return value or 0.0

    def document(self) -> dict[str, Any]:
        found = self.seam.store.document(self.execution_id)
        assert found is not None
        return found

    def process_under_fault(
        self,
        admin: MongoClient[Any],
        times: int | str,
        command: str,
        code: int,
        labels: list[str] | None = None,
    ) -> None:
        """Handle the bump while the store's next `times` `command`s (or all, "alwaysOn") fail with `code`
        (and `labels`)."""
        labels_option = {} if labels is None else {"errorLabels": labels}
        with fail_command(
            admin,
            {"times": times} if isinstance(times, int) else times,
            failCommands=[command],
            errorCode=code,
            appName=self.seam.store_app,
            **labels_option,
        ):
            assert self.worker.process_one()

    def assert_took_effect_once(self) -> None:
        """One step, one count, one trace step, one dedupe mark; the mailbox is empty and released."""
        exe = loaded(self.seam, self.execution_id)
        assert exe.version == self.before["version"] + 1
        assert exe.context["count"] == 1
        assert handled_events(self.seam, self.execution_id).count(BUMP) == 1
        document = self.document()
        assert document["processed"].count(BUMP) == 1
        assert (document["inbox"], document["lease"], document["attempts"]) == ([], None, 0)

    def assert_untouched(self) -> None:
        """The execution is as it was: the bump waits in its mailbox, no attempt counted, no lease held."""
        document = self.document()
        assert {k: document[k] for k in ("version", "data", "processed", "trace")} == {
            k: self.before[k] for k in ("version", "data", "processed", "trace")
        }
        assert [entry["id"] for entry in document["inbox"]] == [BUMP]
        assert (document["lease"], document["attempts"]) == (None, 0), "a deployment fault is not the event's"


def pending_bump(
    seams: Seams,
    tally: Tally,
    name: str,
    *,
    listeners: tuple[monitoring.CommandListener, ...] = (),
    url: str | None = None,
    **config: Any,
) -> PendingBump:
    accounting = CommandAccounting()
    seam = seams.open(name, listeners=(accounting, *listeners), url=url)
    worker = seam.worker(tally.app, **config)
    execution_id = start_tally(seam, tally, worker)
    calls: Counter[str] = Counter()
    worker.store = Phased(seam.store, calls)  # type: ignore[assignment]
    worker.transport = Phased(seam.transport, calls)  # type: ignore[assignment]
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


class DropsTheNextUpdatesReplies(monitoring.CommandListener):
    """Once armed, the next `update` the client sends reaches the server through `proxy`, and every reply is
    dropped from then until that update has failed on the client's side (its deadline passed)."""

    def __init__(self, proxy: PartitionProxy) -> None:
        self.proxy = proxy
        self.armed = False
        self._request_id: int | None = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.armed and event.command_name == "update":
            self.armed = False
            self._request_id = event.request_id
            self.proxy.drop_replies()  # before the command is written: its request goes through, its reply not

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        if event.request_id == self._request_id:
            self.proxy.heal()


def test_commit_applied_then_its_replies_lost_is_resolved_by_the_dedupe_mark(
    replica_set: Deployment, seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the bump takes effect once. The commit was applied and every reply was
    lost until its deadline passed (a partition of the replies, the connection kept open), leaving no time for
    the driver's retry: the outcome is unknown to the worker, which reads the dedupe mark, finds the commit
    there, and does not commit again."""
    server = replica_set.require_fake("the partition proxy stands in front of the fake server")
    with PartitionProxy(("127.0.0.1", server.port)).running() as proxy:
        dropping = DropsTheNextUpdatesReplies(proxy)
        pending = pending_bump(
            seams,
            tally,
            "lost-replies",
            listeners=(dropping,),
            url=proxy.url(),
            op_timeout_seconds=OP_TIMEOUT_SECONDS,
        )
        dropping.armed = True
        try:
            assert pending.worker.process_one()

            assert proxy.dropped > 0, "the commit's reply was dropped"
            pending.assert_took_effect_once()
            assert pending.unknown_outcomes() == 1
            assert pending.commits() == (1, 1)  # no second commit: the mark said it was applied
            assert pending.worker.counters["processed"] == 3  # the two starts and the bump
        finally:
            pending.seam.close()  # while the proxy runs: a closing client ends its sessions through it


# --- the claim's findAndModify ----------------------------------------------------------------------------


def test_a_claim_failing_with_a_retryable_error_is_retried_and_leases_once(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the claim's findAndModify failed with NotWritablePrimary (not
    executed) and PyMongo's retry leased the execution; the bump takes effect once."""
    pending = pending_bump(seams, tally, "claim-retry")
    with fail_command(
        admin,
        {"times": 1},
        failCommands=["findAndModify"],
        errorCode=NOT_WRITABLE_PRIMARY,
        errorLabels=RETRYABLE,
        appName=pending.seam.queue_app,
    ):
        assert pending.worker.process_one()
    pending.assert_took_effect_once()
    claims = pending.accounting.tally(phase="client.claim", command="findAndModify")
    assert (claims.commands, claims.failures) == (2, 1)


def test_a_claim_failing_leaves_the_mailbox_as_it_was(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost: the claim failed with an error the driver does not retry (the transport raises it as
    DeploymentUnavailable), so nothing was leased; the bump waits and the next claim takes it."""
    pending = pending_bump(seams, tally, "claim-fail")
    with (
        fail_command(
            admin,
            {"times": 1},
            failCommands=["findAndModify"],
            errorCode=MAX_TIME_MS_EXPIRED,
            appName=pending.seam.queue_app,
        ),
        pytest.raises(DeploymentUnavailable, match=r"^ExecutionTimeout: "),
    ):
        pending.worker.process_one()
    pending.assert_untouched()
    assert pending.worker.process_one()
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
    assert pending.commits()[0] - pending.commits()[1] >= 1
    assert pending.commits()[1] == 1
    assert pending.unknown_outcomes() == 0


def test_a_commit_cut_short_by_its_deadline_is_read_back_and_sent_again(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: the commit's update was held at the server past the worker's deadline
    (and then refused), leaving no time for the driver's retry. The worker read the outcome back — no dedupe
    mark, the lease still its own — and sent the commit once more, which took effect once."""
    pending = pending_bump(seams, tally, "cut-short", op_timeout_seconds=OP_TIMEOUT_SECONDS)

    with fail_command(
        admin,
        {"times": 1},
        failCommands=["update"],
        errorCode=HOST_UNREACHABLE,
        blockConnection=True,
        blockTimeMS=int(3 * OP_TIMEOUT_SECONDS * 1000),
        appName=pending.seam.store_app,
    ):
        assert pending.worker.process_one()

    pending.assert_took_effect_once()
    assert pending.unknown_outcomes() == 1
    assert pending.commits() == (2, 1), "the first commit timed out, the second took effect"


class TurnsOffOnTheFirstRead(monitoring.CommandListener):
    """Turns the `failCommand` fail point off when the client sends its first `find` once armed: the worker
    reading its commit's outcome back."""

    def __init__(self, admin: MongoClient[Any]) -> None:
        self.admin = admin
        self.armed = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.armed and event.command_name == "find":
            self.armed = False
            self.admin.admin.command({"configureFailPoint": "failCommand", "mode": "off"})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_not_writable_primary_until_the_deadline_is_resolved_by_the_dedupe_mark(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost, nothing doubled: every attempt of the commit within its deadline failed with
    NotWritablePrimary (raised as a connection-class error; the driver retries it while the deadline allows):
    the worker reads the dedupe mark, finds the commit absent and its lease held, commits again, once."""
    reads = TurnsOffOnTheFirstRead(admin)
    pending = pending_bump(
        seams, tally, "not-primary-deadline", listeners=(reads,), op_timeout_seconds=OP_TIMEOUT_SECONDS
    )
    reads.armed = True

    pending.process_under_fault(admin, "alwaysOn", "update", NOT_WRITABLE_PRIMARY, RETRYABLE)

    pending.assert_took_effect_once()
    assert pending.unknown_outcomes() == 1
    assert pending.commits()[1] >= 2, "the driver retried the first commit within its deadline"


def test_not_writable_primary_outlasting_the_attempts_leaves_the_event_waiting(
    replica_set: Deployment, admin: MongoClient[Any], seams: Seams, tally: Tally
) -> None:
    """Nothing lost: every commit the worker sends fails with NotWritablePrimary (a primary that stays
    away). The execution is untouched, the lease released, no attempt counted against the event; once the
    primary is back the bump takes effect once."""
    pending = pending_bump(seams, tally, "not-primary-long", op_timeout_seconds=OP_TIMEOUT_SECONDS)

    pending.process_under_fault(admin, "alwaysOn", "update", NOT_WRITABLE_PRIMARY, RETRYABLE)

    pending.assert_untouched()
    process_until(pending.worker, REDELIVERY_TIMEOUT, "the bump's retry")
    pending.assert_took_effect_once()


# --- a lease expiring while a slow action runs --------------------------------------------------------------


def test_a_lease_expiring_during_a_slow_action_cannot_double_the_event(seams: Seams) -> None:
    """Nothing doubled: the slow worker's lease ran out while its action ran, and a second worker claimed the
    execution. The slow worker's commit arrives while the second one is still stepping, at the version both
    read: it is refused for the lease it no longer holds (LeaseLost, naming the new holder) and writes
    nothing; the second worker's commit lands. The action ran twice (delivery is at least once), the bump
    took effect once. The order is forced by events: the slow action returns once the fast worker is in its
    own action, which returns once the slow worker's commit was answered."""
    tally = tally_app()
    fast_seam, slow_seam = seams.open("lease-fast"), seams.open("lease-slow")
    fast = fast_seam.worker(tally.app)
    slow = slow_seam.worker(tally.app, lease_seconds=0.3)
    execution_id = start_tally(fast_seam, tally, fast)
    bump(fast_seam, tally, execution_id, BUMP)
    slow_in_action, taken_over, slow_answered = threading.Event(), threading.Event(), threading.Event()

    def bump_in_turn(ctx: ActionContext) -> ActionResult:
        if not slow_in_action.is_set():  # the slow worker: on until its lease was taken over
            slow_in_action.set()
            taken_over.wait(REDELIVERY_TIMEOUT)
        else:  # the new holder: on until the slow worker's commit was answered
            taken_over.set()
            slow_answered.wait(REDELIVERY_TIMEOUT)
        return tally.bump(ctx)

    tally.app.registry.actions["tally.bump"] = bump_in_turn
    refusals: list[StoreConflict] = []
    holders: list[str] = []
    slow_commit, fast_claim = slow_seam.store.commit_claim, fast_seam.transport.claim

    def recorded_commit(*args: Any, **kwargs: Any) -> Any:
        try:
            return slow_commit(*args, **kwargs)
        except StoreConflict as refused:
            refusals.append(refused)
            raise

    def recorded_claim(*args: Any, **kwargs: Any) -> Any:
        found = fast_claim(*args, **kwargs)
        if found is not None:
            holders.append(found.owner)
        return found

    slow_seam.store.commit_claim = recorded_commit  # type: ignore[method-assign]
    fast_seam.transport.claim = recorded_claim  # type: ignore[method-assign]

    def run_slow() -> None:
        try:
            slow.process_one()
        finally:
            slow_answered.set()

    slow_run = threading.Thread(target=run_slow)
    slow_run.start()
    try:
        assert slow_in_action.wait(REDELIVERY_TIMEOUT), "the slow worker never entered the action"
        process_until(fast, REDELIVERY_TIMEOUT, "the execution whose lease expired")
    finally:
        taken_over.set()
        slow_run.join()

    assert tally.calls == [BUMP, BUMP], "the action ran on both workers"
    [refused] = refusals
    assert isinstance(refused, LeaseLost), (
        f"the late commit was refused for its version, not its lease: {refused}"
    )
    assert refused.holder == holders[-1], "the refusal names the worker that took the lease over"
    assert slow.counters == {"processed": 0, "conflicts": 1, "redeliveries": 0, "dead_lettered": 0}
    assert fast.counters["conflicts"] == 0 and fast.metrics.lease_steals._value.get() == 1
    assert loaded(fast_seam, execution_id).context["count"] == 1
    assert handled_events(fast_seam, execution_id).count(BUMP) == 1
    document = fast_seam.store.document(execution_id)
    assert document is not None and document["lease"] is None and document["inbox"] == []


# --- a relay stopping between send and its acknowledgement ---------------------------------------------------


def test_relay_stopping_between_send_and_ack_resends_and_dedupe_absorbs_it(
    replica_set: Deployment, seams: Seams, tally: Tally, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing lost, nothing doubled: the committing worker sent `bumped` to the sink, then its
    acknowledgement (the relay loop's, of what it delivered) failed — where a crash would leave it. The entry stays; the sink applies `bumped`; once
    the committer's hold on the work ends, a relay run again (as a restarted worker's would) takes it,
    sends it a second time (refused as already processed) and acknowledges it. `bumped` took effect once."""
    seam = seams.open("relay")
    worker = seam.worker(tally.app, lease_seconds=2.0)
    execution_id = start_tally(seam, tally, worker)
    sink = f"{execution_id}-sink"
    bump(seam, tally, execution_id, BUMP)

    def connection_lost(*args: Any, **kwargs: Any) -> None:
        raise DeploymentUnavailable("AutoReconnect", "connection closed before the acknowledgement")

    with monkeypatch.context() as patch:
        patch.setattr(seam.store, "ack_delivered", connection_lost)
        assert worker.process_one()  # commits and sends `bumped`; its acknowledgement waits
        with pytest.raises(DeploymentUnavailable):
            worker.acknowledge_delivered()

    [entry] = seam.store.pending_outbox()
    assert worker.process_one()  # the sink applies `bumped`
    assert loaded(seam, sink).context["received"] == 1
    restarted = seams.open("relay-restarted").worker(tally.app)
    assert restarted.relay_once() == 0, "the committer's hold on the work has not ended"
    wait_until(lambda: restarted.relay_once() == 1, 10.0, "the relay work to be taken over")
    assert seam.store.pending_outbox() == []
    assert restarted.counters["redeliveries"] == 1
    assert not worker.process_one(), "nothing was queued a second time"
    assert loaded(seam, sink).context["received"] == 1
    assert handled_events(seam, sink).count(entry.event.id) == 1


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
    # How long a step's lease is extended while it runs (the worker's default unless a fault needs less).
    max_step_seconds: float = WorkerConfig.max_step_seconds
    # A delay past the lease: another worker takes the execution over and the late commit is refused.
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
    SmokeFault("connection-closed", failing(4, ["update"], closeConnection=True), "update"),
    SmokeFault(
        "applied-then-lost", lambda _, replica_set, app: _applied_then_lost(replica_set, app), "update"
    ),
    SmokeFault(
        "slow-commit-past-the-lease",
        failing(2, ["update"], blockConnection=True, blockTimeMS=1500),
        None,
        lease_seconds=0.3,
        max_step_seconds=0.3,  # the lease is not extended past it, so it runs out under the blocked commit
        redelivers=True,
    ),
]
CLAIM_FAULTS = [
    SmokeFault(
        "claim-find-and-modify",
        failing(3, ["findAndModify"], errorCode=MAX_TIME_MS_EXPIRED),
        "findAndModify",
    ),
]


@pytest.mark.parametrize(
    "fault", SMOKE_FAULTS + CLAIM_FAULTS, ids=[f.name for f in SMOKE_FAULTS + CLAIM_FAULTS]
)
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
    workers = [
        seam.worker(app, lease_seconds=fault.lease_seconds, max_step_seconds=fault.max_step_seconds)
        for seam in struck
    ]
    client = seams.open("smoke-client")

    target = struck[0].queue_app if fault in CLAIM_FAULTS else struck[0].store_app
    with fault.arm(admin, replica_set, target), running(workers) as run:
        report = run_smoke(client.store, client.transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)

    assert report.passed, report.failures
    if fault.caught is not None:
        assert accounting.tally(command=fault.caught).failures >= 1, "the fault never struck"
    if fault.redelivers:
        assert run.counter("conflicts") >= 1, "no lease ran out under a commit"


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


def test_kill_9_mid_commit(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """Nothing lost: a worker process is killed (SIGKILL) while its commit of the root's start — the
    fork, spawning three children — is held at the server. Two fresh worker processes take over once the
    victim's lease runs out, and the workflow passes the smoke checker: the start took effect once, each
    child was created once and started once, each timer fired once."""
    victim_app = f"victim-{uuid.uuid4().hex[:8]}"
    victim = worker_processes.short_lease_worker(
        with_app_name(replica_set.url, victim_app), VICTIM_LEASE_SECONDS
    )
    victim.wait_registered(admin)
    store, transport, app = _smoke_seams(admin)
    root_id = f"smoke-kill-commit-{uuid.uuid4().hex[:8]}"

    def leased() -> bool:
        document = admin.harel.executions.find_one({"_id": root_id}, {"lease": 1})
        return document is not None and document["lease"] is not None

    with fail_command(
        admin,
        {"times": 1},
        failCommands=["update"],
        blockConnection=True,
        blockTimeMS=BLOCK_MS,
        appName=victim_app,
    ):
        start_execution(store, transport, app, SMOKE_CHART_ID, execution_id=root_id)
        wait_until(leased, 20.0, "the victim to claim the root")
        time.sleep(0.2)  # its commit is held at the server now
        document = admin.harel.executions.find_one({"_id": root_id})
        assert document["version"] == 1 and [e["id"] for e in document["inbox"]] == [f"{root_id}:start"]
        victim.kill()

    _finish_with_survivors(replica_set.url, admin, worker_processes, root_id)


def test_kill_9_mid_relay(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """Nothing lost: a worker process is killed (SIGKILL) in the relay of its own commit, while it creates
    the fork's children — after the commit, before it could acknowledge the spawns. Once its hold on that
    relay work ends, two fresh worker processes take it over (a child that exists already is not created
    twice) and the workflow passes the smoke checker."""
    victim_app = f"victim-{uuid.uuid4().hex[:8]}"
    victim = worker_processes.short_lease_worker(
        with_app_name(replica_set.url, victim_app), VICTIM_LEASE_SECONDS
    )
    victim.wait_registered(admin)
    store, transport, app = _smoke_seams(admin)
    root_id = f"smoke-kill-relay-{uuid.uuid4().hex[:8]}"

    def forked() -> bool:
        document = admin.harel.executions.find_one({"_id": root_id}, {"version": 1})
        return document is not None and document["version"] >= 2

    # The victim's first update is its commit of the fork, its second the relay's bulk creation of the
    # children: each is held at the server, and the victim is killed while the second is.
    with fail_command(
        admin,
        {"times": 2},
        failCommands=["update"],
        blockConnection=True,
        blockTimeMS=BLOCK_MS,
        appName=victim_app,
    ):
        start_execution(store, transport, app, SMOKE_CHART_ID, execution_id=root_id)
        wait_until(forked, 20.0, "the victim to commit the fork")
        victim.kill()

    pending = [spawn for spawn in store.pending_spawns() if spawn.parent_id == root_id]
    assert len(pending) == len(REGIONS), "the victim acknowledged the spawns before it was killed"
    _finish_with_survivors(replica_set.url, admin, worker_processes, root_id)


CHAOS_APP = "tests.wire.chaos_app:app"


def test_kill_9_mid_the_claim_that_fires_a_timer(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """Nothing lost: a worker process is killed (SIGKILL) while its claim at the timer's due time is held at
    the server (the claim that would fire it; applied after the victim died or not, the timer's event waits
    in the mailbox or the timer is still due). Two fresh worker processes take the execution over once any
    lease ran out: the timer took effect once, not early, and nothing is left."""
    victim_app = f"victim-{uuid.uuid4().hex[:8]}"
    victim = worker_processes.harel_worker(
        with_app_name(replica_set.url, victim_app),
        "--app",
        CHAOS_APP,
        "--drain-seconds",
        "2",
        "--lease-seconds",
        str(VICTIM_LEASE_SECONDS),
    )
    victim.wait_registered(admin)
    store, transport = MongoStore(admin, "harel"), MongoTransport(admin, "harel", watch=False)
    execution_id = f"timer-kill-{uuid.uuid4().hex[:8]}"
    start_execution(store, transport, chaos_app.app, chaos_app.TIMER_CHART_ID, execution_id=execution_id)

    def document() -> dict[str, Any]:
        found = admin.harel.executions.find_one({"_id": execution_id})
        assert found is not None
        return found

    wait_until(lambda: document()["next_fire_at"] is not None, 20.0, "the victim to arm the timer")
    fire_at = float(document()["next_fire_at"])
    wait_until(lambda: time.time() > fire_at - 0.3, 10.0, "the timer to be nearly due")
    with fail_command(
        admin,
        {"times": 1},
        failCommands=["findAndModify"],
        blockConnection=True,
        blockTimeMS=BLOCK_MS,
        appName=victim_app,
    ):
        time.sleep(0.6)  # the victim's claim is held now
        victim.kill()
        assert document()["inbox"] == [], "the claim went through before it was held"

    survivors = [worker_processes.harel_worker(replica_set.url, "--app", CHAOS_APP) for _ in range(2)]
    for survivor in survivors:
        survivor.wait_registered(admin)
    wait_until(lambda: document()["status"] == "completed", WORKFLOW_TIMEOUT, f"{execution_id} to complete")
    wait_until(lambda: audit([document()]).passed, 10.0, "the survivors to finish their relays")
    result = audit([document()])
    assert result.passed, result.failures
    assert result.timers == 1
