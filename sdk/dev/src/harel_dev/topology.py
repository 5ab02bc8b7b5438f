"""What the local server says it is: the primary of a one-member replica set.

Drivers, and `harel check`, decide from `hello` what they are connected to. The local server answers as a
replica-set primary (`setName`, `hosts` = itself, `primary`, `me`, `topologyVersion`, `electionId`,
`setVersion`, `logicalSessionTimeoutMinutes`, wire versions of MongoDB 8.0), so the production connection
discipline (replica set, `w=majority`, retryable writes, sessions) works against it unchanged. Times it
reports (`localTime`, `lastWrite`) come from the server's clock.

`hello`, `replSetGetStatus` and `replSetGetConfig` are all derived from one replica-set configuration
(`config()`, mongod's document shape): here one member, this server, at version 1 and term 1.

The hooks a subclass overrides to answer as another role or another set (a test double's secondary,
standalone, mongos, or a configured set of several members): `writable`, `role_fields`, `member_state`,
`config`, `term`, `primary_host`, `peer_state`, `admit`, `repl_status`, `repl_set_initiate`,
`repl_set_reconfig`, `repl_set_step_down`.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bson import Int64, ObjectId, Timestamp

from harel_dev.errors import CommandError, not_modelled
from harel_dev.now import Clock, server_now

SERVER_VERSION = "8.0.4"
MAX_WIRE_VERSION = 25  # MongoDB 8.0
MIN_WIRE_VERSION = 0
MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
MAX_MESSAGE_SIZE_BYTES = 48_000_000
MAX_WRITE_BATCH_SIZE = 100_000
LOGICAL_SESSION_TIMEOUT_MINUTES = 30
TERM = 1
# replSetGetStatus's member states (MemberState in mongod).
STATE_CODES = {
    "STARTUP": 0,
    "PRIMARY": 1,
    "SECONDARY": 2,
    "RECOVERING": 3,
    "STARTUP2": 5,
    "UNKNOWN": 6,
    "ARBITER": 7,
    "DOWN": 8,
    "ROLLBACK": 9,
    "REMOVED": 10,
}
# A member's fields in a replica-set configuration, with mongod's defaults.
MEMBER_DEFAULTS: dict[str, Any] = {
    "arbiterOnly": False,
    "buildIndexes": True,
    "hidden": False,
    "priority": 1.0,
    "tags": {},
    "secondaryDelaySecs": Int64(0),
    "votes": 1,
}
SETTINGS_DEFAULTS: dict[str, Any] = {
    "chainingAllowed": True,
    "heartbeatIntervalMillis": 2000,
    "heartbeatTimeoutSecs": 10,
    "electionTimeoutMillis": 10000,
    "catchUpTimeoutMillis": -1,
    "catchUpTakeoverDelayMillis": 30000,
    "getLastErrorModes": {},
    "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
}


def election_id(term: int) -> ObjectId:
    """The primary's election id in `term`; PyMongo compares (electionId, setVersion) to spot stale
    primaries, so it grows with the term."""
    return ObjectId(f"7fffffff{term:016x}")


@dataclass
class Topology:
    """The replica-set state, with the `topologyVersion` that an awaitable `hello` waits on."""

    set_name: str
    me: str
    clock: Clock = time.time
    process_id: ObjectId = field(default_factory=ObjectId)
    replica_set_id: ObjectId = field(default_factory=ObjectId)
    started: float = field(default_factory=time.monotonic)
    _counter: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stopping: bool = False

    # --- hooks ---------------------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return True

    def role_fields(self, now: dt.datetime) -> dict[str, Any]:
        """The fields of `hello` that say which role this member plays in the configured set."""
        op_time = {"ts": Timestamp(int(self.clock()), 1), "t": Int64(self.term())}
        config = self.config()
        members = config["members"]
        fields: dict[str, Any] = {
            "hosts": [
                m["host"] for m in members if not (m["arbiterOnly"] or m["hidden"] or m["priority"] == 0)
            ]
        }
        passives = [
            m["host"] for m in members if m["priority"] == 0 and not (m["arbiterOnly"] or m["hidden"])
        ]
        arbiters = [m["host"] for m in members if m["arbiterOnly"]]
        if passives:
            fields["passives"] = passives
        if arbiters:
            fields["arbiters"] = arbiters
        fields.update(setName=self.set_name, setVersion=config["version"], secondary=not self.writable)
        primary = self.primary_host()
        if primary is not None:
            fields["primary"] = primary
        fields["me"] = self.me
        if self.writable:
            fields["electionId"] = election_id(self.term())
        fields["lastWrite"] = {
            "opTime": op_time,
            "lastWriteDate": now,
            "majorityOpTime": op_time,
            "majorityWriteDate": now,
        }
        return fields

    def member_state(self) -> tuple[int, str]:
        """`replSetGetStatus`'s state of this member."""
        return 1, "PRIMARY"

    def config(self) -> dict[str, Any]:
        """The replica-set configuration (`replSetGetConfig`'s `config`): one member, this server."""
        return {
            "_id": self.set_name,
            "version": 1,
            "term": self.term(),
            "members": [{"_id": 0, "host": self.me, **MEMBER_DEFAULTS}],
            "protocolVersion": Int64(1),
            "writeConcernMajorityJournalDefault": True,
            "settings": {**SETTINGS_DEFAULTS, "replicaSetId": self.replica_set_id},
        }

    def term(self) -> int:
        return TERM

    def primary_host(self) -> str | None:
        """The member `hello` names as the primary (None: no primary is known)."""
        return self.me if self.writable else None

    def peer_state(self, host: str) -> str:
        """The state of another configured member (`STATE_CODES`); a one-member set has none."""
        raise KeyError(host)

    def admit(self, name: str, command: dict[str, Any]) -> None:
        """Raise the CommandError this member answers `command` with instead of running it; a primary runs
        everything."""

    def repl_set_initiate(self, command: dict[str, Any]) -> dict[str, Any]:
        raise CommandError(23, "already initialized")

    def repl_set_reconfig(self, command: dict[str, Any]) -> dict[str, Any]:
        raise not_modelled("replica-set reconfiguration (the local server is a one-member set)")

    def repl_set_step_down(self, command: dict[str, Any]) -> dict[str, Any]:
        raise not_modelled(
            "replSetStepDown (the local server is a one-member set with no one to step down to)"
        )

    # --- topology version ----------------------------------------------------------------------------

    def topology_version(self) -> dict[str, Any]:
        with self._changed:
            return {"processId": self.process_id, "counter": Int64(self._counter)}

    def changed(self) -> None:
        """The role or state changed: bump the topology version and wake every awaitable `hello`."""
        with self._changed:
            self._counter += 1
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()

    def await_change(self, known: Any, max_await_ms: int) -> None:
        """Block an awaitable `hello` until the topology changes or `max_await_ms` passes, as a server does.

        Without this wait the driver's streaming monitor would ask again at once, in a busy loop.
        """
        if not isinstance(known, dict) or known.get("processId") != self.process_id:
            return
        deadline = time.monotonic() + max_await_ms / 1000
        with self._changed:
            while self._counter == known.get("counter") and not self._stopping:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(remaining)

    # --- replies -------------------------------------------------------------------------------------

    def now(self) -> dt.datetime:
        return server_now(self.clock())

    def hello(self, command: dict[str, Any], connection_id: int) -> dict[str, Any]:
        legacy = next(iter(command)).lower() == "ismaster"
        primary_key = "ismaster" if legacy else "isWritablePrimary"
        now = self.now()
        doc: dict[str, Any] = {primary_key: self.writable}
        if command.get("helloOk"):
            doc["helloOk"] = True
        doc["topologyVersion"] = self.topology_version()
        doc.update(self.role_fields(now))
        doc.update(
            maxBsonObjectSize=MAX_BSON_OBJECT_SIZE,
            maxMessageSizeBytes=MAX_MESSAGE_SIZE_BYTES,
            maxWriteBatchSize=MAX_WRITE_BATCH_SIZE,
            localTime=now,
            logicalSessionTimeoutMinutes=LOGICAL_SESSION_TIMEOUT_MINUTES,
            connectionId=connection_id,
            minWireVersion=MIN_WIRE_VERSION,
            maxWireVersion=MAX_WIRE_VERSION,
            readOnly=False,
            ok=1.0,
        )
        return doc

    def repl_set_get_status(self) -> dict[str, Any]:
        config = self.config()
        now = self.now()
        op_time = {"ts": Timestamp(int(self.clock()), 1), "t": Int64(self.term())}
        uptime = int(time.monotonic() - self.started)
        state, state_str = self.member_state()
        members = []
        for member in config["members"]:
            entry: dict[str, Any] = {"_id": member["_id"], "name": member["host"]}
            if member["host"] == self.me:
                entry.update(health=1.0, state=state, stateStr=state_str, uptime=uptime, self=True)
            else:
                peer = self.peer_state(member["host"])
                down = peer == "DOWN"
                entry.update(health=0.0 if down else 1.0, state=STATE_CODES[peer], stateStr=peer)
                entry.update(uptime=0 if down else uptime, lastHeartbeat=now, pingMs=Int64(0))
                if down:
                    entry["lastHeartbeatMessage"] = "Error connecting to " + member["host"]
            if entry["stateStr"] not in ("ARBITER", "DOWN"):
                entry.update(optime=op_time, optimeDate=now)
            entry.update(configVersion=config["version"], configTerm=config["term"])
            members.append(entry)
        voters = [m for m in config["members"] if m["votes"]]
        majority = len(voters) // 2 + 1
        writable_voters = [m for m in voters if not m["arbiterOnly"]]
        return {
            "set": self.set_name,
            "date": now,
            "myState": state,
            "term": Int64(self.term()),
            "heartbeatIntervalMillis": Int64(config["settings"]["heartbeatIntervalMillis"]),
            "majorityVoteCount": majority,
            "writeMajorityCount": min(majority, len(writable_voters)),
            "votingMembersCount": len(voters),
            "writableVotingMembersCount": len(writable_voters),
            "members": members,
            "ok": 1.0,
        }

    def repl_set_get_config(self) -> dict[str, Any]:
        return {"config": self.config(), "ok": 1.0}

    def build_info(self) -> dict[str, Any]:
        major, minor, patch = (int(part) for part in SERVER_VERSION.split("."))
        return {
            "version": SERVER_VERSION,
            "versionArray": [major, minor, patch, 0],
            "gitVersion": "0" * 40,
            "modules": [],
            "sysInfo": "deprecated",
            "bits": 64,
            "debug": False,
            "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE,
            "storageEngines": ["wiredTiger"],
            "ok": 1.0,
        }

    def server_status(self, connections: int) -> dict[str, Any]:
        uptime = time.monotonic() - self.started
        status: dict[str, Any] = {
            "host": self.me,
            "version": SERVER_VERSION,
            "process": "mongod",
            "pid": Int64(os.getpid()),
            "uptime": float(int(uptime)),
            "uptimeMillis": Int64(int(uptime * 1000)),
            "localTime": self.now(),
            "connections": {"current": connections},
        }
        repl = self.repl_status()
        if repl is not None:
            status["repl"] = repl
        status["ok"] = 1.0
        return status

    def repl_status(self) -> dict[str, Any] | None:
        """`serverStatus.repl`: the replica-set member's view (None for a server that is no member)."""
        return {
            "setName": self.set_name,
            "isWritablePrimary": self.writable,
            "secondary": not self.writable,
            "hosts": self.role_fields(self.now())["hosts"],
            "me": self.me,
        }
