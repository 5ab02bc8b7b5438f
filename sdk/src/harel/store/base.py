"""The persistence seam: what every execution store provides, sync and async."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX
from harel.executions.records import Claim, Delivered, Emit, Failure, Pending, RelayWork, Spawn, StepRecord
from harel.model import (
    DueTimer,
    Event,
    Execution,
    ExecutionPage,
    ExecutionStatus,
    OutboxEntry,
    SpawnEntry,
    TimerOp,
)

if TYPE_CHECKING:
    from harel.errors import UnreadableExecution
    from harel.executions.commits import CommitParts

__all__ = [
    "DEFAULT_DEDUPE_WINDOW",
    "DEFAULT_TRACE_MAX",
    "AsyncExecutionStore",
    "Emit",
    "ExecutionStore",
    "Spawn",
]


@runtime_checkable
class ExecutionStore(Protocol):
    """A durable home for executions. A commit is all or nothing; `commit_claim` is the engine's."""

    trace_max: int
    dedupe_window: int

    def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        """Persist one step: `exe` at version `exe.version + 1` if the store still holds `exe.version`
        (version 0: create), with everything the step produced, all or nothing; on success `exe.version`
        is the new version. Raises StoreConflict, leaving the store and `exe.version` unchanged, when it
        does not, and ExecutionTooLarge, before writing anything, when the execution would outgrow a
        document. On a deployment: CommitOutcomeUnknown when it became unavailable once the commit was
        sent (it may have been applied: the stored version tells), DeploymentError when it failed or
        refused the commit otherwise."""

    def create(self, exe: Execution, events: Sequence[Event] = (), *, now: float) -> bool:
        """Create a version-0 execution with `events` waiting in its mailbox; False when it existed."""

    def commit_claim(
        self,
        claim: Claim,
        exe: Execution,
        records: Sequence[StepRecord],
        *,
        applied: Sequence[Pending],
        failure: Failure | None = None,
        timers_changed: bool,
        delivered: Delivered | None = None,
    ) -> CommitParts:
        """Persist the steps a claim applied (`exe` after them) and settle the mailbox in one CAS update
        fenced by the lease's owner: the applied events leave it, a failure is recorded, the lease ends.
        Returns what was written (the new outbox and spawn entries, for the committing worker to relay).
        `delivered`: the committer's own earlier relay work of this execution, delivered and not yet
        acknowledged, which the commit trims when it is all that is pending.
        StoreConflict when the version moved or the lease was lost."""

    def commit_outcome(self, execution_id: str) -> tuple[int | None, str | None]:
        """The stored version and lease owner: how a commit whose reply was lost is resolved."""

    def load(self, execution_id: str) -> Execution | None: ...

    def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        """The execution and whether `event_id` was already processed, in one round trip."""

    def is_processed(self, execution_id: str, event_id: str) -> bool: ...

    def document(self, execution_id: str) -> dict[str, Any] | None:
        """The stored document as it is."""

    def list_executions(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        definition_id: str | None = None,
        roots_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionPage:
        """Newest first; filters apply on the server; `next_cursor` continues."""

    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        """Outbox entries not yet delivered, across executions (inspection; relays take `RelayWork`)."""

    def ack_outbox(self, execution_id: str, seq: int) -> None: ...

    def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]: ...

    def ack_spawn(self, execution_id: str, seq: int) -> None: ...

    def create_children(self, entries: Sequence[SpawnEntry], *, now: float) -> list[str]:
        """Create each region's child with its start event in its mailbox, in one round trip; returns the
        ids that already existed (a relay that ran before)."""

    def take_relay_work(self, lease: float, bound: float) -> RelayWork | None:
        """Relay work older than its holder's time, held for `lease`; None when there is none, and
        UnreadableExecution when its entries cannot be read."""

    def ack_relay(
        self, execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], *, retry_in: float
    ) -> None: ...

    def ack_delivered(self, delivered: Sequence[Delivered], *, retry_in: float) -> None:
        """Acknowledge the relay work of several executions, each delivered in full, in one command."""

    def park_unreadable(self, unreadable: UnreadableExecution) -> bool:
        """Park the execution whose relay work or timers could not be read (`unreadable`), unless a claim
        holds its lease now (False: a later pass tries again)."""

    def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer | UnreadableExecution]:
        """Each execution's earliest timer that is due on the server's clock; an UnreadableExecution in
        place of an execution whose timers cannot be read."""

    def fire_timer(self, due: DueTimer, *, now: float) -> bool:
        """Turn the timer into an event in its execution's mailbox; False when the execution's timers
        changed since they were read (the next sweep reads them again)."""

    def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None: ...

    def read_trace(self, execution_id: str) -> list[dict[str, Any]]: ...

    def ensure_indexes(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncExecutionStore(Protocol):
    """The awaitable twin of ExecutionStore: the same methods, the same contract."""

    trace_max: int
    dedupe_window: int

    async def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None: ...

    async def create(self, exe: Execution, events: Sequence[Event] = (), *, now: float) -> bool: ...

    async def commit_claim(
        self,
        claim: Claim,
        exe: Execution,
        records: Sequence[StepRecord],
        *,
        applied: Sequence[Pending],
        failure: Failure | None = None,
        timers_changed: bool,
        delivered: Delivered | None = None,
    ) -> CommitParts: ...

    async def commit_outcome(self, execution_id: str) -> tuple[int | None, str | None]: ...

    async def load(self, execution_id: str) -> Execution | None: ...

    async def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]: ...

    async def is_processed(self, execution_id: str, event_id: str) -> bool: ...

    async def document(self, execution_id: str) -> dict[str, Any] | None: ...

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        definition_id: str | None = None,
        roots_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionPage: ...

    async def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]: ...

    async def ack_outbox(self, execution_id: str, seq: int) -> None: ...

    async def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]: ...

    async def ack_spawn(self, execution_id: str, seq: int) -> None: ...

    async def create_children(self, entries: Sequence[SpawnEntry], *, now: float) -> list[str]: ...

    async def take_relay_work(self, lease: float, bound: float) -> RelayWork | None: ...

    async def ack_relay(
        self, execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], *, retry_in: float
    ) -> None: ...

    async def ack_delivered(self, delivered: Sequence[Delivered], *, retry_in: float) -> None: ...

    async def park_unreadable(self, unreadable: UnreadableExecution) -> bool: ...

    async def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer | UnreadableExecution]: ...

    async def fire_timer(self, due: DueTimer, *, now: float) -> bool: ...

    async def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None: ...

    async def read_trace(self, execution_id: str) -> list[dict[str, Any]]: ...

    async def ensure_indexes(self) -> None: ...

    async def close(self) -> None: ...
