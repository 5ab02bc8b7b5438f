"""Withheld write-concern acknowledgement: a replica set that has lost its majority.

On such a set the primary still applies a write, but cannot confirm `w: "majority"`; the reply waits until
a majority is back, or until the command's `wtimeout` (from the start of the wait) or `maxTimeMS` (from the
command's arrival) passes, and then answers `ok: 1` with a `writeConcernError`:

  wtimeout   {code: 64, codeName: "WriteConcernFailed", errmsg: "waiting for replication timed out",
              errInfo: {wtimeout: true, writeConcern: {w, wtimeout, provenance}}}
  maxTimeMS  {code: 50, codeName: "MaxTimeMSExpired", errmsg: "operation exceeded time limit",
              errInfo: {writeConcern: {w, wtimeout, provenance}}}

The write itself stays applied either way. The effective write concern is the command's own
(provenance "clientSupplied") or the cluster-wide default (`getDefaultRWConcern`), which a driver relies on
when it sends none. With neither timeout the reply waits until `release()` or the server stops (then the
connection closes without a reply). Writes with `w: 1` (or any number) are acknowledged at once: the
primary alone satisfies them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harel_dev.errors import code_name

WRITE_CONCERN_TIMEOUT = 64
MAX_TIME_EXPIRED = 50


@dataclass
class WriteConcernGate:
    _withheld: bool = False
    _stopping: bool = False
    _released: int = 0  # counts releases, so a waiter notices one even if withholding resumes at once
    _condition: threading.Condition = field(default_factory=threading.Condition)

    def withhold(self) -> None:
        with self._condition:
            self._withheld = True

    def release(self) -> None:
        with self._condition:
            self._withheld = False
            self._released += 1
            self._condition.notify_all()

    def stop(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()

    def acknowledge(
        self,
        command: dict[str, Any],
        reply: dict[str, Any],
        default_write_concern: dict[str, Any],
        default_source: str,
        arrived: float,
    ) -> dict[str, Any] | None:
        """`reply` once the write concern is satisfied, with a writeConcernError if a timeout passed first,
        or None when the server stops meanwhile."""
        if "writeConcern" in command:
            write_concern, provenance = dict(command["writeConcern"]), "clientSupplied"
        else:
            write_concern = dict(default_write_concern)
            provenance = "customDefault" if default_source == "global" else "implicitDefault"
        if write_concern.get("w") != "majority":
            return reply
        waiting = time.monotonic()
        wtimeout_ms = int(write_concern.get("wtimeout") or 0)
        max_time_ms = int(command.get("maxTimeMS") or 0)
        deadlines = {}
        if wtimeout_ms:
            deadlines[WRITE_CONCERN_TIMEOUT] = waiting + wtimeout_ms / 1000
        if max_time_ms:
            deadlines[MAX_TIME_EXPIRED] = arrived + max_time_ms / 1000
        with self._condition:
            released = self._released
            while self._withheld and self._released == released:
                if self._stopping:
                    return None
                expired = [code for code, deadline in deadlines.items() if deadline <= time.monotonic()]
                if expired:
                    code = min(expired, key=deadlines.__getitem__)
                    return {
                        **reply,
                        "writeConcernError": _error(code, write_concern, provenance, wtimeout_ms),
                    }
                remaining = min(deadlines.values(), default=None)
                self._condition.wait(None if remaining is None else max(0.0, remaining - time.monotonic()))
        return reply


def _error(code: int, write_concern: dict[str, Any], provenance: str, wtimeout_ms: int) -> dict[str, Any]:
    concern = {"w": write_concern["w"], "wtimeout": wtimeout_ms, "provenance": provenance}
    if code == WRITE_CONCERN_TIMEOUT:
        message, info = "waiting for replication timed out", {"wtimeout": True, "writeConcern": concern}
    else:
        message, info = "operation exceeded time limit", {"writeConcern": concern}
    return {"code": code, "codeName": code_name(code), "errmsg": message, "errInfo": info}
