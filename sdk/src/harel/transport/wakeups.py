"""The wake-up hint of the MongoTransports: where the deployment has change streams (a replica set), a
mailbox that becomes due wakes waiting consumers, and one that will be due later (a timer, a lease's end)
plans a wake-up for then; so an idle consumer on a change stream sends no command until something is due.

The watcher asks for the next changes (a getMore) only while one of its process's consumers waits: a busy
consumer claims again as soon as it is done, which sees whatever changed meanwhile, so a stream read then
would only wake it for work already seen, at one command per change per process. The changes made meanwhile
wait in the server's cursor and come in one batch when a consumer waits again. So N busy workers do not each
read every change, and commands per event stay flat as workers are added (benchmark 5).

Where there is no change stream consumers poll with a bounded backoff. A watch that fails is restarted with
a backoff, and meanwhile its consumers poll: it costs latency, never an event. The plan (`WakePlan`) is
shared; the waiting differs between the twins in more than its awaits (a thread and a threading.Event, a
task and an asyncio.Event), so it is written twice, here, and the transports are generated one from the
other.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pymongo.errors import OperationFailure, PyMongoError

from harel.commands import resolved
from harel.executions.partitions import Partitions, Zone
from harel.executions.queries import WATCH_PIPELINE
from harel.sent import WATCH, sending
from harel.transport.rotation import Rotation

log = logging.getLogger("harel.transport")

WATCH_RETRY_FIRST = 0.5
WATCH_RETRY_MAX = 30.0
# How long the watcher's stream takes to notice `close`: one awaited getMore (`max_await_time_ms`) and its
# round trip. A watcher still inside one after this is named in the log and the client closes under it.
WATCH_AWAIT_MS = 1000
WATCH_STOP_SECONDS = 2.0
# A watcher with no consumer waiting still reads its stream this often: a cursor left unread for the server's
# cursor timeout (10 minutes) is closed, and its resume point falls further behind in the oplog.
UNREAD_SECONDS = 60.0
# The server's answers that say the deployment has no change streams at all: IllegalOperation (20), "only
# supported on replica sets" (40573, a standalone), CommandNotSupported (115), NotImplemented (238: the
# local server and the embedded mongomock:// client). Then consumers poll only; any other failure of the
# watch is restarted.
NO_CHANGE_STREAMS = frozenset({20, 40573, 115, 238})
WATCHER_NAME = "harel-mailbox-watch"
# How long a change to an execution this process made claimable itself may be taken for its echo (the change
# stream's report of it, not news: its waiters were woken when it made it), one echo per write it made.
OWN_ECHO_SECONDS = 1.0
# A change that took a round trip to arrive (longer than BUFFERED_SECONDS: not from the batch already read)
# is followed by a pause of GATHER_SECONDS before the next getMore, so that a burst of writes (a fork, its
# children's commits) comes in a few getMores, not one each. It delays wake-ups from other processes by at
# most that much in a burst; this process's own wake its waiters directly.
BUFFERED_SECONDS = 0.001
GATHER_SECONDS = 0.025
# A planned wake-up whose time passed but that the last claim did not see due yet (the estimate of the
# server's clock runs a little ahead) is looked for again after this pause.
PLANNED_FLOOR = 0.005
# A change stream through a router holds a cursor on every shard, and every shard scans its oplog for each
# one (change streams use no index): past this many shards the consumers poll, each window of partitions
# backing off while it stays empty (`harel.transport.rotation`).
WATCH_MAX_SHARDS = 16


def watch_pipeline(partitions: Partitions, zones: Sequence[Zone]) -> list[dict[str, Any]] | None:
    """What the change stream of a transport serving `zones` matches; None: no change stream (too many
    shards to tail)."""
    if len(partitions.zones) > WATCH_MAX_SHARDS:
        return None
    if tuple(zones) == partitions.zones:
        return WATCH_PIPELINE
    served = [p for zone in zones for p in range(zone.start, zone.stop)]
    return [{"$match": {"documentKey.p": {"$in": served}}}, *WATCH_PIPELINE]


def _unsupported(error: PyMongoError) -> bool:
    return isinstance(error, OperationFailure) and error.code in NO_CHANGE_STREAMS


def _polling_only(error: PyMongoError) -> None:
    log.info("change streams unavailable, polling only", extra={"error": str(error)})


def _restarting(error: PyMongoError, pause: float) -> float:
    """Log the failed watch, restarted after `pause`; the pause after the next failure."""
    log.warning("mailbox watch failed, restarting", extra={"error": str(error), "retry_in": pause})
    return min(WATCH_RETRY_MAX, pause * 2)


def _wake_at(change: Mapping[str, Any]) -> Any:
    """The `wake_at` a change wrote: an update's, or an inserted document's."""
    updated = (change.get("updateDescription") or {}).get("updatedFields") or {}
    if "wake_at" in updated:
        return updated["wake_at"]
    return (change.get("fullDocument") or {}).get("wake_at")


def _extension(change: Mapping[str, Any]) -> bool:
    """A lease's extension: a real server reports its `lease.until` as a dotted field, which the stream's
    `$match` cannot tell from an update leaving the lease alone; the `wake_at` it wrote is the holder's."""
    updated = (change.get("updateDescription") or {}).get("updatedFields") or {}
    return any(field.startswith("lease.") for field in updated)


