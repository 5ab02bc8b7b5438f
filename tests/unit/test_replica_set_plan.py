"""The membership plan (compose/mongo-init/replica_set_plan.py) on recorded replSetGetConfig / replSetGetStatus
replies: which member to add, promote or remove, in what order, and when it refuses. The same function drives
compose and Helm (rs_init.py) and the Ansible role (its filter), so these cases hold for all three."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.mongo_init import load

plan = load("replica_set_plan")
Wanted = plan.Wanted

HEADLESS = "harel-stack-mongodb-headless.harel.svc.cluster.local:27017"
HOSTS = [f"harel-stack-mongodb-{i}.{HEADLESS}" for i in range(5)]
STATE_NAMES = {1: "PRIMARY", 2: "SECONDARY", 5: "STARTUP2", 7: "ARBITER", 8: "(not reachable/healthy)"}


# --- recorded reply shapes (mongod 8.0; optimes, dates and heartbeat details trimmed) ---------------------------


def config_reply(*members: dict[str, Any], version: int = 1) -> dict[str, Any]:
    """replSetGetConfig's `config` document."""
    return {
        "_id": "rs0",
        "version": version,
        "term": 3,
        "members": [
            {
                "_id": member["_id"],
                "host": member["host"],
                "arbiterOnly": member.get("arbiterOnly", False),
                "buildIndexes": True,
                "hidden": False,
                "priority": member.get("priority", 1.0),
                "tags": {},
                "secondaryDelaySecs": 0,
                "votes": member.get("votes", 1),
            }
            for member in members
        ],
        "protocolVersion": 1,
        "writeConcernMajorityJournalDefault": True,
        "settings": {
            "chainingAllowed": True,
            "heartbeatIntervalMillis": 2000,
            "electionTimeoutMillis": 10000,
        },
    }


def status_reply(states: dict[str, int]) -> dict[str, Any]:
    """replSetGetStatus, asked on the primary: one entry per configured member, `state` as the server numbers it."""
    return {
        "set": "rs0",
        "myState": 1,
        "term": 3,
        "heartbeatIntervalMillis": 2000,
        "members": [
            {
                "_id": index,
                "name": host,
                "health": 0.0 if state == 8 else 1.0,
                "state": state,
                "stateStr": STATE_NAMES[state],
                "uptime": 0 if state == 8 else 600,
                "configVersion": 1,
                "configTerm": 3,
            }
            for index, (host, state) in enumerate(states.items())
        ],
        "ok": 1.0,
    }


def members_of(count: int) -> list[dict[str, Any]]:
    return [{"_id": i, "host": HOSTS[i]} for i in range(count)]


def wanted(count: int) -> list[Any]:
    return [Wanted(host) for host in HOSTS[:count]]


def votes(config: dict[str, Any]) -> dict[str, int]:
    return {member["host"]: int(member.get("votes", 1)) for member in config["members"]}


class Simulated:
    """A replica set the test drives with the plan's steps: a reconfig replaces the config, a member then reports
    the state `settle` gives it (an added member syncs, then turns SECONDARY)."""

    def __init__(self, config: dict[str, Any], states: dict[str, int]) -> None:
        self.config = config
        self.states = states
        self.reasons: list[str] = []

    def status(self) -> dict[str, Any]:
        return status_reply({m["host"]: self.states.get(m["host"], 8) for m in self.config["members"]})

    def run(self, want: list[Any], reachable: set[str], limit: int = 30) -> Any:
        for _ in range(limit):
            step = plan.next_step(self.config, self.status(), want, reachable)
            if isinstance(step, plan.Wait) and "SECONDARY" in step.reason:
                # The added member has caught up meanwhile.
                for member in self.config["members"]:
                    if self.states.get(member["host"]) == 5:
                        self.states[member["host"]] = 2
                continue
            if not isinstance(step, plan.Reconfig):
                return step
            before, after = votes(self.config), votes(step.config)
            changed = {h for h in before.keys() | after.keys() if before.get(h, 0) != after.get(h, 0)}
            assert len(changed) <= 1, f"{step.reason}: changed the votes of {changed}"
            assert step.config["version"] == self.config["version"] + 1
            assert "term" not in step.config
            self.reasons.append(step.reason)
            for member in step.config["members"]:
                joining = self.states.get(member["host"], 8) == 8
                if joining and member["host"] in reachable:
                    self.states[member["host"]] = 5
            self.config = step.config
        raise AssertionError(f"no end after {limit} steps: {self.reasons}")


