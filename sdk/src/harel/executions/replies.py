"""What the deployment's replies mean: documents (projected as the queries ask) read back as the SDK's
values, and refused writes read back as typed errors."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harel.errors import LeaseLost, StoreConflict
from harel.executions.fields import dec, due_from
from harel.executions.records import Claim, Parked, Pending, RelayWork, SendOutcome
from harel.model import (
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


def parse_execution(document: Mapping[str, Any] | None) -> Execution | None:
    """A document without `data` holds only a trace appended before the execution was created."""
    if document is None or "data" not in document:
        return None
    return Execution.model_validate_json(document["data"])


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
    items = [
        ExecutionSummary.from_data(json.loads(document["data"]), document.get("version", 0))
        for document in documents[:limit]
    ]
    more = len(documents) > limit
    return ExecutionPage(items=items, next_cursor=encode_offset(offset + limit) if more else None)


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
    execution_id = document["_id"]
    return RelayWork(
        execution_id,
        sorted(
            (parse_outbox_entry(execution_id, e) for e in document.get("outbox") or ()), key=lambda e: e.seq
        ),
        sorted((parse_spawn_entry(e) for e in document.get("spawns") or ()), key=lambda s: s.seq),
    )


def parse_pending_outbox(documents: Iterable[Mapping[str, Any]], limit: int) -> list[OutboxEntry]:
    return [entry for document in documents for entry in parse_relay_work(document).outbox][:limit]


def parse_pending_spawns(documents: Iterable[Mapping[str, Any]], limit: int) -> list[SpawnEntry]:
    return [entry for document in documents for entry in parse_relay_work(document).spawns][:limit]


# --- timers ------------------------------------------------------------------------------------------------


def _firing_order(item: tuple[str, float]) -> tuple[float, int, str]:
    """Earliest first; of timers due at the same instant, the outer state's first."""
    path, at = item
    return at, path.count("."), path


def parse_due(documents: Iterable[Mapping[str, Any]]) -> list[DueTimer]:
    """Each document's earliest timer, with the timers as read and where `next_fire_at` moves after it."""
    due: list[DueTimer] = []
    for document in documents:
        stored = dict(document.get("timers") or {})
        ordered = sorted(((dec(key), float(at)) for key, at in stored.items()), key=_firing_order)
        if not ordered:
            continue
        (path, fire_at), rest = ordered[0], ordered[1:]
        due.append(DueTimer(document["_id"], path, fire_at, stored, due_from(rest[0][1]) if rest else None))
    return sorted(due, key=lambda t: (t.fire_at, t.execution_id))


# --- the mailbox -------------------------------------------------------------------------------------------


def parse_pending(entry: Mapping[str, Any]) -> Pending:
    return Pending(
        id=entry["id"],
        event=Event.model_validate_json(entry["event"]),
        source=entry.get("source"),
        at=float(entry.get("at") or 0.0),
        size=int(entry.get("size") or 0),
    )


def parse_send_diagnosis(documents: Sequence[Mapping[str, Any]]) -> SendOutcome:
    """Why a send matched nothing (`queries.send_diagnosis`)."""
    if not documents or not documents[0].get("created"):
        return SendOutcome.MISSING
    return SendOutcome.DUPLICATE if documents[0].get("duplicate") else SendOutcome.FULL


def parse_claim(document: Mapping[str, Any], owner: str) -> Claim:
    execution = parse_execution(document)
    if execution is None:
        raise ValueError(f"claimed execution {document.get('_id')!r} has no data")
    lease = document["lease"]
    return Claim(
        execution=execution,
        pending=tuple(parse_pending(e) for e in document.get("inbox") or ()),
        owner=owner,
        server_time=float(lease["at"]),
        lease_until=float(lease["until"]),
        attempts=int(document.get("attempts") or 0),
        previous_owner=lease.get("previous"),
        relay_idle=document.get("relay_at") is None,
    )


def parse_lease_until(document: Mapping[str, Any] | None) -> float | None:
    """When an extended lease ends; None when it was no longer the claim's to extend."""
    return float(document["lease"]["until"]) if document is not None else None


def parse_parked(document: Mapping[str, Any]) -> Parked:
    parked = document["parked"]
    return Parked(
        execution_id=document["_id"],
        chart=document.get("chart", ""),
        event_id=parked["event_id"],
        event_name=parked["name"],
        error=parked["error"],
        attempts=int(parked["attempts"]),
        at=float(parked["at"]),
        waiting=max(0, len(document.get("inbox") or ()) - 1),
        traceback=parked.get("traceback") or "",
    )


def parse_count(documents: Sequence[Mapping[str, Any]], name: str = "n") -> int:
    """A number the one group of a `$group` over every document gave (0 when nothing matched)."""
    return int(documents[0][name]) if documents else 0


def parse_oldest(documents: Iterable[Mapping[str, Any]]) -> float | None:
    """The minimum `at` a `$group` found, if any document had one."""
    found = [d["at"] for d in documents if d.get("at") is not None]
    return found[0] if found else None
