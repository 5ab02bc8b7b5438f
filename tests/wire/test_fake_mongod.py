"""The fake server itself: what it says it is in each role, its test controls, its process form, and that
it refuses what it does not model instead of answering wrongly.

Marked `fake_server`: these tests prove the test replica set (and, where HAREL_TEST_MONGO_URL is set, that a
real deployment agrees with it), not harel; harel's own behaviour over the same sockets is in the unmarked
wire tests and the conformance suite.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from bson import Int64, Timestamp
from pymongo import MongoClient, monitoring
from pymongo.errors import NotPrimaryError, OperationFailure, WTimeoutError

from tests.fake_mongod import FakeMongod
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment, FakeProcess
from tests.fake_mongod.raw_client import RawConnection

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

NOT_IMPLEMENTED = 238


class HeartbeatCounter(monitoring.ServerHeartbeatListener):
    def __init__(self) -> None:
        self.awaited = 0
        self.total = 0

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        self.total += 1
        self.awaited += event.awaited

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        """Counted at start."""

    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        """Counted at start."""


def direct(url: str, **options: Any) -> MongoClient[Any]:
    # A "not primary" error sends the driver back to its monitor: a short heartbeat keeps that wait short.
    return MongoClient(
        url, directConnection=True, serverSelectionTimeoutMS=5000, heartbeatFrequencyMS=500, **options
    )


def test_primary_says_it_is_a_replica_set_primary(fake_rs: FakeDeployment) -> None:
    me = f"127.0.0.1:{fake_rs.port}"
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        hello = client.admin.command("hello")
        legacy = client.admin.command("isMaster")
        client.admin.command("ping")
        description = client.topology_description

    assert description.topology_type_name == "ReplicaSetWithPrimary"
    assert description.logical_session_timeout_minutes == 30
    assert hello["isWritablePrimary"] is True
    assert hello["secondary"] is False
    assert (hello["setName"], hello["hosts"], hello["primary"], hello["me"]) == ("rs0", [me], me, me)
    assert hello["maxWireVersion"] == 25
    assert hello["setVersion"] == 1
    assert "electionId" in hello
    assert set(hello["topologyVersion"]) == {"processId", "counter"}
    assert legacy["ismaster"] is True
    assert "isWritablePrimary" not in legacy


def test_standalone_has_no_replica_set(fake_standalone: FakeDeployment) -> None:
    with MongoClient(fake_standalone.url, serverSelectionTimeoutMS=5000) as client:
        hello = client.admin.command("hello")
        assert client.topology_description.topology_type_name == "Single"
        with pytest.raises(OperationFailure) as status:
            client.admin.command("replSetGetStatus")
        with pytest.raises(OperationFailure) as txn:
            client.harel.command({"insert": "c", "documents": [{"_id": 1}], "txnNumber": Int64(1)})

    assert hello["isWritablePrimary"] is True
    assert not {"setName", "hosts", "primary", "msg"} & set(hello)
    assert status.value.code == 76  # NoReplicationEnabled
    assert txn.value.code == 20  # IllegalOperation: transaction numbers need a replica set or mongos


def test_secondary_refuses_writes_and_serves_secondary_reads(fake_secondary: FakeDeployment) -> None:
    with direct(fake_secondary.url) as client:
        hello = client.admin.command("hello")
        assert (
            client.topology_description.server_descriptions()[
                ("127.0.0.1", fake_secondary.port)
            ].server_type_name
            == "RSSecondary"
        )
        with pytest.raises(NotPrimaryError):
            client.harel.items.insert_one({"_id": 1})
        assert client.harel.items.find_one() is None  # a direct connection reads with primaryPreferred
        with pytest.raises(NotPrimaryError) as primary_read:
            client.harel.command({"find": "items", "$readPreference": {"mode": "primary"}})
        status = client.admin.command("replSetGetStatus")

    assert (hello["isWritablePrimary"], hello["secondary"], hello["setName"]) == (False, True, "rs0")
    assert "primary" not in hello
    assert primary_read.value.details["code"] == 13435  # NotPrimaryNoSecondaryOk
    assert status["members"][0]["stateStr"] == "SECONDARY"


def test_mongos_says_isdbgrid(fake_mongos: FakeDeployment) -> None:
    with MongoClient(fake_mongos.url, serverSelectionTimeoutMS=5000) as client:
        hello = client.admin.command("hello")
        assert client.topology_description.topology_type_name == "Sharded"
        client.harel.items.insert_one({"_id": 1})
        assert client.harel.items.find_one() == {"_id": 1}
        with pytest.raises(OperationFailure) as status:
            client.admin.command("replSetGetStatus")

    assert hello["msg"] == "isdbgrid"
    assert "setName" not in hello
    assert status.value.code == 59


def test_server_information_commands(fake_rs: FakeDeployment) -> None:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        build = client.admin.command("buildInfo")
        status = client.admin.command("serverStatus")
        repl = client.admin.command("replSetGetStatus")
        client.admin.command("endSessions", [])

    assert build["version"].startswith("8.0.")
    assert build["versionArray"][:2] == [8, 0]
    assert status["process"] == "mongod"
    assert status["repl"]["setName"] == "rs0"
    assert status["connections"]["current"] >= 1
    assert repl["set"] == "rs0"
    assert [(m["name"], m["stateStr"]) for m in repl["members"]] == [(f"127.0.0.1:{fake_rs.port}", "PRIMARY")]


def test_default_rw_concern_is_configurable_and_can_be_denied(fake_rs: FakeDeployment) -> None:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        default = client.admin.command("getDefaultRWConcern")
        client.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 1}})
        after_set = client.admin.command("getDefaultRWConcern")
        fake_rs.server.set_default_rw_concern({"defaultWriteConcern": {"w": 2}})
        configured = client.admin.command("getDefaultRWConcern")
        fake_rs.server.deny("getDefaultRWConcern", "replSetGetStatus")
        with pytest.raises(OperationFailure) as denied:
            client.admin.command("getDefaultRWConcern")
        with pytest.raises(OperationFailure):
            client.admin.command("replSetGetStatus")

    assert default["defaultWriteConcern"]["w"] == "majority"
    assert default["defaultReadConcern"] == {"level": "local"}
    assert after_set["defaultWriteConcern"] == {"w": 1}
    assert configured["defaultWriteConcern"] == {"w": 2}
    assert denied.value.code == 13  # Unauthorized


def test_uninitialized_member_until_repl_set_initiate(fake_rs: FakeDeployment) -> None:
    fake_rs.server.set_initialized(False)
    me = f"127.0.0.1:{fake_rs.port}"
    with direct(f"mongodb://{me}/") as client:
        hello = client.admin.command("hello")
        with pytest.raises(OperationFailure) as status:
            client.admin.command("replSetGetStatus")
        with pytest.raises(NotPrimaryError):
            client.harel.items.insert_one({"_id": 1})
        # The `local` database is served in every state, as mongod does: no stored configuration yet.
        stored_before = client.local["system.replset"].find_one()

        client.admin.command("replSetInitiate", {"_id": "rs0", "members": [{"_id": 0, "host": me}]})
        initiated = client.admin.command("replSetGetStatus")

    assert hello["isWritablePrimary"] is False
    assert hello["isreplicaset"] is True
    assert "setName" not in hello
    assert status.value.code == 94  # NotYetInitialized
    assert stored_before is None
    assert initiated["members"][0]["stateStr"] == "PRIMARY"
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        client.harel.items.insert_one({"_id": 1})


def test_streaming_monitor_waits_in_awaitable_hello(fake_rs: FakeDeployment) -> None:
    heartbeats = HeartbeatCounter()
    with MongoClient(fake_rs.url, event_listeners=[heartbeats], **CLIENT_OPTIONS) as client:
        client.admin.command("ping")
        time.sleep(1.5)

    # With a 500 ms heartbeat a monitor that is answered at once would send hundreds of hellos here.
    assert heartbeats.awaited >= 1
    assert heartbeats.total <= 10


def test_reset_forgets_data_fail_points_and_controls(fake_rs: FakeDeployment) -> None:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        client.harel.items.insert_one({"_id": 1})
        client.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": "alwaysOn",
                "data": {"failCommands": ["find"], "errorCode": 2},
            }
        )
        fake_rs.server.deny("ping")
        fake_rs.reset()

        client.admin.command("ping")
        assert client.harel.items.find_one() is None
        assert client.list_database_names() == []


def test_unmodelled_features_fail_loudly(fake_rs: FakeDeployment) -> None:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        items = client.harel.items
        items.insert_one({"_id": 1, "a": [{"x": 1}]})
        refusals: list[Callable[[], object]] = [
            lambda: items.update_one({"_id": 1}, {"$set": {"a.$[e].x": 2}}, array_filters=[{"e.x": 1}]),
            client.harel.watch,
            lambda: items.watch(start_at_operation_time=Timestamp(1, 1)),
            lambda: items.find_one({}, collation={"locale": "fr"}),
        ]
        for refused in refusals:
            with pytest.raises(OperationFailure) as caught:
                refused()
            assert caught.value.code == NOT_IMPLEMENTED
        with client.start_session() as session, pytest.raises(OperationFailure) as transaction:
            session.with_transaction(lambda s: items.insert_one({"_id": 2}, session=s))
        with pytest.raises(OperationFailure) as unknown:
            client.admin.command("noSuchCommand")

    assert transaction.value.code == NOT_IMPLEMENTED
    assert unknown.value.code == 59  # CommandNotFound


def test_server_in_its_own_process(
    fake_rs_process: FakeProcess, fake_mongod_process: Callable[..., FakeProcess]
) -> None:
    with MongoClient(fake_rs_process.url, **CLIENT_OPTIONS) as client:
        client.harel.items.insert_one({"_id": 1})
        assert client.harel.items.find_one() == {"_id": 1}
        assert client.admin.command("hello")["setName"] == "rs0"

    standalone = fake_mongod_process("--standalone")
    with MongoClient(standalone.url, serverSelectionTimeoutMS=5000) as client:
        assert "setName" not in client.admin.command("hello")
    standalone.stop()
    assert standalone.process.returncode == 0  # SIGTERM is a clean shutdown


def test_configure_fail_point_rejects_what_it_cannot_honour(fake_rs: FakeDeployment) -> None:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        bad = [
            {"configureFailPoint": "failCommand", "mode": {"skip": 1}, "data": {"failCommands": ["find"]}},
            {"configureFailPoint": "failCommand", "mode": "alwaysOn", "data": {}},
            {"configureFailPoint": "rsSyncApplyStop", "mode": "alwaysOn"},
        ]
        for command in bad:
            with pytest.raises(OperationFailure):
                client.admin.command(command)
        with pytest.raises(OperationFailure) as outside_admin:
            client.harel.command({"configureFailPoint": "failCommand", "mode": "off"})
        armed = {"failCommands": ["find"], "errorCode": 2}
        client.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1}, "data": armed})
        with pytest.raises(OperationFailure):
            client.harel.items.find_one()
        reply = client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        assert client.harel.items.find_one() is None

    assert outside_admin.value.code == 13
    assert reply["count"] == 1  # times the fail point was entered


# --- controls for the delivery engine's tests: latency, clock offset, write concern, FCV ---------------


class CommandTimes(monitoring.CommandListener):
    """When each `find` was sent and answered (monotonic seconds), and how long it took."""

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.answered: list[float] = []
        self.durations: list[float] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find":
            self.sent.append(time.monotonic())

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "find":
            self.answered.append(time.monotonic())
            self.durations.append(event.duration_micros / 1e6)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Not expected: a failed find fails the test through the client."""


