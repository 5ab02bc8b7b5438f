"""What a commit writes: the steps' new state and everything they enqueue, as one `update_one` under the
version CAS (`fields` explains why a pipeline), or, at version 0, the upsert that creates the execution.

The parts are built once (`commit_parts`) and are pure, so a commit whose reply was lost is rebuilt exactly
by the worker that resolves it, and the in-memory store applies the same parts in Python.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harel.commands import Write, array, literal
from harel.errors import ContextTooLarge, ExecutionTooLarge, StepTooLarge
from harel.executions.fields import (
    RELAY_GRACE_SECONDS,
    SAFE_COMMIT_BYTES,
    SEQ_STRIDE,
    chart_key,
    due_from,
    enc,
    promoted,
)
from harel.executions.records import Claim, Delivered, Failure, Pending, StepRecord
from harel.executions.replies import parse_outbox_entry, parse_spawn_entry
from harel.executions.writes import WAKE_STAGE, entry, seed, settle_stages, without
from harel.model import TIMER_EVENT, ChildSeed, Event, Execution, OutboxEntry, SpawnEntry, start_event
from harel.servertime import NOW, now_plus

# An execution's state (`data`: the whole Execution, its context with it) is rewritten by every commit and
# read by every claim, so its size is the cost of each event (bench/README.md, benchmark 6). Past
# STATE_WARN_BYTES the worker warns (a log line, `harel_oversized_states`); past STATE_LIMIT_BYTES a commit
# is refused (ContextTooLarge): 8 MiB of state, the 4 MiB mailbox (INBOX_LIMIT_BYTES) and the rings (200
# trace steps, 1,000 event ids) stay under MongoDB's 16 MiB.
STATE_WARN_BYTES = 256 * 1024
STATE_LIMIT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class CommitParts:
    """Everything a commit adds, built once and shared by the Mongo writes and the in-memory store."""

    execution_id: str
    expected: int
    version: int
    promoted: dict[str, Any]
    data: str
    state_bytes: int  # `data`'s UTF-8 bytes, as stored
    outbox: list[dict[str, Any]]
    spawns: list[dict[str, Any]]
    processed: list[str]
    traces: list[dict[str, Any]]
    timers: dict[str, float] | None  # the whole stored `timers` when the steps changed them
    next_fire_at: float | None
    relay_grace: float = RELAY_GRACE_SECONDS  # how long the committer holds its relay work
    held: bool = True  # whether the committer relays its entries itself
    # the committer's own earlier relay work, delivered and not yet acknowledged: trimmed by this commit
    trimmed: Delivered | None = None
    # outbox entries another worker left pending to the targets of the committer's own, which it delivers
    # again before its own: it takes the relay work over (its hold replaces theirs); None: it takes nothing
    # over
    taken_over: tuple[OutboxEntry, ...] | None = None

    @property
    def relays(self) -> bool:
        return bool(self.outbox or self.spawns)

    def outbox_entries(self) -> list[OutboxEntry]:
        """What the committer relays: the entries it took over, then its own, in seq order."""
        return [*(self.taken_over or ()), *(parse_outbox_entry(self.execution_id, e) for e in self.outbox)]

    def spawn_entries(self) -> list[SpawnEntry]:
        return [parse_spawn_entry(e) for e in self.spawns]


@dataclass(frozen=True)
class Commit:
    """One commit as sent: its write, and the version it expected and makes (what a refusal is judged by)."""

    execution_id: str
    expected: int
    version: int
    write: Write
    size: int

    @property
    def creates(self) -> bool:
        return self.write.upsert


def require_step_fits(execution_id: str, entries: int) -> None:
    """StepTooLarge when one step emitted and spawned more entries than a step's seqs number."""
    if entries > SEQ_STRIDE:
        raise StepTooLarge(execution_id, entries, SEQ_STRIDE)


