"""What the deployment says, asked from the host through its published port: mongo1's (directConnection) for the
replica set, the router's (mongos) for the sharded cluster."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pymongo import MongoClient
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from harel.errors import HarelError
from harel_stack.errors import ProbeFailure
from harel_stack.settings import APP_DB, APP_USER, StackSettings

PRIMARY = "PRIMARY"
NOT_YET_INITIALIZED = 94
# What a mongos says in its `hello` reply; a replica-set member says nothing there.
ROUTER_REPLY = "isdbgrid"
# Short: a probe is asked again every poll, and `status` should answer promptly when mongo1 is down.
PROBE_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class MemberState:
    name: str
    state: str  # PRIMARY, SECONDARY, STARTUP2, RECOVERING, (not reachable/healthy), ...
    healthy: bool


@dataclass(frozen=True)
class ReplicaSetState:
    name: str
    members: tuple[MemberState, ...]

    @property
    def primary(self) -> str | None:
        return next((m.name for m in self.members if m.state == PRIMARY), None)

    def describe(self) -> str:
        return ", ".join(f"{m.name} {m.state}" for m in self.members)

    @classmethod
    def from_status(cls, reply: Mapping[str, Any]) -> ReplicaSetState:
        return cls(
            name=str(reply.get("set", "?")),
            members=tuple(
                MemberState(
                    name=str(m["name"]), state=str(m.get("stateStr", "?")), healthy=m.get("health") == 1
                )
                for m in reply.get("members", [])
            ),
        )


@dataclass(frozen=True)
class ShardState:
    name: str
    host: str  # <set>/<host:port>,... as listShards reports it

    @classmethod
    def from_list_shards(cls, reply: Mapping[str, Any]) -> list[ShardState]:
        return [cls(name=str(s["_id"]), host=str(s.get("host", "?"))) for s in reply.get("shards", [])]


@dataclass(frozen=True)
class WorkerBeat:
    worker_id: str
    host: str
    last_beat: datetime
    processed: int

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> WorkerBeat:
        return cls(
            worker_id=str(document["_id"]),
            host=str(document.get("host", "?")),
            last_beat=document["last_beat"],
            processed=int(document.get("counters", {}).get("processed", 0)),
        )


class StackProbe(Protocol):
    """Each method raises ProbeFailure (one line, no secret) when it cannot answer."""

    def replica_set(self) -> ReplicaSetState: ...

    def router(self) -> str:
        """The address the router answered on, once what answers there is a mongos."""
        ...

    def shards(self) -> list[ShardState]: ...

    def authenticate_app_user(self) -> None: ...

    def harel_check(self) -> None: ...

    def workers(self) -> list[WorkerBeat]: ...

    def executions_by_status(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def count_statuses(documents: list[Mapping[str, Any]]) -> dict[str, int]:
    # The status lives inside the serialized execution (`data`, a JSON string); it is not a field to group on.
    counts = Counter(str(json.loads(document["data"]).get("status", "running")) for document in documents)
    return dict(sorted(counts.items()))


class MongoProbe:
    def __init__(self, settings: StackSettings) -> None:
        self._settings = settings
        # The container that publishes the port, named in the reasons.
        self._target = "mongos" if settings.sharded else "mongo1"
        common: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": settings.mongo_port,
            "directConnection": not settings.sharded,
            "authSource": "admin",
            "tz_aware": True,
            "serverSelectionTimeoutMS": PROBE_TIMEOUT_MS,
            "connectTimeoutMS": PROBE_TIMEOUT_MS,
        }
        if settings.tls_ca_file:
            common.update(tls=True, tlsCAFile=str(settings.tls_ca_file), tlsAllowInvalidHostnames=True)
        self._root: MongoClient[dict[str, Any]] = MongoClient(
            username=settings.root_user, password=settings.root_password.get_secret_value(), **common
        )
        self._app: MongoClient[dict[str, Any]] = MongoClient(
            username=APP_USER, password=settings.app_password.get_secret_value(), **common
        )
        # `hello` needs no credential: a router answers it before the users it checks exist.
        self._anonymous: MongoClient[dict[str, Any]] = MongoClient(**common)

    def _failure(self, what: str, error: PyMongoError) -> ProbeFailure:
        if isinstance(error, ConnectionFailure):
            return ProbeFailure(
                f"{what}: {self._target} does not answer on 127.0.0.1:{self._settings.mongo_port}"
            )
        if isinstance(error, OperationFailure) and error.code == NOT_YET_INITIALIZED:
            return ProbeFailure(f"{what}: rs0 is not initiated yet (mongo-init initiates it)")
        if isinstance(error, OperationFailure):
            return ProbeFailure(f"{what}: {error.details.get('codeName') if error.details else error.code}")
        return ProbeFailure(f"{what}: {error.__class__.__name__}")

    def replica_set(self) -> ReplicaSetState:
        try:
            return ReplicaSetState.from_status(self._root.admin.command("replSetGetStatus"))
        except PyMongoError as exc:
            raise self._failure("replSetGetStatus", exc) from None

    def router(self) -> str:
        address = f"127.0.0.1:{self._settings.mongo_port}"
        try:
            hello = self._anonymous.admin.command("hello")
        except PyMongoError as exc:
            raise self._failure("hello", exc) from None
        if hello.get("msg") != ROUTER_REPLY:
            raise ProbeFailure(
                f"what answers on {address} is not a mongos (a replica set's member left running?)"
            )
        return address

    def shards(self) -> list[ShardState]:
        try:
            return ShardState.from_list_shards(self._root.admin.command("listShards"))
        except PyMongoError as exc:
            raise self._failure("listShards", exc) from None

    def authenticate_app_user(self) -> None:
        try:
            status = self._app.admin.command("connectionStatus")
        except PyMongoError as exc:
            raise self._failure(f"authenticating as {APP_USER!r}", exc) from None
        users = status.get("authInfo", {}).get("authenticatedUsers", [])
        if {"user": APP_USER, "db": "admin"} not in users:
            raise ProbeFailure(f"{APP_USER!r} is not authenticated on this connection")

    def harel_check(self) -> None:
        from harel.connection import check, connect

        try:
            client = connect(self._settings.app_url, app_name="harel-stack", deadline=PROBE_TIMEOUT_MS / 1000)
        except HarelError as exc:
            raise ProbeFailure(str(exc)) from None
        try:
            check(client).raise_for_errors()
        except HarelError as exc:
            raise ProbeFailure(" ".join(str(exc).split())) from None
        except PyMongoError as exc:
            raise self._failure("harel check", exc) from None
        finally:
            client.close()

    def workers(self) -> list[WorkerBeat]:
        try:
            documents = list(
                self._app[APP_DB]["workers"].find({}, {"host": 1, "last_beat": 1, "counters": 1})
            )
        except PyMongoError as exc:
            raise self._failure("reading harel.workers", exc) from None
        return [WorkerBeat.from_document(d) for d in documents if "last_beat" in d]

    def executions_by_status(self) -> dict[str, int]:
        try:
            documents = list(self._app[APP_DB]["executions"].find({}, {"data": 1}))
        except PyMongoError as exc:
            raise self._failure("reading harel.executions", exc) from None
        return count_statuses(documents)

    def close(self) -> None:
        self._root.close()
        self._app.close()
        self._anonymous.close()
