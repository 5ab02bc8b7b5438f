"""Phase labels for the command accounting: which call of which worker loop sent each command.

A store, transport or heartbeats object wrapped in `Labelled` runs every method call inside the accounting
phase `<loop>:<method>` — `consume:claim`, `relay:take_relay_work`, `heartbeat:beat`, ... The loop is read
from the calling thread's name (the worker names its threads `harel-consumer-N`, `harel-relay`,
`harel-heartbeat`, `harel-lease`, and `harel-leaving` while it stops); any other thread is the
client. The phase is a context variable of the
calling thread, so the labels hold while the worker runs its loops on their own threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.accounting import CommandAccounting

WORKER_THREAD_PREFIX = "harel-"
CLIENT = "client"


def loop_of_current_thread() -> str:
    name = threading.current_thread().name
    if not name.startswith(WORKER_THREAD_PREFIX):
        return CLIENT
    loop = name.removeprefix(WORKER_THREAD_PREFIX).split("-", 1)[0]
    return "consume" if loop == "consumer" else loop


class Labelled:
    """A transparent wrapper: same methods, same results; each call labelled, and the calls counted per
    method, with those that returned None apart (an empty claim is a poll, not a delivery)."""

    def __init__(self, target: Any, accounting: CommandAccounting) -> None:
        self._target = target
        self._accounting = accounting
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.returned_none: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute
        return self._labelled(name, attribute)

    def _labelled(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._accounting.phase(f"{loop_of_current_thread()}:{name}"):
                result = method(*args, **kwargs)
            with self._lock:
                self.calls[name] += 1
                if result is None:
                    self.returned_none[name] += 1
            return result

        return call
