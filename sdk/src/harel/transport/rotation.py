"""Where a partitioned transport looks for work next: its windows of partitions (`Partitions.windows`, each
on one shard) in turn, the busy ones first, those found empty lately last.

A claim looks in every window before it says there is nothing to claim (one command per window, each on
one shard), so a claim finds whatever is claimable, as on one replica set. The order only decides how soon:
a window where a claim found nothing backs off, tried after the others for `EMPTY_BACKOFF_FIRST`, doubling
up to `EMPTY_BACKOFF_MAX` while it stays empty; a claim that finds work there, a change the change stream
reports in one of its partitions, or a send of this process into one, ends its backoff. The turn starts
after the window that found work last, so that one busy window cannot keep the others waiting. An idle
consumer's cost is the worker's idle pause times the windows, one command each.

Single-partition transports never use it: their claim is one command, as it always was.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

EMPTY_BACKOFF_FIRST = 0.05
EMPTY_BACKOFF_MAX = 1.0

Window = tuple[int, ...]


class Rotation:
    def __init__(self, windows: Sequence[Window], clock: Callable[[], float] = time.monotonic) -> None:
        self.windows = list(windows)
        self._clock = clock
        self._lock = threading.Lock()
        self._next = 0
        self._backoff = [0.0] * len(self.windows)
        self._skip_until = [0.0] * len(self.windows)
        self._window_of = {p: i for i, window in enumerate(self.windows) for p in window}

    def order(self) -> list[Window]:
        """Every window, in the order to try them: those not backing off in turn, then those backing off,
        the soonest to end its backoff first."""
        now = self._clock()
        with self._lock:
            turn = [(self._next + k) % len(self.windows) for k in range(len(self.windows))]
            ready = [i for i in turn if self._skip_until[i] <= now]
            waiting = sorted(
                (i for i in turn if self._skip_until[i] > now), key=lambda i: self._skip_until[i]
            )
            return [self.windows[i] for i in ready + waiting]

    def found(self, window: Window) -> None:
        i = self.windows.index(window)
        with self._lock:
            self._backoff[i] = self._skip_until[i] = 0.0
            self._next = (i + 1) % len(self.windows)

    def empty(self, window: Window) -> None:
        i = self.windows.index(window)
        with self._lock:
            self._backoff[i] = min(EMPTY_BACKOFF_MAX, max(EMPTY_BACKOFF_FIRST, self._backoff[i] * 2))
            self._skip_until[i] = self._clock() + self._backoff[i]

    def woken(self, partition: object) -> None:
        """Work may be waiting in `partition` (an unknown one: anywhere)."""
        with self._lock:
            if isinstance(partition, int) and partition in self._window_of:
                touched = [self._window_of[partition]]
            else:
                touched = list(range(len(self.windows)))
            for i in touched:
                self._backoff[i] = self._skip_until[i] = 0.0
