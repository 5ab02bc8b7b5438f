"""Loaded at start-up by the worker processes the clock-skew tests run under libfaketime (on PYTHONPATH).

libfaketime 0.9.10, as Debian ships it, mistranslates `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`
when the monotonic clock is left true: it hands the kernel a negative time and the call fails with EINVAL.
Python 3.11's `time.sleep` makes exactly that call, so every sleep in the process would raise. Sleeping on
`select`'s relative timeout instead leaves both clocks as the test wants them: the wall clock skewed, the
monotonic clock true. Waits on locks, events and sockets are not affected and are left alone.
"""

from __future__ import annotations

import select
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
