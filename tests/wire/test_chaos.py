"""The chaos run, bounded for `make test`: fewer executions and faults than `make chaos`, the same verdict
(tests/chaos/runner.py): three `harel worker` processes on the test replica set in its own process, killed
(SIGKILL) and replaced, stopped (SIGTERM) and replaced, one stalled past its lease; every fork/join
execution completes, nothing lost, doubled, early or left behind, as read from the store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.chaos.runner import ChaosConfig, run

pytestmark = pytest.mark.wire

BOUNDED = ChaosConfig(
    workers=3, executions=100, kills=4, sigterms=1, stalls=1, start_rate=4.0, finish_timeout=120.0, seed=7
)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(BOUNDED, id="replica-set"),
        # the fake cluster's three shards behind one router, partitioned: P = 256, one zone per shard
        pytest.param(dataclasses.replace(BOUNDED, shards=3), id="sharded"),
    ],
)
def test_chaos_bounded(tmp_path: Path, config: ChaosConfig) -> None:
    report = run(config, tmp_path)
    print(report.render())
    assert report.passed, report.render()
    assert (report.kills, report.sigterms, report.stalls) == (4, 1, 1), "every fault was dealt"
    assert report.roots == config.executions
    assert report.audit.executions == 4 * config.executions, "each root with its three children"
    assert report.audit.timers == 4 * config.executions, "four timers a run, each fired once"
