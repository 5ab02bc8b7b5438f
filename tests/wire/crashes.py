"""A worker that dies between two round trips: a proxy around its store, its transport or the store's
collection that kills the worker at the n-th call of one method — before the call leaves, or after the
server applied it (the reply never seen).

`Killed` is a BaseException: nothing in the worker may catch it, as nothing in a process survives
SIGKILL. The test drives the doomed worker by hand (`process_one`, `relay_once`) in its own
thread, so the exception ends exactly that unit of work; the worker is then abandoned, holding whatever
lease or relay hold it had, and a fresh worker on its own clients takes over.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal

Part = Literal["store", "transport", "collection"]


class Killed(BaseException):
    """The worker died here."""


@dataclass(frozen=True)
class Crash:
    """Where the worker dies: at the `nth` call of `method` on its `part` (`collection`: the store's
    `executions` collection, for a window inside one store method), once that call was applied or before
    it was sent."""

    part: Part
    method: str
    nth: int = 1
    applied: bool = True

    @property
    def name(self) -> str:
        moment = "after" if self.applied else "before"
        return f"{moment}-{self.part}.{self.method}#{self.nth}"


class Dying:
    """Forwards everything to `target`; the `crash.nth` call of `crash.method` kills the worker."""

    def __init__(self, target: Any, crash: Crash) -> None:
        self._target = target
        self._crash = crash
        self._calls = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if name != self._crash.method:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._calls += 1
                fatal = self._calls == self._crash.nth
            if fatal and not self._crash.applied:
                raise Killed(self._crash.name)
            result = attribute(*args, **kwargs)
            if fatal:
                raise Killed(self._crash.name)
            return result

        return call
