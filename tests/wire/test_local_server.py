"""harel-dev's local server (`harel_dev.server`) with real drivers over sockets: MongoClient,
AsyncMongoClient and Motor; `$$NOW` from the server's clock; retryable writes answered once; the data file
across restarts; and its command line."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from bson import Binary
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient, ReturnDocument
from pymongo.errors import OperationFailure

from harel.connection import check
from harel_dev.now import server_now
from harel_dev.persistence import COALESCE_SECONDS
from harel_dev.server import LocalServer
from tests.fake_mongod.fixtures import CLIENT_OPTIONS
from tests.fake_mongod.raw_client import RawConnection
from tests.wire.processes import WorkerProcesses, run_harel

pytestmark = pytest.mark.wire

SERVER_TIME = 1_900_000_000.0  # 2030-03-17: far from the test machine's clock, so a client clock shows
EPOCH = datetime(1970, 1, 1)
NOW_SECONDS = {"$divide": [{"$subtract": ["$$NOW", {"$literal": EPOCH}]}, 1000]}
# One event into a mailbox (pushed with the server's time of arrival), then a claim of what is due by the
# server's clock: the shapes of the delivery engine's send and claim.
PUSH = [
    {
        "$set": {
            "inbox": {"$concatArrays": [{"$ifNull": ["$inbox", []]}, [{"id": "e1", "at": NOW_SECONDS}]]},
            "inbox_at": {"$ifNull": ["$inbox_at", NOW_SECONDS]},
        }
    }
]
# As on MongoDB, a missing inbox_at sorts below every number: the filter must exclude it explicitly.
DUE = {"inbox_at": {"$ne": None}, "$expr": {"$lte": ["$inbox_at", NOW_SECONDS]}}
CLAIM = [{"$set": {"lease": {"owner": "w1", "until": {"$add": [NOW_SECONDS, 30]}, "at": NOW_SECONDS}}}]


class ServerClock:
    """A clock the test sets; the server reads it for `$$NOW` and `hello.localTime`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> float:
        return self.seconds


@pytest.fixture
def clock() -> ServerClock:
    return ServerClock(SERVER_TIME)


@pytest.fixture
def local_server(clock: ServerClock) -> Iterator[LocalServer]:
    with LocalServer(port=0, clock=clock) as server:
        yield server


def test_it_answers_as_a_one_member_replica_set_primary_and_passes_the_start_up_checks(
    local_server: LocalServer,
) -> None:
    me = f"127.0.0.1:{local_server.port}"
    assert local_server.url == f"mongodb://{me}/?replicaSet=rs0"
    with MongoClient(local_server.url, **CLIENT_OPTIONS) as client:
        hello = client.admin.command("hello")
        report = check(client)
        fcv = client.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
        assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"

    assert (hello["setName"], hello["hosts"], hello["primary"], hello["me"]) == ("rs0", [me], me, me)
    assert hello["isWritablePrimary"] is True
    assert hello["logicalSessionTimeoutMinutes"] == 30
    assert (hello["minWireVersion"], hello["maxWireVersion"]) == (0, 25)
    assert {"electionId", "setVersion", "topologyVersion"} <= set(hello)
    assert hello["localTime"] == server_now(SERVER_TIME)
    assert report.passed, report
    assert fcv["featureCompatibilityVersion"] == {"version": "8.0"}


def test_mongo_client_crud_and_pipeline_updates_on_the_server_clock(
    local_server: LocalServer, clock: ServerClock
) -> None:
    with MongoClient(local_server.url, **CLIENT_OPTIONS) as client:
        executions = client.harel.executions
        executions.create_index("inbox_at", sparse=True)
        executions.insert_many([{"_id": "x", "version": 0}, {"_id": "y", "version": 0}])
        executions.update_one({"_id": "x"}, PUSH)
        clock.seconds += 5
        claimed = executions.find_one_and_update(DUE, CLAIM, return_document=ReturnDocument.AFTER)
        assert executions.find_one_and_update(DUE | {"lease": None}, CLAIM) is None  # y has nothing due
        stamped = list(executions.aggregate([{"$match": {"_id": "y"}}, {"$project": {"now": NOW_SECONDS}}]))
        executions.update_many({}, {"$inc": {"version": 1}})
        executions.delete_one({"_id": "y"})
        remaining = list(executions.find({}, {"version": 1}))

    assert claimed is not None
    assert claimed["inbox"] == [{"id": "e1", "at": SERVER_TIME}]
    assert claimed["lease"] == {"owner": "w1", "until": SERVER_TIME + 35, "at": SERVER_TIME + 5}
    assert stamped == [{"_id": "y", "now": SERVER_TIME + 5}]
    assert remaining == [{"_id": "x", "version": 1}]