def test_latency_delays_every_command_and_concurrent_commands_overlap() -> None:
    latency = 0.5
    with FakeMongod(latency_ms=latency * 1000) as server:
        times = CommandTimes()
        clients = [MongoClient(server.url, event_listeners=[times], **CLIENT_OPTIONS) for _ in range(4)]
        try:
            for client in clients:
                client.admin.command("ping")  # connected and monitored before the measured commands
            barrier = threading.Barrier(len(clients))

            def read(client: MongoClient[Any]) -> None:
                barrier.wait()
                client.harel.items.find_one()

            threads = [threading.Thread(target=read, args=(client,)) for client in clients]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for client in clients:
                client.close()

    assert len(times.answered) == 4
    assert min(times.durations) >= latency
    # Every find was in flight at once: the latency is not served under the execution lock.
    assert max(times.sent) < min(times.answered)


def test_latency_in_a_server_process(fake_mongod_process: Callable[..., FakeProcess]) -> None:
    slow = fake_mongod_process("--latency-ms", "300")
    with MongoClient(slow.url, **CLIENT_OPTIONS) as client:
        client.admin.command("ping")
        started = time.monotonic()
        client.admin.command("ping")
        assert time.monotonic() - started >= 0.3


def test_a_negative_latency_is_refused() -> None:
    with pytest.raises(ValueError, match="latency_ms"):
        FakeMongod(latency_ms=-1)


