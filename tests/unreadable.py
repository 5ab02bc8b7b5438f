"""Execution documents this version cannot read, as an older version or a hand could have stored them: the
context nested 199 levels deep (past the parser's recursion limit), a field of `data` of the wrong type, a
malformed mailbox entry. Each is a whole `executions` document (harel.executions.fields), due at once, to
insert straight into the collection past the SDK's checks."""

from __future__ import annotations

import json
from typing import Any

from harel.executions.fields import chart_key
from harel.executions.writes import entry
from harel.model import Event, Execution

DEPTH = 199  # the nesting of the original finding: past the JSON parser's limit (128), under MongoDB's (100 + BSON)


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"k": value}
    return value


def stored(
    execution_id: str,
    definition_id: str,
    *,
    data: dict[str, Any] | None = None,
    inbox: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A started execution of `definition_id` v1 with `data` merged into its data and `inbox` as its mailbox
    (one `poke` event when not given), due since long ago."""
    execution = Execution(
        id=execution_id, definition_id=definition_id, definition_version=1, configuration=["open"]
    )
    fields = {**execution.model_dump(mode="json"), **(data or {})}
    entries = (
        inbox if inbox is not None else [entry(Event(id=f"{execution_id}:poke", name="poke"), None, 0.0)]
    )
    return {
        "_id": execution_id,
        "definition_id": definition_id,
        "version": 0,
        "data": json.dumps(fields),
        "outbox": [],
        "spawns": [],
        "processed": [],
        "timers": {},
        "trace": [],
        "next_fire_at": None,
        "status": "running",
        "parent_id": None,
        "created_at": 0.0,
        "updated_at": 0.0,
        "relay_at": None,
        "chart": chart_key(definition_id, 1),
        "inbox": entries,
        "inbox_bytes": sum(int(e.get("size") or 0) for e in entries),
        "inbox_at": 0.0,
        "lease": None,
        "attempts": 0,
        "last_error": None,
        "parked": None,
    }


def deep(execution_id: str, definition_id: str) -> dict[str, Any]:
    return stored(execution_id, definition_id, data={"context": {"tree": nested(DEPTH)}})


def status_a_number(execution_id: str, definition_id: str) -> dict[str, Any]:
    return stored(execution_id, definition_id, data={"status": 7})


def malformed_entry(execution_id: str, definition_id: str) -> dict[str, Any]:
    """The head event's JSON lacks its name."""
    return stored(
        execution_id,
        definition_id,
        inbox=[
            {"id": f"{execution_id}:poke", "event": json.dumps({"id": f"{execution_id}:poke"}), "at": 0.0}
        ],
    )


# Each kind, and the start of what UnreadableExecution says could not be read.
KINDS = {
    "nested-199": (deep, "data: Invalid JSON: recursion limit exceeded"),
    "status-a-number": (status_a_number, "data.status: Input should be"),
    "malformed-inbox-entry": (malformed_entry, "inbox.0.event.name: Field required"),
}
