"""What the deployment's replies mean: documents (projected as the queries ask) read back as the SDK's
values, and refused writes read back as typed errors."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from harel.errors import LeaseLost, StoreConflict, UnreadableExecution
from harel.executions.fields import dec, due_from
from harel.executions.partitions import Partitions, Zone
from harel.executions.records import Claim, Parked, Pending, RelayWork, SendOutcome
from harel.model import (
    TIMER_EVENT,
    DueTimer,
    Event,
    Execution,
    ExecutionPage,
    ExecutionSummary,
    OutboxEntry,
    SpawnEntry,
    encode_offset,
)

DUPLICATE_KEY = 11000

# What parsing a stored value this version cannot read raises: pydantic's ValidationError (a ValueError, like
# the JSON decoder's errors; a value nested past the parser's recursion limit is one), a field of another type
# or shape, a value nested past Python's own recursion limit.
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecursionError)
WHAT_LIMIT = 500  # characters of what could not be read, kept in the error (and the dead letter it parks)
UNKNOWN = "-"  # the head event's id or name where it is not readable either


def unreadable_what(where: str, exc: BaseException) -> str:
    """`where` (a key path in the document) and why it could not be read: pydantic's first error, at its own
    key path under `where`, else the exception's kind and message."""
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False, include_input=False)
        first = errors[0]
        path = ".".join([where, *(str(step) for step in first["loc"])])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        what = f"{path}: {first['msg']}{more}"
    else:
        what = f"{where}: {type(exc).__name__}: {exc}"
    return what[:WHAT_LIMIT]


def stored_head(document: Mapping[str, Any]) -> tuple[str, str]:
    """The head event's id and name as stored, read past the models: what parks an unreadable execution."""
    inbox = document.get("inbox")
    head = inbox[0] if isinstance(inbox, list) and inbox and isinstance(inbox[0], Mapping) else {}
    event_id = head.get("id")
    try:
        name = TIMER_EVENT if "timer" in head else json.loads(head["event"]).get("name")
    except UNREADABLE:
        name = None
    return (
        event_id if isinstance(event_id, str) else UNKNOWN,
        name if isinstance(name, str) else UNKNOWN,
    )


@contextmanager
def reading(document: Mapping[str, Any], where: str, owner: str | None = None) -> Iterator[None]:
    """Parse the document's `where` inside: what cannot be read raises UnreadableExecution, naming it (with
    the claim's `owner` and the head event as stored, when a claim read it)."""
    try:
        yield
    except UNREADABLE as exc:
        event_id, event = stored_head(document) if owner is not None else (None, None)
        raise UnreadableExecution(
            str(document.get("_id")), unreadable_what(where, exc), owner=owner, event_id=event_id, event=event
        ) from exc


def parse_execution(document: Mapping[str, Any] | None, owner: str | None = None) -> Execution | None:
    """A document without `data` holds only a trace appended before the execution was created."""
    if document is None or "data" not in document:
        return None
    with reading(document, "data", owner):
        return Execution.model_validate_json(document["data"])


def parse_inbox(document: Mapping[str, Any], owner: str | None = None) -> tuple[Pending, ...]:
    """The events waiting in the document's mailbox, in arrival order."""
    with reading(document, "inbox", owner):
        entries = list(document.get("inbox") or ())
    pending = []
    for n, entry in enumerate(entries):
        with reading(document, f"inbox.{n}.{'timer' if 'timer' in entry else 'event'}", owner):
            event = _entry_event(entry)
        with reading(document, f"inbox.{n}", owner):
            pending.append(parse_pending(entry, event))
    return tuple(pending)


def _entry_event(entry: Mapping[str, Any]) -> Event:
    """The event of a mailbox entry: its JSON, or the timer event a fired timer's entry names."""
    timer = entry.get("timer")
    if timer is None:
        return Event.model_validate_json(entry["event"])
    return Event(
        id=entry["id"],
        name=TIMER_EVENT,
        data={"path": dec(timer["key"]), "fire_at": float(timer["fire_at"])},
        created_at=float(entry["at"]),
    )


def parse_load_for_event(documents: Sequence[Mapping[str, Any]]) -> tuple[Execution | None, bool]:
    if not documents:
        return None, False
    return parse_execution(documents[0]), bool(documents[0].get("hit"))


def parse_commit_outcome(document: Mapping[str, Any] | None) -> tuple[int | None, str | None]:
    """What resolves a commit whose reply was lost: the stored version and the lease's owner now."""
    if document is None:
        return None, None
    return document.get("version"), (document.get("lease") or {}).get("owner")


