"""The `failCommand` fail point with the real server's fields and semantics.

`configureFailPoint: "failCommand"` with `mode` ({times: N}, "alwaysOn", "off") and `data`: `failCommands`,
`errorCode`, `errorLabels`, `closeConnection`, `blockConnection`/`blockTimeMS`, `writeConcernError`,
`appName`. Every matching command consumes one of the `times`, retries included.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from harel_dev.errors import CommandError

FAIL_COMMAND = "failCommand"


@dataclass(frozen=True)
class Failure:
    """What the fail point does to one command it caught."""

    block_ms: int = 0
    close_connection: bool = False
    error_code: int | None = None
    error_labels: list[str] | None = None
    write_concern_error: dict[str, Any] | None = None


@dataclass
class _Armed:
    commands: frozenset[str]
    failure: Failure
    app_name: str | None
    remaining: int | None  # None: alwaysOn


@dataclass
class FailCommandPoint:
    _armed: _Armed | None = None
    _entered: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def configure(self, command: dict[str, Any]) -> dict[str, Any]:
        name = command.get("configureFailPoint")
        if name != FAIL_COMMAND:
            raise CommandError(2, f"fake_mongod models only the failCommand fail point, not {name!r}")
        armed = _parse(command.get("mode"), command.get("data") or {})
        with self._lock:
            self._armed = armed
            entered = self._entered
        # As on the server: `count` is how often the fail point was entered before this change.
        return {"count": entered, "ok": 1.0}

    def reset(self) -> None:
        with self._lock:
            self._armed = None
            self._entered = 0

    def take(self, command_name: str, app_name: str | None) -> Failure | None:
        """The failure for this command, if the fail point catches it; consumes one activation."""
        with self._lock:
            armed = self._armed
            if armed is None or command_name not in armed.commands:
                return None
            if armed.app_name is not None and armed.app_name != app_name:
                return None
            self._entered += 1
            if armed.remaining is not None:
                armed.remaining -= 1
                if armed.remaining <= 0:
                    self._armed = None
            return armed.failure


def _parse(mode: Any, data: dict[str, Any]) -> _Armed | None:
    if mode == "off":
        return None
    if mode == "alwaysOn":
        remaining = None
    elif isinstance(mode, dict) and set(mode) == {"times"} and int(mode["times"]) >= 0:
        remaining = int(mode["times"])
        if remaining == 0:
            return None
    else:
        raise CommandError(
            2, f"fake_mongod models fail point modes 'off', 'alwaysOn' and {{times: N}}, not {mode!r}"
        )
    commands = data.get("failCommands")
    if not isinstance(commands, list) or not commands:
        raise CommandError(2, "failCommand requires a non-empty 'failCommands' array")
    failure = Failure(
        block_ms=int(data.get("blockTimeMS", 0)) if data.get("blockConnection") else 0,
        close_connection=bool(data.get("closeConnection", False)),
        error_code=int(data["errorCode"]) if "errorCode" in data else None,
        error_labels=list(data["errorLabels"]) if "errorLabels" in data else None,
        write_concern_error=dict(data["writeConcernError"]) if "writeConcernError" in data else None,
    )
    return _Armed(frozenset(commands), failure, data.get("appName"), remaining)