class WakePlan:
    """When executions become claimable, as far as this process knows: the future wake-ups it heard of (on
    the server's clock: `now` is the transport's estimate of it), and whether it knows the earliest one at
    all — not until it has looked (`known`) since its change stream opened (`watching`)."""

    def __init__(self, now: Callable[[], float], partitions: Partitions | None = None) -> None:
        self._now = now
        self._partitions = partitions
        self._rotations: list[Rotation] = []
        self._lock = threading.Lock()
        self._times: list[float] = []
        self.watching = False
        self.known = False
        self.due = False  # something is claimable now: a waiter returns
        # executions this process made claimable: the echoes still expected, and when the last was made
        self._own: dict[str, tuple[int, float]] = {}

    def rotate(self, rotation: Rotation) -> Rotation:
        """`rotation` hears, from now on, of the partitions where work may be waiting."""
        self._rotations.append(rotation)
        return rotation

    def _woken(self, partition: object) -> None:
        for rotation in self._rotations:
            rotation.woken(partition)

    def opened(self) -> None:
        with self._lock:
            self.watching, self.known = True, False

    def closed(self) -> None:
        with self._lock:
            self.watching = self.known = False

    def plan(self, at: float | None, *, looked: bool = False) -> None:
        """A wake-up at server time `at` (None: nothing to plan); `looked` when it came from a look at the
        earliest one, which makes the plan known."""
        with self._lock:
            if at is not None:
                heapq.heappush(self._times, at)
            if looked:
                self.known = True

    def made_claimable(self, execution_ids: Iterable[str]) -> None:
        """This process made these executions claimable (a send, a child created) and woke its waiters."""
        execution_ids = list(execution_ids)
        if self._partitions is not None and self._rotations:
            for execution_id in execution_ids:
                self._woken(self._partitions.of(execution_id))
        now = time.monotonic()
        with self._lock:
            for execution_id in [e for e, (_, at) in self._own.items() if at < now - OWN_ECHO_SECONDS]:
                del self._own[execution_id]
            for execution_id in execution_ids:
                expected, _ = self._own.get(execution_id, (0, now))
                self._own[execution_id] = (expected + 1, now)

    def _echo(self, change: Mapping[str, Any]) -> bool:
        """Whether `change` is the echo of a write of this process (and then one fewer is expected)."""
        execution_id = (change.get("documentKey") or {}).get("_id")
        if not isinstance(execution_id, str):
            return False
        with self._lock:
            expected, at = self._own.get(execution_id, (0, 0.0))
            if expected == 0 or at < time.monotonic() - OWN_ECHO_SECONDS:
                return False
            if expected == 1:
                del self._own[execution_id]
            else:
                self._own[execution_id] = (expected - 1, at)
            return True

    def heard(self, change: Mapping[str, Any]) -> bool:
        """A change the watch matched: True when something is claimable now (and not this process's own
        doing: its waiters were woken then); a later `wake_at` is planned."""
        if self._echo(change) or _extension(change):
            return False
        at = _wake_at(change)
        if isinstance(at, int | float) and at > self._now():
            self.plan(float(at))
            return False
        self._woken((change.get("documentKey") or {}).get("p"))
        return True

    def pause(self, longest: float, floor: float = PLANNED_FLOOR) -> float:
        """How long to wait: `longest`, or less until the earliest planned wake-up (at least `floor` once it
        has passed: a claim did not see it due yet). A passed wake-up leaves the plan and makes it unknown:
        what comes after it is looked for again."""
        now = self._now()
        with self._lock:
            while self._times and self._times[0] <= now - floor:
                heapq.heappop(self._times)
                self.known = False
            if not self._times:
                return longest
            earliest = self._times[0]
        return min(longest, max(floor, earliest - now))