@pytest.mark.parametrize("driver", ["AsyncMongoClient", "Motor"])
def test_async_drivers_crud_and_pipeline_updates_on_the_server_clock(
    local_server: LocalServer, clock: ServerClock, driver: str
) -> None:
    async def scenario() -> None:
        client: Any = (
            AsyncMongoClient(local_server.url, **CLIENT_OPTIONS)
            if driver == "AsyncMongoClient"
            else AsyncIOMotorClient(local_server.url, **CLIENT_OPTIONS)
        )
        try:
            executions = client.harel.executions
            await executions.insert_one({"_id": "x"})
            await executions.update_one({"_id": "x"}, PUSH)
            clock.seconds += 1
            claimed = await executions.find_one_and_update(DUE, CLAIM, return_document=ReturnDocument.AFTER)
            assert claimed["lease"]["at"] == SERVER_TIME + 1
            assert claimed["inbox"] == [{"id": "e1", "at": SERVER_TIME}]
            assert await executions.count_documents({"lease.owner": "w1"}) == 1
            assert [d["_id"] for d in await executions.find({}).to_list(None)] == ["x"]
            await executions.delete_many({})
            assert await executions.count_documents({}) == 0
        finally:
            if driver == "AsyncMongoClient":
                await client.close()
            else:
                client.close()

    asyncio.run(scenario())


def test_a_retried_write_is_answered_from_its_record_and_applied_once(local_server: LocalServer) -> None:
    session = {"id": Binary(os.urandom(16), 4)}
    increment = {
        "update": "counters",
        "updates": [{"q": {"_id": "seq"}, "u": {"$inc": {"n": 1}}, "upsert": True}],
        "lsid": session,
        "txnNumber": 1,
    }
    with RawConnection(local_server.host_port) as first, RawConnection(local_server.host_port) as retry:
        applied = first.command("harel", increment)
        answered = retry.command("harel", increment)  # a driver's retry after the reply was lost
        newer = first.command("harel", increment | {"txnNumber": 2})
        too_old = first.command("harel", increment | {"txnNumber": 1})
        stored = first.command("harel", {"find": "counters"})

    assert applied == answered
    assert applied["ok"] == 1.0 and applied["n"] == 1
    assert newer["ok"] == 1.0
    assert (too_old["ok"], too_old["code"], too_old["codeName"]) == (0.0, 225, "TransactionTooOld")
    assert stored["cursor"]["firstBatch"] == [{"_id": "seq", "n": 2}]  # two writes, not three


def test_what_it_does_not_model_is_refused(local_server: LocalServer) -> None:
    with MongoClient(local_server.url, **CLIENT_OPTIONS) as client:
        with client.start_session() as session, pytest.raises(OperationFailure) as transaction:
            session.with_transaction(lambda s: client.harel.items.insert_one({"_id": 1}, session=s))
        with pytest.raises(OperationFailure) as fail_point:
            client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        with pytest.raises(OperationFailure) as unknown_parameter:
            client.admin.command({"getParameter": 1, "noSuchParameter": 1})

    assert transaction.value.code == 238  # NotImplemented: "harel_dev does not model ..."
    assert "harel_dev does not model multi-document transactions" in str(transaction.value)
    assert fail_point.value.code == 59  # a test double's command, not the server's
    assert unknown_parameter.value.code == 72


class FailingServer(LocalServer):
    """A server whose data commands hit an unexpected error."""

    def _run(self, name: str, db: str, command: dict[str, Any]) -> dict[str, Any]:
        if name == "insert":
            raise RuntimeError("boom")
        return super()._run(name, db, command)


def test_an_unexpected_error_is_answered_and_the_server_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with FailingServer(port=0) as server, MongoClient(server.url, **CLIENT_OPTIONS) as client:
        with pytest.raises(OperationFailure) as failed:
            client.harel.items.insert_one({"_id": 1})
        assert client.harel.items.find_one() is None

    assert failed.value.code == 1  # InternalError
    assert "internal error in the local server: RuntimeError('boom')" in str(failed.value)
    assert any(record.exc_info for record in caplog.records if record.name == "harel_dev.server")


