"""The persistence seam: what every execution store provides, sync and async."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

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

DEFAULT_TRACE_MAX = 200
# How many processed event ids each execution remembers. A redelivery that arrives after this many newer
# events of the same execution were processed is no longer recognised by its id and is stepped again
# (harel.store.mongo explains the window and how long a redelivery may lag).
DEFAULT_DEDUPE_WINDOW = 1000

Emit = tuple[str | None, Event]
Spawn = tuple[str, str, dict[str, Any]]


@runtime_checkable
class ExecutionStore(Protocol):
    """A durable home for executions. `commit` is the only write on the hot path and is all or nothing."""

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
        """Persist `exe` at version `exe.version + 1` if the store still holds `exe.version` (version 0:
        create), with everything the step produced, all or nothing; on success `exe.version` is the new
        version. Raises StoreConflict, leaving the store and `exe.version` unchanged, when it does not, and
        ExecutionTooLarge, before writing anything, when the execution would outgrow a document."""

    def load(self, execution_id: str) -> Execution | None: ...

    def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        """The execution and whether `event_id` was already processed, in one round trip."""

    def is_processed(self, execution_id: str, event_id: str) -> bool: ...

    def list_executions(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        definition_id: str | None = None,
        roots_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionPage: ...

    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]: ...

    def ack_outbox(self, seq: int) -> None: ...

    def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]: ...

    def ack_spawn(self, seq: int) -> None: ...

    def due_timers(self, now: float, limit: int = 100) -> list[DueTimer]: ...

    def next_timer_at(self) -> float | None:
        """The earliest armed timer of any execution, or None: how long the sweep may sleep."""

    def delete_timer(self, execution_id: str, path: str, fire_at: float) -> None:
        """Disarm the timer only if it still holds `fire_at` (a re-armed timer is left alone)."""

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

    async def load(self, execution_id: str) -> Execution | None: ...

    async def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]: ...

    async def is_processed(self, execution_id: str, event_id: str) -> bool: ...

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

    async def ack_outbox(self, seq: int) -> None: ...

    async def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]: ...

    async def ack_spawn(self, seq: int) -> None: ...

    async def due_timers(self, now: float, limit: int = 100) -> list[DueTimer]: ...

    async def next_timer_at(self) -> float | None: ...

    async def delete_timer(self, execution_id: str, path: str, fire_at: float) -> None: ...

    async def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None: ...

    async def read_trace(self, execution_id: str) -> list[dict[str, Any]]: ...

    async def ensure_indexes(self) -> None: ...

    async def close(self) -> None: ...
