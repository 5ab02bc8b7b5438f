"""Workers whose clocks are wrong: one 30 s ahead of the server, one 30 s behind.

Leases, due times and timers are decided by the server's `$$NOW`; a worker's own clock feeds only its
estimates (a step's `now` is the server's time of the claim plus the local time elapsed since). Each
scenario asserts from the store:

- no timer fired early by the server's clock: each timer step's `at` (the server's time of its claim, plus
  the worker's time since) is at or after the timer's `fire_at` (the audit, tests/audit.py);
- no lease was taken before it expired by the server's clock: a lease's claim time is the server's
  (`at == until - lease_seconds`, `until` computed in the command), and a lease that took over another
  (`previous`) was claimed at or after that one's `until`.

Twice: in this process with an injected local clock (`ServerClock(local=...)`), where the same lease
scenario fails on a transport that leases on the caller's clock; and with `harel worker` processes under
`faketime` against the test replica set in its own process, whose clock is true.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pymongo import MongoClient

from harel.client import send_event, start_execution
from harel.servertime import ServerClock
from harel.smoke import check, gather, run_smoke
from harel.store.mongo import MongoStore
from harel.transport.base import Claim
from harel.transport.mongo import MongoTransport
from harel.worker import Worker
from tests.audit import Lease, audit, leases_taken_early
from tests.conformance.broken import CallerClockTimersTransport, CallerClockTransport
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeProcess
from tests.wire import chaos_app
from tests.wire.in_process import (
    SMOKE_TIMEOUT,
    Seams,
    bump,
    loaded,
    process_until,
    running,
    smoke_app,
    start_tally,
    tally_app,
)
from tests.wire.processes import WorkerProcess, WorkerProcesses, wait_until

pytestmark = pytest.mark.wire

AHEAD, BEHIND = 30.0, -30.0
SHORT_LEASE = 0.5
SLOW_ACTION = 2.5
BUMP = "bump-skew"


def _skewed(offset: float) -> ServerClock:
    return ServerClock(local=lambda: time.time() + offset)


class _RecordingClaims:
    """The worker's transport, recording the lease of every claim it made (the claimed document's)."""

    def __init__(self, transport: MongoTransport, seconds: float, leases: list[Lease]) -> None:
        self._transport = transport
        self._seconds = seconds
        self._leases = leases

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def claim(self, charts: Any, lease: float, bound: float) -> Claim | None:
        claim = self._transport.claim(charts, lease, bound)
        if claim is not None:
            self._leases.append(
                Lease(
                    claim.execution_id,
                    claim.owner,
                    claim.server_time,
                    claim.lease_until,
                    claim.previous_owner,
                    self._seconds,
                )
            )
        return claim


def _skewed_worker(
    seams: Seams,
    name: str,
    offset: float,
    app: Any,
    leases: list[Lease],
    transport_class: type[MongoTransport] = MongoTransport,
    store_class: type[MongoStore] = MongoStore,
    **config: Any,
) -> Worker:
    seam = seams.open(name, clock=_skewed(offset), transport_class=transport_class, store_class=store_class)
    worker = seam.worker(app, **config)
    worker.transport = _RecordingClaims(seam.transport, worker.config.lease_seconds, leases)  # type: ignore[assignment]
    return worker


# --- in this process, with an injected local clock --------------------------------------------------


def smoke_under_skew(seams: Seams, transport_class: type[MongoTransport]) -> None:
    """Both skewed workers run fork/join workflows with 0.3 s timers: every timer fired at or after its
    fire_at by the server's clock, every lease's claim time is the server's."""
    app, chart_id = smoke_app()
    leases: list[Lease] = []
    workers = [
        _skewed_worker(seams, f"smoke-{name}", offset, app, leases, transport_class)
        for name, offset in (("ahead", AHEAD), ("behind", BEHIND))
    ]
    client = seams.open("smoke-client")
    with running(workers):
        reports = [
            run_smoke(client.store, client.transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)
            for _ in range(2)
        ]

    for report in reports:
        assert report.passed, report.failures
    result = audit(client.store._executions.find({}))
    assert result.passed, result.failures
    assert result.timers == 2 * 4, "three regions' timers and the final one, per run"
    assert leases and not leases_taken_early(leases)


def test_skewed_workers_run_the_smoke_workflow_on_the_servers_clock(seams: Seams) -> None:
    smoke_under_skew(seams, MongoTransport)


def test_the_timer_check_fails_on_claims_that_fire_timers_on_the_callers_clock(seams: Seams) -> None:
    """The same workflows on CallerClockTimersTransport (tests/conformance/broken.py): timers fire once the
    worker's own estimate passed them, early by the server's clock."""
    with pytest.raises(AssertionError, match=r"fired \d\.\d+s before its fire_at"):
        smoke_under_skew(seams, CallerClockTimersTransport)