def test_clock_offset_moves_now_and_local_time(fake_rs: FakeDeployment) -> None:
    now_seconds = {"$divide": [{"$subtract": ["$$NOW", {"$literal": datetime(1970, 1, 1)}]}, 1000]}
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        items = client.harel.items
        items.insert_one({"_id": 1})
        fake_rs.server.set_clock_offset(3600)
        ahead = client.admin.command("hello")["localTime"]
        stamped = items.find_one_and_update({"_id": 1}, [{"$set": {"at": now_seconds}}], return_document=True)
        fake_rs.server.set_clock_offset(-3600)
        behind = client.admin.command("hello")["localTime"]
        fake_rs.reset()
        reset = client.admin.command("hello")["localTime"]

    real = datetime.now(UTC).replace(tzinfo=None)
    assert abs((ahead - real).total_seconds() - 3600) < 60
    assert abs(stamped["at"] - time.time() - 3600) < 60
    assert abs((behind - real).total_seconds() + 3600) < 60
    assert abs((reset - real).total_seconds()) < 60


def test_clock_offset_in_a_server_process(fake_mongod_process: Callable[..., FakeProcess]) -> None:
    behind = fake_mongod_process("--clock-offset", "-30")
    with MongoClient(behind.url, **CLIENT_OPTIONS) as client:
        local_time = client.admin.command("hello")["localTime"]
    assert abs((local_time - datetime.now(UTC).replace(tzinfo=None)).total_seconds() + 30) < 10