# --- the process: python -m harel_dev.server -------------------------------------------------------


def start(*arguments: str) -> tuple[subprocess.Popen[str], str]:
    """Start the server on a free port; its URL (the first line on stdout)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harel_dev.server", "--port", "0", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("mongodb://"):
        process.kill()
        _, stderr = process.communicate(timeout=10)
        pytest.fail(f"the server did not start: {url!r} {stderr}")
    return process, url


def stop(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> str:
    """Stop the server with `signum`; its stderr."""
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=20)
    return stderr


def test_without_a_data_file_nothing_survives_and_it_says_so() -> None:
    process, url = start()
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        client.harel.items.insert_one({"_id": 1})
    stderr = stop(process)
    assert process.returncode == 0
    assert "nothing survives a stop" in stderr
    assert "never use it in production" in stderr

    process, url = start()
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        assert client.harel.items.find_one() is None
    stop(process)


def test_a_data_file_keeps_data_indexes_and_retry_records_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "dev.db"
    session = {"id": Binary(os.urandom(16), 4)}
    push = {"insert": "events", "documents": [{"_id": "e1"}], "lsid": session, "txnNumber": 7}

    process, url = start("--data", str(data))
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        client.harel.executions.create_index("inbox_at", name="due", unique=True, sparse=True)
        client.harel.executions.insert_many([{"_id": f"x{n}", "inbox_at": n} for n in range(3)])
    with RawConnection(url.removeprefix("mongodb://").split("/")[0]) as raw:
        first = raw.command("harel", push)
    stderr = stop(process)
    assert process.returncode == 0
    assert f"data kept in {data}" in stderr

    process, url = start("--data", str(data))
    host_port = url.removeprefix("mongodb://").split("/")[0]
    with MongoClient(url, **CLIENT_OPTIONS) as client, RawConnection(host_port) as raw:
        executions = client.harel.executions
        assert [d["_id"] for d in executions.find().sort("_id", 1)] == ["x0", "x1", "x2"]
        assert executions.index_information()["due"]["unique"] is True
        assert raw.command("harel", push) == first  # the retry reaching the restarted server: not reapplied
        assert client.harel.events.count_documents({}) == 1
        executions.insert_one({"_id": "x3", "inbox_at": 3})
        time.sleep(COALESCE_SECONDS + 1.5)  # past the pause: the snapshot is on disk
    stderr = stop(process, signal.SIGKILL)  # a crash, after the snapshot

    process, url = start("--data", str(data))
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        assert client.harel.executions.count_documents({}) == 4
    stderr = stop(process)
    assert "5 documents in 2 collections loaded" in stderr


def test_command_line_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"not a snapshot")
    process, url = start()
    port = url.removeprefix("mongodb://127.0.0.1:").split("/")[0]
    try:
        in_use = subprocess.run(
            [sys.executable, "-m", "harel_dev.server", "--port", port],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        bad_data = subprocess.run(
            [sys.executable, "-m", "harel_dev.server", "--port", "0", "--data", str(corrupt)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        stop(process)

    assert in_use.returncode == 2
    assert in_use.stderr.strip().splitlines() == [
        f"harel_dev.server: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert bad_data.returncode == 2
    assert len(bad_data.stderr.strip().splitlines()) == 1
    assert f"data file {corrupt}: not a harel.local snapshot" in bad_data.stderr
    assert "Traceback" not in in_use.stderr + bad_data.stderr
    assert corrupt.read_bytes() == b"not a snapshot"


def test_a_worker_and_the_smoke_cli_in_other_processes_share_its_store(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """What a development session looks like: the server in one process, a worker in another, and a
    `harel` command in a third, all on the server's URL."""
    process, url = start("--data", str(tmp_path / "dev.db"))
    try:
        worker = worker_processes.harel_worker(url, "--drain-seconds", "2")
        with MongoClient(url, **CLIENT_OPTIONS) as client:
            worker.wait_registered(client)
        smoke = run_harel("smoke", "--url", url, "--timeout", "60")
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        assert "PASS" in smoke.stdout
        assert worker.terminate() == 0
    finally:
        stop(process)
