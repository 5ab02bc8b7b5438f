"""Replica-set administration on the test double: a configuration of several members, of which only this
process is real.

`replSetInitiate`, `replSetReconfig` and `replSetStepDown` are checked the way mongod checks them (the
rules below, with mongod's codes); the other members are simulated: their state (`SECONDARY` unless a test
says otherwise with `FakeMongod.set_member_state`) decides quorum checks, step-down and what
`replSetGetStatus` reports. Nothing is replicated to them, and no member but this process answers on the
network: configure hosts on 127.0.0.1 at ports nobody listens on, because drivers connect to every host
`hello` lists.

Rules, as mongod enforces them:
- a configuration names this set (`_id`), lists members with unique integer `_id`s and unique `host`s,
  only known member fields, `votes` 0 or 1, `priority` 0..1000 (0 for arbiters, hidden and non-voting
  members), at most 7 voters and 50 members, at least one electable member, and this process among them;
- initiation needs every member up; it is refused on a member already initiated (AlreadyInitialized);
- a reconfiguration without `force` runs on the primary only, needs a higher `version`, keeps each
  member `_id` on its host, adds or removes at most one voting member, leaves this member electable, and
  needs a majority of the new configuration's voters up; with `force` only the configuration's own
  validity is checked and the version jumps by a random 10,000 to 100,000 (and `term` becomes -1), as
  mongod does;
- step-down hands the primary to an electable, healthy secondary (a simulated one, which `hello` then names
  as primary) for the step-down period, after which this process is elected again; with no such
  secondary it is refused (ExceededTimeLimit) unless `force`, which leaves the set without a primary for
  the period.
"""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bson import Int64, ObjectId

from harel_dev.errors import CommandError
from harel_dev.topology import MEMBER_DEFAULTS, SETTINGS_DEFAULTS, STATE_CODES, TERM

MAX_MEMBERS = 50
MAX_VOTERS = 7
_MEMBER_FIELDS = frozenset({"_id", "host", *MEMBER_DEFAULTS})
_CONFIG_FIELDS = frozenset(
    {"_id", "version", "term", "members", "protocolVersion", "writeConcernMajorityJournalDefault", "settings"}
)
INVALID_CONFIG = 93
NODE_NOT_FOUND = 74
INCOMPATIBLE = 103
SIMULATED_STATES = frozenset(STATE_CODES) - {"PRIMARY", "REMOVED"}