def insert_command(**fields: Any) -> dict[str, Any]:
    return {"insert": "items", "documents": [{"_id": fields.pop("_id", 1)}], **fields}


def test_withheld_write_concern_times_out_with_the_servers_reply_shapes(fake_rs: FakeDeployment) -> None:
    fake_rs.server.withhold_write_concern()
    with RawConnection(fake_rs.server.host_port) as raw:
        by_wtimeout = raw.command("harel", insert_command(writeConcern={"w": "majority", "wtimeout": 200}))
        by_max_time = raw.command(
            "harel", insert_command(_id=2, writeConcern={"w": "majority"}, maxTimeMS=200)
        )
        by_default = raw.command("harel", insert_command(_id=3, maxTimeMS=200))
        w1 = raw.command("harel", insert_command(_id=4, writeConcern={"w": 1}))
        stored = raw.command("harel", {"find": "items"})

    assert by_wtimeout == {
        "n": 1,
        "ok": 1.0,
        "writeConcernError": {
            "code": 64,
            "codeName": "WriteConcernFailed",
            "errmsg": "waiting for replication timed out",
            "errInfo": {
                "wtimeout": True,
                "writeConcern": {"w": "majority", "wtimeout": 200, "provenance": "clientSupplied"},
            },
        },
    }
    assert by_max_time["writeConcernError"] == {
        "code": 50,
        "codeName": "MaxTimeMSExpired",
        "errmsg": "operation exceeded time limit",
        "errInfo": {"writeConcern": {"w": "majority", "wtimeout": 0, "provenance": "clientSupplied"}},
    }
    # No writeConcern sent: the cluster default (w: majority, implicit) applies.
    assert by_default["writeConcernError"]["errInfo"]["writeConcern"]["provenance"] == "implicitDefault"
    assert w1 == {"n": 1, "ok": 1.0}
    # Every write was applied; only its acknowledgement was withheld.
    assert [d["_id"] for d in stored["cursor"]["firstBatch"]] == [1, 2, 3, 4]