def lease_expiry_under_skew(
    seams: Seams, holder_offset: float, stealer_offset: float, transport_class: type[MongoTransport]
) -> None:
    """The holder's lease (0.5 s) runs out while its action takes 2.5 s; the stealer, polling meanwhile,
    takes the execution over: only once the holder's lease expired by the server's clock. The bump took
    effect once; the holder's late commit was refused."""
    tally = tally_app(slow_first_call=SLOW_ACTION)
    setup_seam = seams.open("lease-setup")
    execution_id = start_tally(setup_seam, tally, setup_seam.worker(tally.app))
    leases: list[Lease] = []
    holder = _skewed_worker(
        seams, "lease-holder", holder_offset, tally.app, leases, transport_class, lease_seconds=SHORT_LEASE
    )
    stealer = _skewed_worker(seams, "lease-stealer", stealer_offset, tally.app, leases, transport_class)
    bump(setup_seam, tally, execution_id, BUMP)

    slow_run = threading.Thread(target=holder.process_one)
    slow_run.start()
    try:
        wait_until(lambda: len(tally.calls) == 1, 10.0, "the holder to enter its slow action")
        process_until(stealer, 10.0, "the execution whose lease expires")
    finally:
        slow_run.join()
    while stealer.process_one():  # the sink applies `bumped`
        pass
    stealer.acknowledge_delivered()  # as its relay loop would

    steals = [lease for lease in leases if lease.previous is not None]
    assert [lease.execution_id for lease in steals] == [execution_id], "one lease was taken over"
    early = leases_taken_early(leases)
    assert not early, "\n".join(early)
    assert loaded(setup_seam, execution_id).context["count"] == 1
    assert holder.counters["conflicts"] == 1, "the holder's late commit was refused"
    result = audit(setup_seam.store._executions.find({}), running={execution_id, f"{execution_id}-sink"})
    assert result.passed, result.failures


@pytest.mark.parametrize(
    ("holder_offset", "stealer_offset"),
    [(BEHIND, AHEAD), (AHEAD, BEHIND)],
    ids=["ahead-takes-over-from-behind", "behind-takes-over-from-ahead"],
)
def test_a_skewed_worker_takes_a_lease_over_only_once_it_expired(
    seams: Seams, holder_offset: float, stealer_offset: float
) -> None:
    lease_expiry_under_skew(seams, holder_offset, stealer_offset, MongoTransport)


def test_the_lease_check_fails_on_a_transport_that_leases_on_the_callers_clock(seams: Seams) -> None:
    """The same scenario on CallerClockTransport (tests/conformance/broken.py): the worker ahead takes the
    lease before it expired by the server's clock, and records its own time as the claim's."""
    with pytest.raises(AssertionError, match=r"taken over .*s before lease .* expired by the server's clock"):
        lease_expiry_under_skew(seams, BEHIND, AHEAD, CallerClockTransport)


# --- `harel worker` processes under faketime, the replica set's clock true ----------------------------

APP = "tests.wire.chaos_app:app"
PROCESS_LEASE = 1.0
SMOKE_RUNS = 3
FINISH_TIMEOUT = 60.0