def _entries_of(
    version: int, record: StepRecord, source: Execution, at: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    require_step_fits(source.id, len(record.emits) + len(record.spawns))
    base = version * SEQ_STRIDE
    outbox = [
        {"seq": base + n, "target_id": target, "event": event.model_dump_json(), "at": at}
        for n, (target, event) in enumerate(record.emits)
    ]
    spawns = [
        {
            "seq": base + len(record.emits) + n,
            "parent_id": source.id,
            "child_id": child,
            "root_path": root,
            "context": dict(context),
            "at": at,
        }
        for n, (child, root, context) in enumerate(record.spawns)
    ]
    return outbox, spawns


def next_fire_at(timers: Mapping[str, float], fired: Iterable[str] = ()) -> float | None:
    """When the earliest timer whose event is not already waiting in the mailbox is due (`fired`: the
    paths of those that are)."""
    skipped = set(fired)
    earliest = min((at for path, at in timers.items() if path not in skipped), default=None)
    return None if earliest is None else due_from(earliest)


def fired_timer_paths(pending: Iterable[Pending], timers: Mapping[str, float]) -> list[str]:
    """Paths of `timers` whose events already wait in the mailbox (not to be fired again), recognised by
    the timer they name: whoever appended them made the id."""
    waiting = {
        (p.event.data.get("path"), p.event.data.get("fire_at"))
        for p in pending
        if p.event.name == TIMER_EVENT
    }
    return [path for path, at in timers.items() if (path, at) in waiting]


def commit_parts(
    exe: Execution,
    records: Sequence[StepRecord],
    *,
    expected: int,
    timers_changed: bool,
    fired_timer_paths: Iterable[str] = (),
    relay_grace: float = RELAY_GRACE_SECONDS,
    held: bool = True,
    trimmed: Delivered | None = None,
    taken_over: Sequence[OutboxEntry] | None = None,
) -> CommitParts:
    """`exe` after the steps of `records`, which started at version `expected`; it is stored at version
    `expected + len(records)` (one step: the seed's `+1`)."""
    version = expected + max(1, len(records))
    outbox: list[dict[str, Any]] = []
    spawns: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []
    for n, record in enumerate(records):
        step_outbox, step_spawns = _entries_of(expected + n, record, exe, exe.updated_at)
        outbox += step_outbox
        spawns += step_spawns
        if record.trace is not None:
            traces.append({**record.trace, "index": expected + n})
    data = exe.model_copy(update={"version": version}).model_dump_json()
    return CommitParts(
        execution_id=exe.id,
        expected=expected,
        version=version,
        promoted=promoted(exe),
        data=data,
        state_bytes=require_state_fits(exe.id, data),
        outbox=outbox,
        spawns=spawns,
        processed=[r.event_id for r in records if r.event_id is not None],
        traces=traces,
        timers={enc(path): at for path, at in exe.timers.items()} if timers_changed else None,
        next_fire_at=next_fire_at(exe.timers, fired_timer_paths) if timers_changed else None,
        relay_grace=relay_grace,
        held=held,
        trimmed=trimmed,
        taken_over=None if taken_over is None else tuple(taken_over),
    )


def claim_commit_parts(
    claim: Claim,
    exe: Execution,
    records: Sequence[StepRecord],
    applied: Sequence[Pending],
    timers_changed: bool,
    delivered: Delivered | None = None,
) -> CommitParts:
    """What a claim's commit writes: the steps from the claimed version; `next_fire_at` skips timers whose
    events still wait in the mailbox (fired already, not applied in this batch); the committer holds the
    relay work for as long as its lease was. Relay work the claim found pending is the committer's own
    `delivered` work (which this commit trims: the acknowledgement rides on it), or another worker's: when
    this commit has entries of its own and that work is outbox entries only, the committer takes it over
    and delivers again, before its own, those to the targets of its own (the receivers drop the repeats by
    event id; an event may not overtake an earlier one to the same target), rather than leave its own
    waiting for that worker's acknowledgement and a background relay. The rest stays for that worker's
    acknowledgement, or a relay once the committer's hold ends. Pending spawns are left to their holder (a
    child created twice costs a read to tell a repeat from a taken id)."""
    applied_ids = {p.id for p in applied}
    waiting = [p for p in claim.pending if p.id not in applied_ids]
    trimmed = delivered if delivered is not None and delivered.covers(claim) else None
    takes_over = (
        any(record.emits or record.spawns for record in records)
        and not claim.relay_idle
        and trimmed is None
        and not claim.relay_spawns
        and claim.outbox_pending is not None
    )
    held = claim.relay_idle or trimmed is not None or takes_over
    return commit_parts(
        exe,
        records,
        expected=claim.execution.version,
        timers_changed=timers_changed,
        fired_timer_paths=fired_timer_paths(waiting, exe.timers),
        # a claim that found relay work pending and takes nothing over leaves delivery to whoever holds it,
        # so it holds nothing: if that holder acknowledged meanwhile, its entries are due for a relay now
        relay_grace=claim.lease_until - claim.server_time if held else 0.0,
        held=held,
        trimmed=trimmed,
        taken_over=_to_the_same_targets(claim.outbox_pending or (), records) if takes_over else None,
    )


def _to_the_same_targets(pending: Sequence[OutboxEntry], records: Sequence[StepRecord]) -> list[OutboxEntry]:
    targets = {target for record in records for target, _ in record.emits if target is not None}
    return [entry for entry in pending if entry.target_id in targets]


def _appended(field_name: str, entries: Sequence[Any], keep: int | None = None) -> dict[str, Any]:
    joined: dict[str, Any] = {"$concatArrays": [array(field_name), literal(list(entries))]}
    return {"$slice": [joined, -keep]} if keep is not None else joined


def _relay_fields(parts: CommitParts) -> dict[str, Any]:
    if parts.trimmed is not None:
        # all the relay work pending is the committer's, delivered: it leaves, the new entries are held
        return {
            "outbox": {
                "$concatArrays": [without("outbox", "seq", parts.trimmed.outbox), literal(parts.outbox)]
            },
            "spawns": {
                "$concatArrays": [without("spawns", "seq", parts.trimmed.spawns), literal(parts.spawns)]
            },
            "relay_at": now_plus(parts.relay_grace) if parts.relays else None,
        }
    fields: dict[str, Any] = {}
    if parts.outbox:
        fields["outbox"] = _appended("outbox", parts.outbox)
    if parts.spawns:
        fields["spawns"] = _appended("spawns", parts.spawns)
    if parts.taken_over is not None:
        fields["relay_at"] = now_plus(parts.relay_grace)
    elif parts.relays and parts.held:
        fields["relay_at"] = {"$ifNull": ["$relay_at", now_plus(parts.relay_grace)]}
    elif parts.relays:
        fields["relay_at"] = NOW  # left to a relay: due now, not when the other holder's time ends
    return fields


def _written_fields(parts: CommitParts, trace_max: int, dedupe_window: int) -> dict[str, Any]:
    fields: dict[str, Any] = {
        **{name: literal(value) for name, value in parts.promoted.items()},
        "version": parts.version,
        "data": literal(parts.data),
        **_relay_fields(parts),
    }
    if parts.processed:
        fields["processed"] = _appended("processed", parts.processed, dedupe_window)
    if parts.traces:
        fields["trace"] = _appended("trace", parts.traces, trace_max)
    if parts.timers is not None:
        fields["timers"] = literal(parts.timers)
        fields["next_fire_at"] = parts.next_fire_at
    return fields


def plan_commit(
    parts: CommitParts,
    trace_max: int,
    dedupe_window: int,
    *,
    claim: Claim | None = None,
    applied: Sequence[Pending] = (),
    failure: Failure | None = None,
) -> Commit:
    """The CAS update of an existing execution: `{_id, version}`, and the lease's owner when the steps came
    from a claim, whose applied events leave the mailbox in the same update."""
    cas = {"_id": parts.execution_id, "version": parts.expected}
    stages: list[dict[str, Any]] = [{"$set": _written_fields(parts, trace_max, dedupe_window)}]
    if claim is not None:
        cas["lease.owner"] = claim.owner
        release, then = settle_stages(applied, failure)
        stages[0]["$set"].update(release)
        stages.append({"$set": then})
    if claim is not None or parts.timers is not None:
        stages.append(WAKE_STAGE)  # the mailbox or the earliest timer changed: so may the time to claim it
    size = ensure_fits(parts.execution_id, {"q": cas, "u": stages}, parts.spawns)
    return Commit(parts.execution_id, parts.expected, parts.version, Write(cas, stages), size)


def plan_create(parts: CommitParts, pending: Sequence[Mapping[str, Any]], chart: str) -> Commit:
    """A new execution: an upsert whose filter no stored execution can match (`version: -1`), so it inserts,
    or fails on the duplicate `_id` when the execution exists — with `$$NOW` available to the mailbox, which
    a plain insert would not have. Every field is seeded, so later pipelines find their arrays."""
    fields = {
        **{name: literal(value) for name, value in parts.promoted.items()},
        "version": parts.version,
        "data": literal(parts.data),
        "outbox": literal(parts.outbox),
        "spawns": literal(parts.spawns),
        "processed": literal(parts.processed),
        "timers": literal(parts.timers or {}),
        "next_fire_at": parts.next_fire_at,
        "trace": literal(parts.traces),
        "relay_at": now_plus(parts.relay_grace) if parts.relays else None,
        **seed(chart, pending),
        "wake_at": NOW if pending else parts.next_fire_at,
    }
    create_filter = {"_id": parts.execution_id, "version": -1}
    stages = [{"$set": fields}]
    size = ensure_fits(parts.execution_id, {"q": create_filter, "u": stages}, parts.spawns)
    return Commit(parts.execution_id, 0, parts.version, Write(create_filter, stages, upsert=True), size)


def step_commit(
    exe: Execution, record: StepRecord, timers_changed: bool, trace_max: int, dedupe_window: int
) -> Commit:
    """The seed's `commit` of one step: the CAS update from `exe.version`, or at version 0 its creation
    (with an empty mailbox)."""
    parts = commit_parts(
        exe, [record], expected=exe.version, timers_changed=timers_changed or exe.version == 0
    )
    if exe.version == 0:
        return plan_create(parts, (), chart_key(exe.definition_id, exe.definition_version))
    return plan_commit(parts, trace_max, dedupe_window)


def created_document(
    parts: CommitParts, entries: Sequence[Mapping[str, Any]], chart: str, now: float
) -> dict[str, Any]:
    """The document a creation leaves, built in Python: what `plan_create`'s pipeline makes on a server
    whose clock reads `now` (the in-memory store stores it; benchmarks insert it directly)."""
    document: dict[str, Any] = {
        "_id": parts.execution_id,
        **copy.deepcopy(parts.promoted),
        "version": parts.version,
        "data": parts.data,
        "outbox": copy.deepcopy(parts.outbox),
        "spawns": copy.deepcopy(parts.spawns),
        "processed": list(parts.processed),
        "timers": dict(parts.timers or {}),
        "next_fire_at": parts.next_fire_at,
        "trace": copy.deepcopy(parts.traces),
        "relay_at": now + parts.relay_grace if parts.relays else None,
        "chart": chart,
        "inbox": copy.deepcopy(list(entries)),
        "inbox_bytes": sum(int(e["size"]) for e in entries),
        "inbox_at": now if entries else None,
        "wake_at": now if entries else parts.next_fire_at,
        "lease": None,
        "attempts": 0,
        "last_error": None,
        "parked": None,
    }
    ensure_fits(parts.execution_id, document, parts.spawns)
    return document


def creation(exe: Execution, events: Sequence[Event], now: float) -> Commit:
    """A version-0 execution with `events` already in its mailbox (a start event, for one)."""
    parts = commit_parts(exe, (), expected=0, timers_changed=True)
    chart = chart_key(exe.definition_id, exe.definition_version)
    return plan_create(parts, [entry(event, None, now) for event in events], chart)


def child_creation(spawn: SpawnEntry, now: float) -> Commit:
    """A region's child execution, created with its start event already in its mailbox."""
    child = ChildSeed.model_validate(spawn.context).to_execution(spawn, now)
    return creation(child, [start_event(child.id, now)], now)


def encoded_size(payload: Mapping[str, Any]) -> int:
    import bson

    return len(bson.encode(payload))


def ensure_fits(
    execution_id: str, payload: Mapping[str, Any], spawns: Sequence[Mapping[str, Any]] = ()
) -> int:
    """The payload's BSON size; ExecutionTooLarge when it reaches SAFE_COMMIT_BYTES, with the bytes of the
    fork's `spawns` it carries (a copy of the context each) when there are any."""
    size = encoded_size(payload)
    if size >= SAFE_COMMIT_BYTES:
        spawn_bytes = encoded_size({"spawns": list(spawns)}) if spawns else 0
        raise ExecutionTooLarge(
            execution_id, size, SAFE_COMMIT_BYTES, spawns=len(spawns), spawn_bytes=spawn_bytes
        )
    return size


def require_state_fits(execution_id: str, data: str) -> int:
    """`data`'s size as stored (its UTF-8 bytes); ContextTooLarge when it passes STATE_LIMIT_BYTES."""
    size = len(data.encode())
    if size > STATE_LIMIT_BYTES:
        raise ContextTooLarge(execution_id, size, STATE_LIMIT_BYTES)
    return size
