"""The deployment's clock: every lease, mailbox due time and timer is decided by the server's `$$NOW`.

Workers' clocks differ. A worker whose clock ran ahead would take leases before they expire and fire timers
early; one behind would delay them. So the commands that decide (claim, fire a timer, take over relay work)
compare against `$$NOW` inside the command, on the primary, and every stored time is written from it:
`NOW` is that instant as float epoch seconds, the unit of every time the engine stores.

`ServerClock` is a worker's estimate of the server's time, kept from the server times its commands return
(a claim returns the `$$NOW` it leased at). It is used for two things only, never to decide: the `now` of a
step (the claim's server time plus the local time elapsed since, read from the monotonic clock), and the
upper bound that lets a decisive query use an index range (`inbox_at <= estimate + margin`); the exact
comparison is the `$expr` against `$$NOW` in the same query. Until the first server time is known the
margin is wide (`UNKNOWN_MARGIN`): a query may then scan further, never decide earlier.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

EPOCH = datetime(1970, 1, 1)
# `$$NOW` in epoch seconds: a date minus the epoch is milliseconds on every server and on mongomock.
NOW: dict[str, Any] = {"$divide": [{"$subtract": ["$$NOW", {"$literal": EPOCH}]}, 1000]}

KNOWN_MARGIN = 1.0
UNKNOWN_MARGIN = 3600.0

Monotonic = Callable[[], float]
Clock = Callable[[], float]


def now_plus(seconds: float) -> dict[str, Any]:
    """`$$NOW` + `seconds`, in epoch seconds."""
    return {"$add": [NOW, seconds]} if seconds else NOW


class ServerClock:
    """A worker's running estimate of the deployment's clock (see the module docstring)."""

    def __init__(self, local: Clock = time.time, monotonic: Monotonic = time.monotonic) -> None:
        self._local = local
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._anchor: tuple[float, float] | None = None  # (server seconds, monotonic seconds) at the anchor

    def observe(self, server_seconds: float) -> None:
        """A server time a command just returned."""
        with self._lock:
            self._anchor = (server_seconds, self._monotonic())

    def mark(self) -> float:
        """A reading of this clock's monotonic source, to pass to `since` later."""
        return self._monotonic()

    def since(self, server_seconds: float, observed_at: float) -> float:
        """The server time now, given it was `server_seconds` at the `mark()` reading `observed_at`."""
        return server_seconds + max(0.0, self._monotonic() - observed_at)

    @property
    def known(self) -> bool:
        return self._anchor is not None

    def now(self) -> float:
        """The estimate; before any server time is known, the worker's own clock."""
        with self._lock:
            anchor = self._anchor
        if anchor is None:
            return self._local()
        return self.since(*anchor)

    def bound(self) -> float:
        """An upper bound of the server's time for index ranges; exact decisions use `$$NOW`."""
        return self.now() + (KNOWN_MARGIN if self.known else UNKNOWN_MARGIN)