class LeaseWatch:
    """Polls the store for held leases and keeps every distinct one it saw (a test's view from outside)."""

    def __init__(self, client: MongoClient[dict[str, Any]], seconds: float) -> None:
        self._executions = client.harel.executions
        self._seconds = seconds
        self.seen: dict[str, Lease] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            for document in self._executions.find({"lease": {"$ne": None}}, {"lease": 1}):
                lease = document["lease"]
                self.seen.setdefault(
                    lease["owner"],
                    Lease(
                        document["_id"],
                        lease["owner"],
                        float(lease["at"]),
                        float(lease["until"]),
                        lease.get("previous"),
                        self._seconds,
                    ),
                )
            self._stop.wait(0.01)

    def holder(self, execution_id: str) -> Lease | None:
        return next((lease for lease in self.seen.values() if lease.execution_id == execution_id), None)

    @contextmanager
    def watching(self) -> Iterator[LeaseWatch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def _skewed_process(
    processes: WorkerProcesses, url: str, offset: float, admin: MongoClient[dict[str, Any]]
) -> WorkerProcess:
    launched = time.time()
    worker = processes.harel_worker(
        url,
        "--app",
        APP,
        "--concurrency",
        "1",  # one consumer: the execution's holder cannot take its own lease over
        "--lease-seconds",
        str(PROCESS_LEASE),
        "--drain-seconds",
        "2",
        clock_offset=offset,
    )
    worker.wait_registered(admin)
    beat = admin.harel.workers.find_one({"pid": worker.pid})
    assert beat is not None
    skew = beat["started_at"] - launched  # the worker's own clock's reading at its start
    assert abs(skew - offset) < 10, f"faketime did not move the worker's clock: {skew:+.1f}s"
    return worker


def _finished(store: MongoStore, ids: list[str]) -> Callable[[], bool]:
    return lambda: all((exe := store.load(i)) is not None and exe.status.value != "running" for i in ids)


def _taken_over(
    watch: LeaseWatch,
    store: MongoStore,
    transport: MongoTransport,
    holder: WorkerProcess,
    stealer: WorkerProcess,
    execution_id: str,
) -> Lease:
    """The holder claims `execution_id` (the stealer stopped meanwhile) and is frozen (SIGSTOP) in its
    action, its lease held; the stealer, continued, takes the lease over once it expired; then the holder
    goes on, and its late commit is refused. The stealer's lease, as the store held it."""
    stealer.process.send_signal(signal.SIGSTOP)
    # the holder stopped too while both events are queued, so that the one claim it makes takes the start and
    # `work` together: a holder on a change stream would otherwise claim the start alone, at once, and the
    # lease seen first would not be the stalled step's
    holder.process.send_signal(signal.SIGSTOP)
    try:
        start_execution(store, transport, chaos_app.app, chaos_app.STALL_CHART_ID, execution_id=execution_id)
        send_event(store, transport, chaos_app.app, execution_id, "work")
        holder.process.send_signal(signal.SIGCONT)
        wait_until(lambda: watch.holder(execution_id) is not None, 20.0, f"{execution_id} to be claimed")
        holder.process.send_signal(signal.SIGSTOP)
    finally:
        stealer.process.send_signal(signal.SIGCONT)
    held = watch.holder(execution_id)
    assert held is not None

    def stolen() -> Lease | None:
        return next((lease for lease in watch.seen.values() if lease.previous == held.owner), None)

    try:
        wait_until(
            lambda: stolen() is not None, FINISH_TIMEOUT, f"the lease of {execution_id} to be taken over"
        )
    finally:
        holder.process.send_signal(signal.SIGCONT)
    wait_until(_finished(store, [execution_id]), FINISH_TIMEOUT, f"{execution_id} to finish")
    assert f'"execution_id": "{execution_id}"' in _takeovers(stealer), "the stealer did not take it over"
    taken = stolen()
    assert taken is not None
    return taken


def _takeovers(worker: WorkerProcess) -> str:
    return "\n".join(line for line in worker.log().splitlines() if "took over an expired lease" in line)


def test_skewed_worker_processes_decide_on_the_servers_clock(
    fake_rs_process: FakeProcess, worker_processes: WorkerProcesses
) -> None:
    """`harel worker` processes under faketime, one 30 s ahead and one 30 s behind, on a replica set in its
    own process: smoke and approval workflows with 0.3 s timers never fire a timer early; a stalled
    holder's lease is taken over, in each direction, only once it expired by the server's clock."""
    url = fake_rs_process.url
    with MongoClient(url, **CLIENT_OPTIONS) as admin:
        ahead = _skewed_process(worker_processes, url, AHEAD, admin)
        behind = _skewed_process(worker_processes, url, BEHIND, admin)
        store, transport = MongoStore(admin, "harel"), MongoTransport(admin, "harel", watch=False)
        roots = [
            start_execution(store, transport, chaos_app.app, chart_id, execution_id=f"skew-{chart_id}-{n}")[
                0
            ].id
            for n in range(SMOKE_RUNS)
            for chart_id in (chaos_app.SMOKE_CHART_ID, chaos_app.APPROVAL_CHART_ID)
        ]
        wait_until(_finished(store, roots), FINISH_TIMEOUT, "the workflows to finish", poll=0.1)
        for root in roots[::2]:
            report = check(gather(store, root, FINISH_TIMEOUT))
            assert report.passed, report.failures

        with LeaseWatch(admin, PROCESS_LEASE).watching() as watch:
            ahead_took = _taken_over(watch, store, transport, behind, ahead, "stall-ahead-takes-over")
            behind_took = _taken_over(watch, store, transport, ahead, behind, "stall-behind-takes-over")

        assert not leases_taken_early(watch.seen.values()), [ahead_took, behind_took]
        result = audit(admin.harel.executions.find({}))
        assert result.passed, result.failures
        assert result.timers == SMOKE_RUNS * (4 + 4)