# --- growing ---------------------------------------------------------------------------------------------------


def test_one_to_three_adds_each_member_without_a_vote_then_promotes_it() -> None:
    replica_set = Simulated(config_reply(*members_of(1)), {HOSTS[0]: 1})

    final = replica_set.run(wanted(3), reachable=set(HOSTS[:3]))

    assert isinstance(final, plan.Done)
    assert replica_set.reasons == [
        f"add {HOSTS[1]} without a vote until it has caught up",
        f"give {HOSTS[1]} its vote (caught up)",
        f"add {HOSTS[2]} without a vote until it has caught up",
        f"give {HOSTS[2]} its vote (caught up)",
    ]
    assert votes(replica_set.config) == dict.fromkeys(HOSTS[:3], 1)
    assert [m["_id"] for m in replica_set.config["members"]] == [0, 1, 2]


def test_a_new_member_gets_no_vote_while_it_syncs() -> None:
    config = config_reply(*members_of(3), {"_id": 3, "host": HOSTS[3], "votes": 0, "priority": 0})
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2, HOSTS[3]: 5})

    step = plan.next_step(config, status, wanted(5), set(HOSTS))

    assert step == plan.Wait(f"{HOSTS[3]} is STARTUP2: it gets its vote once it is SECONDARY")


def test_a_member_that_does_not_answer_yet_is_waited_for() -> None:
    step = plan.next_step(
        config_reply(*members_of(3)),
        status_reply(dict.fromkeys(HOSTS[:3], 2) | {HOSTS[0]: 1}),
        wanted(5),
        reachable=set(HOSTS[:3]),
    )

    assert step == plan.Wait(f"{HOSTS[3]} does not answer yet: it is added once it does")


def test_an_arbiter_is_added_with_its_vote() -> None:
    arbiter = "harel-stack-mongodb-arbiter-0." + HEADLESS
    config = config_reply(*members_of(2))
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 2})

    step = plan.next_step(config, status, [*wanted(2), Wanted(arbiter, arbiter=True)], {arbiter})

    assert isinstance(step, plan.Reconfig)
    assert step.config["members"][-1] == {
        "_id": 2,
        "host": arbiter,
        "arbiterOnly": True,
        "votes": 1,
        "priority": 0,
    }


# --- shrinking -------------------------------------------------------------------------------------------------


def test_five_to_three_after_the_pods_are_gone_removes_them_one_at_a_time() -> None:
    # Helm scaled the StatefulSet down first: members 3 and 4 no longer answer; 3 of 5 voters still do.
    replica_set = Simulated(config_reply(*members_of(5)), {HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2})

    final = replica_set.run(wanted(3), reachable=set(HOSTS[:3]))

    assert isinstance(final, plan.Done)
    assert replica_set.reasons == [f"remove {HOSTS[4]}", f"remove {HOSTS[3]}"]
    assert votes(replica_set.config) == dict.fromkeys(HOSTS[:3], 1)


def test_three_to_one_with_every_member_up_goes_through_two() -> None:
    # Ansible: hosts removed from the inventory while they still run.
    replica_set = Simulated(config_reply(*members_of(3)), {HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2})

    final = replica_set.run(wanted(1), reachable=set(HOSTS[:3]))

    assert isinstance(final, plan.Done)
    assert replica_set.reasons == [f"remove {HOSTS[2]}", f"remove {HOSTS[1]}"]


