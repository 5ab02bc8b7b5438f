"""`make bench` fails fast: a flow whose workers stop processing is reported as failed once nothing moved for
STALL_SECONDS, not after a long timeout; a flow that keeps moving is waited for to the end."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from bench import end_to_end

STALL = 0.3


@dataclass
class ScriptedPool:
    """Reports the processed counts of `script` one per call, then repeats the last."""

    script: list[int]
    calls: int = 0
    seen: list[int] = field(default_factory=list)
    kind: str = "scripted"

    def processed(self) -> int:
        count = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return count


@pytest.fixture(autouse=True)
def short_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(end_to_end, "STALL_SECONDS", STALL)


def test_a_flow_that_stops_moving_fails_once_nothing_moved_for_the_stall_time() -> None:
    pool = ScriptedPool([0, 1, 2, 3])  # three events, then nothing more
    failures: list[str] = []
    began = time.monotonic()
    waiting = threading.Thread(
        target=end_to_end._wait_for, args=(pool, 10, failures, pool.seen.append), daemon=True
    )
    waiting.start()
    waiting.join(timeout=STALL + 5.0)  # a wait without the stall check would never return
    took = time.monotonic() - began
    assert not waiting.is_alive(), "the wait did not give up on a flow that stopped"
    assert failures == [f"3 of 10 events; none processed in the last {STALL:g} s"]
    assert pool.seen == [0, 1, 2, 3], "each new count was reported"
    assert STALL <= took < STALL + 2.0, "failed once the stall time passed, not later"


def test_a_flow_that_keeps_moving_is_waited_for_to_the_end() -> None:
    # One event more at every look: never a stall, however long the flow takes in all.
    pool = ScriptedPool(list(range(11)))
    failures: list[str] = []
    end_to_end._wait_for(pool, 10, failures, pool.seen.append)
    assert failures == [] and pool.seen == list(range(11))