def conflict_for(
    execution_id: str, expected: int, found: Mapping[str, Any] | None, owner: str | None
) -> StoreConflict:
    """StoreConflict for a CAS that matched nothing (`found`: the version and lease now); LeaseLost when the
    version is the one expected but the lease is no longer this claim's `owner`'s (it expired and another
    worker holds the execution)."""
    if owner is not None and found is not None and found.get("version") == expected:
        return LeaseLost(execution_id, expected, (found.get("lease") or {}).get("owner"))
    return StoreConflict(execution_id, expected, found.get("version") if found else None)


def existing_children(details: Mapping[str, Any], child_ids: Sequence[str]) -> list[str] | None:
    """The children a bulk create found already there, from its write errors' `details`; None when any
    write failed for another reason."""
    failures = details.get("writeErrors", [])
    if any(f.get("code") != DUPLICATE_KEY for f in failures):
        return None
    return [child_ids[f["index"]] for f in failures]


def parse_trace(document: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return list(document.get("trace", [])) if document is not None else []


def first_of_block(counter_doc: Mapping[str, Any], count: int) -> int:
    """The first number of the block a `$inc` by `count` reserved (the document is the one after it)."""
    return int(counter_doc["n"]) - count + 1


def parse_page(documents: Sequence[Mapping[str, Any]], offset: int, limit: int) -> ExecutionPage:
    items = [_summary(document) for document in documents[:limit]]
    more = len(documents) > limit
    return ExecutionPage(items=items, next_cursor=encode_offset(offset + limit) if more else None)


def _summary(document: Mapping[str, Any]) -> ExecutionSummary:
    with reading(document, "data"):
        return ExecutionSummary.from_data(json.loads(document["data"]), document.get("version", 0))


# --- relays ------------------------------------------------------------------------------------------------


def parse_outbox_entry(execution_id: str, entry: Mapping[str, Any]) -> OutboxEntry:
    return OutboxEntry(
        entry["seq"], entry["target_id"], Event.model_validate_json(entry["event"]), execution_id
    )


def parse_spawn_entry(entry: Mapping[str, Any]) -> SpawnEntry:
    return SpawnEntry(
        entry["seq"], entry["parent_id"], entry["child_id"], entry["root_path"], dict(entry["context"])
    )


def parse_relay_work(document: Mapping[str, Any]) -> RelayWork:
    """The execution's outbox and spawns in seq order; UnreadableExecution when any entry cannot be read (no
    entry is relayed then: the others would overtake it)."""
    execution_id = document["_id"]
    with reading(document, "outbox"):
        outbox = _outbox_in_seq_order(document)
    with reading(document, "spawns"):
        spawns = sorted((parse_spawn_entry(e) for e in document.get("spawns") or ()), key=lambda s: s.seq)
    return RelayWork(execution_id, outbox, spawns)


def parse_pending_outbox(documents: Iterable[Mapping[str, Any]], limit: int) -> list[OutboxEntry]:
    return [entry for document in documents for entry in parse_relay_work(document).outbox][:limit]


def parse_pending_spawns(documents: Iterable[Mapping[str, Any]], limit: int) -> list[SpawnEntry]:
    return [entry for document in documents for entry in parse_relay_work(document).spawns][:limit]


# --- timers ------------------------------------------------------------------------------------------------


def _stored_timers(document: Mapping[str, Any]) -> dict[str, float]:
    """The stored `timers`, paths decoded."""
    return {dec(key): float(at) for key, at in dict(document.get("timers") or {}).items()}


def _firing_order(item: tuple[str, float]) -> tuple[float, int, str]:
    """Earliest first; of timers due at the same instant, the outer state's first."""
    path, at = item
    return at, path.count("."), path


def parse_due(documents: Iterable[Mapping[str, Any]]) -> list[DueTimer | UnreadableExecution]:
    """Each document's earliest timer, with the timers as read and where `next_fire_at` moves after it; an
    UnreadableExecution in its place for a document whose timers cannot be read, so that the others fire."""
    due: list[DueTimer] = []
    unreadable: list[UnreadableExecution] = []
    for document in documents:
        try:
            timer = earliest_timer(document)
        except UnreadableExecution as exc:
            unreadable.append(exc)
            continue
        if timer is not None:
            due.append(timer)
    return [*sorted(due, key=lambda t: (t.fire_at, t.execution_id)), *unreadable]


def earliest_timer(document: Mapping[str, Any]) -> DueTimer | None:
    """The document's earliest timer (None without one); UnreadableExecution when its timers cannot be read."""
    with reading(document, "timers"):
        stored = dict(document.get("timers") or {})
        ordered = sorted(_stored_timers(document).items(), key=_firing_order)
    if not ordered:
        return None
    (path, fire_at), rest = ordered[0], ordered[1:]
    return DueTimer(document["_id"], path, fire_at, stored, due_from(rest[0][1]) if rest else None)


# --- the mailbox -------------------------------------------------------------------------------------------


def parse_pending(entry: Mapping[str, Any], event: Event) -> Pending:
    return Pending(
        id=entry["id"],
        event=event,
        source=entry.get("source"),
        at=float(entry.get("at") or 0.0),
        size=int(entry.get("size") or 0),
    )


def parse_send_diagnosis(documents: Sequence[Mapping[str, Any]]) -> SendOutcome:
    """Why a send matched nothing (`queries.send_diagnosis`)."""
    if not documents or not documents[0].get("created"):
        return SendOutcome.MISSING
    return SendOutcome.DUPLICATE if documents[0].get("duplicate") else SendOutcome.FULL


def _seqs(entries: Any) -> tuple[int, ...]:
    """The seqs of relay entries as a claim projects them; none where not readable: the relay reads the
    entries themselves, and parks what it cannot."""
    if not isinstance(entries, list):
        return ()
    return tuple(e["seq"] for e in entries if isinstance(e, Mapping) and isinstance(e.get("seq"), int))


def parse_wake(documents: Sequence[Mapping[str, Any]]) -> float | None:
    """The `wake_at` of `next_wake_find`'s one document, or None."""
    at = documents[0].get("wake_at") if documents else None
    return float(at) if isinstance(at, int | float) else None


def parse_claim(document: Mapping[str, Any], owner: str) -> Claim:
    """The claimed execution; UnreadableExecution (with the claim's `owner`, to park it) when the document
    cannot be read."""
    execution = parse_execution(document, owner)
    if execution is None:
        raise ValueError(f"claimed execution {document.get('_id')!r} has no data")
    pending = parse_inbox(document, owner)
    with reading(document, "attempts", owner):
        attempts = int(document.get("attempts") or 0)
    with reading(document, "timers", owner):
        # the claim fires only the timers it can read: one it cannot would never fire, silently
        _stored_timers(document)
    lease = document["lease"]  # this claim's own write
    return Claim(
        execution=execution,
        pending=pending,
        owner=owner,
        server_time=float(lease["at"]),
        lease_until=float(lease["until"]),
        attempts=attempts,
        previous_owner=lease.get("previous"),
        relay_idle=document.get("relay_at") is None,
        state_bytes=len(document["data"].encode()),
        relay_outbox=_seqs(document.get("outbox")),
        relay_spawns=_seqs(document.get("spawns")),
        outbox_pending=_outbox_pending(document),
    )


def _outbox_in_seq_order(document: Mapping[str, Any]) -> list[OutboxEntry]:
    entries = document.get("outbox") or ()
    return sorted((parse_outbox_entry(document["_id"], e) for e in entries), key=lambda e: e.seq)


def _outbox_pending(document: Mapping[str, Any]) -> tuple[OutboxEntry, ...] | None:
    """The outbox entries a claim found, in seq order; None when one cannot be read (the relay parks it)."""
    try:
        return tuple(_outbox_in_seq_order(document))
    except (KeyError, TypeError, ValueError):
        return None


def parse_lease_until(document: Mapping[str, Any] | None) -> float | None:
    """When an extended lease ends; None when it was no longer the claim's to extend."""
    return float(document["lease"]["until"]) if document is not None else None


def parse_parked(document: Mapping[str, Any]) -> Parked:
    """The dead letter, read past the rest of the document (it may be what could not be read)."""
    inbox = document.get("inbox")
    with reading(document, "parked"):
        parked = document["parked"]
        return Parked(
            execution_id=document["_id"],
            chart=document.get("chart", ""),
            event_id=parked["event_id"],
            event_name=parked["name"],
            error=parked["error"],
            attempts=int(parked["attempts"]),
            at=float(parked["at"]),
            waiting=max(0, len(inbox) - 1) if isinstance(inbox, list) else 0,
            traceback=parked.get("traceback") or "",
        )


def parse_count(documents: Sequence[Mapping[str, Any]], name: str = "n") -> int:
    """A number the one group of a `$group` over every document gave (0 when nothing matched)."""
    return int(documents[0][name]) if documents else 0


def parse_zone_backlog(documents: Iterable[Mapping[str, Any]], partitions: Partitions) -> dict[Zone, int]:
    """Events waiting per zone, from `PENDING_BY_PARTITION`'s groups (a partition outside every zone, or a
    document without `p`, counts nowhere: `harel check` reports such a map)."""
    waiting = dict.fromkeys(partitions.zones, 0)
    for group in documents:
        for zone in waiting:
            if group.get("_id") in zone:
                waiting[zone] += int(group.get("n") or 0)
    return waiting


def parse_oldest(documents: Iterable[Mapping[str, Any]]) -> float | None:
    """The minimum `at` a `$group` found, if any document had one."""
    found = [d["at"] for d in documents if d.get("at") is not None]
    return found[0] if found else None