class _Wakeups:
    """What both twins hold: the collection watched, the stream's pipeline (None: no stream, poll only), the
    plan, and the event their waiters wait on (a threading.Event or an asyncio.Event: set and clear alike)."""

    def __init__(
        self,
        executions: Any,
        watch: bool,
        plan: WakePlan,
        pipeline: list[dict[str, Any]] | None,
        wake: threading.Event | asyncio.Event,
    ) -> None:
        self._executions = executions
        self._watch_enabled = watch and pipeline is not None
        self._pipeline = pipeline or []
        self._wake = wake
        self.plan = plan
        self.waiters = 0  # consumers waiting now: the watcher reads its stream only while there is one

    def set(self) -> None:
        self.plan.due = True
        self._wake.set()

    def clear(self) -> None:
        self.plan.due = False
        self._wake.clear()


class ThreadWakeups(_Wakeups):
    """MongoTransport's: a threading.Event, set by this process's sends and by a watcher thread."""

    def __init__(
        self,
        executions: Any,
        watch: bool,
        plan: WakePlan,
        pipeline: list[dict[str, Any]] | None = WATCH_PIPELINE,
    ) -> None:
        self._thread_wake = threading.Event()
        super().__init__(executions, watch, plan, pipeline, self._thread_wake)
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()
        self._waiting = threading.Condition()

    def wait(self, timeout: float) -> bool:
        """Until something is claimable (True), or `timeout` or the earliest wake-up planned passes (False);
        a wake-up planned meanwhile re-plans the wait."""
        if self._watch_enabled and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name=WATCHER_NAME, daemon=True)
            self._watcher.start()
        with self._waiting:
            self.waiters += 1
            self._waiting.notify_all()
        try:
            deadline = time.monotonic() + timeout
            while not self.plan.due:
                pause = self.plan.pause(deadline - time.monotonic())
                if pause <= 0 or not self._thread_wake.wait(pause):
                    return self.plan.due
                if not self.plan.due:
                    self._wake.clear()  # a re-plan: wait again, to the plan as it is now
            return True
        finally:
            with self._waiting:
                self.waiters -= 1

    def _until_waited_on(self) -> None:
        with self._waiting:
            self._waiting.wait_for(lambda: self.waiters > 0 or self._closed.is_set(), UNREAD_SECONDS)

    def _watch(self) -> None:
        pause = WATCH_RETRY_FIRST
        while not self._closed.is_set():
            try:
                with sending(WATCH):
                    stream = self._executions.watch(self._pipeline, max_await_time_ms=WATCH_AWAIT_MS)
                with stream:
                    pause = WATCH_RETRY_FIRST
                    self.plan.opened()
                    self.set()  # consumers waiting long while it was shut look again
                    while not self._closed.is_set() and stream.alive:
                        self._until_waited_on()
                        asked = time.monotonic()
                        with sending(WATCH):  # one pass per getMore: a pass is counted when it ends
                            change = stream.try_next()
                        if change is not None:
                            self._heard(change)
                            if time.monotonic() - asked > BUFFERED_SECONDS:
                                self._closed.wait(GATHER_SECONDS)
                self.plan.closed()  # invalidated (its collection dropped, say): opened again after a pause
                self._closed.wait(pause)
            except PyMongoError as error:
                self.plan.closed()
                if self._closed.is_set():
                    return  # the client is closing under it: nothing to restart, nothing to report
                if _unsupported(error):
                    _polling_only(error)
                    return
                after = _restarting(error, pause)
                self._closed.wait(pause)
                pause = after

    def _heard(self, change: Mapping[str, Any]) -> None:
        if self.plan.heard(change):
            self.set()
        else:
            self._wake.set()  # a wake-up planned: waiters re-plan

    def stop(self) -> None:
        """End the watcher before the client closes; one still inside a getMore is named in the log."""
        self._closed.set()
        with self._waiting:
            self._waiting.notify_all()
        if self._watcher is not None:
            self._watcher.join(WATCH_STOP_SECONDS)
            if self._watcher.is_alive():
                log.warning(
                    "threads did not stop in time; left behind, they end quietly when their command returns",
                    extra={"threads": [self._watcher.name]},
                )


