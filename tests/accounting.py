"""Command accounting: a PyMongo command listener that counts commands and their bytes.

Register it on a client (`MongoClient(url, event_listeners=[accounting])`) and label stretches of work with
`with accounting.phase("commit"): ...`; every command started in that stretch is tallied under that phase,
its database, collection and command name, with the BSON size of the command and of its reply. Reading is
by `tally(...)` (one total over a filter) or `group_by(...)` (totals per distinct key).

The phase is a context variable: it follows the thread or asyncio task that set it. Work handed to another
thread without copying the context (Motor runs PyMongo in an executor) is tallied as `UNLABELLED`.
Sizes are of the command and reply documents as the driver hands them to listeners (OP_MSG document
sequences merged in), within a few header bytes of what crosses the wire.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, Literal

import bson
from pymongo import monitoring

UNLABELLED = "unlabelled"
Field = Literal["phase", "database", "collection", "command"]

_phase: contextvars.ContextVar[str] = contextvars.ContextVar("command_accounting_phase", default=UNLABELLED)


@dataclass(frozen=True)
class CommandKey:
    phase: str
    database: str
    collection: str | None  # None for commands not aimed at one collection (ping, listCollections, ...)
    command: str


@dataclass
class Tally:
    commands: int = 0
    failures: int = 0
    request_bytes: int = 0
    reply_bytes: int = 0
    duration_micros: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Tally)))


@dataclass(frozen=True)
class _Started:
    key: CommandKey
    request_bytes: int


class CommandAccounting(monitoring.CommandListener):
    """Thread-safe; one instance may listen on several clients at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[CommandKey, Tally] = {}
        self._in_flight: dict[tuple[Any, int], _Started] = {}

    @staticmethod
    @contextlib.contextmanager
    def phase(label: str) -> Iterator[None]:
        token = _phase.set(label)
        try:
            yield
        finally:
            _phase.reset(token)

    # --- listener ------------------------------------------------------------------------------------

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        key = CommandKey(_phase.get(), event.database_name, _collection_of(event), event.command_name)
        started = _Started(key, _size(event.command))
        with self._lock:
            self._in_flight[(event.connection_id, event.request_id)] = started

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._finish(event, failed=False, reply_bytes=_size(event.reply))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._finish(event, failed=True, reply_bytes=_size(event.failure))

    def _finish(
        self,
        event: monitoring.CommandSucceededEvent | monitoring.CommandFailedEvent,
        *,
        failed: bool,
        reply_bytes: int,
    ) -> None:
        with self._lock:
            started = self._in_flight.pop((event.connection_id, event.request_id), None)
            if started is None:
                return  # started before this listener was cleared
            tally = self._tallies.setdefault(started.key, Tally())
            tally.commands += 1
            tally.failures += failed
            tally.request_bytes += started.request_bytes
            tally.reply_bytes += reply_bytes
            tally.duration_micros += event.duration_micros

    # --- reading -------------------------------------------------------------------------------------

    def tally(
        self,
        *,
        phase: str | None = None,
        database: str | None = None,
        collection: str | None = None,
        command: str | None = None,
    ) -> Tally:
        """The sum over every completed command matching all the given fields."""
        wanted = {"phase": phase, "database": database, "collection": collection, "command": command}
        total = Tally()
        for key, tally in self._snapshot().items():
            if all(value is None or getattr(key, name) == value for name, value in wanted.items()):
                total += tally
        return total

    def group_by(self, *by: Field) -> dict[tuple[Any, ...], Tally]:
        """Totals per distinct value of the given fields, e.g. `group_by("phase", "command")`."""
        groups: dict[tuple[Any, ...], Tally] = {}
        for key, tally in self._snapshot().items():
            group = tuple(getattr(key, name) for name in by)
            groups[group] = groups.get(group, Tally()) + tally
        return groups

    def rows(self) -> list[dict[str, Any]]:
        """One flat record per (phase, database, collection, command), for reports and JSON output."""
        return [
            {"phase": k.phase, "database": k.database, "collection": k.collection, "command": k.command}
            | {f.name: getattr(t, f.name) for f in fields(Tally)}
            for k, t in sorted(self._snapshot().items(), key=lambda item: _sort_key(item[0]))
        ]

    def clear(self) -> None:
        with self._lock:
            self._tallies.clear()
            self._in_flight.clear()

    def _snapshot(self) -> dict[CommandKey, Tally]:
        with self._lock:
            return {key: Tally(**vars(tally)) for key, tally in self._tallies.items()}


# Commands whose collection is not the value of their first field.
_COLLECTION_FIELD = {"getMore": "collection"}


def _collection_of(event: monitoring.CommandStartedEvent) -> str | None:
    value = event.command.get(_COLLECTION_FIELD.get(event.command_name, event.command_name))
    return value if isinstance(value, str) else None


def _size(document: Any) -> int:
    return len(bson.encode(document)) if document else 0


def _sort_key(key: CommandKey) -> tuple[str, str, str, str]:
    return key.phase, key.database, key.collection or "", key.command
