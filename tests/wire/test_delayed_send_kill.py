"""A delayed send survives the `kill -9` of the worker process that armed it: the follow-up chart of
docs/charts.md (its sends and cancel the chart's own) on the test replica set in its own process, whose
clock is true. One `harel worker` arms both sends and cancels one, and is killed with SIGKILL before they
are due; a new `harel worker`, its clock 60 s ahead under faketime, fires the remaining one once, not
before it is due by the server's clock, and never the cancelled one."""

from __future__ import annotations

import time

import pytest
from pymongo import MongoClient

from harel.client import send_event, start_execution
from harel.model import TIMER_EVENT, Execution
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeProcess
from tests.wire import follow_up_app
from tests.wire.processes import WorkerProcesses, wait_until

pytestmark = pytest.mark.wire

APP = "tests.wire.follow_up_app:app"
AHEAD = 60.0
EXECUTION_ID = "follow-up-killed"
SETTLE = 2.0  # seconds past the due time in which a second delivery would have shown


@pytest.mark.semantics("sem-delayed-durable", "sem-chart-send")
def test_a_delayed_send_armed_by_a_killed_worker_fires_once_on_the_servers_clock(
    fake_rs_process: FakeProcess, worker_processes: WorkerProcesses
) -> None:
    url = fake_rs_process.url
    with MongoClient(url, **CLIENT_OPTIONS) as admin:
        store, transport = MongoStore(admin, "harel"), MongoTransport(admin, "harel", watch=False)
        app = follow_up_app.app

        def stored() -> Execution:
            exe = store.load(EXECUTION_ID)
            assert exe is not None
            return exe

        armer = worker_processes.harel_worker(url, "--app", APP, "--drain-seconds", "2")
        armer.wait_registered(admin)
        start_execution(store, transport, app, follow_up_app.CHART_ID, execution_id=EXECUTION_ID)
        send_event(store, transport, app, EXECUTION_ID, "acknowledge")
        wait_until(
            lambda: any(step["event"] == "acknowledge" for step in store.read_trace(EXECUTION_ID)),
            30,
            "the arming worker to commit the start and the acknowledge",
        )
        armed = stored()
        assert list(armed.delayed) == ["remind"], "escalate was cancelled, remind is held"
        fire_at = armed.timers["send:remind"]
        assert list(armed.timers) == ["send:remind"]

        launched = time.time()
        firer = worker_processes.harel_worker(url, "--app", APP, "--drain-seconds", "2", clock_offset=AHEAD)
        firer.wait_registered(admin)
        beat = admin.harel.workers.find_one({"pid": firer.pid})
        assert beat is not None and abs(beat["started_at"] - launched - AHEAD) < 10, (
            "faketime moved its clock"
        )
        armer.kill()
        assert time.time() < fire_at, (
            "the arming worker was killed, and the new one started, before the send was due"
        )
        assert stored().context.get("log") is None, "nothing delivered yet"

        wait_until(
            lambda: stored().context.get("log"), follow_up_app.DELAY_SECONDS + 30, "the remind", poll=0.02
        )
        delivered_by = time.time()
        assert delivered_by >= fire_at, "not delivered before it was due by the server's clock"
        time.sleep(SETTLE)

        after = stored()
        assert after.context["log"] == ["send_reminder@remind"], (
            "delivered once; the cancelled escalate never"
        )
        assert after.configuration == ["waiting"]
        assert after.delayed == {} and after.timers == {}
        fired = [step for step in store.read_trace(EXECUTION_ID) if step["event"] == TIMER_EVENT]
        assert len(fired) == 1, fired
        assert fired[0]["handled"] and fired[0]["at"] >= fired[0]["timer_fire_at"] == fire_at
        assert fired[0]["internal"] == [
            {"event": "remind", "id": armed.delayed["remind"].event.id, "disposition": "handled"}
        ]
        assert firer.running(), firer.log()
