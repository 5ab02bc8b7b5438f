"""The next membership change of a replica set: which member to add, promote or remove, and when to refuse.

A pure function of what the primary reports (replSetGetConfig's `config`, replSetGetStatus), the members the
deployment wants and the wanted hosts that answered a `hello`. It never talks to a server, so every decision is
tested on recorded replies; the callers (compose and Helm: rs_init.py; Ansible: the mongodb role, through the
`harel_replica_set_step` filter below) carry the step out, then ask again until the answer is Done.

The rules, in the order they are applied:
1. No primary: wait (a reconfiguration is only accepted by a primary).
2. A wanted data member that was added without a vote is given its vote once it is SECONDARY (caught up), and
   not before: a voter still copying data would count towards the majority without being able to acknowledge.
3. Members no longer wanted are removed, unreachable ones first, one at a time, and never when the voters left
   would not hold a healthy majority (the step is refused and says why). A primary to be removed steps down first.
4. Wanted hosts missing from the set are added one at a time, in the wanted order, once they answer: a data
   member without a vote and priority 0 (rule 2 promotes it), an arbiter with its vote (it holds no data).
5. A voting data member whose priority differs from the wanted one gets it.
Every Reconfig changes at most one vote, as MongoDB requires of a replSetReconfig.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PRIMARY = 1
SECONDARY = 2
ARBITER = 7
UP_STATES = (PRIMARY, SECONDARY, ARBITER)


@dataclass(frozen=True)
class Wanted:
    """A member the deployment wants: its host:port, whether it is an arbiter, and its election priority."""

    host: str
    arbiter: bool = False
    priority: float = 1.0


@dataclass(frozen=True)
class Done:
    reason: str


@dataclass(frozen=True)
class Wait:
    """Nothing to do yet: ask again later (a member starting, syncing, an election running)."""

    reason: str


@dataclass(frozen=True)
class Refuse:
    """Going on would cost the set its majority (or is not a membership change at all): an operator decides."""

    reason: str


@dataclass(frozen=True)
class StepDown:
    """The primary is to be removed: it hands over first (replSetStepDown), then the plan is asked again."""

    host: str
    reason: str


@dataclass(frozen=True)
class Reconfig:
    """replSetReconfig with `config`: the current configuration, one member changed, version + 1."""

    config: dict[str, Any]
    reason: str


Step = Done | Wait | Refuse | StepDown | Reconfig


def next_step(
    config: Mapping[str, Any],
    status: Mapping[str, Any],
    wanted: Sequence[Wanted],
    reachable: Iterable[str],
) -> Step:
    """The one change to make now (see the module's rules), or Done when the set has the wanted members."""
    members: list[dict[str, Any]] = [dict(member) for member in config["members"]]
    states = {str(member["name"]): member for member in status.get("members", [])}
    wanted_by_host = {member.host: member for member in wanted}
    answering = set(reachable)

    def up(host: str) -> bool:
        state = states.get(host, {})
        return state.get("health") == 1 and state.get("state") in UP_STATES

    def state_of(host: str) -> str:
        return str(states.get(host, {}).get("stateStr", "not in replSetGetStatus"))

    primary = next((name for name, state in states.items() if state.get("state") == PRIMARY), None)
    if primary is None:
        return Wait(f"no primary: {', '.join(f'{h} {state_of(h)}' for h in states) or 'no members reported'}")

    for member in members:
        want = wanted_by_host.get(member["host"])
        if want is not None and want.arbiter != bool(member.get("arbiterOnly")):
            kind = "an arbiter" if want.arbiter else "a data member"
            return Refuse(
                f"{member['host']} is in the set as {'an arbiter' if member.get('arbiterOnly') else 'a data member'} "
                f"but wanted as {kind}: remove it from the wanted members first, then add it back"
            )
        if want is not None and not want.arbiter and _votes(member) == 0:
            if states.get(member["host"], {}).get("state") == SECONDARY and up(member["host"]):
                promoted = {**member, "votes": 1, "priority": want.priority}
                return _reconfig(
                    config, members, member, promoted, f"give {member['host']} its vote (caught up)"
                )
            return Wait(
                f"{member['host']} is {state_of(member['host'])}: it gets its vote once it is SECONDARY"
            )

    voters = sum(_votes(member) for member in members)
    healthy = sum(_votes(member) for member in members if up(member["host"]))

    unwanted = [member for member in members if member["host"] not in wanted_by_host]
    if unwanted:
        # Unreachable members first: removing them costs no healthy vote. Then the last configured first.
        target = min(unwanted, key=lambda member: (up(member["host"]), -members.index(member)))
        if target["host"] == primary:
            return StepDown(primary, f"{primary} is to be removed and is the primary: it steps down first")
        left = voters - _votes(target)
        healthy_left = healthy - (_votes(target) if up(target["host"]) else 0)
        if left == 0 or healthy_left < _majority(left):
            return Refuse(
                f"removing {target['host']} would leave {healthy_left} of {left} voting member(s) healthy, "
                f"fewer than the {_majority(left) if left else 1} a majority needs: bring the unreachable "
                "members back (or remove them first), then retry"
            )
        return _reconfig(config, members, target, None, f"remove {target['host']}")

    missing = [member for member in wanted if member.host not in {m["host"] for m in members}]
    if missing:
        want = missing[0]
        if want.host not in answering:
            return Wait(f"{want.host} does not answer yet: it is added once it does")
        next_id = max((int(member["_id"]) for member in members), default=-1) + 1
        if want.arbiter:
            if healthy + 1 < _majority(voters + 1):
                return Refuse(
                    f"adding the arbiter {want.host} would make {voters + 1} voters with {healthy + 1} healthy: "
                    "no majority"
                )
            added = {"_id": next_id, "host": want.host, "arbiterOnly": True, "votes": 1, "priority": 0}
            return _reconfig(config, members, None, added, f"add the arbiter {want.host}")
        added = {"_id": next_id, "host": want.host, "votes": 0, "priority": 0}
        return _reconfig(
            config, members, None, added, f"add {want.host} without a vote until it has caught up"
        )

    for member in members:
        want = wanted_by_host[member["host"]]
        if not want.arbiter and float(member.get("priority", 1)) != want.priority:
            changed = {**member, "priority": want.priority}
            return _reconfig(config, members, member, changed, f"set the priority of {member['host']}")
    return Done(f"the set has the {len(wanted)} wanted member(s), each with its vote")


def _votes(member: Mapping[str, Any]) -> int:
    return int(member.get("votes", 1))


def _majority(voters: int) -> int:
    return voters // 2 + 1


def _reconfig(
    config: Mapping[str, Any],
    members: list[dict[str, Any]],
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    reason: str,
) -> Reconfig:
    if old is None:
        changed = [*members, dict(new or {})]
    elif new is None:
        changed = [member for member in members if member is not old]
    else:
        changed = [dict(new) if member is old else member for member in members]
    document = copy.deepcopy(dict(config))
    # The primary sets the term itself; the version must grow by one.
    document.pop("term", None)
    document["version"] = int(config.get("version", 1)) + 1
    document["members"] = changed
    return Reconfig(document, reason)


def step_as_dict(step: Step) -> dict[str, Any]:
    """A step as plain data (for Ansible and for logs): {"action", "reason"} and the step's own fields."""
    action = {Done: "done", Wait: "wait", Refuse: "refuse", StepDown: "step_down", Reconfig: "reconfig"}
    data: dict[str, Any] = {"action": action[type(step)], "reason": step.reason}
    if isinstance(step, StepDown):
        data["host"] = step.host
    if isinstance(step, Reconfig):
        data["config"] = step.config
    return data


def harel_replica_set_step(
    state: Mapping[str, Any], wanted: Sequence[str | Mapping[str, Any]], reachable: Iterable[str] = ()
) -> dict[str, Any]:
    """Ansible filter: `{config, status}` (the mongodb role's replica_set_state.js), the wanted members as
    "host:port" or {host, arbiter, priority}, and the wanted hosts that answer -> the step as plain data."""
    members = [
        Wanted(w)
        if isinstance(w, str)
        else Wanted(str(w["host"]), bool(w.get("arbiter", False)), float(w.get("priority", 1)))
        for w in wanted
    ]
    return step_as_dict(next_step(state["config"], state["status"], members, reachable))


class FilterModule:
    """How the mongodb role reaches next_step: `{{ state | harel_replica_set_step(wanted, reachable) }}`."""

    def filters(self) -> dict[str, Any]:
        return {"harel_replica_set_step": harel_replica_set_step}
