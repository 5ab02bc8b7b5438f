"""The worker runtime: claim an execution, apply its pending events in order, commit, relay — plus the
background relay and heartbeats.

One claim, end to end (ARCHITECTURE.md):

1. `transport.claim` — one findAndModify: the execution that has been claimable longest (its mailbox or one
   of its timers due), of a chart version this worker serves, with its data and pending events — due timers
   appended as events by the same command — leased to this worker on the server's clock. No other worker
   steps it until the lease ends.
2. `interpreter.step` for each pending event in arrival order (pure; ids derived from the version, so a
   retried step mints the same ids), until the batch is done or half the lease is used.
3. `store.commit_claim` — one CAS update (`{_id, version, lease.owner}`): the steps with their outbox
   events, spawns, timers, dedupe marks and traces; the applied events leave the mailbox; the lease ends.
4. The same worker relays what it committed, at once: children first (one bulk create, each child with
   its start event in its mailbox), then the outbox events in seq order (one send each). Events from one
   execution to another therefore arrive in the order they were sent. Work delivered in full needs no
   acknowledgement of its own: this worker's next commit of the execution trims it, or the relay loop
   acknowledges what is left of it, for every execution at once, in one bulk command. A worker whose
   claim found another's outbox entries still there, and whose commit has entries of its own, takes the
   relay work over and delivers those to the same targets again before its own (`claim_commit_parts`). (A worker that dies first leaves
   its work held: the background relay delivers it again once the hold ran out, and the receivers drop
   the repeats by event id and child id.)

- A lost CAS or lease (`StoreConflict`, `LeaseLost`) changes nothing: the events stay for whoever holds
  the execution now. A commit whose reply was lost is resolved by reading the dedupe mark and the lease.
- An action or guard that raises fails the attempt at that event: the events before it are committed,
  it is retried after a backoff with the events behind it waiting, and after `max_attempts` the
  execution is parked (a dead letter on the execution, `harel dead`). An error no retry can change parks
  it at once; every failed attempt is logged and kept with its traceback.
- The lease keeper extends the lease of a step that runs past a third of it, up to `max_step_seconds`; a
  claim that takes over a lease that ran out counts an attempt, so a step that always outlives its lease
  is parked (`LeaseExpired`) rather than run again without end.
- A claimed execution whose stored document cannot be read (nested past the parser's limit, a field of the
  wrong type, a malformed mailbox entry: stored by an older version or by hand) is parked at once
  (`UnreadableExecution`, naming what could not be read), fenced by the claim's lease, in one log line.
  Relay work (an outbox or spawn entry) the relay cannot read parks it the same way, fenced by no claim
  holding its lease; the relay does not take it again until the operator settles it.
- The background relay only takes relay work left longer than its holder's time (a crashed worker's);
  one relay holds an execution's relay work at a time, so relays never repeat each other.
- Timers need no pass of their own: an execution's `wake_at` is its earliest timer while its mailbox is
  idle, so the claim that takes it when the timer is due fires the timer. An idle consumer wakes for the
  timers this worker armed.
- Each command the worker sends runs under a deadline of its own (`op_timeout_seconds`, `harel.deadlines`),
  so a deployment that stops answering (a partition that drops packets) costs about that long, not the
  client's 30 s reply bound; a command the deadline cut short fails like any network error (a commit's
  outcome is then read back).
- A pause (`harel pause`, `harel.pausing`) reaches the worker through its heartbeat: it stops claiming, lets the
  steps in flight commit and relay what they committed, acknowledges what it delivered, stops its background
  relay, and says it has paused in its next beat (sent at once). A worker that starts while a pause stands
  claims nothing until it is resumed; until its first beat has looked, it claims nothing either.
- `async def` actions and guards run on the process's event loop (`harel.eventloop`), which a worker holds
  from `start` to `stop`; each call is bounded by `async_timeout_seconds`, and one that times out fails the
  attempt like an action that raises.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field

from harel import interpreter
from harel.app import App
from harel.deadlines import per_operation
from harel.errors import (
    DeploymentError,
    ExecutionTooLarge,
    InvalidContext,
    InvalidSend,
    LeaseExpired,
    LeaseLost,
    PermanentError,
    StepLimitExceeded,
    StepTimedOut,
    StepTooLarge,
    StoreConflict,
    UnknownAction,
    UnknownChart,
    UnreadableExecution,
)
from harel.eventloop import PROCESS_LOOP
from harel.executions.commits import (
    STATE_LIMIT_BYTES,
    STATE_WARN_BYTES,
    CommitParts,
    claim_commit_parts,
    require_step_fits,
)
from harel.executions.fields import SAFE_COMMIT_BYTES, chart_key
from harel.executions.records import Claim, Delivered, Failure, Pending, RelayWork, SendOutcome, StepRecord
from harel.fanout import oversized_forks
from harel.heartbeat import Beat, Heartbeats
from harel.metrics import Metrics
from harel.model import FAIL_EVENT, TIMER_EVENT, Event, Execution, OutboxEntry
from harel.sent import CONSUMER, HEARTBEAT, IDLE, RELAY, sending
from harel.store.base import ExecutionStore
from harel.transport.base import DEFAULT_LEASE_SECONDS, Transport, backoff

log = logging.getLogger("harel.worker")

DELIVERED = frozenset({SendOutcome.QUEUED, SendOutcome.DUPLICATE})
# Relay work whose target does not exist yet, or whose mailbox is full, is tried again after this long.
RELAY_RETRY_SECONDS = 1.0
# A commit the deployment refused twice (and did not apply) is tried again after this long; it is not the
# event's fault, so it counts no attempt.
UNRESOLVED_RETRY_SECONDS = 1.0
# An event whose target still does not exist this long after it was sent fails its sender (judged once the
# worker has read the server's clock: its own may be far off).
UNDELIVERABLE_AFTER_SECONDS = 300.0
# Errors a retry cannot change: the step is refused for what it is, not for a passing condition (a
# TypeError is a bug in the action or in what it returned; PermanentError is the app's own say-so).
PERMANENT = (
    PermanentError,
    TypeError,
    ExecutionTooLarge,
    StepTooLarge,
    StepLimitExceeded,
    InvalidContext,
    InvalidSend,
    UnknownAction,
    UnknownChart,
)
# An idle consumer on a change stream, with nothing planned, claims again after this long even if it heard
# nothing: a net under what the stream does not report (a lease taken or extended elsewhere, which runs out
# unseen when its holder dies), at one claim and one look per interval.
WATCHED_IDLE_SECONDS = 5.0


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 2
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    idle_poll_max: float = 0.5
    # The background relay (work a crashed or slow worker left) polls every RELAY_RETRY_SECONDS after a pass
    # that moved something or while a delivery of this worker's waits for its retry, and backs off to this
    # (at most a third of the lease) while it finds nothing: an idle worker's cost stays a command or so per
    # few seconds, however many workers there are.
    relay_poll_max: float = 5.0
    heartbeat_seconds: float = 5.0
    drain_seconds: float = 20.0
    trace: bool = True
    batch: int = 100
    # An async action or guard that runs longer fails the attempt. Keep it well under the lease: a step that
    # outlives its lease is stepped again by another worker.
    async_timeout_seconds: float = 10.0
    # How long one step's actions may run: while they run, the worker extends the claim's lease every third of
    # `lease_seconds`, up to this; a step that takes longer fails its attempt (StepTimedOut), and its lease
    # runs out for another worker to take over, which counts an attempt (LeaseExpired once they are spent).
    max_step_seconds: float = 60.0
    # After the drain, how long the threads get to end their current command (the relay and the heartbeat,
    # and a consumer still relaying). They stop between commands; one still blocked then (or in a long action)
    # is named in the log and left behind, so `stop` returns within drain + this (Helm's termination margin
    # covers it).
    stop_seconds: float = 5.0
    # How long one command of the worker's (a claim, a commit, a relay's send or acknowledgement, a lease
    # extension, a heartbeat) may take, all of it: server selection, the round trip, retries (`harel.deadlines`). A deployment that stops answering then costs about this long, not the 30 s
    # reply bound. Keep it well under the lease: a command blocked past it outlives the claim it serves.
    op_timeout_seconds: float = 5.0


@dataclass
class _Batch:
    """What one claim applied: the execution after each step, and what the commit records."""

    claim: Claim
    executions: list[Execution] = field(default_factory=list)
    steps: list[interpreter.Step] = field(default_factory=list)
    records: list[StepRecord] = field(default_factory=list)
    applied: list[Pending] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)  # seconds each step took, actions included
    failure: Failure | None = None

    def first(self, count: int) -> _Batch:
        return _Batch(
            self.claim,
            self.executions[:count],
            self.steps[:count],
            self.records[:count],
            self.applied[:count],
            self.durations[:count],
        )

    @property
    def execution(self) -> Execution:
        return self.executions[-1]

    @property
    def timers_changed(self) -> bool:
        return any(step.timers for step in self.steps)


@dataclass(frozen=True)
class _Held:
    """A claim a consumer is stepping, and when it started (monotonic): the lease keeper extends it until the
    maximum step time."""

    claim: Claim
    since: float


class _Unresolved(Exception):
    """The commit's outcome could not be learned (the deployment is unreachable)."""