@dataclass
class ReplicaSetState:
    """The configuration and the simulated members' states; mutated under `lock`."""

    on_change: Callable[[], None]
    config: dict[str, Any] | None = None  # None: the one-member default
    term: int = TERM
    peer_states: dict[str, str] = field(default_factory=dict)
    simulated_primary: str | None = None
    stepped_down: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)
    _election: threading.Timer | None = None

    def reset(self) -> None:
        with self.lock:
            self._cancel_election()
            self.config = None
            self.term = TERM
            self.peer_states.clear()
            self.simulated_primary = None
            self.stepped_down = False

    def peer_state(self, member: dict[str, Any]) -> str:
        with self.lock:
            if member["host"] == self.simulated_primary:
                return "PRIMARY"
            default = "ARBITER" if member["arbiterOnly"] else "SECONDARY"
            return self.peer_states.get(member["host"], default)

    def set_peer_state(self, host: str, state: str) -> None:
        if state not in SIMULATED_STATES:
            raise ValueError(
                f"a simulated member's state is one of {sorted(SIMULATED_STATES)}, not {state!r}"
            )
        with self.lock:
            self.peer_states[host] = state
            if host == self.simulated_primary and state != "SECONDARY":
                self.simulated_primary = None
        self.on_change()

    # --- commands ------------------------------------------------------------------------------------

    def initiate(self, requested: Any, set_name: str, me: str, replica_set_id: ObjectId) -> dict[str, Any]:
        if requested in (None, {}):
            requested = {"_id": set_name, "members": [{"_id": 0, "host": me}]}
        config = validated(requested, set_name, me, term=self.term, code=INVALID_CONFIG)
        config.setdefault("version", 1)
        config["settings"]["replicaSetId"] = replica_set_id
        down = [m["host"] for m in config["members"] if m["host"] != me and self._is_down(m)]
        if down:
            raise CommandError(
                NODE_NOT_FOUND,
                "replSetInitiate quorum check failed because not all proposed set members responded "
                f"affirmatively: {', '.join(f'{host} failed with Connection refused' for host in down)}",
            )
        with self.lock:
            self.config = config
        self.on_change()
        return {"ok": 1.0}

    def reconfig(
        self, command: dict[str, Any], current: dict[str, Any], me: str, primary: bool
    ) -> dict[str, Any]:
        force = bool(command.get("force"))
        if not force and not primary:
            raise CommandError(10107, "replSetReconfig should only be run on a writable PRIMARY")
        requested = command.get("replSetReconfig")
        if isinstance(requested, dict) and requested.get("_id") != current["_id"]:
            raise CommandError(
                INCOMPATIBLE,
                f"New and old configurations differ in replica set name; old was {current['_id']}, and new "
                f"is {requested.get('_id')}",
            )
        config = validated(requested, current["_id"], me, term=self.term, code=NODE_NOT_FOUND)
        config["settings"]["replicaSetId"] = current["settings"]["replicaSetId"]
        if force:
            config["version"] = current["version"] + random.randint(10_000, 100_000)
            config["term"] = -1
        else:
            self._check_safe_change(current, config, me)
        with self.lock:
            self.config = config
            if self.simulated_primary not in {m["host"] for m in config["members"]}:
                self.simulated_primary = None
        self.on_change()
        return {"ok": 1.0}

    def _check_safe_change(self, current: dict[str, Any], config: dict[str, Any], me: str) -> None:
        if "version" not in config or config["version"] <= current["version"]:
            raise CommandError(
                INCOMPATIBLE,
                f"New config version {config.get('version')} must be greater than the current config "
                f"version {current['version']}",
            )
        old_hosts = {m["_id"]: m["host"] for m in current["members"]}
        for member in config["members"]:
            old = old_hosts.get(member["_id"])
            if old is not None and old != member["host"]:
                raise CommandError(
                    INCOMPATIBLE,
                    f"New and old configurations both have members with _id of {member['_id']} but in the new "
                    f"config the host is {member['host']} and in the old config it is {old}",
                )
        if len(_voters(current) ^ _voters(config)) > 1:
            raise CommandError(
                INCOMPATIBLE, "Non force replica set reconfig can only add or remove at most 1 voting member."
            )
        mine = next(m for m in config["members"] if m["host"] == me)
        if not _electable(mine):
            raise CommandError(
                INCOMPATIBLE,
                f"This node, {me}, with _id {mine['_id']} is not electable under the new configuration with "
                f"version {config['version']} for replica set {config['_id']}",
            )
        voters = [m for m in config["members"] if m["votes"]]
        up = [m["host"] for m in voters if m["host"] == me or not self._is_down(m)]
        required = len(voters) // 2 + 1
        if len(up) < required:
            raise CommandError(
                NODE_NOT_FOUND,
                f"Quorum check failed because not enough voting nodes responded; required {required} but only "
                f"the following {len(up)} voting nodes responded: {', '.join(up)}",
            )

    def step_down(self, command: dict[str, Any], config: dict[str, Any], me: str, now: str) -> dict[str, Any]:
        seconds = int(command.get("replSetStepDown") or 60)
        catch_up = int(command.get("secondaryCatchUpPeriodSecs", 10))
        if seconds <= catch_up:
            raise CommandError(2, "stepdown period must be longer than secondaryCatchUpPeriodSecs")
        candidates = [
            m["host"]
            for m in config["members"]
            if m["host"] != me and _electable(m) and m["votes"] and self.peer_state(m) == "SECONDARY"
        ]
        if not candidates and not command.get("force"):
            raise CommandError(
                262,
                f"No electable secondaries caught up as of {now}. Please use the replSetStepDown command with "
                "the argument {force: true} to force node to step down.",
            )
        with self.lock:
            self._cancel_election()
            self.stepped_down = True
            self.term += 1
            self.simulated_primary = candidates[0] if candidates else None
            self._election = threading.Timer(seconds, self._elected_again)
            self._election.daemon = True
            self._election.start()
        self.on_change()
        return {"ok": 1.0}

    def _elected_again(self) -> None:
        with self.lock:
            if not self.stepped_down:
                return
            self.stepped_down = False
            self.simulated_primary = None
            self.term += 1
            self._election = None
        self.on_change()

    def _cancel_election(self) -> None:
        if self._election is not None:
            self._election.cancel()
            self._election = None

    def _is_down(self, member: dict[str, Any]) -> bool:
        return self.peer_state(member) == "DOWN"