def test_an_unreachable_member_is_removed_before_a_healthy_one() -> None:
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 8, HOSTS[2]: 2})

    step = plan.next_step(config, status, wanted(1), set())

    assert isinstance(step, plan.Reconfig)
    assert step.reason == f"remove {HOSTS[1]}"


def test_a_removal_that_would_lose_the_majority_is_refused() -> None:
    # Keep members 0 and 1, but member 1 is down: removing the healthy member 2 leaves 1 healthy of 2 voters.
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 8, HOSTS[2]: 2})

    step = plan.next_step(config, status, wanted(2), set(HOSTS))

    assert isinstance(step, plan.Refuse)
    assert step.reason.startswith(f"removing {HOSTS[2]} would leave 1 of 2 voting member(s) healthy")


def test_a_set_that_lost_its_majority_has_no_primary_and_nothing_is_changed() -> None:
    # What 3 -> 1 in one Helm step would leave behind: two of three voters gone at once.
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 2, HOSTS[1]: 8, HOSTS[2]: 8})

    step = plan.next_step(config, status, wanted(1), {HOSTS[0]})

    assert isinstance(step, plan.Wait)
    assert step.reason.startswith("no primary:")


def test_the_primary_steps_down_before_it_is_removed() -> None:
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 2, HOSTS[1]: 2, HOSTS[2]: 1})

    step = plan.next_step(config, status, wanted(2), set(HOSTS))

    assert step == plan.StepDown(
        HOSTS[2], f"{HOSTS[2]} is to be removed and is the primary: it steps down first"
    )


# --- settled sets and other refusals ---------------------------------------------------------------------------


def test_a_set_with_its_wanted_members_is_done() -> None:
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2})

    assert isinstance(plan.next_step(config, status, wanted(3), set(HOSTS)), plan.Done)


def test_a_priority_change_is_applied_alone() -> None:
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2})
    want = [Wanted(HOSTS[0], priority=2.0), *wanted(3)[1:]]

    step = plan.next_step(config, status, want, set(HOSTS))

    assert isinstance(step, plan.Reconfig)
    assert step.config["members"][0]["priority"] == 2.0
    assert votes(step.config) == votes(config)


def test_a_data_member_wanted_as_an_arbiter_is_refused() -> None:
    config = config_reply(*members_of(3))
    status = status_reply({HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2})
    want = [*wanted(2), Wanted(HOSTS[2], arbiter=True)]

    step = plan.next_step(config, status, want, set(HOSTS))

    assert isinstance(step, plan.Refuse)
    assert "as a data member but wanted as an arbiter" in step.reason


def test_the_input_config_is_never_modified() -> None:
    config = config_reply(*members_of(1))
    before = copy.deepcopy(config)

    plan.next_step(config, status_reply({HOSTS[0]: 1}), wanted(3), set(HOSTS))

    assert config == before


@pytest.mark.parametrize(
    ("states", "want", "action"),
    [
        ({HOSTS[0]: 1}, 3, "reconfig"),
        ({HOSTS[0]: 1, HOSTS[1]: 2, HOSTS[2]: 2}, 3, "done"),
        ({HOSTS[0]: 2, HOSTS[1]: 8, HOSTS[2]: 8}, 1, "wait"),
    ],
)
def test_the_ansible_filter_returns_the_step_as_data(states: dict[str, int], want: int, action: str) -> None:
    state = {"config": config_reply(*members_of(len(states))), "status": status_reply(states)}

    step = plan.harel_replica_set_step(state, [{"host": host} for host in HOSTS[:want]], list(HOSTS))

    assert step["action"] == action
    assert isinstance(step["reason"], str) and step["reason"]
    assert ("config" in step) == (action == "reconfig")
    assert plan.FilterModule().filters()["harel_replica_set_step"] is plan.harel_replica_set_step
    # The mongodb role passes its members as "host:port" strings: the same decision.
    assert plan.harel_replica_set_step(state, list(HOSTS[:want]), list(HOSTS)) == step