def test_pymongo_sees_a_withheld_write_concern_as_wtimeout_and_waits_without_a_bound(
    fake_rs: FakeDeployment,
) -> None:
    fake_rs.server.withhold_write_concern()
    with (
        MongoClient(fake_rs.url, **{**CLIENT_OPTIONS, "wTimeoutMS": 200}) as bounded,
        MongoClient(fake_rs.url, **CLIENT_OPTIONS) as unbounded,
    ):
        with pytest.raises(WTimeoutError) as timed_out:
            bounded.harel.items.insert_one({"_id": 1})
        assert bounded.harel.items.find_one({"_id": 1}) == {"_id": 1}  # reads are not held

        acknowledged = threading.Event()

        def write() -> None:
            unbounded.harel.items.insert_one({"_id": 2})
            acknowledged.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert not acknowledged.wait(1.0)  # no wtimeout, no maxTimeMS: it waits for the majority
        fake_rs.server.release_write_concern()
        assert acknowledged.wait(10)
        writer.join()

    assert timed_out.value.code == 64
    assert timed_out.value.details["errInfo"]["wtimeout"] is True


def test_withholding_in_a_server_process_follows_sigusr1_and_sigusr2(
    fake_mongod_process: Callable[..., FakeProcess],
) -> None:
    fake = fake_mongod_process()
    host_port = f"127.0.0.1:{fake.port}"
    bounded = {"writeConcern": {"w": "majority", "wtimeout": 200}}
    with RawConnection(host_port) as raw:
        assert "writeConcernError" not in raw.command("harel", insert_command(_id=1, **bounded))
        fake.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while "writeConcernError" not in raw.command(
            "harel", insert_command(_id=time.monotonic(), **bounded)
        ):
            assert time.monotonic() < deadline, "SIGUSR1 did not withhold acknowledgements"
        fake.process.send_signal(signal.SIGUSR2)
        while "writeConcernError" in raw.command("harel", insert_command(_id=time.monotonic(), **bounded)):
            assert time.monotonic() < deadline, "SIGUSR2 did not release acknowledgements"


def test_feature_compatibility_version_is_answered_and_settable(fake_rs: FakeDeployment) -> None:
    wanted = {"getParameter": 1, "featureCompatibilityVersion": 1}
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        default = client.admin.command(wanted)
        fake_rs.server.set_feature_compatibility_version("7.0")
        lowered = client.admin.command(wanted)
        everything = client.admin.command({"getParameter": "*"})
        with pytest.raises(OperationFailure) as outside_admin:
            client.harel.command(wanted)
        fake_rs.reset()
        after_reset = client.admin.command(wanted)

    assert default["featureCompatibilityVersion"] == {"version": "8.0"}
    assert lowered["featureCompatibilityVersion"] == {"version": "7.0"}
    assert everything["featureCompatibilityVersion"] == {"version": "7.0"}
    assert outside_admin.value.code == 13
    assert after_reset["featureCompatibilityVersion"] == {"version": "8.0"}
