"""The data the engine moves: executions, events, and the bookkeeping a commit carries."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ExecutionStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset({ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED})

# Event names the engine itself uses; user events may not start with "harel.".
START_EVENT = "harel.start"
TIMER_EVENT = "harel.timer"
DONE_EVENT = "harel.done"
CANCEL_EVENT = "harel.cancel"
# The engine fails an execution it cannot carry on (a region's child that can never be created, an event
# it sent that can never be delivered): data {"reason": ...}.
FAIL_EVENT = "harel.fail"
RESERVED_EVENT_PREFIX = "harel."


class Event(BaseModel):
    """One message to one execution. `id` is the dedupe key: redelivery of the same id takes effect once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)
    source_id: str | None = None
    created_at: float | None = None


class ChildRef(BaseModel):
    """A child execution the parent waits for: one per region of a parallel state (the join expectations)."""

    model_config = ConfigDict(extra="forbid")

    root_path: str
    fork: str
    done: bool = False


class DelayedSend(BaseModel):
    """An event an action sent with a delay, held by its sender until its timer (`timers["send:<id>"]`)
    fires: `to` is the target's execution id (the sender's own for an event to self), `order` the sending
    step's version and the event's number in it (delayed sends due together are delivered in that order)."""

    model_config = ConfigDict(extra="forbid")

    to: str
    event: Event
    order: tuple[int, int]


class Execution(BaseModel):
    """The durable state of one statechart instance, serialized whole into the store's `data` field."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    id: str = Field(min_length=1)
    definition_id: str
    definition_version: int
    version: int = 0
    status: ExecutionStatus = ExecutionStatus.RUNNING
    configuration: list[str] = Field(default_factory=list)
    context: dict[str, Any] = Field(default_factory=dict)
    parent_id: str | None = None
    root_path: str | None = None
    siblings: dict[str, str] = Field(default_factory=dict)
    children: dict[str, ChildRef] = Field(default_factory=dict)
    timers: dict[str, float] = Field(default_factory=dict)
    # What each history state remembers, by its path: the state its parent was last left from (shallow:
    # the parent's child; deep: the active leaf). Absent from executions stored before history states.
    history: dict[str, str] = Field(default_factory=dict)
    # The delayed sends still pending, by send id; each has its timer in `timers` under `send:<id>`.
    # Absent from executions stored before delayed sends.
    delayed: dict[str, DelayedSend] = Field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    # Why it failed, when the engine failed it rather than a final state (`harel.fail`).
    reason: str | None = None
    # A digest of the chart id and initial context a client started a root with: a start under a taken id
    # is the same request, and returns the execution, only with the same digest.
    start_request: str | None = None

    @property
    def started(self) -> bool:
        return bool(self.configuration) or self.status is not ExecutionStatus.RUNNING

    @property
    def next_fire_at(self) -> float | None:
        return min(self.timers.values()) if self.timers else None


class ExecutionSummary(BaseModel):
    """What a listing shows of an execution, built from the stored `data` without a full parse."""

    model_config = ConfigDict(extra="forbid")

    id: str
    definition_id: str
    definition_version: int
    version: int
    status: ExecutionStatus
    parent_id: str | None
    configuration: list[str]
    updated_at: float

    @classmethod
    def from_data(cls, data: dict[str, Any], version: int) -> ExecutionSummary:
        return cls(
            id=data["id"],
            definition_id=data["definition_id"],
            definition_version=data["definition_version"],
            version=version,
            status=data.get("status", ExecutionStatus.RUNNING),
            parent_id=data.get("parent_id"),
            configuration=list(data.get("configuration", [])),
            updated_at=float(data.get("updated_at", 0.0)),
        )


class ExecutionPage(BaseModel):
    items: list[ExecutionSummary]
    next_cursor: str | None = None


def matches(
    summary: ExecutionSummary,
    status: ExecutionStatus | str | None,
    definition_id: str | None,
    roots_only: bool,
) -> bool:
    """The listing filter every store applies (client-side where the field is not promoted)."""
    if status is not None and summary.status != ExecutionStatus(status):
        return False
    if definition_id is not None and summary.definition_id != definition_id:
        return False
    return not (roots_only and summary.parent_id is not None)


def encode_offset(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode()


def decode_offset(cursor: str | None) -> int:
    """Parse a listing cursor; a cursor that was not made by `encode_offset` is a caller error."""
    if cursor is None:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(cursor.encode()))["o"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"invalid listing cursor {cursor!r}") from exc
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"invalid listing cursor {cursor!r}")
    return offset


@dataclass(frozen=True)
class OutboxEntry:
    """An event committed with its execution (`source_id`) and awaiting delivery by the outbox relay.
    `seq` orders the entries of one execution."""

    seq: int
    target_id: str | None
    event: Event
    source_id: str = ""


@dataclass(frozen=True)
class SpawnEntry:
    """A child execution committed as an intent with its parent and awaiting creation by the spawn relay."""

    seq: int
    parent_id: str
    child_id: str
    root_path: str
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TimerOp:
    """Arm (`schedule`) or disarm (`cancel`) the durable timer of the state at `path`."""

    action: Literal["schedule", "cancel"]
    path: str
    fire_at: float = 0.0


@dataclass(frozen=True)
class DueTimer:
    """The earliest timer of an execution, due on the server's clock, with what the sweep read: the timer
    becomes an event in that execution's mailbox only while its `timers` are still `stored_timers` (the
    stored sub-document, keys encoded), and `next_fire_at` then moves to `next_fire_at`."""

    execution_id: str
    path: str
    fire_at: float
    stored_timers: dict[str, float] = field(default_factory=dict, compare=False)
    next_fire_at: float | None = None


def start_event_id(execution_id: str) -> str:
    return f"{execution_id}:start"


def start_event(execution_id: str, now: float) -> Event:
    """The event that enters an execution's initial state; its id is deterministic, so a retried
    `harel start` or a second spawn relay cannot start an execution twice."""
    return Event(id=start_event_id(execution_id), name=START_EVENT, created_at=now)


def timer_event_id(execution_id: str, path: str, fire_at: float) -> str:
    return f"{execution_id}:timer:{path}@{fire_at!r}"


def timer_event(execution_id: str, path: str, fire_at: float, now: float) -> Event:
    """The event a due timer becomes; its id is deterministic, so two sweeps deliver it once."""
    return Event(
        id=timer_event_id(execution_id, path, fire_at),
        name=TIMER_EVENT,
        data={"path": path, "fire_at": fire_at},
        created_at=now,
    )


class ChildSeed(BaseModel):
    """What a spawn entry's `context` holds: everything the spawn relay needs to create the child."""

    model_config = ConfigDict(extra="forbid")

    definition_id: str
    definition_version: int
    context: dict[str, Any] = Field(default_factory=dict)
    siblings: dict[str, str] = Field(default_factory=dict)

    def to_execution(self, entry: SpawnEntry, now: float) -> Execution:
        return Execution(
            id=entry.child_id,
            definition_id=self.definition_id,
            definition_version=self.definition_version,
            context=dict(self.context),
            parent_id=entry.parent_id,
            root_path=entry.root_path,
            siblings=dict(self.siblings),
            created_at=now,
            updated_at=now,
        )
