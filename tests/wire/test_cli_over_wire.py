"""The execution commands of `harel` as processes over sockets: start (idempotent), send, status, list,
trace, cancel — with their exit codes — against the fake replica set and a `harel worker` process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fake_mongod.fixtures import FakeDeployment
from tests.wire.processes import WorkerProcesses, run_harel

pytestmark = pytest.mark.wire

CHART = """
id: ticket
version: 1
initial: open
states:
  open:
    on:
      assign: working
  working:
    after: {1h: escalated}
    on:
      resolve: closed
  escalated: {}
  closed: {final: true}
"""


@pytest.fixture
def charts(tmp_path: Path) -> Path:
    (tmp_path / "ticket.yaml").write_text(CHART)
    return tmp_path


def harel(url: str, *arguments: str) -> tuple[int, str, str]:
    result = run_harel(*arguments, "--url", url, "--deadline", "20")
    return result.returncode, result.stdout, result.stderr


def wait_for(url: str, execution_id: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        _, out, _ = harel(url, "status", execution_id)
        if text in out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def test_execution_commands_end_to_end(
    fake_rs: FakeDeployment, charts: Path, worker_processes: WorkerProcesses
) -> None:
    url = fake_rs.url
    code, out, _ = harel(
        url, "start", "ticket", "--charts", str(charts), "--id", "t-1", "--context", '{"who": "ann"}'
    )
    assert code == 0 and out == "t-1 started (ticket v1)\n"
    code, out, _ = harel(url, "start", "ticket", "--charts", str(charts), "--id", "t-1")
    assert code == 0 and out.startswith("t-1 already exists"), "an id is an idempotency key"

    worker_processes.harel_worker(url, "--charts", str(charts), "--drain-seconds", "2")
    assert "active     open" in wait_for(url, "t-1", "active     open")

    # no --charts: the chart comes from the catalog the worker published to
    code, out, err = harel(url, "send", "t-1", "assign", "--data", '{"to": "bob"}')
    assert code == 0 and out.startswith("queued assign"), err
    status = wait_for(url, "t-1", "active     working")
    assert "active     working" in status
    assert "timers     working  fires in" in status, "the durable timer is shown with its time to fire"

    code, out, _ = harel(url, "list", "--definition", "ticket", "--json")
    assert code == 0 and [item["id"] for item in json.loads(out)["items"]] == ["t-1"]

    code, out, _ = harel(url, "trace", "t-1")
    assert code == 0 and "harel.start" in out and "assign" in out

    code, out, _ = harel(url, "cancel", "t-1")
    assert code == 0
    assert "status     cancelled" in wait_for(url, "t-1", "status     cancelled")
    code, out, _ = harel(url, "status", "t-1", "--document")
    document = json.loads(out)
    assert document["_id"] == "t-1" and document["timers"] == {}, "cancel disarmed the timer"
