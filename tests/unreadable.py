"""Execution documents this version cannot read, as an older version or a hand could have stored them: the
context nested 199 levels deep (past the parser's recursion limit), a field of `data` of the wrong type, a
malformed mailbox entry. Each is a whole `executions` document (harel.executions.fields), due at once, to
insert straight into the collection past the SDK's checks (with the `wake_at` the SDK's writes would give
it: `claimable`)."""

from __future__ import annotations

import json
from collections.abc import Callable
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


def claimable(make: Callable[[str, str], dict[str, Any]]) -> Callable[[str, str], dict[str, Any]]:
    """`make`'s document with its `wake_at` as every write of the SDK sets it (`writes.WAKE_STAGE`)."""

    def made(execution_id: str, definition_id: str) -> dict[str, Any]:
        document = make(execution_id, definition_id)
        mailbox, timer = document.get("inbox_at"), document.get("next_fire_at")
        wake = None if document.get("parked") else (mailbox if mailbox is not None else timer)
        return {**document, "wake_at": wake}

    return made


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


def attempts_a_string_after_a_lease_ran_out(execution_id: str, definition_id: str) -> dict[str, Any]:
    """Taken over, its attempts are counted: not a number, they are what the claim cannot read."""
    return {
        **stored(execution_id, definition_id),
        "attempts": "x",
        "lease": {"owner": "gone", "until": 1.0, "at": 0.0},
    }


# Each kind, and the start of what UnreadableExecution says could not be read.
KINDS = {
    "nested-199": (claimable(deep), "data: Invalid JSON: recursion limit exceeded"),
    "status-a-number": (claimable(status_a_number), "data.status: Input should be"),
    "malformed-inbox-entry": (claimable(malformed_entry), "inbox.0.event.name: Field required"),
    "attempts-a-string-after-a-lease-ran-out": (
        claimable(attempts_a_string_after_a_lease_ran_out),
        "attempts: ValueError: invalid literal for int()",
    ),
}


# Relay work and timers the relay and the sweep cannot read, as fields of an idle execution (nothing in its
# mailbox): its `relay_at` or `next_fire_at` due since long ago. Each, and the start of what is said.
def outbox_entry_without_event(execution_id: str, definition_id: str) -> dict[str, Any]:
    return {
        **stored(execution_id, definition_id, inbox=[]),
        "inbox_at": None,
        "outbox": [{"seq": 1, "target_id": "elsewhere"}],
        "relay_at": 1.0,
    }


def spawn_entry_without_child(execution_id: str, definition_id: str) -> dict[str, Any]:
    return {
        **stored(execution_id, definition_id, inbox=[]),
        "inbox_at": None,
        "spawns": [{"seq": 1, "parent_id": execution_id, "root_path": "r", "context": {}}],
        "relay_at": 1.0,
    }


def timer_not_a_number(execution_id: str, definition_id: str) -> dict[str, Any]:
    return {
        **stored(execution_id, definition_id, inbox=[]),
        "inbox_at": None,
        "timers": {"open": "soon"},
        "next_fire_at": 1.0,
    }


def timers_not_a_map(execution_id: str, definition_id: str) -> dict[str, Any]:
    return {
        **stored(execution_id, definition_id, inbox=[]),
        "inbox_at": None,
        "timers": 7,
        "next_fire_at": 1.0,
    }


RELAY_KINDS = {
    "outbox-entry-without-event": (claimable(outbox_entry_without_event), "outbox: KeyError: 'event'"),
    "spawn-entry-without-child": (claimable(spawn_entry_without_child), "spawns: KeyError: 'child_id'"),
}
TIMER_KINDS = {
    "timer-not-a-number": (
        claimable(timer_not_a_number),
        "timers: ValueError: could not convert string to float",
    ),
    "timers-not-a-map": (claimable(timers_not_a_map), "timers: TypeError: 'int' object is not iterable"),
}
