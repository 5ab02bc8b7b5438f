"""What the rules read: the deployment's reply documents, the client's own settings, and what the replies say
about the deployment (its shape, its cluster-wide defaults, its feature compatibility version).

Pure: reading a client's options touches no network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pymongo

UNAUTHORIZED = 13


@dataclass(frozen=True)
class DeploymentReplies:
    """The reply documents of the five commands, failures included (a failure is its `ok: 0` reply)."""

    database: str
    hello: Mapping[str, Any]
    build_info: Mapping[str, Any]
    feature_compatibility: Mapping[str, Any]
    default_rw_concern: Mapping[str, Any]
    list_collections: Mapping[str, Any]
    # The `find` on the backup status documents; None when no backup window is configured (nothing asked).
    backups: Mapping[str, Any] | None = None
    # The partition map (`harel_meta`), `executions` in `config.collections`, `listShards`: `connection.sharding`.
    partitions: Mapping[str, Any] | None = None
    shard_key: Mapping[str, Any] | None = None
    shards: Mapping[str, Any] | None = None
    # Each router's clock offset from this machine's, as the client's monitor heard them (None: not heard).
    router_clocks: Mapping[str, float] | None = None


@dataclass(frozen=True)
class ClientSettings:
    """The client options the checks judge. Holds no secret: only the user name and whether TLS is on."""

    hosts: tuple[str, ...]
    write_concern: Mapping[str, Any]
    read_concern_level: str | None
    read_preference: str
    retry_writes: bool
    direct_connection: bool
    username: str | None
    auth_source: str | None
    authenticated: bool
    tls: bool
    # timeoutMS in seconds: None when unset, 0 when set to "no bound".
    operation_timeout: float | None = None


def client_settings(client: pymongo.MongoClient[Any] | pymongo.AsyncMongoClient[Any]) -> ClientSettings:
    options = client.options
    pool = options.pool_options
    # PyMongo exposes the credentials and the TLS context only on its pool options.
    credentials = pool._credentials
    return ClientSettings(
        hosts=tuple(
            sorted(f"{host}:{port}" for host, port in client.topology_description.server_descriptions())
        ),
        write_concern=dict(options.write_concern.document),
        read_concern_level=options.read_concern.level,
        read_preference=options.read_preference.mongos_mode,
        retry_writes=options.retry_writes,
        direct_connection=bool(options.direct_connection),
        username=credentials.username if credentials else None,
        auth_source=credentials.source if credentials else None,
        authenticated=credentials is not None,
        tls=pool._ssl_context is not None,
        operation_timeout=options.timeout,
    )


def succeeded(reply: Mapping[str, Any]) -> bool:
    return bool(reply.get("ok"))


def failure_reason(reply: Mapping[str, Any]) -> str:
    if reply.get("code") == UNAUTHORIZED:
        return "not authorized"
    return f"the command failed: {reply.get('codeName') or reply.get('errmsg') or 'no reason given'}"


def release(text: str) -> tuple[int, int] | None:
    """The major and minor release numbers in a version string ("8.0.4", "4.4"), or None."""
    numbers = re.findall(r"\d+", text)
    return (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else None


class Topology(StrEnum):
    STANDALONE = "standalone"
    REPLICA_SET = "replica set"
    SHARDED = "sharded cluster"
    UNINITIATED = "uninitiated replica-set member"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Shape:
    """What `hello` says about the deployment and the member this connection reached."""

    topology: Topology
    set_name: str | None = None
    me: str | None = None
    primary: str | None = None
    member_state: str = "unknown"
    data_members: tuple[str, ...] = ()
    arbiters: tuple[str, ...] = ()
    sessions: bool = False

    @classmethod
    def from_hello(cls, hello: Mapping[str, Any]) -> Shape:
        if not succeeded(hello):
            return cls(Topology.UNKNOWN)
        sessions = "logicalSessionTimeoutMinutes" in hello
        if hello.get("msg") == "isdbgrid":
            return cls(Topology.SHARDED, sessions=sessions)
        if hello.get("setName"):
            return cls(
                Topology.REPLICA_SET,
                set_name=hello["setName"],
                me=hello.get("me"),
                primary=hello.get("primary"),
                member_state=_member_state(hello),
                # `hosts` are the electable members, `passives` the priority-0 ones; hidden members are not listed.
                data_members=(*hello.get("hosts", ()), *hello.get("passives", ())),
                arbiters=tuple(hello.get("arbiters", ())),
                sessions=sessions,
            )
        if hello.get("isreplicaset"):
            return cls(Topology.UNINITIATED, sessions=sessions)
        return cls(Topology.STANDALONE, sessions=sessions)

    def describe(self) -> str:
        if self.topology is Topology.REPLICA_SET:
            return (
                f"replica set {self.set_name}: {self.members()}, connected to {self.member_state} {self.me}"
            )
        return self.topology.value

    def members(self) -> str:
        data, arbiters = len(self.data_members), len(self.arbiters)
        text = f"{data} data-bearing member{'s' if data != 1 else ''}"
        return text + (f" + {arbiters} arbiter{'s' if arbiters != 1 else ''}" if arbiters else "")


def _member_state(hello: Mapping[str, Any]) -> str:
    if hello.get("isWritablePrimary") or hello.get("ismaster"):
        return "primary"
    if hello.get("secondary"):
        return "secondary"
    if hello.get("arbiterOnly"):
        return "arbiter"
    return "member in another state (starting, recovering or removed)"


@dataclass(frozen=True)
class ClusterDefaults:
    """The cluster-wide default read and write concern, as getDefaultRWConcern reports it (or why not)."""

    write_concern: Mapping[str, Any] | None
    read_concern_level: str | None
    source: str
    unknown_because: str | None = None

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any], shape: Shape) -> ClusterDefaults:
        if shape.topology is Topology.STANDALONE:
            return cls({"w": 1}, "local", "the server's own default")
        if not succeeded(reply):
            return cls(None, None, "unknown", failure_reason(reply))
        # Without a configured default the server reports `defaultWriteConcern` only when the implicit default
        # is majority; when it is absent the server writes with w:1 (the implicit default of a set whose
        # arbiters leave too few data-bearing members, or any server before 5.0).
        return cls(
            reply.get("defaultWriteConcern") or {"w": 1},
            reply.get("defaultReadConcern", {}).get("level", "local"),
            reply.get("defaultWriteConcernSource", "the server's own default"),
        )

    @property
    def known(self) -> bool:
        return self.unknown_because is None


@dataclass(frozen=True)
class FeatureCompatibility:
    """The feature compatibility version `getParameter` reports: the release whose rules the server keeps
    (during an upgrade or a downgrade, the lower one, and where it is heading)."""

    version: str
    release: tuple[int, int] | None
    target: str | None = None
    previous: str | None = None

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> FeatureCompatibility | None:
        """None when the reply is a failure or carries no version."""
        if not succeeded(reply):
            return None
        fcv = reply.get("featureCompatibilityVersion")
        if not isinstance(fcv, Mapping) or not isinstance(fcv.get("version"), str):
            return None
        version = fcv["version"]
        return cls(version, release(version), fcv.get("targetVersion"), fcv.get("previousVersion"))

    def describe(self) -> str:
        if self.previous:
            return f"{self.version} (downgrading from {self.previous})"
        if self.target and self.target != self.version:
            return f"{self.version} (upgrading to {self.target})"
        return self.version