class TaskWakeups(_Wakeups):
    """AsyncMongoTransport's: an asyncio.Event, set by this process's sends and by a watcher task."""

    def __init__(
        self,
        executions: Any,
        watch: bool,
        plan: WakePlan,
        pipeline: list[dict[str, Any]] | None = WATCH_PIPELINE,
    ) -> None:
        self._task_wake = asyncio.Event()
        super().__init__(executions, watch, plan, pipeline, self._task_wake)
        self._watcher: asyncio.Task[None] | None = None
        self._waited_on = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """As ThreadWakeups.wait."""
        if self._watch_enabled and self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch(), name=WATCHER_NAME)
        self.waiters += 1
        self._waited_on.set()
        try:
            deadline = time.monotonic() + timeout
            while not self.plan.due:
                pause = self.plan.pause(deadline - time.monotonic())
                if pause <= 0:
                    return self.plan.due
                try:
                    await asyncio.wait_for(self._task_wake.wait(), pause)
                except TimeoutError:
                    return self.plan.due
                if not self.plan.due:
                    self._wake.clear()
            return True
        finally:
            self.waiters -= 1
            if not self.waiters:
                self._waited_on.clear()

    async def _until_waited_on(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._waited_on.wait(), UNREAD_SECONDS)

    async def _watch(self) -> None:
        pause = WATCH_RETRY_FIRST
        while True:
            try:
                stream = await resolved(
                    self._executions.watch(self._pipeline, max_await_time_ms=WATCH_AWAIT_MS)
                )
                async with stream as changes:
                    pause = WATCH_RETRY_FIRST
                    self.plan.opened()
                    self.set()
                    while changes.alive:
                        await self._until_waited_on()
                        asked = time.monotonic()
                        change = await resolved(changes.try_next())
                        if change is None:
                            continue
                        if self.plan.heard(change):
                            self.set()
                        else:
                            self._wake.set()
                        if time.monotonic() - asked > BUFFERED_SECONDS:
                            await asyncio.sleep(GATHER_SECONDS)
                self.plan.closed()
                await asyncio.sleep(pause)
            except PyMongoError as error:
                self.plan.closed()
                if _unsupported(error):
                    _polling_only(error)
                    return
                after = _restarting(error, pause)
                await asyncio.sleep(pause)
                pause = after

    async def stop(self) -> None:
        """Cancel the watcher before the client closes: a task ends at its next await, a getMore included."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
