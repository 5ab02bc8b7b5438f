"""`harel pause --wait` and `harel resume` as processes over sockets, against the fake replica set and a
`harel worker` process: the worker hears of the pause at its next heartbeat, acknowledges, applies nothing
while paused, and applies what waited once resumed; a live worker that never acknowledges makes `--wait`
give up with its own error and exit code, the pause left standing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from harel.cli.exits import Exit
from harel.store.mongo import MongoStore
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.wire.processes import WorkerProcesses, run_harel, wait_until

pytestmark = pytest.mark.wire

CHART = """
id: turnstile
version: 1
initial: locked
states:
  locked:
    on: {coin: unlocked}
  unlocked:
    on: {push: locked}
"""


def harel(url: str, *arguments: str) -> tuple[int, str, str]:
    result = run_harel(*arguments, "--url", url, "--deadline", "20")
    return result.returncode, result.stdout, result.stderr


def state(store: MongoStore, execution_id: str) -> list[str]:
    execution = store.load(execution_id)
    return [] if execution is None else execution.configuration


def test_pause_wait_then_resume_with_a_worker_process(
    fake_rs: FakeDeployment, tmp_path: Path, worker_processes: WorkerProcesses
) -> None:
    url = fake_rs.url
    (tmp_path / "turnstile.yaml").write_text(CHART)
    worker = worker_processes.harel_worker(url, "--charts", str(tmp_path), "--drain-seconds", "2")
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        store = MongoStore(client)
        worker.wait_registered(client)
        code, _, err = harel(url, "start", "turnstile", "--charts", str(tmp_path), "--id", "gate")
        assert code == 0, err
        wait_until(lambda: state(store, "gate") == ["locked"], 30, "the start event")

        code, out, err = harel(url, "pause", "--wait", "--timeout", "30", "--reason", "wire test")
        assert code == Exit.OK, err
        [row] = [line for line in out.splitlines() if f" {worker.pid} " in line]
        assert "since " in row, out
        assert "all 1 live worker(s) paused" in out
        assert "(wire test)" in err
        stored = client.harel.harel_meta.find_one({"_id": "pause"})
        assert stored is not None and stored["reason"] == "wire test"

        code, _, err = harel(url, "send", "gate", "coin")
        assert code == 0, err
        time.sleep(3)
        assert state(store, "gate") == ["locked"], "a paused worker applies nothing"
        assert worker.running()

        code, out, err = harel(url, "pause", "--json")
        assert code == 0, err
        status = json.loads(out)
        assert status["complete"] and [w["pid"] for w in status["acknowledged"]] == [worker.pid]

        code, out, err = harel(url, "pause", "--status")
        assert code == 0, err
        assert out.startswith("pause requested at ") and "(wire test)" in out and "since " in out

        code, out, err = harel(url, "resume")
        assert code == 0, err
        assert out.startswith("resumed: the pause requested at ") and "(wire test)" in out
        wait_until(lambda: state(store, "gate") == ["unlocked"], 30, "the event once resumed")
        assert client.harel.harel_meta.find_one({"_id": "pause"}) is None
        code, out, _ = harel(url, "resume")
        assert code == 0 and out == "no pause stood; the workers run\n"
        code, out, _ = harel(url, "pause", "--status")
        assert code == 0 and out == "no pause stands\n"
        assert client.harel.harel_meta.find_one({"_id": "pause"}) is None, "--status requests nothing"
    assert worker.terminate() == 0


def test_pause_wait_gives_up_on_a_worker_that_never_acknowledges(fake_rs: FakeDeployment) -> None:
    url = fake_rs.url
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        # a live worker of a version that knows no pause: it beats, and never acknowledges
        client.harel.workers.update_one(
            {"_id": "old-worker"},
            [{"$set": {"host": "h", "pid": 4242, "beat_at": {"$divide": [{"$toLong": "$$NOW"}, 1000]}}}],
            upsert=True,
        )
        code, out, err = harel(url, "pause", "--wait", "--timeout", "2")
        assert code == Exit.TIMED_OUT
        assert err.splitlines()[-1].startswith(
            "harel pause: 1 live worker(s) did not acknowledge the pause within 2s: old-worker; the pause stands"
        )
        assert "not yet" in out
        code, out, err = harel(url, "pause", "--wait", "--timeout", "2", "--json")
        assert code == Exit.TIMED_OUT
        assert json.loads(err.splitlines()[-1])["error"] == "PauseNotAcknowledged"
        assert client.harel.harel_meta.find_one({"_id": "pause"}) is not None, "the pause stands"
        assert client.harel.workers.find_one({"_id": "old-worker"})["pause_requested"] is True
        code, _, _ = harel(url, "resume")
        assert code == 0
        assert "pause_requested" not in client.harel.workers.find_one({"_id": "old-worker"})
