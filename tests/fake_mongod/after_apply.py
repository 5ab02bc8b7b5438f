"""Faults only a test double can inject; the real server has no fail point for them.

`fail_after_apply`: the command is executed (and, for a retryable write, its outcome recorded), then the
connection is closed before the reply is sent, so the client cannot know whether the write happened. On a
real deployment the same situation arises from a failover or a network cut at the wrong moment, which no
test command reproduces; tests that use this hook run only against the double and are skipped in real mode.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class _Pending:
    command: str
    remaining: int
    app_name: str | None


@dataclass
class AfterApplyFaults:
    _pending: list[_Pending] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arm(self, command: str, times: int, app_name: str | None) -> None:
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times}")
        with self._lock:
            self._pending.append(_Pending(command, times, app_name))

    def take(self, command: str, app_name: str | None) -> bool:
        """True when this command's connection must be closed after it was applied; consumes one."""
        with self._lock:
            for pending in self._pending:
                if pending.command == command and pending.app_name in (None, app_name):
                    pending.remaining -= 1
                    if pending.remaining == 0:
                        self._pending.remove(pending)
                    return True
            return False

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()
