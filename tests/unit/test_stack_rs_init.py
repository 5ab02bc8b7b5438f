"""The compose stack's replica-set init (compose/mongo-init/rs_init.py): its decisions on recorded
replSetGetStatus replies, whole runs (twice) against an in-process replica set at the command level, and the
initiate step over the wire against the fake replica-set server."""

from __future__ import annotations

import copy
import datetime as dt
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def _load_rs_init() -> ModuleType:
    path = REPOSITORY_ROOT / "compose" / "mongo-init" / "rs_init.py"
    spec = importlib.util.spec_from_file_location("rs_init", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rs_init"] = module
    spec.loader.exec_module(module)
    return module


rs_init = _load_rs_init()
Decision = rs_init.Decision
HOSTS_3 = ["mongo1:27017", "mongo2:27017", "mongo3:27017"]
HOSTS_1 = ["mongo1:27017"]
NOW = dt.datetime(2025, 1, 6, 9, 30, 0)

# --- recorded replies (shapes as mongod 8.0 sends them; timestamps and optimes trimmed) ---------------------

# A member started with --replSet rs0 whose set was never initiated.
NOT_YET_INITIALIZED: dict[str, Any] = {
    "ok": 0.0,
    "errmsg": "no replset config has been received",
    "code": 94,
    "codeName": "NotYetInitialized",
}


def _member(index: int, state: int, state_str: str, health: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {
        "_id": index,
        "name": f"mongo{index + 1}:27017",
        "health": health,
        "state": state,
        "stateStr": state_str,
        "uptime": 120,
        "configVersion": 1,
        "configTerm": 1,
        **extra,
    }


# mongo1 asked after initiation: primary, two secondaries.
INITIATED: dict[str, Any] = {
    "set": "rs0",
    "date": NOW,
    "myState": 1,
    "term": 1,
    "heartbeatIntervalMillis": 2000,
    "majorityVoteCount": 2,
    "writeMajorityCount": 2,
    "votingMembersCount": 3,
    "writableVotingMembersCount": 3,
    "members": [
        _member(0, 1, "PRIMARY", self=True, electionDate=NOW),
        _member(1, 2, "SECONDARY", syncSourceHost="mongo1:27017"),
        _member(2, 2, "SECONDARY", syncSourceHost="mongo1:27017"),
    ],
    "ok": 1.0,
}

# mongo1 a moment after a restart: it has loaded its config and is recovering; mongo2 is still down.
RESTARTED_RECOVERING: dict[str, Any] = {
    "set": "rs0",
    "date": NOW,
    "myState": 3,
    "term": 2,
    "members": [
        _member(0, 3, "RECOVERING", self=True),
        _member(
            1,
            8,
            "(not reachable/healthy)",
            health=0.0,
            lastHeartbeatMessage="Error connecting to mongo2:27017",
        ),
        _member(2, 2, "SECONDARY"),
    ],
    "ok": 1.0,
}

# local.system.replset of an initiated 3-member rs0 (what a restarted member holds before it has loaded it).
STORED_CONFIG_3: dict[str, Any] = {
    "_id": "rs0",
    "version": 1,
    "term": 2,
    "protocolVersion": 1,
    "writeConcernMajorityJournalDefault": True,
    "members": [
        {
            "_id": 0,
            "host": "mongo1:27017",
            "arbiterOnly": False,
            "hidden": False,
            "priority": 2.0,
            "votes": 1,
        },
        {
            "_id": 1,
            "host": "mongo2:27017",
            "arbiterOnly": False,
            "hidden": False,
            "priority": 1.0,
            "votes": 1,
        },
        {
            "_id": 2,
            "host": "mongo3:27017",
            "arbiterOnly": False,
            "hidden": False,
            "priority": 1.0,
            "votes": 1,
        },
    ],
    "settings": {"chainingAllowed": True, "heartbeatIntervalMillis": 2000, "electionTimeoutMillis": 10000},
}

AUTHENTICATION_FAILED: dict[str, Any] = {
    "ok": 0.0,
    "errmsg": "Authentication failed.",
    "code": 18,
    "codeName": "AuthenticationFailed",
}
NO_REPLICATION: dict[str, Any] = {
    "ok": 0.0,
    "errmsg": "not running with --replSet",
    "code": 76,
    "codeName": "NoReplicationEnabled",
}


# --- decisions on recorded replies ---------------------------------------------------------------------------


def test_a_member_that_never_held_a_config_is_initiated() -> None:
    assert rs_init.decide(NOT_YET_INITIALIZED, None, HOSTS_3) is Decision.INITIATE
    assert rs_init.decide(NOT_YET_INITIALIZED, None, HOSTS_1) is Decision.INITIATE


def test_an_initiated_set_is_left_alone() -> None:
    assert rs_init.decide(INITIATED, STORED_CONFIG_3, HOSTS_3) is Decision.INITIATED
    # The members can also come from the status reply alone.
    assert rs_init.decide(INITIATED, None, HOSTS_3) is Decision.INITIATED


def test_a_restarted_member_still_loading_its_config_is_never_initiated() -> None:
    # The trap: for a moment after a restart the member answers exactly like a new one.
    assert rs_init.decide(NOT_YET_INITIALIZED, STORED_CONFIG_3, HOSTS_3) is Decision.RESTARTED


def test_a_restarted_member_that_is_recovering_is_never_initiated() -> None:
    assert rs_init.decide(RESTARTED_RECOVERING, STORED_CONFIG_3, HOSTS_3) is Decision.RESTARTED


def test_wrong_root_credentials_stop_the_init_with_the_remedy() -> None:
    with pytest.raises(rs_init.InitError, match=r"HAREL_MONGO_ROOT_PASSWORD.*make down VOLUMES=1"):
        rs_init.decide(AUTHENTICATION_FAILED, None, HOSTS_3)


def test_a_member_without_replset_stops_the_init() -> None:
    with pytest.raises(rs_init.InitError, match="--replSet"):
        rs_init.decide(NO_REPLICATION, None, HOSTS_3)


def test_a_set_initiated_with_other_members_is_not_reconfigured() -> None:
    with pytest.raises(rs_init.InitError, match="HAREL_MEMBERS asks for mongo1:27017"):
        rs_init.decide(INITIATED, STORED_CONFIG_3, HOSTS_1)


def test_a_volume_from_another_set_is_refused() -> None:
    other = {**STORED_CONFIG_3, "_id": "other"}
    with pytest.raises(rs_init.InitError, match="'other', not 'rs0'"):
        rs_init.decide(NOT_YET_INITIALIZED, other, HOSTS_3)


def test_initiate_config_lists_the_members_with_mongo1_preferred() -> None:
    config = rs_init.initiate_config(rs_init.member_hosts(3))
    assert config["_id"] == "rs0"
    assert [m["host"] for m in config["members"]] == HOSTS_3
    assert [m["_id"] for m in config["members"]] == [0, 1, 2]
    assert [m["priority"] for m in config["members"]] == [2, 1, 1]
    assert rs_init.initiate_config(rs_init.member_hosts(1))["members"] == [
        {"_id": 0, "host": "mongo1:27017", "priority": 2}
    ]


def test_primary_and_member_description_from_status() -> None:
    assert rs_init.primary_of(INITIATED) == "mongo1:27017"
    assert rs_init.primary_of(RESTARTED_RECOVERING) is None
    assert rs_init.describe_members(RESTARTED_RECOVERING) == (
        "mongo1:27017 RECOVERING, mongo2:27017 (not reachable/healthy), mongo3:27017 SECONDARY"
    )
    assert rs_init.describe_members(NOT_YET_INITIALIZED).startswith("NotYetInitialized")


def test_app_user_is_created_then_updated_with_readwrite_on_harel_only() -> None:
    create = rs_init.app_user_command({"users": [], "ok": 1.0}, "pw-one")
    assert next(iter(create)) == "createUser"
    assert create["createUser"] == "harel"
    assert create["pwd"] == "pw-one"
    assert create["roles"] == [{"role": "readWrite", "db": "harel"}]
    existing = {"users": [{"_id": "admin.harel", "user": "harel", "db": "admin", "roles": []}], "ok": 1.0}
    update = rs_init.app_user_command(existing, "pw-two")
    assert next(iter(update)) == "updateUser"
    assert update["pwd"] == "pw-two"
    # Roles are reset too: whatever was granted by hand is replaced by exactly readWrite on harel.
    assert update["roles"] == [{"role": "readWrite", "db": "harel"}]


# --- whole runs against an in-process replica set (command level) --------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeReplicaSet:
    """Answers the commands rs_init sends, as mongod does, including its errors (as pymongo raises them).

    `loading_polls`: replSetGetStatus answers NotYetInitialized that many times although a config is stored
    (a restarted member). `unreachable_members`: that many replSetInitiate calls fail the quorum check.
    `no_primary_polls`: that many status replies without a primary after initiation (an election)."""

    def __init__(
        self,
        stored_config: Mapping[str, Any] | None = None,
        loading_polls: int = 0,
        unreachable_members: int = 0,
        no_primary_polls: int = 0,
    ) -> None:
        self.config = copy.deepcopy(dict(stored_config)) if stored_config else None
        self.loading_polls = loading_polls
        self.unreachable_members = unreachable_members
        self.no_primary_polls = no_primary_polls
        self.users: dict[str, dict[str, Any]] = {}
        self.initiations = 0
        self.user_commands: list[str] = []

    def database(self, name: str) -> FakeDatabase:
        return FakeDatabase(self, name)

    @staticmethod
    def fail(reply: Mapping[str, Any]) -> OperationFailure:
        return OperationFailure(reply["errmsg"], reply["code"], dict(reply))

    def status(self) -> dict[str, Any]:
        if self.config is None:
            raise self.fail(NOT_YET_INITIALIZED)
        if self.loading_polls:
            self.loading_polls -= 1
            raise self.fail(NOT_YET_INITIALIZED)
        electing = self.no_primary_polls > 0
        self.no_primary_polls = max(0, self.no_primary_polls - 1)
        members = [
            _member(
                m["_id"], 2 if electing or m["_id"] else 1, "SECONDARY" if electing or m["_id"] else "PRIMARY"
            )
            for m in self.config["members"]
        ]
        return {"set": self.config["_id"], "myState": members[0]["state"], "members": members, "ok": 1.0}

    def initiate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if self.config is not None:
            raise self.fail({"errmsg": "already initialized", "code": 23, "codeName": "AlreadyInitialized"})
        if self.unreachable_members:
            self.unreachable_members -= 1
            raise self.fail(
                {
                    "errmsg": "replSetInitiate quorum check failed because not all proposed set members "
                    "responded affirmatively: mongo3:27017 failed with Error connecting to mongo3:27017",
                    "code": 74,
                    "codeName": "NodeNotFound",
                }
            )
        self.initiations += 1
        self.config = {**copy.deepcopy(dict(config)), "version": 1, "term": 1}
        return {"ok": 1.0}

    def user_command(self, command: Mapping[str, Any]) -> dict[str, Any]:
        verb = next(iter(command))
        self.user_commands.append(verb)
        name = command[verb]
        if verb == "usersInfo":
            user = command["usersInfo"]["user"]
            return {"users": [self.users[user]] if user in self.users else [], "ok": 1.0}
        if verb == "createUser" and name in self.users:
            raise self.fail(
                {"errmsg": f'User "{name}@admin" already exists', "code": 51003, "codeName": "Location51003"}
            )
        if verb == "updateUser" and name not in self.users:
            raise self.fail(
                {"errmsg": f"User {name}@admin not found", "code": 11, "codeName": "UserNotFound"}
            )
        self.users[name] = {"user": name, "db": "admin", "roles": command["roles"], "pwd": command["pwd"]}
        return {"ok": 1.0}


class FakeDatabase:
    def __init__(self, replica_set: FakeReplicaSet, name: str) -> None:
        self.replica_set = replica_set
        self.name = name

    def command(self, command: Mapping[str, Any]) -> Mapping[str, Any]:
        verb = next(iter(command))
        if verb == "replSetGetStatus":
            return self.replica_set.status()
        if verb == "replSetInitiate":
            return self.replica_set.initiate(command["replSetInitiate"])
        if verb == "find" and self.name == "local" and command["find"] == "system.replset":
            config = self.replica_set.config
            return {
                "cursor": {"firstBatch": [config] if config else [], "id": 0, "ns": "local.system.replset"},
                "ok": 1.0,
            }
        if verb in ("usersInfo", "createUser", "updateUser"):
            return self.replica_set.user_command(command)
        raise AssertionError(f"rs_init sent an unexpected command: {verb}")


def _run(replica_set: FakeReplicaSet, hosts: list[str], password: str, clock: FakeClock, timeout: float = 60):
    lines: list[str] = []
    decision = rs_init.run_init(
        replica_set.database("admin"),
        replica_set.database("local"),
        replica_set.database("admin"),
        hosts,
        password,
        rs_init.Deadline(timeout, clock=clock, sleep=clock.sleep),
        lines.append,
    )
    return decision, lines


def test_two_runs_on_a_new_set_initiate_once_and_keep_the_user_current() -> None:
    replica_set = FakeReplicaSet(unreachable_members=2, no_primary_polls=2)
    clock = FakeClock()

    first, lines = _run(replica_set, HOSTS_3, "first-password", clock)
    assert first is Decision.INITIATE
    assert replica_set.initiations == 1
    assert [m["host"] for m in replica_set.config["members"]] == HOSTS_3
    assert replica_set.users["harel"]["roles"] == [{"role": "readWrite", "db": "harel"}]
    assert replica_set.users["harel"]["pwd"] == "first-password"
    assert lines[0].startswith("mongo-init: rs0 not yet initiated: initiating")
    assert lines[1] == "mongo-init: primary is mongo1:27017"
    assert "created" in lines[2]
    assert not any("first-password" in line for line in lines)

    second, lines = _run(replica_set, HOSTS_3, "rotated-password", clock)
    assert second is Decision.INITIATED
    assert replica_set.initiations == 1
    assert replica_set.user_commands == ["usersInfo", "createUser", "usersInfo", "updateUser"]
    assert replica_set.users["harel"]["pwd"] == "rotated-password"
    assert "updated" in lines[2]


def test_a_restarted_member_is_waited_for_and_never_initiated() -> None:
    replica_set = FakeReplicaSet(stored_config=STORED_CONFIG_3, loading_polls=3)
    replica_set.users["harel"] = {"user": "harel", "db": "admin", "roles": [], "pwd": "old"}
    decision, _ = _run(replica_set, HOSTS_3, "pw", FakeClock())
    assert decision is Decision.RESTARTED
    assert replica_set.initiations == 0
    assert replica_set.user_commands == ["usersInfo", "updateUser"]


def test_a_set_without_a_primary_times_out_naming_the_step_and_the_members() -> None:
    replica_set = FakeReplicaSet(stored_config=STORED_CONFIG_3, no_primary_polls=10_000)
    clock = FakeClock()
    with pytest.raises(rs_init.InitError) as failure:
        _run(replica_set, HOSTS_3, "pw", clock, timeout=30)
    message = str(failure.value)
    assert message.startswith("elect a primary: not done after 30s")
    assert "mongo1:27017 SECONDARY, mongo2:27017 SECONDARY, mongo3:27017 SECONDARY" in message
    assert 30 <= clock.now <= 30 + 2.0
    assert replica_set.user_commands == []


def test_members_that_never_answer_time_out_with_the_quorum_error() -> None:
    replica_set = FakeReplicaSet(unreachable_members=10_000)
    with pytest.raises(
        rs_init.InitError, match="initiate rs0: not done after 20s; last: replSetInitiate: NodeNotFound"
    ):
        _run(replica_set, HOSTS_3, "pw", FakeClock(), timeout=20)
    assert replica_set.initiations == 0


def test_main_refuses_without_the_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HAREL_MONGO_ROOT_PASSWORD", raising=False)
    monkeypatch.setenv("HAREL_APP_PASSWORD", "x")
    assert rs_init.main(["--members", "1"]) == 1
    assert "HAREL_MONGO_ROOT_PASSWORD is not set" in capsys.readouterr().err


def test_main_gives_up_on_an_unreachable_mongo1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real entry point with real clients, pointed at a loopback port where nothing listens.
    monkeypatch.setattr(rs_init, "member_hosts", lambda count: ["127.0.0.1:9"] * count)
    monkeypatch.setenv("HAREL_MONGO_ROOT_PASSWORD", "root-pw")
    monkeypatch.setenv("HAREL_APP_PASSWORD", "app-pw")
    monkeypatch.setattr(rs_init.Deadline, "pause_seconds", 0.0)
    assert rs_init.main(["--members", "1", "--timeout", "0"]) == 1
    err = capsys.readouterr().err
    assert (
        "mongo-init: initiate rs0: not done after 0s; last: not reachable yet (ServerSelectionTimeoutError"
        in err
    )
    assert "root-pw" not in err


# --- over the wire, against the fake replica-set server --------------------------------------------------------


def test_init_decisions_twice_over_the_wire(fake_rs: Any) -> None:
    """Real pymongo against the fake server (tests/fake_mongod), started as a member awaiting replSetInitiate."""
    fake_rs.server.set_initialized(False)
    me = fake_rs.server.host_port
    with MongoClient(
        "127.0.0.1", fake_rs.port, directConnection=True, serverSelectionTimeoutMS=5000
    ) as client:
        # First run: the error reply comes back as data, and says initiate.
        status = rs_init.send(client.admin, {"replSetGetStatus": 1})
        assert status["code"] == 94
        assert rs_init.decide(status, None, [me]) is Decision.INITIATE
        assert rs_init.send(client.admin, {"replSetInitiate": rs_init.initiate_config([me])})["ok"] == 1
        # Second run, the whole step (stored config read from `local` included): nothing to initiate.
        assert rs_init.initiate_step(client.admin, client.local, [me]) is Decision.INITIATED
        assert rs_init.primary_step(client.admin) == me
        # What a second replSetInitiate would meet: the server's own refusal.
        assert rs_init.send(client.admin, {"replSetInitiate": rs_init.initiate_config([me])})["code"] == 23