def validated(requested: Any, set_name: str, me: str, *, term: int, code: int) -> dict[str, Any]:
    """`requested` with mongod's defaults filled in; InvalidReplicaSetConfig (93) where it breaks a rule, and
    `code` when this process is not among its members."""
    if not isinstance(requested, dict):
        raise CommandError(INVALID_CONFIG, "a replica set configuration must be a document")
    unknown = set(requested) - _CONFIG_FIELDS
    if unknown:
        raise CommandError(40415, f"BSON field 'ReplSetConfig.{sorted(unknown)[0]}' is an unknown field.")
    if requested.get("_id") != set_name:
        raise CommandError(
            INVALID_CONFIG,
            f"Attempting to initiate a replica set with name {requested.get('_id')}, but command line reports "
            f"{set_name}; rejecting",
        )
    members = requested.get("members")
    if not isinstance(members, list) or not members:
        raise CommandError(INVALID_CONFIG, "Replica set configuration must contain at least one member")
    if len(members) > MAX_MEMBERS:
        raise CommandError(
            INVALID_CONFIG,
            f"Replica set configuration contains {len(members)} members, but must have at most {MAX_MEMBERS}",
        )
    config = copy.deepcopy(requested)
    config["members"] = [_member(member) for member in members]
    _check_members(config["members"])
    if me not in {m["host"] for m in config["members"]}:
        raise CommandError(
            code,
            f"No host described in new configuration with version {config.get('version', 1)} for replica set "
            f"{set_name} maps to this node",
        )
    config["term"] = term
    config.setdefault("protocolVersion", Int64(1))
    config.setdefault("writeConcernMajorityJournalDefault", True)
    config["settings"] = {**SETTINGS_DEFAULTS, **(config.get("settings") or {})}
    return config


def _member(requested: Any) -> dict[str, Any]:
    if not isinstance(requested, dict):
        raise CommandError(INVALID_CONFIG, "each member of a replica set configuration must be a document")
    unknown = set(requested) - _MEMBER_FIELDS
    if unknown:
        raise CommandError(40415, f"BSON field 'MemberConfig.{sorted(unknown)[0]}' is an unknown field.")
    if not isinstance(requested.get("_id"), int) or isinstance(requested.get("_id"), bool):
        raise CommandError(INVALID_CONFIG, f"member _id must be an integer, not {requested.get('_id')!r}")
    host = requested.get("host")
    if not isinstance(host, str) or ":" not in host:
        raise CommandError(INVALID_CONFIG, f"member host must be a 'host:port' string, not {host!r}")
    member = {"_id": requested["_id"], "host": host, **copy.deepcopy(MEMBER_DEFAULTS)}
    member.update({key: value for key, value in requested.items() if key in MEMBER_DEFAULTS})
    if member["arbiterOnly"] and "priority" not in requested:
        member["priority"] = 0.0
    if member["votes"] == 0 and "priority" not in requested:
        member["priority"] = 0.0
    return member


def _check_members(members: list[dict[str, Any]]) -> None:
    ids, hosts = [m["_id"] for m in members], [m["host"] for m in members]
    for values, what in ((ids, "_id"), (hosts, "host")):
        duplicates = sorted({str(v) for v in values if values.count(v) > 1})
        if duplicates:
            raise CommandError(
                INVALID_CONFIG, f"Found two member configurations with same {what} field, {duplicates[0]}"
            )
    for member in members:
        where = f"member {member['_id']} ({member['host']})"
        if member["votes"] not in (0, 1):
            raise CommandError(INVALID_CONFIG, f"{where}: votes must be 0 or 1, not {member['votes']}")
        if not 0 <= member["priority"] <= 1000:
            raise CommandError(INVALID_CONFIG, f"{where}: priority must be between 0 and 1000")
        for reason in ("arbiterOnly", "hidden"):
            if member[reason] and member["priority"] != 0:
                raise CommandError(INVALID_CONFIG, f"{where}: priority must be 0 when {reason} is true")
        if member["votes"] == 0 and member["priority"] != 0:
            raise CommandError(INVALID_CONFIG, f"{where}: priority must be 0 when non-voting (votes:0)")
    if sum(1 for m in members if m["votes"]) > MAX_VOTERS:
        raise CommandError(
            INVALID_CONFIG, f"Replica set configuration contains more than {MAX_VOTERS} voting members"
        )
    if not any(_electable(m) for m in members):
        raise CommandError(
            INVALID_CONFIG, "Replica set configuration must contain at least one electable member"
        )


def _electable(member: dict[str, Any]) -> bool:
    return bool(
        member["priority"] > 0 and member["votes"] and not member["arbiterOnly"] and not member["hidden"]
    )


def _voters(config: dict[str, Any]) -> set[str]:
    return {m["host"] for m in config["members"] if m["votes"]}
