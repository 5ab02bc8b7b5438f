"""Counting the database commands a worker process sends, by the loop that sent them (`harel_db_commands`).

`CommandCounter` is a PyMongo command listener on the worker's client. Each worker loop runs every pass
inside `sending(<loop>)`, which sets a context variable for the thread running it; each command started
while it is set is counted for that pass and added to the metric under the pass's loop when the pass ends.
Counting at the end of the pass lets a pass say what it turned out to be: a consumer pass whose claim found
nothing is renamed `idle`, so polling is not mistaken for work on the hot path.

Context variables belong to the thread (or task) that sets them, and each loop runs on a thread of its own,
so concurrent loops never count into each other's pass. A command sent outside any pass (the start-up checks,
index creation, the statistics read on a scrape) is counted at once under `OTHER`.

Only a real client carries the listener: `mongomock://` has no command monitoring, so it leaves the metric
at zero.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from pymongo import monitoring

from harel.metrics import Metrics

CONSUMER = "consumer"
IDLE = "idle"  # a consumer pass whose claim found nothing due
RELAY = "relay"
HEARTBEAT = "heartbeat"
WATCH = "watch"  # the mailbox change stream that wakes idle consumers
SCRAPE = "scrape"  # the deployment statistics read when /metrics is scraped
OTHER = "other"


@dataclass
class Pass:
    """One pass of one loop: its commands so far, and the loop they are counted under when it ends."""

    loop: str
    commands: int = 0
    counter: CommandCounter | None = None  # the listener that counted into it, which takes the total


_current: ContextVar[Pass | None] = ContextVar("harel_sending_pass", default=None)


@contextlib.contextmanager
def sending(loop: str) -> Iterator[Pass]:
    """Count the commands sent inside under `loop`, or under the name the caller gives `Pass.loop` before
    the block ends."""
    current = Pass(loop)
    token = _current.set(current)
    try:
        yield current
    finally:
        _current.reset(token)
        if current.counter is not None and current.commands:
            current.counter.add(current.loop, current.commands)


class CommandCounter(monitoring.CommandListener):
    """Counts every command the client starts (a retried command once per attempt: each crosses the wire).

    PyMongo calls `started` on the thread that sends the command, so the pass it reads is that thread's."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        current = _current.get()
        if current is None:
            self.add(OTHER, 1)
            return
        current.counter = self
        current.commands += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass  # counted when started: a command whose reply is lost was still sent

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def add(self, loop: str, commands: int) -> None:
        self._metrics.commands.labels(loop=loop).inc(commands)
