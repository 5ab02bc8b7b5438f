"""The replica-set init and reconcile of compose and Helm (compose/mongo-init/rs_init.py): its decisions on recorded
replSetGetStatus replies, whole runs (twice, and across member changes) against an in-process replica set at the
command level, and the initiate step over the wire against the fake replica-set server."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from tests.unit.mongo_init import load

rs_init = load("rs_init")
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
    assert rs_init.decide(NOT_YET_INITIALIZED, None, "rs0") is Decision.INITIATE


def test_an_initiated_set_is_left_alone() -> None:
    assert rs_init.decide(INITIATED, STORED_CONFIG_3, "rs0") is Decision.INITIATED
    assert rs_init.decide(INITIATED, None, "rs0") is Decision.INITIATED


def test_a_restarted_member_still_loading_its_config_is_never_initiated() -> None:
    # The trap: for a moment after a restart the member answers exactly like a new one.
    assert rs_init.decide(NOT_YET_INITIALIZED, STORED_CONFIG_3, "rs0") is Decision.RESTARTED


def test_a_restarted_member_that_is_recovering_is_never_initiated() -> None:
    assert rs_init.decide(RESTARTED_RECOVERING, STORED_CONFIG_3, "rs0") is Decision.RESTARTED


def test_wrong_root_credentials_stop_the_init_with_the_remedy() -> None:
    with pytest.raises(
        rs_init.InitError, match=r"HAREL_MONGO_PREVIOUS_ROOT_PASSWORD.*previous-root-password"
    ):
        rs_init.decide(AUTHENTICATION_FAILED, None, "rs0")


def test_a_member_without_replset_stops_the_init() -> None:
    with pytest.raises(rs_init.InitError, match="--replSet rs0"):
        rs_init.decide(NO_REPLICATION, None, "rs0")


def test_a_volume_from_another_set_is_refused() -> None:
    other = {**STORED_CONFIG_3, "_id": "other"}
    with pytest.raises(rs_init.InitError, match="'other', not 'rs0'"):
        rs_init.decide(NOT_YET_INITIALIZED, other, "rs0")


def test_the_set_is_initiated_with_its_first_member_alone() -> None:
    assert rs_init.initiate_config(rs_init.compose_settings(3)) == {
        "_id": "rs0",
        "members": [{"_id": 0, "host": "mongo1:27017", "priority": 2.0}],
    }
    assert [m.priority for m in rs_init.compose_settings(3).members] == [2.0, 1.0, 1.0]


def test_helm_settings_come_from_the_init_config(tmp_path: Path) -> None:
    path = tmp_path / "init-config.json"
    path.write_text(
        '{"replicaSetName": "rs0", "dataMembers": ["a:27017", "b:27017"], "arbiter": "c:27017",'
        ' "database": "orders", "rootUsername": "admin", "appUsername": "app", "tlsCAFile": "/ca.crt"}'
    )
    settings = rs_init.file_settings(path)
    assert [(m.host, m.arbiter) for m in settings.members] == [
        ("a:27017", False),
        ("b:27017", False),
        ("c:27017", True),
    ]
    assert settings.data_hosts == ["a:27017", "b:27017"]
    assert settings.app_url("p/w@") == (
        "mongodb://app:p%2Fw%40@a:27017,b:27017/orders?replicaSet=rs0&authSource=admin&tls=true&tlsCAFile=/ca.crt"
    )


def test_primary_and_member_description_from_status() -> None:
    assert rs_init.primary_of(INITIATED) == "mongo1:27017"
    assert rs_init.primary_of(RESTARTED_RECOVERING) is None
    assert rs_init.describe_members(RESTARTED_RECOVERING) == (
        "mongo1:27017 RECOVERING, mongo2:27017 (not reachable/healthy), mongo3:27017 SECONDARY"
    )
    assert rs_init.describe_members(NOT_YET_INITIALIZED).startswith("NotYetInitialized")


def test_app_user_is_created_then_updated_with_readwrite_on_harel_only() -> None:
    settings = rs_init.compose_settings(1)
    create = rs_init.app_user_command({"users": [], "ok": 1.0}, settings, "pw-one")
    assert next(iter(create)) == "createUser"
    assert create["createUser"] == "harel"
    assert create["pwd"] == "pw-one"
    assert create["roles"] == [{"role": "readWrite", "db": "harel"}]
    existing = {"users": [{"_id": "admin.harel", "user": "harel", "db": "admin", "roles": []}], "ok": 1.0}
    update = rs_init.app_user_command(existing, settings, "pw-two")
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
    """Answers the commands rs_init sends, as mongod does, including its errors (as pymongo raises them), for a
    set whose first member is asked directly and whose primary is the first member.

    `loading_polls`: replSetGetStatus answers NotYetInitialized that many times although a config is stored
    (a restarted member). `no_primary_polls`: that many status replies without a primary (an election).
    `answering`: the hosts that answer `hello`; a member added to the config syncs for `sync_polls` status
    replies (STARTUP2), then is SECONDARY. `down`: configured members that do not answer."""

    def __init__(
        self,
        stored_config: Mapping[str, Any] | None = None,
        loading_polls: int = 0,
        no_primary_polls: int = 0,
        answering: set[str] | None = None,
        sync_polls: int = 2,
    ) -> None:
        self.config = copy.deepcopy(dict(stored_config)) if stored_config else None
        self.loading_polls = loading_polls
        self.no_primary_polls = no_primary_polls
        self.answering = set(HOSTS_3) if answering is None else answering
        self.down: set[str] = set()
        self.sync_polls = sync_polls
        self.syncing: dict[str, int] = {}
        self.other_set: dict[str, str] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.initiations = 0
        self.reconfigs: list[dict[str, Any]] = []
        self.user_commands: list[str] = []
        self.default_write_concern: dict[str, Any] | None = None

    @staticmethod
    def fail(reply: Mapping[str, Any]) -> OperationFailure:
        return OperationFailure(reply["errmsg"], reply["code"], dict(reply))

    def status(self, directly: bool) -> dict[str, Any]:
        if self.config is None:
            raise self.fail(NOT_YET_INITIALIZED)
        if directly and self.loading_polls:
            self.loading_polls -= 1
            raise self.fail(NOT_YET_INITIALIZED)
        electing = self.no_primary_polls > 0
        self.no_primary_polls = max(0, self.no_primary_polls - 1)
        members = []
        for member in self.config["members"]:
            host = member["host"]
            if host in self.down:
                members.append(
                    _member(member["_id"], 8, "(not reachable/healthy)", health=0.0) | {"name": host}
                )
            elif self.syncing.get(host, 0) > 0:
                self.syncing[host] -= 1
                members.append(_member(member["_id"], 5, "STARTUP2") | {"name": host})
            elif member["_id"] == 0 and not electing:
                members.append(_member(0, 1, "PRIMARY") | {"name": host})
            else:
                members.append(_member(member["_id"], 2, "SECONDARY") | {"name": host})
        return {"set": self.config["_id"], "myState": members[0]["state"], "members": members, "ok": 1.0}

    def initiate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if self.config is not None:
            raise self.fail({"errmsg": "already initialized", "code": 23, "codeName": "AlreadyInitialized"})
        self.initiations += 1
        self.config = {**copy.deepcopy(dict(config)), "version": 1, "term": 1}
        return {"ok": 1.0}

    def reconfig(self, config: Mapping[str, Any]) -> dict[str, Any]:
        assert self.config is not None
        assert config["version"] == self.config["version"] + 1
        before = {m["host"]: m.get("votes", 1) for m in self.config["members"]}
        after = {m["host"]: m.get("votes", 1) for m in config["members"]}
        assert sum(before.get(h, 0) != after.get(h, 0) for h in before.keys() | after.keys()) <= 1
        for host in after.keys() - before.keys():
            self.syncing[host] = self.sync_polls
        self.reconfigs.append(copy.deepcopy(dict(config)))
        self.config = copy.deepcopy(dict(config))
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

    # Servers
    def first_admin(self) -> FakeDatabase:
        return FakeDatabase(self, "admin", directly=True)

    def first_local(self) -> FakeDatabase:
        return FakeDatabase(self, "local", directly=True)

    def set_admin(self) -> FakeDatabase:
        return FakeDatabase(self, "admin", directly=False)

    def hello(self, host: str) -> Mapping[str, Any] | None:
        if host not in self.answering or host in self.down:
            return None
        return {"ok": 1.0, "setName": self.other_set[host]} if host in self.other_set else {"ok": 1.0}


class FakeDatabase:
    def __init__(self, replica_set: FakeReplicaSet, name: str, directly: bool) -> None:
        self.replica_set = replica_set
        self.name = name
        self.directly = directly

    def command(self, command: Mapping[str, Any]) -> Mapping[str, Any]:
        verb = next(iter(command))
        replica_set = self.replica_set
        if verb == "replSetGetStatus":
            return replica_set.status(self.directly)
        if verb == "replSetInitiate":
            return replica_set.initiate(command["replSetInitiate"])
        if verb == "replSetGetConfig":
            return {"config": copy.deepcopy(replica_set.config), "ok": 1.0}
        if verb == "replSetReconfig":
            return replica_set.reconfig(command["replSetReconfig"])
        if verb == "setDefaultRWConcern":
            replica_set.default_write_concern = command["defaultWriteConcern"]
            return {"ok": 1.0}
        if verb == "find" and self.name == "local" and command["find"] == "system.replset":
            config = replica_set.config
            return {
                "cursor": {"firstBatch": [config] if config else [], "id": 0, "ns": "local.system.replset"},
                "ok": 1.0,
            }
        if verb in ("usersInfo", "createUser", "updateUser"):
            return replica_set.user_command(command)
        raise AssertionError(f"rs_init sent an unexpected command: {verb}")


def _run(
    replica_set: FakeReplicaSet, members: int, password: str, clock: FakeClock, timeout: float = 60
) -> tuple[Any, list[str]]:
    lines: list[str] = []
    decision = rs_init.run_init(
        replica_set,
        rs_init.compose_settings(members),
        password,
        rs_init.Deadline(timeout, clock=clock, sleep=clock.sleep),
        lines.append,
    )
    return decision, lines


def _hosts(replica_set: FakeReplicaSet) -> list[tuple[str, int]]:
    assert replica_set.config is not None
    return [(m["host"], m.get("votes", 1)) for m in replica_set.config["members"]]


def test_two_runs_on_a_new_set_initiate_once_add_the_members_and_keep_the_user_current() -> None:
    replica_set = FakeReplicaSet(no_primary_polls=2)
    clock = FakeClock()

    first, lines = _run(replica_set, 3, "first-password", clock)
    assert first is Decision.INITIATE
    assert replica_set.initiations == 1
    assert _hosts(replica_set) == [(host, 1) for host in HOSTS_3]
    # mongo2 and mongo3 each joined without a vote and got it once SECONDARY: four reconfigs.
    assert [[m.get("votes", 1) for m in c["members"]] for c in replica_set.reconfigs] == [
        [1, 0],
        [1, 1],
        [1, 1, 0],
        [1, 1, 1],
    ]
    assert replica_set.default_write_concern == {"w": "majority"}
    assert replica_set.users["harel"]["roles"] == [{"role": "readWrite", "db": "harel"}]
    assert replica_set.users["harel"]["pwd"] == "first-password"
    assert lines[0].startswith("mongo-init: rs0 not yet initiated: initiating")
    assert "mongo-init: primary is mongo1:27017" in lines
    assert not any("first-password" in line for line in lines)

    second, lines = _run(replica_set, 3, "rotated-password", clock)
    assert second is Decision.INITIATED
    assert replica_set.initiations == 1
    assert len(replica_set.reconfigs) == 4
    assert replica_set.user_commands == ["usersInfo", "createUser", "usersInfo", "updateUser"]
    assert replica_set.users["harel"]["pwd"] == "rotated-password"


def test_one_member_grows_to_three_and_shrinks_back_one_member_at_a_time() -> None:
    replica_set = FakeReplicaSet()
    clock = FakeClock()
    _run(replica_set, 1, "pw", clock)
    assert _hosts(replica_set) == [("mongo1:27017", 1)]

    _, lines = _run(replica_set, 3, "pw", clock)
    assert _hosts(replica_set) == [(host, 1) for host in HOSTS_3]
    assert "mongo-init: add mongo2:27017 without a vote until it has caught up (config version 2)" in lines

    _, lines = _run(replica_set, 1, "pw", clock)
    assert _hosts(replica_set) == [("mongo1:27017", 1)]
    assert [line for line in lines if "remove" in line] == [
        "mongo-init: remove mongo3:27017 (config version 6)",
        "mongo-init: remove mongo2:27017 (config version 7)",
    ]


def test_a_member_that_does_not_answer_yet_is_waited_for_until_the_deadline() -> None:
    replica_set = FakeReplicaSet(answering={"mongo1:27017", "mongo2:27017"})
    with pytest.raises(
        rs_init.InitError,
        match="reconcile the members: not done after 30s; last: mongo3:27017 does not answer yet",
    ):
        _run(replica_set, 3, "pw", FakeClock(), timeout=30)
    assert _hosts(replica_set) == [("mongo1:27017", 1), ("mongo2:27017", 1)]
    assert replica_set.user_commands == []


def test_a_removal_that_would_lose_the_majority_is_refused_at_once() -> None:
    replica_set = FakeReplicaSet()
    clock = FakeClock()
    _run(replica_set, 3, "pw", clock)
    replica_set.down = {"mongo2:27017"}
    started = clock.now

    with pytest.raises(
        rs_init.InitError, match="membership change refused: removing mongo3:27017 would leave 1 of 2"
    ):
        rs_init.run_init(
            replica_set,
            rs_init.Settings(
                "rs0", (rs_init.Wanted("mongo1:27017", priority=2.0), rs_init.Wanted("mongo2:27017"))
            ),
            "pw",
            rs_init.Deadline(60, clock=clock, sleep=clock.sleep),
            lambda line: None,
        )
    assert clock.now == started, "a refusal is final: not retried"
    assert _hosts(replica_set) == [(host, 1) for host in HOSTS_3]


def test_a_first_member_that_lost_its_volume_waits_for_the_set_and_never_initiates() -> None:
    replica_set = FakeReplicaSet()
    replica_set.other_set = {"mongo2:27017": "rs0"}
    with pytest.raises(rs_init.InitError, match="waiting for mongo1:27017 to rejoin it"):
        _run(replica_set, 3, "pw", FakeClock(), timeout=10)
    assert replica_set.initiations == 0


def test_a_restarted_member_is_waited_for_and_never_initiated() -> None:
    replica_set = FakeReplicaSet(stored_config=STORED_CONFIG_3, loading_polls=3)
    replica_set.users["harel"] = {"user": "harel", "db": "admin", "roles": [], "pwd": "old"}
    decision, _ = _run(replica_set, 3, "pw", FakeClock())
    assert decision is Decision.RESTARTED
    assert replica_set.initiations == 0
    assert replica_set.reconfigs == []
    assert replica_set.user_commands == ["usersInfo", "updateUser"]


def test_a_set_without_a_primary_times_out_naming_the_step_and_the_members() -> None:
    replica_set = FakeReplicaSet(stored_config=STORED_CONFIG_3, no_primary_polls=10_000)
    clock = FakeClock()
    with pytest.raises(rs_init.InitError) as failure:
        _run(replica_set, 3, "pw", clock, timeout=30)
    message = str(failure.value)
    assert message.startswith("elect a primary: not done after 30s")
    assert "mongo1:27017 SECONDARY, mongo2:27017 SECONDARY, mongo3:27017 SECONDARY" in message
    assert 30 <= clock.now <= 30 + 2.0
    assert replica_set.user_commands == []


# --- the entry point ------------------------------------------------------------------------------------------


def _secret_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    path = tmp_path / name.lower()
    path.write_text(value + "\n")
    monkeypatch.setenv(f"{name}_FILE", str(path))


def test_main_refuses_without_the_secret_files(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("HAREL_MONGO_ROOT_PASSWORD_FILE", raising=False)
    _secret_file(tmp_path, monkeypatch, "HAREL_APP_PASSWORD", "x")
    assert rs_init.main(["--members", "1"]) == 1
    assert "HAREL_MONGO_ROOT_PASSWORD_FILE is not set" in capsys.readouterr().err


def test_an_optional_secret_mounted_without_its_file_is_not_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Helm mounts previous-root-password from an optional Secret key: outside a rotation the file is absent.
    monkeypatch.setenv("HAREL_MONGO_PREVIOUS_ROOT_PASSWORD_FILE", str(tmp_path / "previous-root-password"))
    assert rs_init.secret("HAREL_MONGO_PREVIOUS_ROOT_PASSWORD", required=False) is None
    monkeypatch.setenv("HAREL_MONGO_ROOT_PASSWORD_FILE", str(tmp_path / "root-password"))
    with pytest.raises(rs_init.InitError, match="root-password: cannot read it"):
        rs_init.secret("HAREL_MONGO_ROOT_PASSWORD")


def test_main_gives_up_on_an_unreachable_first_member(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The real entry point with real clients, pointed at a loopback port where nothing listens.
    monkeypatch.setattr(
        rs_init, "compose_settings", lambda *_: rs_init.Settings("rs0", (rs_init.Wanted("127.0.0.1:9"),))
    )
    _secret_file(tmp_path, monkeypatch, "HAREL_MONGO_ROOT_PASSWORD", "root-pw")
    _secret_file(tmp_path, monkeypatch, "HAREL_APP_PASSWORD", "app-pw")
    monkeypatch.setattr(rs_init.Deadline, "pause_seconds", 0.0)
    assert rs_init.main(["--members", "1", "--timeout", "0"]) == 1
    err = capsys.readouterr().err
    assert (
        "mongo-init: log in as root: not done after 0s; last: not reachable yet (ServerSelectionTimeoutError"
        in err
    )
    assert "root-pw" not in err


def test_the_url_file_is_replaced_whole_and_private(tmp_path: Path) -> None:
    target = tmp_path / "mongodb-url"
    rs_init.write_url_file(target, "mongodb://first")
    rs_init.write_url_file(target, rs_init.compose_settings(3).app_url("pw~1"))
    assert target.read_text() == (
        "mongodb://harel:pw~1@mongo1:27017,mongo2:27017,mongo3:27017/harel?replicaSet=rs0&authSource=admin"
    )
    assert target.stat().st_mode & 0o777 == 0o400
    assert [p.name for p in tmp_path.iterdir()] == ["mongodb-url"]


class _Refusing:
    """A pymongo client stand-in whose `ping` refuses the password it was built with."""

    def __init__(self, password: str, refused: str) -> None:
        self.password = password
        self.admin = self
        self.refused = refused

    def command(self, name: str) -> dict[str, Any]:
        if self.password == self.refused:
            raise OperationFailure("Authentication failed.", 18, {"ok": 0, "code": 18})
        return {"ok": 1.0}


def test_a_refused_root_password_falls_back_to_the_previous_one_and_rotates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers = rs_init.MongoServers(rs_init.compose_settings(1), "new-root", "old-root")
    monkeypatch.setattr(servers, "_client", lambda hosts, password, **extra: _Refusing(password, "new-root"))
    client = servers._login("mongo1:27017")
    assert client.password == "old-root"
    assert servers.rotating
    # Without a previous password there is nothing to fall back to: the refusal is the caller's to report.
    plain = rs_init.MongoServers(rs_init.compose_settings(1), "new-root", None)
    monkeypatch.setattr(plain, "_client", lambda hosts, password, **extra: _Refusing(password, "new-root"))
    assert plain._login("mongo1:27017").password == "new-root"
    assert not plain.rotating


# --- over the wire, against the fake replica-set server --------------------------------------------------------


class _Direct:
    """`Servers` over one real client: the fake server is the first member and the whole set."""

    def __init__(self, client: MongoClient[dict[str, Any]]) -> None:
        self.client = client

    def first_admin(self) -> Any:
        return self.client.admin

    def first_local(self) -> Any:
        return self.client.local

    def set_admin(self) -> Any:
        return self.client.admin

    def hello(self, host: str) -> Mapping[str, Any] | None:
        return dict(self.client.admin.command("hello"))


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
        settings = rs_init.Settings("rs0", (rs_init.Wanted(me),))
        servers = _Direct(client)
        assert rs_init.decide(status, None, "rs0") is Decision.INITIATE
        assert rs_init.send(client.admin, {"replSetInitiate": rs_init.initiate_config(settings)})["ok"] == 1
        # Second run, the whole step (stored config read from `local` included): nothing to initiate.
        assert rs_init.initiate_step(servers, settings) is Decision.INITIATED
        assert rs_init.primary_step(servers) == me
        # What a second replSetInitiate would meet: the server's own refusal.
        assert (
            rs_init.send(client.admin, {"replSetInitiate": rs_init.initiate_config(settings)})["code"] == 23
        )
