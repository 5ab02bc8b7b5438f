"""Replica-set administration on the test replica set (`tests/fake_mongod/replset.py`) with real PyMongo:
initiation with a configuration, `replSetGetConfig`, reconfiguration with mongod's rules, `replSetGetStatus`
over simulated members, step-down and the `hello` fields that follow from the configuration.

Marked `fake_server`: these tests prove the test replica set (and, where HAREL_TEST_MONGO_URL is set, that a
real deployment agrees with it), not harel; harel's own behaviour over the same sockets is in the unmarked
wire tests and the conformance suite.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import NotPrimaryError, OperationFailure

from harel_dev.server import LocalServer
from tests.fake_mongod import FakeMongod
from tests.fake_mongod.fixtures import FakeDeployment

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

SELECTION = {"serverSelectionTimeoutMS": 10_000}


def _free_loopback_hosts(count: int) -> list[str]:
    """Hosts on 127.0.0.1 at ports nobody listens on: simulated members a driver may try, and fail, to reach."""
    hosts = []
    for _ in range(count):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            hosts.append(f"127.0.0.1:{probe.getsockname()[1]}")
    return hosts


def _refused(client: MongoClient[Any], command: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(OperationFailure) as refused:
        client.admin.command(command)
    return refused.value.details or {}


@pytest.fixture
def direct(fake_rs: FakeDeployment) -> Iterator[MongoClient[Any]]:
    with MongoClient(f"mongodb://{fake_rs.server.host_port}/?directConnection=true", **SELECTION) as client:
        yield client


def _members(me: str, others: list[str], *, arbiter: str | None = None) -> list[dict[str, Any]]:
    members = [{"_id": index, "host": host} for index, host in enumerate([me, *others])]
    if arbiter is not None:
        members.append({"_id": len(members), "host": arbiter, "arbiterOnly": True})
    return members


def _initiated(server: FakeMongod, client: MongoClient[Any], members: list[dict[str, Any]]) -> dict[str, Any]:
    server.set_initialized(False)
    client.admin.command({"replSetInitiate": {"_id": "rs0", "members": members}})
    return client.admin.command("replSetGetConfig")["config"]


def test_initiate_with_a_configuration_shapes_config_status_and_hello(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    second, third, arbiter = _free_loopback_hosts(3)
    fake_rs.server.set_initialized(False)
    before = _refused(direct, {"replSetGetConfig": 1})

    reply = direct.admin.command(
        {
            "replSetInitiate": {
                "_id": "rs0",
                "members": [
                    *_members(me, [second]),
                    {"_id": 2, "host": third, "priority": 0},
                    {"_id": 3, "host": arbiter, "arbiterOnly": True},
                ],
            }
        }
    )
    config = direct.admin.command("replSetGetConfig")["config"]
    status = direct.admin.command("replSetGetStatus")
    hello = direct.admin.command("hello")

    assert before["code"] == 94
    assert reply["ok"] == 1.0
    assert config["_id"] == "rs0" and config["version"] == 1
    assert [m["host"] for m in config["members"]] == [me, second, third, arbiter]
    assert config["members"][3]["arbiterOnly"] is True and config["members"][3]["priority"] == 0
    assert config["members"][1] == {
        "_id": 1,
        "host": second,
        "arbiterOnly": False,
        "buildIndexes": True,
        "hidden": False,
        "priority": 1.0,
        "tags": {},
        "secondaryDelaySecs": 0,
        "votes": 1,
    }
    assert [(m["name"], m["stateStr"], m["health"]) for m in status["members"]] == [
        (me, "PRIMARY", 1.0),
        (second, "SECONDARY", 1.0),
        (third, "SECONDARY", 1.0),
        (arbiter, "ARBITER", 1.0),
    ]
    assert (
        status["votingMembersCount"],
        status["majorityVoteCount"],
        status["writableVotingMembersCount"],
    ) == (4, 3, 3)
    assert hello["hosts"] == [me, second]
    assert hello["passives"] == [third]
    assert hello["arbiters"] == [arbiter]
    assert hello["setVersion"] == 1 and hello["primary"] == me and hello["isWritablePrimary"] is True


def test_initiate_refusals(fake_rs: FakeDeployment, direct: MongoClient[Any]) -> None:
    me = fake_rs.server.host_port
    (other,) = _free_loopback_hosts(1)
    fake_rs.server.set_initialized(False)
    fake_rs.server.set_member_state(other, "DOWN")

    wrong_name = _refused(direct, {"replSetInitiate": {"_id": "other", "members": [{"_id": 0, "host": me}]}})
    without_me = _refused(direct, {"replSetInitiate": {"_id": "rs0", "members": [{"_id": 0, "host": other}]}})
    duplicate = _refused(
        direct,
        {"replSetInitiate": {"_id": "rs0", "members": [{"_id": 0, "host": me}, {"_id": 0, "host": other}]}},
    )
    unknown_field = _refused(
        direct, {"replSetInitiate": {"_id": "rs0", "members": [{"_id": 0, "host": me, "weight": 2}]}}
    )
    member_down = _refused(direct, {"replSetInitiate": {"_id": "rs0", "members": _members(me, [other])}})
    direct.admin.command({"replSetInitiate": {}})
    again = _refused(direct, {"replSetInitiate": {}})

    assert wrong_name["code"] == 93
    assert (without_me["code"], without_me["codeName"]) == (93, "InvalidReplicaSetConfig")
    assert "maps to this node" in without_me["errmsg"]
    assert duplicate["code"] == 93
    assert unknown_field["code"] == 40415
    assert (member_down["code"], member_down["codeName"]) == (74, "NodeNotFound")
    assert "quorum check failed" in member_down["errmsg"]
    assert again["code"] == 23


def test_reconfig_adds_one_voter_at_a_time_with_a_higher_version(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    second, third, fourth = _free_loopback_hosts(3)
    config = _initiated(fake_rs.server, direct, _members(me, []))

    two_at_once = _refused(
        direct, {"replSetReconfig": {**config, "version": 2, "members": _members(me, [second, third])}}
    )
    same_version = _refused(direct, {"replSetReconfig": {**config, "members": _members(me, [second])}})
    moved = _refused(
        direct,
        {
            "replSetReconfig": {
                **config,
                "version": 2,
                "members": [{"_id": 0, "host": second}, {"_id": 1, "host": me}],
            }
        },
    )
    direct.admin.command({"replSetReconfig": {**config, "version": 2, "members": _members(me, [second])}})
    direct.admin.command(
        {"replSetReconfig": {**config, "version": 3, "members": _members(me, [second, third])}}
    )
    non_voter = {"_id": 3, "host": fourth, "votes": 0, "priority": 0}
    direct.admin.command(
        {"replSetReconfig": {**config, "version": 4, "members": [*_members(me, [second, third]), non_voter]}}
    )
    final = direct.admin.command("replSetGetConfig")["config"]
    hello = direct.admin.command("hello")

    assert two_at_once["code"] == 103
    assert (
        two_at_once["errmsg"]
        == "Non force replica set reconfig can only add or remove at most 1 voting member."
    )
    assert (same_version["code"], same_version["codeName"]) == (103, "NewReplicaSetConfigurationIncompatible")
    assert moved["code"] == 103
    assert final["version"] == 4
    assert [m["host"] for m in final["members"]] == [me, second, third, fourth]
    assert hello["setVersion"] == 4
    assert hello["hosts"] == [me, second, third]


def test_reconfig_needs_a_majority_of_the_new_voters_up_unless_forced(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    second, third = _free_loopback_hosts(2)
    config = _initiated(fake_rs.server, direct, _members(me, [second]))
    fake_rs.server.set_member_state(second, "DOWN")
    fake_rs.server.set_member_state(third, "DOWN")

    no_quorum = _refused(
        direct, {"replSetReconfig": {**config, "version": 2, "members": _members(me, [second, third])}}
    )
    direct.admin.command(
        {"replSetReconfig": {**config, "version": 2, "members": _members(me, [second, third])}, "force": True}
    )
    forced = direct.admin.command("replSetGetConfig")["config"]
    status = direct.admin.command("replSetGetStatus")

    assert (no_quorum["code"], no_quorum["codeName"]) == (74, "NodeNotFound")
    assert "Quorum check failed" in no_quorum["errmsg"]
    assert 10_001 <= forced["version"] <= 100_001
    assert forced["term"] == -1
    assert [(m["stateStr"], m["health"]) for m in status["members"]] == [
        ("PRIMARY", 1.0),
        ("DOWN", 0.0),
        ("DOWN", 0.0),
    ]


def test_reconfig_removes_one_voter_and_may_not_make_this_member_unelectable(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    second, third = _free_loopback_hosts(2)
    config = _initiated(fake_rs.server, direct, _members(me, [second, third]))

    unelectable = _refused(
        direct,
        {
            "replSetReconfig": {
                **config,
                "version": 2,
                "members": [{"_id": 0, "host": me, "priority": 0}, *_members(me, [second, third])[1:]],
            }
        },
    )
    direct.admin.command({"replSetReconfig": {**config, "version": 2, "members": _members(me, [second])}})
    after = direct.admin.command("replSetGetStatus")

    assert unelectable["code"] == 103 and "not electable" in unelectable["errmsg"]
    assert [m["name"] for m in after["members"]] == [me, second]


def test_member_states_set_by_the_test_show_in_status(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    second, third = _free_loopback_hosts(2)
    _initiated(fake_rs.server, direct, _members(me, [second, third]))

    fake_rs.server.set_member_state(second, "STARTUP2")
    fake_rs.server.set_member_state(third, "DOWN")
    status = direct.admin.command("replSetGetStatus")
    with pytest.raises(ValueError, match="follows its role"):
        fake_rs.server.set_member_state(me, "DOWN")
    with pytest.raises(ValueError, match="one of"):
        fake_rs.server.set_member_state(second, "PRIMARY")

    by_name = {m["name"]: m for m in status["members"]}
    assert (by_name[second]["state"], by_name[second]["stateStr"], by_name[second]["health"]) == (
        5,
        "STARTUP2",
        1.0,
    )
    assert (by_name[third]["state"], by_name[third]["stateStr"], by_name[third]["health"]) == (8, "DOWN", 0.0)
    assert by_name[me]["self"] is True


def test_step_down_hands_the_primary_to_a_secondary_for_the_period(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    (second,) = _free_loopback_hosts(1)
    _initiated(fake_rs.server, direct, _members(me, [second]))
    term = direct.admin.command("replSetGetStatus")["term"]
    before = direct.admin.command("hello")

    direct.admin.command({"replSetStepDown": 2, "secondaryCatchUpPeriodSecs": 1})
    during = direct.admin.command("hello")
    status = direct.admin.command("replSetGetStatus")
    with pytest.raises(NotPrimaryError) as write:
        direct.admin.command({"insert": "items", "documents": [{}]})
    deadline = time.monotonic() + 10
    while not direct.admin.command("hello")["isWritablePrimary"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = direct.admin.command("hello")

    assert during["isWritablePrimary"] is False and during["secondary"] is True
    assert during["primary"] == second
    assert status["myState"] == 2 and status["term"] == term + 1
    assert [m["stateStr"] for m in status["members"]] == ["SECONDARY", "PRIMARY"]
    assert write.value.details is not None and write.value.details["code"] == 10107
    assert after["isWritablePrimary"] is True and after["primary"] == me
    assert "electionId" not in during
    assert (
        after["electionId"] > before["electionId"]
    )  # a new term: drivers do not take it for a stale primary


def test_step_down_without_an_electable_secondary_is_refused_unless_forced(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    refused = _refused(direct, {"replSetStepDown": 60})
    direct.admin.command({"replSetStepDown": 60, "force": True})
    hello = direct.admin.command("hello")
    fake_rs.server.reset()
    bad_period = _refused(direct, {"replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 10})

    assert (refused["code"], refused["codeName"]) == (262, "ExceededTimeLimit")
    assert "No electable secondaries caught up" in refused["errmsg"]
    assert hello["isWritablePrimary"] is False and "primary" not in hello
    assert bad_period["code"] == 2


def test_reset_returns_to_the_one_member_set(fake_rs: FakeDeployment, direct: MongoClient[Any]) -> None:
    me = fake_rs.server.host_port
    (second,) = _free_loopback_hosts(1)
    _initiated(fake_rs.server, direct, _members(me, [second]))
    direct.admin.command({"replSetStepDown": 60, "secondaryCatchUpPeriodSecs": 1})

    fake_rs.server.reset()
    hello = direct.admin.command("hello")
    config = direct.admin.command("replSetGetConfig")["config"]

    assert hello["isWritablePrimary"] is True and hello["hosts"] == [me]
    assert [m["host"] for m in config["members"]] == [me] and config["version"] == 1


def test_the_driver_follows_the_configured_set_and_writes_through_the_primary(
    fake_rs: FakeDeployment, direct: MongoClient[Any]
) -> None:
    me = fake_rs.server.host_port
    second, third = _free_loopback_hosts(2)
    _initiated(fake_rs.server, direct, _members(me, [second, third]))

    with MongoClient(fake_rs.url, w="majority", **SELECTION) as client:
        client.harel.items.insert_one({"through": "primary"})
        nodes = client.nodes
        primary = client.primary

    assert primary == ("127.0.0.1", fake_rs.server.port)
    assert ("127.0.0.1", fake_rs.server.port) in nodes


def test_sdk_server_stays_a_one_member_set() -> None:
    with LocalServer() as server, MongoClient(server.url, **SELECTION) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        reconfig = _refused(client, {"replSetReconfig": {**config, "version": 2}})
        step_down = _refused(client, {"replSetStepDown": 60, "force": True})

    assert [m["host"] for m in config["members"]] == [server.host_port]
    assert reconfig["code"] == step_down["code"] == 238
