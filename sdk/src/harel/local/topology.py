"""What the local server says it is: the primary of a one-member replica set.

Drivers, and `harel check`, decide from `hello` what they are connected to. The local server answers as a
replica-set primary (`setName`, `hosts` = itself, `primary`, `me`, `topologyVersion`, `electionId`,
`setVersion`, `logicalSessionTimeoutMinutes`, wire versions of MongoDB 8.0), so the production connection
discipline (replica set, `w=majority`, retryable writes, sessions) works against it unchanged. Times it
reports (`localTime`, `lastWrite`) come from the server's clock.

The hooks a subclass overrides to answer as another role (a test double's secondary, standalone or
mongos): `writable`, `role_fields`, `member_state`, `admit`, `repl_set_initiate`.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bson import Int64, ObjectId, Timestamp

from harel.local.errors import CommandError
from harel.local.now import Clock, server_now

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


@dataclass
class Topology:
    """The replica-set state, with the `topologyVersion` that an awaitable `hello` waits on."""

    set_name: str
    me: str
    clock: Clock = time.time
    process_id: ObjectId = field(default_factory=ObjectId)
    started: float = field(default_factory=time.monotonic)
    _counter: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stopping: bool = False

    # --- hooks ---------------------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return True

    def role_fields(self, now: dt.datetime) -> dict[str, Any]:
        """The fields of `hello` that say which role this member plays."""
        op_time = {"ts": Timestamp(int(self.clock()), 1), "t": Int64(TERM)}
        return {
            "hosts": [self.me],
            "setName": self.set_name,
            "setVersion": 1,
            "secondary": False,
            "primary": self.me,
            "me": self.me,
            "electionId": ELECTION_ID,
            "lastWrite": {
                "opTime": op_time,
                "lastWriteDate": now,
                "majorityOpTime": op_time,
                "majorityWriteDate": now,
            },
        }

    def member_state(self) -> tuple[int, str]:
        """`replSetGetStatus`'s state of this member."""
        return 1, "PRIMARY"

    def admit(self, name: str, command: dict[str, Any]) -> None:
        """Raise the CommandError this member answers `command` with instead of running it; a primary runs
        everything."""

    def repl_set_initiate(self, command: dict[str, Any]) -> dict[str, Any]:
        raise CommandError(23, "already initialized")

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
        state, state_str = self.member_state()
        return {
            "set": self.set_name,
            "date": self.now(),
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
        return {
            "host": self.me,
            "version": SERVER_VERSION,
            "process": "mongod",
            "pid": Int64(os.getpid()),
            "uptime": float(int(uptime)),
            "uptimeMillis": Int64(int(uptime * 1000)),
            "localTime": self.now(),
            "connections": {"current": connections},
            "repl": {
                "setName": self.set_name,
                "isWritablePrimary": self.writable,
                "secondary": not self.writable,
                "hosts": [self.me],
                "me": self.me,
            },
            "ok": 1.0,
        }
