"""The shapes of the commands a client sends, recorded by a PyMongo command listener: for each command on a
collection, its name, the collection, the fields its filter (or first `$match`) names, its sort and its
write options — what decides which index serves it and which shards a router sends it to, without the
values that differ from run to run. Cursor continuations (`getMore`, `killCursors`) are left out: they
follow the command that opened the cursor."""

from __future__ import annotations

import threading
from typing import Any

from pymongo import monitoring

_CONTINUATIONS = {"getMore", "killCursors", "endSessions", "hello", "isMaster", "ismaster", "ping"}


def _fields(filter_: Any) -> list[str]:
    return sorted(filter_) if isinstance(filter_, dict) else []


def _statement_shape(command: str, statement: dict[str, Any]) -> dict[str, Any]:
    shape: dict[str, Any] = {"filter": _fields(statement.get("q", statement.get("query")))}
    if statement.get("upsert"):
        shape["upsert"] = True
    if statement.get("multi"):
        shape["multi"] = True
    if "sort" in statement:
        shape["sort"] = list(statement["sort"])
    if command == "delete":
        shape["limit"] = statement.get("limit")
    return shape


def command_shapes(command_name: str, command: dict[str, Any]) -> list[dict[str, Any]]:
    """One shape per statement of `command` (an `update` or `delete` of several statements gives several)."""
    collection = command.get(command_name)
    if not isinstance(collection, str) or command_name in _CONTINUATIONS:
        return []
    base = {"command": command_name, "collection": collection}
    if command_name in ("update", "delete"):
        key = "updates" if command_name == "update" else "deletes"
        return [base | _statement_shape(command_name, s) for s in command.get(key, [])]
    if command_name == "findAndModify":
        return [base | _statement_shape(command_name, command)]
    if command_name in ("find", "count", "distinct"):
        shape = base | {"filter": _fields(command.get("filter", command.get("query")))}
        if command.get("sort"):
            shape["sort"] = list(command["sort"])
        return [shape]
    if command_name == "aggregate":
        pipeline = command.get("pipeline") or [{}]
        first = pipeline[0]
        if "$changeStream" in first:
            return [base | {"change_stream": True}]
        return [base | {"filter": _fields(first.get("$match")), "stages": [next(iter(s)) for s in pipeline]}]
    return [base]


class ShapeRecorder(monitoring.CommandListener):
    """Every distinct command shape started on the clients it listens on (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shapes: set[str] = set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        import json

        shapes = [json.dumps(s, sort_keys=True) for s in command_shapes(event.command_name, event.command)]
        with self._lock:
            self._shapes.update(shapes)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def shapes(self) -> list[dict[str, Any]]:
        import json

        with self._lock:
            return [json.loads(s) for s in sorted(self._shapes)]
