"""What the double says about itself: its role, `hello`, `replSetGetStatus`, `buildInfo`, `serverStatus`."""

from __future__ import annotations

import datetime as dt
import enum
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bson import Int64, ObjectId, Timestamp

from .errors import CommandError, not_modelled

SERVER_VERSION = "8.0.4"
MAX_WIRE_VERSION = 25  # MongoDB 8.0
MIN_WIRE_VERSION = 0
MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
MAX_MESSAGE_SIZE_BYTES = 48_000_000
MAX_WRITE_BATCH_SIZE = 100_000
LOGICAL_SESSION_TIMEOUT_MINUTES = 30
# The server's election id for term 1; PyMongo compares (electionId, setVersion) to spot stale primaries.
ELECTION_ID = ObjectId("7fffffff0000000000000001")
TERM = 1


class Role(enum.Enum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    STANDALONE = "standalone"
    MONGOS = "mongos"


@dataclass
class Topology:
    """The role and replica-set state, with the `topologyVersion` that awaitable `hello` waits on."""

    role: Role
    set_name: str
    me: str
    initialized: bool = True
    process_id: ObjectId = field(default_factory=ObjectId)
    started: float = field(default_factory=time.monotonic)
    _counter: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stopping: bool = False

    @property
    def is_replica_set(self) -> bool:
        return self.role in (Role.PRIMARY, Role.SECONDARY)

    @property
    def writable(self) -> bool:
        return self.role in (Role.STANDALONE, Role.MONGOS) or (self.role is Role.PRIMARY and self.initialized)

    def topology_version(self) -> dict[str, Any]:
        with self._changed:
            return {"processId": self.process_id, "counter": Int64(self._counter)}

    def set_initialized(self, initialized: bool) -> None:
        with self._changed:
            self.initialized = initialized
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

    def hello(self, command: dict[str, Any], connection_id: int) -> dict[str, Any]:
        legacy = next(iter(command)).lower() == "ismaster"
        primary_key = "ismaster" if legacy else "isWritablePrimary"
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        doc: dict[str, Any] = {primary_key: self.writable}
        if command.get("helloOk"):
            doc["helloOk"] = True
        doc["topologyVersion"] = self.topology_version()
        if self.role is Role.MONGOS:
            doc["msg"] = "isdbgrid"
        elif self.is_replica_set and not self.initialized:
            doc.update(secondary=False, isreplicaset=True, info="Does not have a valid replica set config")
        elif self.is_replica_set:
            doc.update(self._replica_set_fields(now))
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

    def _replica_set_fields(self, now: dt.datetime) -> dict[str, Any]:
        op_time = {"ts": Timestamp(int(time.time()), 1), "t": Int64(TERM)}
        fields: dict[str, Any] = {
            "hosts": [self.me],
            "setName": self.set_name,
            "setVersion": 1,
            "secondary": self.role is Role.SECONDARY,
            "me": self.me,
            "lastWrite": {
                "opTime": op_time,
                "lastWriteDate": now,
                "majorityOpTime": op_time,
                "majorityWriteDate": now,
            },
        }
        if self.role is Role.PRIMARY:
            fields.update(primary=self.me, electionId=ELECTION_ID)
        return fields

    def repl_set_get_status(self) -> dict[str, Any]:
        if not self.is_replica_set:
            if self.role is Role.MONGOS:
                raise CommandError(59, "no such command: 'replSetGetStatus'")
            raise CommandError(76, "not running with --replSet")
        if not self.initialized:
            raise CommandError(94, "no replset config has been received")
        state, state_str = (1, "PRIMARY") if self.role is Role.PRIMARY else (2, "SECONDARY")
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        return {
            "set": self.set_name,
            "date": now,
            "myState": state,
            "term": Int64(TERM),
            "members": [
                {
                    "_id": 0,
                    "name": self.me,
                    "health": 1.0,
                    "state": state,
                    "stateStr": state_str,
                    "uptime": int(time.monotonic() - self.started),
                    "configVersion": 1,
                    "configTerm": TERM,
                    "self": True,
                }
            ],
            "ok": 1.0,
        }

    def repl_set_initiate(self, command: dict[str, Any]) -> dict[str, Any]:
        if not self.is_replica_set:
            raise CommandError(76, "This node was not started with replication enabled.")
        if self.initialized:
            raise CommandError(23, "already initialized")
        config = command.get("replSetInitiate")
        if isinstance(config, dict) and config.get("_id") not in (None, self.set_name):
            raise CommandError(
                93,
                f"Attempting to initiate a replica set with name {config['_id']}, "
                f"but command line reports {self.set_name}; rejecting",
            )
        self.set_initialized(True)
        return {"ok": 1.0}

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

    def get_parameter(self, command: dict[str, Any]) -> dict[str, Any]:
        """`getParameter` for the feature compatibility version only: that of a fresh deployment of this
        release (a mongos before 8.3 answers the same, from its own binary)."""
        if "featureCompatibilityVersion" not in command:
            raise not_modelled("getParameter for anything but featureCompatibilityVersion")
        major, minor, _ = SERVER_VERSION.split(".")
        return {"featureCompatibilityVersion": {"version": f"{major}.{minor}"}, "ok": 1.0}

    def server_status(self, connections: int) -> dict[str, Any]:
        uptime = time.monotonic() - self.started
        doc: dict[str, Any] = {
            "host": self.me,
            "version": SERVER_VERSION,
            "process": "mongos" if self.role is Role.MONGOS else "mongod",
            "pid": Int64(os.getpid()),
            "uptime": float(int(uptime)),
            "uptimeMillis": Int64(int(uptime * 1000)),
            "localTime": dt.datetime.now(dt.UTC).replace(tzinfo=None),
            "connections": {"current": connections},
            "ok": 1.0,
        }
        if self.is_replica_set and self.initialized:
            doc["repl"] = {
                "setName": self.set_name,
                "isWritablePrimary": self.writable,
                "secondary": self.role is Role.SECONDARY,
                "hosts": [self.me],
                "me": self.me,
            }
        return doc
