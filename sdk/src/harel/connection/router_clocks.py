"""The routers' clocks, as a client's monitor hears them: `$$NOW` on a sharded cluster is the clock of the
mongos that ran the command, so leases and timers taken through two routers compare two clocks.

Every client `connect` builds listens to its own server heartbeats; a mongos's `hello` reply carries its
`localTime`. The offset of each router from this machine's clock (less half the heartbeat's round trip) is
kept per client, for `check` to compare. Clients built elsewhere are not heard (`heard_routers` gives None).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import weakref
from typing import Any

from pymongo import monitoring

_HEARD: weakref.WeakKeyDictionary[Any, RouterClocks] = weakref.WeakKeyDictionary()


class RouterClocks(monitoring.ServerHeartbeatListener):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[str, float] = {}

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        document = event.reply.document
        local = document.get("localTime")
        if document.get("msg") != "isdbgrid" or not isinstance(local, dt.datetime):
            return
        if local.tzinfo is None:
            local = local.replace(tzinfo=dt.UTC)
        host, port = event.connection_id
        with self._lock:
            self._offsets[f"{host}:{port}"] = local.timestamp() - (time.time() - event.duration / 2)

    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        pass

    def offsets(self) -> dict[str, float]:
        with self._lock:
            return dict(self._offsets)


def listen(client: Any, clocks: RouterClocks) -> None:
    _HEARD[client] = clocks


def heard_routers(client: Any) -> dict[str, float] | None:
    """Each router's clock offset (seconds ahead of this machine's) heard so far; None: not listened to."""
    clocks = _HEARD.get(client)
    return clocks.offsets() if clocks is not None else None
