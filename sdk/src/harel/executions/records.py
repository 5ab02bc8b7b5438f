"""What the document builders take and the reply parsers give back: steps to record, pending events, claims,
failed attempts, dead letters, relay work. `harel.store` and `harel.transport` re-export them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harel.model import Event, Execution, OutboxEntry, SpawnEntry

Emit = tuple[str | None, Event]  # (target execution id, event)
Spawn = tuple[str, str, dict[str, Any]]  # (child execution id, region root path, the child's seed)


@dataclass(frozen=True)
class StepRecord:
    """One applied step as a commit records it: its event, what it emitted and spawned, its trace."""

    event_id: str | None
    emits: Sequence[Emit] = ()
    spawns: Sequence[Spawn] = ()
    trace: Mapping[str, Any] | None = None


class SendOutcome(StrEnum):
    QUEUED = "queued"  # appended to the target's mailbox
    DUPLICATE = "duplicate"  # already waiting there, or already processed: nothing to do
    MISSING = "missing"  # no such execution (yet)
    FULL = "full"  # the target's mailbox is at its size limit; send again later


@dataclass(frozen=True)
class Pending:
    """An event waiting in a mailbox. `at`: when it arrived (server clock, as estimated by the sender);
    `size`: its share of the mailbox's byte budget."""

    id: str
    event: Event
    source: str | None
    at: float
    size: int


@dataclass(frozen=True)
class Claim:
    """An execution leased to one worker, with its pending events in arrival order.

    `server_time` is the server's clock when the lease was taken; `owner` fences every later write of this
    claim. `attempts` counts the failed attempts at the head event. `previous_owner` names the holder of an
    expired lease this claim took over. `relay_idle` is True when no relay work was pending on the
    execution, so the worker that commits may relay its own entries at once; `relay_outbox` and
    `relay_spawns` are the seqs of what was pending, and `outbox_pending` the outbox entries themselves
    (None when one of them cannot be read: the relay parks it). `state_bytes` is the size of the
    execution's state (`data`) as the claim read it."""

    execution: Execution
    pending: tuple[Pending, ...]
    owner: str
    server_time: float
    lease_until: float
    attempts: int
    previous_owner: str | None
    relay_idle: bool
    state_bytes: int
    relay_outbox: tuple[int, ...] = ()
    relay_spawns: tuple[int, ...] = ()
    outbox_pending: tuple[OutboxEntry, ...] | None = ()

    @property
    def execution_id(self) -> str:
        return self.execution.id


@dataclass(frozen=True)
class Delivered:
    """Relay work a worker delivered in full right after its own commit, not yet acknowledged: the next
    commit of the execution by that worker trims it from the document, or one acknowledgement of several
    executions at once does. `since` is monotonic, for how long it has waited."""

    execution_id: str
    outbox: tuple[int, ...]
    spawns: tuple[int, ...]
    since: float

    def covers(self, claim: Claim) -> bool:
        """Whether the relay work pending at `claim` is all this delivered work (so no one else's)."""
        return set(claim.relay_outbox) <= set(self.outbox) and set(claim.relay_spawns) <= set(self.spawns)


@dataclass(frozen=True)
class Failure:
    """The head event (after those applied) raised: retry it after a backoff, or park the execution once
    `max_attempts` is reached."""

    event: Pending
    error: str
    attempts: int
    park: bool
    retry_in: float
    traceback: str = ""


@dataclass(frozen=True)
class Parked:
    """An execution whose head event was dead-lettered: it waits for an operator (retry or drop)."""

    execution_id: str
    chart: str
    event_id: str
    event_name: str
    error: str
    attempts: int
    at: float
    waiting: int  # events queued behind the dead-lettered one
    traceback: str = ""


@dataclass(frozen=True)
class RelayWork:
    """One execution's pending outbox events and spawns, in seq order, for the relay that holds them."""

    execution_id: str
    outbox: list[OutboxEntry] = field(default_factory=list)
    spawns: list[SpawnEntry] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.outbox or self.spawns)