class Worker:
    """Consumers, the background relay and heartbeats over one store and one transport."""

    def __init__(
        self,
        store: ExecutionStore,
        transport: Transport,
        app: App,
        *,
        config: WorkerConfig | None = None,
        metrics: Metrics | None = None,
        heartbeats: Heartbeats | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.app = app
        self.config = config or WorkerConfig()
        self.metrics = metrics or Metrics()
        self.heartbeats = heartbeats
        self.clock = transport.clock
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.charts = [chart_key(chart.id, chart.version) for chart in app.charts]
        self.registry = app.registry.on_loop(PROCESS_LOOP, self.config.async_timeout_seconds)
        self.started_at = time.time()
        self.counters = {"processed": 0, "conflicts": 0, "redeliveries": 0, "dead_lettered": 0}
        self._stopping = threading.Event()
        self._halt = threading.Event()
        self._planning = threading.Lock()
        self._delivered: dict[str, Delivered] = {}  # relay work delivered after own commits, unacknowledged
        self._postponed = (
            threading.Event()
        )  # a delivery waits for its retry: the relay loop polls at its pace
        self._inflight: dict[int, _Held] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._consumers: list[threading.Thread] = []
        self._last_loop = time.monotonic()
        self._degraded: str | None = None  # the deployment's last failure, until it answers again
        self._holds_loop = False
        # The pause (`harel.pausing`), as this worker last heard of it; guarded by `_gate`, which consumers and
        # the relay wait on while it stands. Without heartbeats no pause can reach the worker.
        self._gate = threading.Condition()
        self._pause_known = heartbeats is None  # the start has looked for a pause standing
        self._pause_requested = False
        self._parked = 0  # consumers waiting at the pause
        self._relay_parked = False
        self._beat_soon = threading.Event()  # the heartbeat loop beats now: this worker has just paused

    # --- one claim ---------------------------------------------------------------------------------

    def process_one(self) -> bool:
        """Claim one execution and apply its pending events. False when nothing was due."""
        with self._bounded():
            return self._process_one()

    def _bounded(self) -> contextlib.AbstractContextManager[None]:
        """Each command sent inside under a deadline of its own (`op_timeout_seconds`); a step's actions
        between them are not bounded by it."""
        return per_operation(self.config.op_timeout_seconds)

    def _process_one(self) -> bool:
        try:
            claim = self.transport.claim(self.charts, self.config.lease_seconds, self.clock.bound())
        except UnreadableExecution as unreadable:
            self._answered()
            self._park_unreadable(unreadable)
            return True
        self._answered()  # the claim is a majority write: the deployment took it
        if claim is None:
            return False
        observed = self.clock.mark()
        if claim.previous_owner is not None:
            self.metrics.lease_steals.inc()
            log.info(
                "took over an expired lease",
                extra={"execution_id": claim.execution_id, "previous_owner": claim.previous_owner},
            )
        if (
            claim.previous_owner is not None
            and claim.attempts >= self.transport.max_attempts
            and claim.pending
        ):
            self._park_taken_over(claim)
            return True
        with self._lock:
            self._inflight[threading.get_ident()] = _Held(claim, time.monotonic())
        self.metrics.leased.inc()
        try:
            self._settle(self._apply(claim, observed))
        finally:
            self.metrics.leased.dec()
            with self._lock:
                self._inflight.pop(threading.get_ident(), None)
        return True

    def _park_taken_over(self, claim: Claim) -> None:
        """Its leases ran out `max_attempts` times at the head event: park it rather than run the event's
        actions once more."""
        head = claim.pending[0]
        assert claim.previous_owner is not None
        expired = LeaseExpired(
            head.event.name,
            claim.attempts,
            claim.previous_owner,
            self.config.lease_seconds,
            self.config.max_step_seconds,
        )
        self.transport.fail(claim, self._failure(claim, head, expired, first=True, counted=True))

    def _park_unreadable(self, unreadable: UnreadableExecution) -> None:
        """Its document cannot be read, so no step can be taken: park it at once, in one logged line, rather
        than leave its lease to run out and the next claim to fail the same way, without end."""
        self.metrics.failures.inc()
        if not self.transport.park_unreadable(unreadable):
            log.info(
                "an unreadable execution's lease was lost before it was parked",
                extra={"execution_id": unreadable.execution_id},
            )
            return
        self._parked_unreadable(unreadable, event_id=unreadable.event_id)

    def _park_unleased(self, unreadable: UnreadableExecution, by: str) -> None:
        """The relay (`by`) cannot read what it came for: park the execution, in one logged line, rather than
        meet the same entry on every pass. While a claim holds the execution the park waits for a later pass
        (once the relay's hold runs out)."""
        if not self.store.park_unreadable(unreadable):
            log.info(
                "an unreadable execution is leased; parked on a later pass",
                extra={"execution_id": unreadable.execution_id, "by": by},
            )
            return
        self.metrics.failures.inc()
        self._parked_unreadable(unreadable, by=by)

    def _parked_unreadable(self, unreadable: UnreadableExecution, **context: str | None) -> None:
        self._count("dead_lettered")
        self.metrics.dead_letters.inc()
        log.error(
            "execution unreadable, parked; it waits for `harel dead retry|drop` once its document is repaired",
            extra={
                "execution_id": unreadable.execution_id,
                **context,
                "error": f"{type(unreadable).__name__}: {unreadable}",
            },
        )

    def _apply(self, claim: Claim, observed: float) -> _Batch:
        batch = _Batch(claim)
        exe = claim.execution
        chart = self.app.get_chart(exe.definition_id, exe.definition_version)
        stop_at = time.monotonic() + self.config.lease_seconds / 2
        for pending in claim.pending[: self.config.batch]:
            if batch.applied and time.monotonic() > stop_at:
                break  # the rest waits for the next claim, well inside this lease
            exe = exe.model_copy(update={"version": claim.execution.version + len(batch.applied)})
            now = self.clock.since(claim.server_time, observed)
            started = time.monotonic()
            try:
                step = interpreter.step(chart, exe, pending.event, now, registry=self.registry)
                # refused here, as the step that it is, not later by the commit that would carry it
                require_step_fits(exe.id, len(step.emits) + len(step.spawns))
                took = time.monotonic() - started
                if took > self.config.max_step_seconds:
                    raise StepTimedOut(exe.id, pending.event.name, took, self.config.max_step_seconds)
            except Exception as exc:
                batch.failure = self._failure(claim, pending, exc, first=not batch.applied)
                break
            self.metrics.step_seconds.observe(took)
            self.metrics.queue_wait.observe(max(0.0, now - pending.at))
            exe = step.execution
            batch.executions.append(exe)
            batch.steps.append(step)
            batch.applied.append(pending)
            batch.durations.append(took)
            batch.records.append(
                StepRecord(pending.id, step.emits, step.spawns, step.trace if self.config.trace else None)
            )
        return batch

    def _failure(
        self, claim: Claim, pending: Pending, exc: Exception, *, first: bool, counted: bool = False
    ) -> Failure:
        """The failed attempt at `pending`; `counted` when the claim already counted it (a takeover)."""
        attempts = (claim.attempts if first else 0) + (0 if counted else 1)
        # an error that another attempt cannot change parks at once, its reason named
        park = attempts >= self.transport.max_attempts or isinstance(exc, PERMANENT)
        error = f"{type(exc).__name__}: {exc}"
        where = "".join(traceback.format_exception(exc))
        fields = {
            "execution_id": claim.execution_id,
            "event": pending.event.name,
            "event_id": pending.id,
            "attempts": attempts,
            "error": error,
        }
        self.metrics.failures.inc()
        if park:
            self._count("dead_lettered")
            self.metrics.dead_letters.inc()
            log.error(
                "event dead-lettered; the execution waits for `harel dead retry|drop`",
                extra=fields,
                exc_info=exc,
            )
        else:
            log.warning("attempt failed, will retry", extra=fields, exc_info=exc)
        return Failure(pending, error, attempts, park, backoff(attempts), where)

    def _settle(self, batch: _Batch) -> None:
        claim = batch.claim
        if not batch.applied:
            if batch.failure is not None:
                self.transport.fail(claim, batch.failure)
            else:
                self.transport.release(claim)
            return
        try:
            parts = self._commit(batch)
        except ExecutionTooLarge as exc:
            if len(batch.applied) > 1:
                log.warning(
                    "batch too large for one commit; committing its first step alone",
                    extra={"error": str(exc)},
                )
                self._settle(batch.first(1))
                return
            self.transport.fail(claim, self._failure(claim, batch.applied[0], exc, first=True))
            return
        except StoreConflict as lost:
            self._count("conflicts")
            self.metrics.conflicts.inc()
            log.info(
                "commit refused; the events stay in the mailbox",
                extra={"execution_id": claim.execution_id, "error": str(lost)},
            )
            if not isinstance(lost, LeaseLost):
                # another writer moved the version while the lease held: end the lease so the events are
                # stepped again from the new version now, not when the lease runs out
                self.transport.release(claim)
            return
        except _Unresolved as exc:
            log.warning(
                "commit not made; the events stay in the mailbox and are retried",
                extra={"execution_id": claim.execution_id, "error": str(exc)},
            )
            with contextlib.suppress(DeploymentError):  # unreachable: the lease runs out instead
                self.transport.release(claim, UNRESOLVED_RETRY_SECONDS)
            return
        self._after_commit(batch, parts)

    def _commit(self, batch: _Batch) -> CommitParts:
        """Commit the batch. A commit that failed on the deployment (a lost reply, a primary gone, a write
        concern error) may or may not have been applied: the outcome is read back, and a commit that did
        not happen is sent once more while the lease still holds."""
        claim = batch.claim
        with self._lock:
            delivered = self._delivered.get(claim.execution_id)
        for _ in range(2):
            try:
                return self.store.commit_claim(
                    claim,
                    batch.execution,
                    batch.records,
                    applied=batch.applied,
                    failure=batch.failure,
                    timers_changed=batch.timers_changed,
                    delivered=delivered,
                )
            except DeploymentError as exc:
                if self._halt.is_set():
                    raise  # stopped: the client may be closing; the lease runs out, the events stay
                self._failing(exc)
                self.metrics.unknown_outcomes.inc()
                log.warning(
                    "commit failed on the deployment; reading its outcome",
                    extra={"execution_id": claim.execution_id, "error": str(exc)},
                )
                if self._committed(claim, batch.applied[-1].id, exc):
                    # it happened: what it wrote is rebuilt exactly, the builders being pure
                    return claim_commit_parts(
                        claim, batch.execution, batch.records, batch.applied, batch.timers_changed, delivered
                    )
        raise _Unresolved(f"execution {claim.execution_id!r}: the commit did not reach the deployment")

    def _committed(self, claim: Claim, last_event_id: str, cause: Exception) -> bool:
        """Resolve an unknown commit outcome: the last applied event's dedupe mark says it happened; the
        lease still held at the version claimed says it did not (and may be sent again); anything else is
        a lost lease. Reads are retried while the network heals, within half the lease."""
        delay = 0.05
        deadline = time.monotonic() + self.config.lease_seconds / 2
        while True:
            try:
                if self.store.is_processed(claim.execution_id, last_event_id):
                    return True
                version, owner = self.store.commit_outcome(claim.execution_id)
            except DeploymentError as exc:
                if time.monotonic() + delay > deadline:
                    raise _Unresolved(f"{cause}; then {exc}") from exc
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            if version == claim.execution.version and owner == claim.owner:
                return False
            raise LeaseLost(claim.execution_id, claim.execution.version, owner)

    def _after_commit(self, batch: _Batch, parts: CommitParts) -> None:
        claim = batch.claim
        for pending, step, took in zip(batch.applied, batch.steps, batch.durations, strict=True):
            self._count("processed")
            if step.handled:
                self.metrics.events.labels(kind=_kind(pending.event.name)).inc()
            else:
                self.metrics.ignored.inc()
            if pending.event.name == TIMER_EVENT and step.handled:
                self.metrics.timers_fired.inc()
                self.metrics.timer_lateness.observe(
                    max(0.0, step.trace["at"] - float(pending.event.data["fire_at"]))
                )
            log.info(
                "event applied" if step.handled else "event ignored",
                extra={
                    "execution_id": claim.execution_id,
                    "event": pending.event.name,
                    "event_id": pending.id,
                    "from": ",".join(step.trace.get("from", [])) or "-",
                    "to": ",".join(step.trace.get("to", [])) or "-",
                    "duration_ms": round(took * 1000, 3),
                    "reason": step.trace.get("reason"),
                },
            )
        self._note_state(claim, parts)
        if parts.timers is not None and parts.next_fire_at is not None:
            self._note_timer(parts.next_fire_at)
        if parts.trimmed is not None:
            with self._lock:
                if self._delivered.get(parts.execution_id) is parts.trimmed:
                    del self._delivered[parts.execution_id]  # acknowledged by this commit
        if parts.relays and parts.held:
            if parts.taken_over:
                self.metrics.relay_takeovers.inc(len(parts.taken_over))
            work = RelayWork(parts.execution_id, parts.outbox_entries(), parts.spawn_entries())
            self._deliver(work, own=True)

    def _note_state(self, claim: Claim, parts: CommitParts) -> None:
        """The state's size as this commit stored it; past STATE_WARN_BYTES a count, and one log line when
        the commit took it past (or at its first step, when it was created past it)."""
        self.metrics.state_bytes.observe(parts.state_bytes)
        if parts.state_bytes <= STATE_WARN_BYTES:
            return
        self.metrics.oversized_states.inc()
        if claim.state_bytes > STATE_WARN_BYTES and claim.execution.started:
            return  # the commit that took it past warned
        log.warning(
            "execution state is large: every commit rewrites it and every claim reads it; keep references "
            "to large data in the context, not the data",
            extra={
                "execution_id": claim.execution_id,
                "state_bytes": parts.state_bytes,
                "warn_bytes": STATE_WARN_BYTES,
                "limit_bytes": STATE_LIMIT_BYTES,
            },
        )

    # --- relays ------------------------------------------------------------------------------------

    def _deliver(self, work: RelayWork, *, own: bool = False) -> int:
        """Children first, then the outbox in seq order; an entry that cannot be delivered yet holds back
        the later entries to the same target, so no event overtakes another from the same sender. What was
        delivered is acknowledged at once, unless it is this worker's `own` commit's work delivered in
        full: that waits for the execution's next commit or the relay loop's acknowledgement of all."""
        now = self.clock.now()
        if work.spawns:
            self._check_existing(work, self.store.create_children(work.spawns, now=now))
            self.metrics.relayed.labels(kind="spawn").inc(len(work.spawns))
        delivered: list[int] = []
        blocked: set[str] = set()
        for entry in work.outbox:
            if self._halt.is_set():
                break  # stopping: what is left keeps its order and is due for the next relay after the retry
            if entry.target_id is None:
                delivered.append(entry.seq)
                continue
            if entry.target_id in blocked:
                continue
            outcome = self.transport.send(entry.target_id, entry.event, source=entry.source_id)
            if outcome is SendOutcome.MISSING and self.clock.known and _undeliverable(entry, now):
                self._fail_execution(
                    work.execution_id,
                    f"its event {entry.event.name!r} ({entry.event.id}) to {entry.target_id!r} could not be "
                    f"delivered: no such execution after {UNDELIVERABLE_AFTER_SECONDS:.0f}s",
                    f"undeliverable:{entry.seq}",
                )
                delivered.append(entry.seq)
                continue
            if outcome not in DELIVERED:
                blocked.add(entry.target_id)
                self._postponed.set()
                log.info(
                    "delivery postponed",
                    extra={
                        "execution_id": work.execution_id,
                        "target": entry.target_id,
                        "outcome": outcome.value,
                    },
                )
                continue
            if outcome is SendOutcome.DUPLICATE:
                self._count("redeliveries")
                self.metrics.redeliveries.inc()
            delivered.append(entry.seq)
            self.metrics.relayed.labels(kind="outbox").inc()
            if entry.event.created_at is not None:
                self.metrics.relay_lag.observe(max(0.0, now - entry.event.created_at))
        spawned = [s.seq for s in work.spawns]
        if own and len(delivered) == len(work.outbox):
            with self._lock:
                self._delivered[work.execution_id] = Delivered(
                    work.execution_id, tuple(delivered), tuple(spawned), time.monotonic()
                )
        else:
            self.store.ack_relay(work.execution_id, delivered, spawned, retry_in=RELAY_RETRY_SECONDS)
        if delivered or work.spawns:
            self.transport.wake([s.child_id for s in work.spawns])
        return len(delivered) + len(work.spawns)

    def _check_existing(self, work: RelayWork, existed: list[str]) -> None:
        """A child found existing was created by an earlier relay (a repeated delivery, absorbed), unless it
        belongs to another execution: then the region can never start and the parent fails, saying why."""
        for child_id in existed:
            child = self.store.load(child_id)
            if child is not None and child.parent_id == work.execution_id:
                self._count("redeliveries")
                self.metrics.redeliveries.inc()
                log.info(
                    "child already created", extra={"execution_id": work.execution_id, "child_id": child_id}
                )
                continue
            self._fail_execution(
                work.execution_id,
                f"the child execution {child_id!r} of one of its regions cannot be created: the id is taken by "
                "another execution",
                f"child-taken:{child_id}",
            )

    def _fail_execution(self, execution_id: str, reason: str, key: str) -> None:
        log.error(
            "failing an execution the engine cannot carry on",
            extra={"execution_id": execution_id, "reason": reason},
        )
        self.transport.send(
            execution_id, Event(id=f"{execution_id}:fail:{key}", name=FAIL_EVENT, data={"reason": reason})
        )

    def acknowledge_delivered(self) -> int:
        """Acknowledge, in one command, the relay work this worker delivered after its commits and no commit
        trimmed since, except that of executions a consumer holds now (its commit may trim it). Returns how
        many executions' work was acknowledged."""
        with self._lock:
            held = {held.claim.execution_id for held in self._inflight.values()}
            due = [d for execution_id, d in self._delivered.items() if execution_id not in held]
            for done in due:
                del self._delivered[done.execution_id]
        if due:
            with self._bounded():
                self.store.ack_delivered(due, retry_in=RELAY_RETRY_SECONDS)
        return len(due)

    def relay_once(self) -> int:
        """Take relay work left behind (a crashed or slow worker's) and deliver it. Returns entries moved."""
        moved = 0
        with self._bounded():
            while moved < self.config.batch and not self._halt.is_set():
                try:
                    work = self.store.take_relay_work(self.config.lease_seconds, self.clock.bound())
                except UnreadableExecution as unreadable:
                    self._park_unleased(unreadable, "relay")  # its work stays held: the loop takes the next
                    continue
                if work is None:
                    break
                moved += self._deliver(work)
        return moved

    # --- timers ------------------------------------------------------------------------------------

    def _note_timer(self, due: float) -> None:
        """A commit of this worker armed a timer due then (server clock): an idle consumer wakes for it."""
        self.transport.wake_plan.plan(due)

    def _idle_pause(self, backoff: float) -> float:
        """How long an idle consumer waits at most (the wait ends sooner at the earliest wake-up planned,
        `harel.transport.wakeups`). On a change stream: WATCHED_IDLE_SECONDS, once the earliest wake-up is
        known (looked up by one consumer whenever it is not); without one: its backoff."""
        plan = self.transport.wake_plan
        if not plan.watching:
            return backoff
        if not plan.known and self._planning.acquire(blocking=False):
            try:
                with self._bounded():
                    self.transport.plan_next_wake(self.charts)
            finally:
                self._planning.release()
        return WATCHED_IDLE_SECONDS

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        PROCESS_LOOP.acquire()
        self._holds_loop = True
        if not self.charts:
            log.warning("no chart registered: this worker serves nothing", extra={"worker_id": self.id})
        self._warn_of_large_forks()
        for n in range(self.config.concurrency):
            thread = threading.Thread(target=self._consume, name=f"harel-consumer-{n}", daemon=True)
            self._consumers.append(thread)
        self._threads = [
            *self._consumers,
            threading.Thread(target=self._relay_loop, name="harel-relay", daemon=True),
            threading.Thread(target=self._lease_loop, name="harel-lease", daemon=True),
        ]
        if self.heartbeats is not None:
            self._threads.append(
                threading.Thread(target=self._heartbeat_loop, name="harel-heartbeat", daemon=True)
            )
        for thread in self._threads:
            thread.start()
        log.info(
            "worker started",
            extra={"worker_id": self.id, "concurrency": self.config.concurrency, "charts": self.charts},
        )

    def _warn_of_large_forks(self) -> None:
        for fork in oversized_forks(self.app.charts):
            log.warning(
                "a fork copies the context into each of its regions' spawns: its commit is refused once the "
                "context passes context_budget bytes (regions x (context + the regions' ids) under "
                "limit_bytes); the context grows with what actions and region results add to it",
                extra={
                    "chart": fork.chart,
                    "state": fork.state,
                    "regions": fork.regions,
                    "context_budget": fork.context_budget,
                    "empty_fork_bytes": fork.empty_bytes,
                    "limit_bytes": SAFE_COMMIT_BYTES,
                },
            )

    def stop(self, drain_seconds: float | None = None) -> None:
        """Stop claiming; let in-flight claims finish until the drain deadline; release what is left; then
        halt every thread (relays stop between sends) and join them for up to `stop_seconds`. Returns once every
        thread ended, or names in one log line those that did not (blocked in a command): they end
        quietly whenever it returns, so the caller may close the client after this, and only after."""
        drain = self.config.drain_seconds if drain_seconds is None else drain_seconds
        self._stopping.set()
        self._wake_gate()
        self.transport.wake()
        _join(self._consumers, time.monotonic() + drain)
        with self._lock:
            unfinished = [held.claim for held in self._inflight.values()]
        self._halt.set()
        self._postponed.set()  # the relay loop's wait ends
        self._beat_soon.set()  # and the heartbeat loop's
        self._wake_gate()
        # Releasing the claims and removing the heartbeat are commands too: bounded like the threads, so an
        # unreachable deployment cannot hold the stop past drain + stop_seconds.
        leaving = threading.Thread(target=self._leave, args=(unfinished,), name="harel-leaving", daemon=True)
        leaving.start()
        # a consumer still relaying what it committed stops between sends now, like the background relay
        _join([*self._threads, leaving], time.monotonic() + self.config.stop_seconds)
        if self._holds_loop:
            PROCESS_LOOP.release()
            self._holds_loop = False
        if leaving.is_alive():
            log.error(
                "the deployment did not answer the stop's releases in time; the leases run out and the heartbeat "
                "expires",
                extra={"worker_id": self.id, "executions": [claim.execution_id for claim in unfinished]},
            )
        left = [thread.name for thread in self._threads if thread.is_alive()]
        if left:
            log.error(
                "threads did not stop in time; left behind, they end quietly when their command returns",
                extra={"worker_id": self.id, "threads": left},
            )
        log.info("worker stopped", extra={"worker_id": self.id, "released": len(unfinished), **self.counters})

    def _leave(self, unfinished: list[Claim]) -> None:
        """Hand back the claims still held after the drain, acknowledge the relay work delivered, then remove
        this worker's heartbeat."""
        with self._lock:
            self._inflight.clear()  # what is left of them is released here
        with contextlib.suppress(DeploymentError):  # unacknowledged, it is delivered again and deduplicated
            self.acknowledge_delivered()
        with self._bounded():
            for claim in unfinished:
                try:
                    self.transport.release(claim)
                except DeploymentError as exc:
                    log.warning("could not release a claim; its lease will expire", extra={"error": str(exc)})
            if self.heartbeats is not None:
                try:
                    self.heartbeats.remove(self.id)
                except DeploymentError as exc:
                    log.warning("could not remove the heartbeat; it expires", extra={"error": str(exc)})

    def _wake_gate(self) -> None:
        with self._gate:
            self._gate.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def degraded(self) -> str | None:
        """Why the deployment is failing this worker (unreachable, writes not acknowledged by a majority
        within their bound), from the first failure until it answers a claim or a commit again."""
        return self._degraded

    def _failing(self, exc: DeploymentError) -> None:
        if self._degraded is None:
            log.error("deployment degraded; not ready until it answers again", extra={"error": str(exc)})
        self._degraded = str(exc)  # the driver's kind and message: "NetworkTimeout: ..."

    def _answered(self) -> None:
        if self._degraded is not None:
            log.warning("deployment answers again; ready", extra={"was": self._degraded})
            self._degraded = None

    def alive(self) -> bool:
        """Alive while the consumer threads run and the loops turned recently."""
        running = all(t.is_alive() for t in self._consumers) if self._consumers else True
        return running and (time.monotonic() - self._last_loop) < max(30.0, 3 * self.config.lease_seconds)

    def _consume(self) -> None:
        idle = 0.01
        while not self._stopping.is_set():
            self._last_loop = time.monotonic()
            if self._hold_at_pause():
                idle = 0.01
                continue
            pause = idle
            with sending(CONSUMER) as current:
                try:
                    worked = self.process_one()
                    if not worked:
                        current.loop = IDLE
                        pause = self._idle_pause(idle)
                except DeploymentError as exc:
                    if self._halt.is_set():
                        return  # left behind by `stop`: the client may be closed; stop names this thread
                    self._failing(exc)
                    worked = False
                except Exception:
                    # a failure this worker did not foresee must not stop its consumer: log, go on
                    log.exception("consumer failed; continuing")
                    worked = False
            if worked:
                idle = 0.01
                continue
            if not self._stopping.is_set():
                self.transport.wait_hint(pause)
            idle = min(self.config.idle_poll_max, idle * 2)

    # --- the pause -------------------------------------------------------------------------------

    @property
    def pause_requested(self) -> bool:
        """A pause stands as this worker last heard (or its start has not looked yet)."""
        with self._gate:
            return self._standing()

    @property
    def paused(self) -> bool:
        """A pause stands and this worker has stopped for it: every consumer waits, the steps that were in
        flight committed and relayed, the relay acknowledged what it delivered and waits too."""
        with self._gate:
            return self._stopped_for_pause()

    def _standing(self) -> bool:
        return self._pause_requested or not self._pause_known

    def _stopped_for_pause(self) -> bool:
        return (
            self._pause_requested
            and self._pause_known
            and self._relay_parked
            and self._parked == len(self._consumers)
        )

    def _hold_at_pause(self) -> bool:
        """While a pause stands, wait here (counted as parked) until it is lifted or the worker stops. True
        when it waited: the caller looks at its loop's condition again."""
        with self._gate:
            if not self._standing():
                return False
            self._parked += 1
            self._gate.notify_all()
            try:
                while self._standing() and not self._stopping.is_set():
                    self._last_loop = time.monotonic()
                    self._gate.wait(1.0)
            finally:
                self._parked -= 1
        return True

    def _relay_at_pause(self, retry: float) -> None:
        """The relay's part of a pause: once every consumer waits (their last commits relayed), acknowledge
        what this worker delivered, then wait until the pause is lifted or the worker halts."""
        with self._gate:
            while self._standing() and not self._halt.is_set() and self._parked < len(self._consumers):
                self._gate.wait(1.0)
            if not self._standing() or self._halt.is_set():
                return
        with sending(RELAY):
            try:
                self.acknowledge_delivered()
            except DeploymentError as exc:
                if not self._halt.is_set():
                    log.warning(
                        "acknowledging before the pause failed, will retry", extra={"error": str(exc)}
                    )
                    self._halt.wait(retry)
                return
            except Exception:
                log.exception("acknowledging before the pause failed; will retry")
                self._halt.wait(retry)
                return
        with self._gate:
            if not self._standing() or self._halt.is_set():
                return
            self._relay_parked = True
            self._gate.notify_all()
            paused = self._pause_requested
        if paused:
            log.info("paused: no claim, no relay until resumed", extra={"worker_id": self.id})
            self._beat_soon.set()  # say so now, not a heartbeat later
        with self._gate:
            try:
                while self._standing() and not self._halt.is_set():
                    self._gate.wait(1.0)
            finally:
                self._relay_parked = False

    def _heard_pause(self, standing: bool) -> None:
        """What the deployment said of the pause (a beat, or the start's look at `harel_meta`)."""
        with self._gate:
            was, known = self._pause_requested, self._pause_known
            self._pause_requested, self._pause_known = standing, True
            self._gate.notify_all()
        if standing and not was:
            log.info(
                "pause requested: claiming nothing more; the steps in flight finish",
                extra={"worker_id": self.id},
            )
            self.transport.wake()  # idle consumers come to the pause now, not at the end of their wait
        elif was and not standing:
            log.info("resumed", extra={"worker_id": self.id})
        elif not known and not standing:
            log.debug("no pause stands", extra={"worker_id": self.id})

    def _relay_loop(self) -> None:
        longest = min(self.config.relay_poll_max, self.config.lease_seconds / 3)
        first = min(RELAY_RETRY_SECONDS, longest)
        pause = first
        while not self._halt.is_set():
            if self.pause_requested:
                self._relay_at_pause(first)
                pause = first
                continue
            moved = 0
            postponed = self._postponed.is_set()
            self._postponed.clear()
            with sending(RELAY):
                try:
                    self.acknowledge_delivered()
                    moved = self.relay_once()
                except DeploymentError as exc:
                    if self._halt.is_set():
                        return  # stopping: the client may be closed; the work's hold expires for another relay
                    log.warning("relay failed, will retry", extra={"error": str(exc)})
                except Exception:
                    log.exception("relay failed on an entry it cannot read; will retry")
            pause = first if moved or postponed or self._postponed.is_set() else min(longest, pause * 2)
            if self._postponed.wait(pause):
                self._halt.wait(first)  # a delivery postponed meanwhile: its retry is due this long after it

    def _lease_loop(self) -> None:
        """Every third of the lease, extend the leases of the steps still running within the maximum step
        time, so a slow action is not taken over (and run again) by another worker while it runs."""
        every = self.config.lease_seconds / 3
        while not self._halt.wait(every):
            with sending(HEARTBEAT):
                try:
                    self.extend_leases()
                except DeploymentError as exc:
                    if self._halt.is_set():
                        return  # stopping: the client may be closed; the leases run out
                    log.warning("lease extension failed, will retry", extra={"error": str(exc)})

    def extend_leases(self) -> int:
        """Extend the lease of every claim stepped for longer than a third of the lease and less than the
        maximum step time. Returns how many were extended."""
        now = time.monotonic()
        with self._lock:
            due = [
                held.claim
                for held in self._inflight.values()
                if self.config.lease_seconds / 3 <= now - held.since < self.config.max_step_seconds
            ]
        with self._bounded():
            return sum(self.transport.extend(claim, self.config.lease_seconds) is not None for claim in due)

    def _heartbeat_loop(self) -> None:
        assert self.heartbeats is not None
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": self.started_at,
            "charts": self.charts,
        }
        while not self._halt.is_set():
            with sending(HEARTBEAT):
                try:
                    with self._bounded():
                        beat = self.heartbeats.beat(self.id, info, dict(self.counters), paused=self.paused)
                except DeploymentError as exc:
                    if self._halt.is_set():
                        return  # stopping: the client may be closed; `stop` removes the heartbeat
                    log.warning("heartbeat failed", extra={"error": str(exc)})
                else:
                    if beat.server_time is not None:  # the deployment's time, for the estimate's next anchor
                        self.clock.observe(beat.server_time)
                    self._look_for_pause(beat)
            self._beat_soon.wait(self.config.heartbeat_seconds)
            self._beat_soon.clear()

    def _look_for_pause(self, beat: Beat) -> None:
        """The pause as the beat returned it; at the start (once the beat stored this worker's document, so a
        pause written later flags it) also whether one stands in `harel_meta`."""
        assert self.heartbeats is not None
        with self._gate:
            known = self._pause_known
        if known or beat.pause_requested:
            self._heard_pause(beat.pause_requested)
            return
        try:
            with self._bounded():
                standing = self.heartbeats.join_pause(self.id)
        except DeploymentError as exc:
            if not self._halt.is_set():
                log.warning("could not look for a pause; claiming nothing yet", extra={"error": str(exc)})
            return
        if standing:
            log.info("a pause stands: starting paused", extra={"worker_id": self.id})
        self._heard_pause(standing)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1


def _join(threads: list[threading.Thread], deadline: float) -> None:
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _undeliverable(entry: OutboxEntry, now: float) -> bool:
    return now - (entry.event.created_at or now) > UNDELIVERABLE_AFTER_SECONDS


def _kind(name: str) -> str:
    return name if name.startswith("harel.") else "user"
