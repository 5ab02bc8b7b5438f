"""Connecting to MongoDB with safe defaults, and the start-up checks that refuse a deployment that can lose
acknowledged writes.

`connect` / `connect_async` build the client and wait for the deployment to answer. `check` / `check_async` ask
the deployment four questions (`hello`, `buildInfo`, `getDefaultRWConcern`, `listCollections`) and hand the
reply documents, with the client's own options, to `evaluate`: a pure function, so every rule is tested on
recorded replies. The twins differ only in their awaits.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote_plus

import pymongo
from pydantic import BaseModel, ConfigDict, Field
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from harel.backup_check import CHECK_NAME as BACKUP_CHECK
from harel.backup_check import configured_window, judge_backups
from harel.backups import BACKUPS_COLLECTION
from harel.errors import (
    CollationError,
    ConnectionFailed,
    DeploymentCheckError,
    DeploymentRefused,
    InvalidURL,
    NotPrimaryError,
    ReadPreferenceError,
    RetryableWritesDisabledError,
    StandaloneDeploymentError,
    UnsupportedServerError,
    WeakReadConcernError,
    WeakWriteConcernError,
)

logger = logging.getLogger("harel.connection")

DEFAULT_DB_NAME = "harel"
# Every collection the store and the transport write; a non-simple collation on any of them would make two
# different ids one key.
STORE_COLLECTIONS = ("executions", "counters", "queue", "dead_letters", "workers", "charts")

MONGODB_SCHEMES = frozenset({"mongodb", "mongodb+srv"})
EMBEDDED_SCHEMES = frozenset({"mongomock", "memory"})

# 5.0 is the first release in which majority read concern cannot be switched off (5.0 removed
# enableMajorityReadConcern=false) and in which getDefaultRWConcern says where the default write concern comes
# from (the implicit w:1 of a set with arbiters shows only there). Wire version 13 is 5.0.
MIN_SERVER_VERSION = (5, 0)
MIN_WIRE_VERSION = 13
_MIN_VERSION_TEXT = ".".join(map(str, MIN_SERVER_VERSION))
_UPGRADE_FIX = (
    f"upgrade MongoDB to {_MIN_VERSION_TEXT} or newer (the stack ships 8.0): from {_MIN_VERSION_TEXT} on, "
    "majority read concern cannot be disabled and the default write concern's source is reported"
)

UNAUTHORIZED = 13

# Each safe default: the option names PyMongo accepts for it (lower-cased), the name we pass, the value.
# A default is applied only when neither the URL nor the caller's options name the setting.
SAFE_DEFAULTS: tuple[tuple[frozenset[str], str, Any], ...] = (
    (frozenset({"w"}), "w", "majority"),
    (frozenset({"journal"}), "journal", True),
    (frozenset({"readconcernlevel"}), "readConcernLevel", "majority"),
    (frozenset({"readpreference", "read_preference"}), "readPreference", "primary"),
    (frozenset({"retrywrites"}), "retryWrites", True),
)

# Waiting for a deployment: the first pause, the longest pause, and the longest single attempt (a server
# selection that finds nobody waits this long before the next pause).
FIRST_PAUSE = 0.25
MAX_PAUSE = 5.0
MAX_ATTEMPT = 10.0

_SECRET_QUERY_OPTIONS = re.compile(
    r"(?i)\b(tlsCertificateKeyFilePassword|sslPEMKeyPassword|sslClientCertificateKeyPassword"
    r"|authMechanismProperties)=([^&#]*)"
)

# PyMongo appends its configured timeouts to every network error; they say nothing about why it failed.
_DRIVER_TIMEOUTS = re.compile(r" \(configured timeouts: [^)]*\)")

Client = TypeVar("Client", pymongo.MongoClient, pymongo.AsyncMongoClient)


# --- URLs ----------------------------------------------------------------------------------------------------


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def _userinfo_end(rest: str) -> int:
    """Where the user info of a URL (without its scheme) ends, or -1: at its last `@`. A password typed with a
    raw `@`, `/` or `?` is still redacted whole; an `@` in an option value only makes redaction hide more."""
    return rest.rfind("@")


def _password(url: str) -> str | None:
    _, sep, rest = url.partition("://")
    end = _userinfo_end(rest if sep else url)
    if end < 0:
        return None
    _, colon, password = (rest if sep else url)[:end].partition(":")
    return password if colon and password else None


def redact(url: str) -> str:
    """The URL with its password, and any secret-bearing option value, replaced by `***`. Safe on any string,
    well-formed or not."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    end = _userinfo_end(rest)
    if end >= 0:
        user, colon, _ = rest[:end].partition(":")
        if colon:
            rest = f"{user}:***{rest[end:]}"
    return scheme + sep + _SECRET_QUERY_OPTIONS.sub(r"\1=***", rest)


def scrub(text: str, url: str) -> str:
    """`text` (a driver's message) with the URL's password removed, raw or percent-decoded."""
    password = _password(url)
    if password:
        for form in {password, unquote_plus(password)}:
            text = text.replace(form, "***")
    return text


def embedded_backend(url: str) -> str | None:
    """`mongomock` or `memory` when the URL names an embedded, in-process backend; None otherwise."""
    scheme = _scheme(url)
    return scheme if scheme in EMBEDDED_SCHEMES else None


def _named_options(url: str, options: Mapping[str, Any]) -> set[str]:
    _, _, query = url.partition("?")
    names = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
    return names | {name.lower() for name in options}


def client_arguments(url: str, app_name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for the client: the safe defaults the URL and `options` leave unset, the app
    name, then `options` as given. Raises InvalidURL for anything that is not a MongoDB URL."""
    scheme = _scheme(url)
    if scheme in EMBEDDED_SCHEMES:
        raise InvalidURL(
            redact(url), f"{scheme}:// is an embedded, in-process backend with no server to connect to"
        )
    if scheme not in MONGODB_SCHEMES:
        raise InvalidURL(redact(url), "expected a mongodb:// or mongodb+srv:// URL")
    named = _named_options(url, options)
    arguments: dict[str, Any] = {key: value for aliases, key, value in SAFE_DEFAULTS if not aliases & named}
    if "appname" not in named:
        arguments["appname"] = app_name
    # Construction must not touch the network (a mongodb+srv name may not resolve yet); the first ping does.
    arguments["connect"] = False
    arguments.update(options)
    return arguments


def _new_client(factory: type[Client], url: str, arguments: Mapping[str, Any]) -> Client:
    try:
        return factory(url, **arguments)
    except (PyMongoError, ValueError, TypeError) as error:
        raise InvalidURL(redact(url), scrub(str(error), url)) from None


# --- waiting for the deployment ------------------------------------------------------------------------------


def _failure_text(
    client: pymongo.MongoClient | pymongo.AsyncMongoClient, error: PyMongoError, url: str
) -> str:
    """One line on why an attempt failed: per server when nobody could be reached (PyMongo's own message
    carries a whole topology description)."""
    text = str(error)
    if isinstance(error, ConnectionFailure):
        servers = client.topology_description.server_descriptions()
        problems = [str(server.error) for server in servers.values() if server.error is not None]
        text = "; ".join(problems) or text.split(", Timeout:", maxsplit=1)[0]
    return scrub(_DRIVER_TIMEOUTS.sub("", text), url)


@dataclass
class _Patience:
    """Bounded exponential backoff with jitter until a deadline."""

    url: str
    deadline: float
    started: float = field(default_factory=time.monotonic)
    attempts: int = 0
    last_failure: str = "no attempt was made"

    @property
    def remaining(self) -> float:
        return self.deadline - (time.monotonic() - self.started)

    def attempt_timeout(self) -> float:
        # Never 0: PyMongo reads a zero timeout as "no timeout".
        return max(0.01, min(self.remaining, MAX_ATTEMPT))

    def pause_after(self, failure: str) -> float | None:
        """The pause before the next attempt, or None when the deadline has passed."""
        self.attempts += 1
        self.last_failure = failure
        remaining = self.remaining
        if remaining <= 0:
            return None
        ceiling = min(MAX_PAUSE, FIRST_PAUSE * 2 ** (self.attempts - 1))
        pause = min(remaining, random.uniform(ceiling / 2, ceiling))
        logger.warning(
            "MongoDB at %s not ready (attempt %d, retrying in %.1fs): %s",
            self.url,
            self.attempts,
            pause,
            failure,
        )
        return pause

    def gave_up(self) -> ConnectionFailed:
        return ConnectionFailed(self.url, time.monotonic() - self.started, self.last_failure)


def connect(
    url: str, *, app_name: str = "harel", deadline: float = 60.0, **options: Any
) -> pymongo.MongoClient[dict[str, Any]]:
    """A client with safe defaults (w=majority, journal, majority reads, primary reads, retryable writes)
    unless the URL or `options` set them, returned once the deployment answers a ping. Containers start in any
    order, so it retries with bounded backoff until `deadline` seconds have passed, then raises
    ConnectionFailed (URL redacted, last failure). A weak override is kept as given: `check` reports it."""
    client = _new_client(pymongo.MongoClient, url, client_arguments(url, app_name, options))
    patience = _Patience(redact(url), deadline)
    while True:
        try:
            with pymongo.timeout(patience.attempt_timeout()):
                client.admin.command("ping")
        except PyMongoError as error:
            pause = patience.pause_after(_failure_text(client, error, url))
            if pause is None:
                client.close()
                raise patience.gave_up() from None
            time.sleep(pause)
        else:
            return client


async def connect_async(
    url: str, *, app_name: str = "harel", deadline: float = 60.0, **options: Any
) -> pymongo.AsyncMongoClient[dict[str, Any]]:
    """`connect` for PyMongo's AsyncMongoClient."""
    client = _new_client(pymongo.AsyncMongoClient, url, client_arguments(url, app_name, options))
    patience = _Patience(redact(url), deadline)
    while True:
        try:
            with pymongo.timeout(patience.attempt_timeout()):
                await client.admin.command("ping")
        except PyMongoError as error:
            pause = patience.pause_after(_failure_text(client, error, url))
            if pause is None:
                await client.close()
                raise patience.gave_up() from None
            await asyncio.sleep(pause)
        else:
            return client


# --- what the checks read ------------------------------------------------------------------------------------


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
    )


@dataclass(frozen=True)
class DeploymentReplies:
    """The reply documents of the four commands, failures included (a failure is its `ok: 0` reply)."""

    database: str
    hello: Mapping[str, Any]
    build_info: Mapping[str, Any]
    default_rw_concern: Mapping[str, Any]
    list_collections: Mapping[str, Any]
    # The `find` on the backup status documents; None when no backup window is configured (nothing asked).
    backups: Mapping[str, Any] | None = None


def _succeeded(reply: Mapping[str, Any]) -> bool:
    return bool(reply.get("ok"))


def _failure_reason(reply: Mapping[str, Any]) -> str:
    if reply.get("code") == UNAUTHORIZED:
        return "not authorized"
    return f"the command failed: {reply.get('codeName') or reply.get('errmsg') or 'no reason given'}"


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
        if not _succeeded(hello):
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
        if not _succeeded(reply):
            return cls(None, None, "unknown", _failure_reason(reply))
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


# --- findings ------------------------------------------------------------------------------------------------


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"
    RELAXED = "relaxed"


class Finding(BaseModel):
    """One check's outcome. Errors (and relaxed errors) carry the exception that names them."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    check: str
    found: str
    required: str
    status: Status
    fix: str | None = None
    error: DeploymentCheckError | None = Field(default=None, exclude=True)

    def document(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "error": type(self.error).__name__ if self.error else None}


class CheckReport(BaseModel):
    """Every finding of one check, in a fixed order."""

    model_config = ConfigDict(frozen=True)

    target: str
    deployment: str
    dev_override: bool = False
    embedded: bool = False
    findings: tuple[Finding, ...] = ()

    @property
    def errors(self) -> list[DeploymentCheckError]:
        return [f.error for f in self.findings if f.status is Status.ERROR and f.error is not None]

    @property
    def passed(self) -> bool:
        return not self.errors

    def count(self, status: Status) -> int:
        return sum(1 for f in self.findings if f.status is status)

    def raise_for_errors(self) -> None:
        """Raise DeploymentRefused listing every error; relaxed errors and warnings pass."""
        if self.errors:
            raise DeploymentRefused(self.errors)

    def document(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "deployment": self.deployment,
            "embedded": self.embedded,
            "dev_override": self.dev_override,
            "passed": self.passed,
            "counts": {status.value: self.count(status) for status in Status},
            "findings": [f.document() for f in self.findings],
        }


def embedded_report(url: str) -> CheckReport:
    """The report for an embedded backend: there is no deployment to check."""
    backend = embedded_backend(url)
    if backend is None:
        raise InvalidURL(redact(url), "not an embedded backend (mongomock:// or memory://)")
    return CheckReport(
        target=f"{backend}://",
        deployment=f"embedded, in-process backend ({backend}): no deployment to check",
        embedded=True,
    )


def _ok(check: str, found: str, required: str) -> Finding:
    return Finding(check=check, found=found, required=required, status=Status.OK)


def _warning(check: str, found: str, required: str, fix: str) -> Finding:
    return Finding(check=check, found=found, required=required, status=Status.WARNING, fix=fix)


def _violation(
    error_type: type[DeploymentCheckError], found: str, required: str, fix: str, *, relaxed: bool = False
) -> Finding:
    return Finding(
        check=error_type.check,
        found=found,
        required=required,
        status=Status.RELAXED if relaxed else Status.ERROR,
        fix=fix,
        error=error_type(found, required, fix),
    )


def _version(build_info: Mapping[str, Any]) -> tuple[tuple[int, ...], str] | None:
    if not _succeeded(build_info):
        return None
    text = str(build_info.get("version", ""))
    numbers = build_info.get("versionArray") or [int(n) for n in re.findall(r"\d+", text)[:3]]
    return (tuple(int(n) for n in numbers[:2]), text) if numbers else None


def _server_version(build_info: Mapping[str, Any], hello: Mapping[str, Any]) -> Finding:
    required = f"{_MIN_VERSION_TEXT} or newer"
    version = _version(build_info)
    if version is not None:
        numbers, found = version
        supported = numbers >= MIN_SERVER_VERSION
    elif _succeeded(hello) and "maxWireVersion" in hello:
        found = f"wire version {hello['maxWireVersion']} (buildInfo: {_failure_reason(build_info)})"
        supported = hello["maxWireVersion"] >= MIN_WIRE_VERSION
    else:
        return _warning(
            "server version", "unknown (buildInfo and hello failed)", required, "make buildInfo reachable"
        )
    if supported:
        return _ok("server version", found, required)
    return _violation(UnsupportedServerError, found, required, _UPGRADE_FIX)


_SHAPE_REQUIRED = "replica set or sharded cluster"


def _deployment(shape: Shape, allow_standalone: bool) -> Finding:
    if shape.topology in (Topology.REPLICA_SET, Topology.SHARDED):
        found = f"replica set {shape.set_name}" if shape.set_name else "sharded cluster (mongos)"
        return _ok("deployment", found, _SHAPE_REQUIRED)
    if shape.topology is Topology.UNINITIATED:
        return _violation(
            StandaloneDeploymentError,
            "replica-set member, set not initiated",
            _SHAPE_REQUIRED,
            "initiate the set: rs.initiate({_id: 'rs0', members: [...]})",
        )
    if shape.topology is Topology.UNKNOWN:
        return _warning("deployment", "unknown (hello failed)", _SHAPE_REQUIRED, "check the server's logs")
    return _violation(
        StandaloneDeploymentError,
        "standalone server",
        _SHAPE_REQUIRED,
        "a standalone has no majority and cannot retry writes: run mongod with --replSet rs0 and rs.initiate() "
        "(one member is enough for development), or pass --dev / HAREL_DEV=1 to accept it for development only",
        relaxed=allow_standalone,
    )


def _primary(shape: Shape, settings: ClientSettings) -> list[Finding]:
    if shape.topology is not Topology.REPLICA_SET:
        return []
    required = "the primary, via the set"
    through_the_set = f"list the members and the set name: mongodb://<members>/?replicaSet={shape.set_name}"
    if shape.member_state != "primary":
        return [
            _violation(
                NotPrimaryError,
                f"{shape.member_state} {shape.me}, direct connection (primary: {shape.primary or 'unknown'})",
                required,
                f"a secondary's reads are stale and it takes no writes: {through_the_set}, without "
                "directConnection=true",
            )
        ]
    if settings.direct_connection:
        return [
            _warning(
                "primary",
                f"primary {shape.me}, direct connection",
                required,
                f"a direct connection is not followed after a failover: remove directConnection=true and "
                f"{through_the_set}",
            )
        ]
    return [_ok("primary", f"primary {shape.me}", required)]


def _concern_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _write_concern(settings: ClientSettings, defaults: ClusterDefaults) -> Finding:
    required = "w=majority, j=true"
    explicit = settings.write_concern
    inherited = [key for key in ("w", "j") if key not in explicit]
    inherit_from = defaults.write_concern or {}
    w = explicit.get("w", inherit_from.get("w"))
    j = explicit.get("j", inherit_from.get("j"))
    found = f"w={_concern_text(w)}, j={_concern_text(j)}"
    if inherited:
        keys = " and ".join(inherited)
        found += (
            f" ({keys} from the cluster default)"
            if defaults.known
            else f" (the client sets no {keys}; the cluster default is unknown: {defaults.unknown_because})"
        )
    if w == "majority" and j is True:
        return _ok("write concern", found, required)
    changes = []
    if w != "majority":
        changes.append(f"w={_concern_text(w)} to w=majority" if "w" in explicit else "w=majority")
    if j is not True:
        changes.append(f"journal={_concern_text(j)} to journal=true" if "j" in explicit else "journal=true")
    fix = (
        f"{'change' if explicit else 'set'} {' and '.join(changes)} in the URL or the client options "
        "(connect() defaults to w=majority, journal=true)"
    )
    return _violation(WeakWriteConcernError, found, required, fix)


def _read_concern(settings: ClientSettings, defaults: ClusterDefaults) -> Finding:
    required = "majority"
    level = settings.read_concern_level
    if level is not None:
        found = level
    elif defaults.known:
        level = defaults.read_concern_level
        found = f"{level} (the cluster default)"
    else:
        found = f"unset, and the cluster default is unknown ({defaults.unknown_because})"
    if level == "majority":
        return _ok("read concern", found, required)
    return _violation(
        WeakReadConcernError,
        found,
        required,
        f"{f'change readConcernLevel={level} to' if settings.read_concern_level else 'set'} "
        "readConcernLevel=majority in the URL or the client options (connect() defaults to majority)",
    )


def _read_preference(settings: ClientSettings) -> Finding:
    if settings.read_preference == "primary":
        return _ok("read preference", "primary", "primary")
    return _violation(
        ReadPreferenceError,
        settings.read_preference,
        "primary",
        f"remove readPreference={settings.read_preference} from the URL or set readPreference=primary: a "
        "secondary can return a state the primary has already moved past",
    )


def _retryable_writes(settings: ClientSettings, shape: Shape, allow_standalone: bool) -> Finding:
    required = "on"
    if not settings.retry_writes:
        return _violation(
            RetryableWritesDisabledError,
            "off (retryWrites=false)",
            required,
            "remove retryWrites=false from the URL or the client options",
        )
    if shape.topology is Topology.STANDALONE:
        return _violation(
            RetryableWritesDisabledError,
            "on, but a standalone cannot retry writes",
            required,
            "run a replica set (one member is enough for development)",
            relaxed=allow_standalone,
        )
    if shape.topology in (Topology.REPLICA_SET, Topology.SHARDED) and not shape.sessions:
        return _violation(
            RetryableWritesDisabledError,
            "on, but the server offers no sessions",
            required,
            f"run {_MIN_VERSION_TEXT} or newer on every member; a member without sessions disables them",
        )
    return _ok("retryable writes", "on", required)


def _collation(reply: Mapping[str, Any], database: str) -> Finding:
    required = "simple (binary) on store collections"
    if not _succeeded(reply):
        return _warning(
            "collation",
            f"unknown: listing {database} failed ({_failure_reason(reply)})",
            required,
            f"grant the app user readWrite on {database}",
        )
    infos = [
        info
        for info in reply.get("cursor", {}).get("firstBatch", ())
        if info.get("name") in STORE_COLLECTIONS
    ]
    wrong = {
        info["name"]: info["options"]["collation"]
        for info in infos
        if info.get("options", {}).get("collation", {}).get("locale", "simple") != "simple"
    }
    if wrong:
        found = "; ".join(
            f"{name}: "
            + ", ".join(f"{key} {value}" for key, value in collation.items() if key in ("locale", "strength"))
            for name, collation in sorted(wrong.items())
        )
        return _violation(
            CollationError,
            found,
            required,
            f"a locale collation makes ids that differ only in case or accents one key: re-create "
            f"{', '.join(sorted(wrong))} without a collation (it cannot be changed in place: copy the documents "
            "out, drop, re-create, copy back)",
        )
    present = sorted(info["name"] for info in infos)
    if not present:
        return _ok("collation", f"simple (no store collection in {database} yet)", required)
    return _ok("collation", f"simple on {', '.join(present)}", required)


def _cluster_default(shape: Shape, defaults: ClusterDefaults) -> list[Finding]:
    if shape.topology not in (Topology.REPLICA_SET, Topology.SHARDED):
        return []
    required = "w=majority"
    if not defaults.known:
        return [
            _warning(
                "cluster default",
                f"unknown ({defaults.unknown_because})",
                required,
                "nothing to do while the client sets w=majority and journal=true itself; an administrator can "
                "read it with db.adminCommand({getDefaultRWConcern: 1})",
            )
        ]
    w = (defaults.write_concern or {}).get("w")
    found = f"w={_concern_text(w)} ({defaults.source})"
    if w == "majority":
        return [_ok("cluster default", found, required)]
    return [
        _warning(
            "cluster default",
            found,
            required,
            "db.adminCommand({setDefaultRWConcern: 1, defaultWriteConcern: {w: 'majority'}}): clients that set no "
            "write concern of their own (shells, tools) write with this one",
        )
    ]


def _fault_tolerance(shape: Shape) -> list[Finding]:
    if shape.topology is not Topology.REPLICA_SET:
        return []
    data, arbiters = len(shape.data_members), len(shape.arbiters)
    majority = (data + arbiters) // 2 + 1
    required = "survives one member down"
    members = shape.members()
    if data == 1 and not arbiters:
        return [
            _warning(
                "fault tolerance",
                "1 member: no failover",
                required,
                "fine for development; run three data-bearing members in production",
            )
        ]
    if data - 1 < majority:
        return [
            _warning(
                "fault tolerance",
                f"{members}: majority writes stall with one down",
                required,
                f"{'replace arbiters with' if arbiters else 'add'} data-bearing members: three data-bearing "
                "members keep a majority through the loss of one",
            )
        ]
    if arbiters:
        return [
            _warning(
                "fault tolerance",
                f"{members}",
                required,
                "arbiters vote but hold no copy of the data: replace them with data-bearing members",
            )
        ]
    return [_ok("fault tolerance", members, required)]


def _authentication(settings: ClientSettings) -> Finding:
    required = "credentials"
    if settings.authenticated:
        who = settings.username or "a certificate or external identity"
        return _ok("authentication", f"as {who} (authSource {settings.auth_source})", required)
    return _warning(
        "authentication",
        "none",
        required,
        "enable auth on the deployment and put the app user in the URL: mongodb://harel:<password>@...",
    )


def _tls(settings: ClientSettings) -> Finding:
    if settings.tls:
        return _ok("TLS", "on", "on")
    return _warning(
        "TLS",
        "off",
        "on",
        "credentials and documents cross the network unencrypted: enable TLS on the deployment and add "
        "tls=true to the URL",
    )


def _server_time(hello: Mapping[str, Any]) -> float | None:
    local_time = hello.get("localTime")
    if not isinstance(local_time, dt.datetime):
        return None
    return (local_time if local_time.tzinfo else local_time.replace(tzinfo=dt.UTC)).timestamp()


def _backups(replies: DeploymentReplies, window: float | None) -> list[Finding]:
    """harel.backup_check's rule on the status documents, at the server's time; only with a window configured."""
    if window is None or replies.backups is None:
        return []
    required = "a recent successful backup"
    fix = "grant the app user readWrite on its database, and read the status with the app user"
    if not _succeeded(replies.backups):
        found = f"unknown: reading {replies.database}.{BACKUPS_COLLECTION} failed ({_failure_reason(replies.backups)})"
        return [_warning(BACKUP_CHECK, found, required, fix)]
    now = _server_time(replies.hello)
    if now is None:
        return [
            _warning(BACKUP_CHECK, "unknown: the server did not report its time", required, "check hello")
        ]
    judged = judge_backups(replies.backups.get("cursor", {}).get("firstBatch", ()), now, window)
    if judged.ok:
        return [_ok(BACKUP_CHECK, judged.found, judged.required)]
    return [_warning(BACKUP_CHECK, judged.found, judged.required, judged.fix or "")]


def evaluate(
    replies: DeploymentReplies,
    settings: ClientSettings,
    *,
    allow_standalone: bool = False,
    backup_window: float | None = None,
) -> CheckReport:
    """Every finding for these replies and client settings. Pure: no I/O, no logging."""
    shape = Shape.from_hello(replies.hello)
    defaults = ClusterDefaults.from_reply(replies.default_rw_concern, shape)
    findings = (
        _server_version(replies.build_info, replies.hello),
        _deployment(shape, allow_standalone),
        *_primary(shape, settings),
        _write_concern(settings, defaults),
        _read_concern(settings, defaults),
        _read_preference(settings),
        _retryable_writes(settings, shape, allow_standalone),
        _collation(replies.list_collections, replies.database),
        *_cluster_default(shape, defaults),
        *_fault_tolerance(shape),
        _authentication(settings),
        _tls(settings),
        *_backups(replies, backup_window),
    )
    return CheckReport(
        target=",".join(settings.hosts) or "unknown",
        deployment=shape.describe(),
        dev_override=allow_standalone,
        findings=findings,
    )


# --- gathering the replies -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    name: str
    database: str
    command: Mapping[str, Any]


def _probes(database: str, backup_window: float | None) -> Sequence[_Probe]:
    backups = (
        (_Probe("backups", database, {"find": BACKUPS_COLLECTION, "limit": 100}),) if backup_window else ()
    )
    return (
        *backups,
        _Probe("hello", "admin", {"hello": 1}),
        _Probe("build_info", "admin", {"buildInfo": 1}),
        _Probe("default_rw_concern", "admin", {"getDefaultRWConcern": 1}),
        _Probe(
            "list_collections",
            database,
            {"listCollections": 1, "filter": {"name": {"$in": list(STORE_COLLECTIONS)}}, "nameOnly": False},
        ),
    )


def _refusal(error: OperationFailure) -> Mapping[str, Any]:
    """A command's failure as its reply document; a network error is not a refusal and propagates."""
    return error.details or {"ok": 0, "code": error.code, "errmsg": str(error)}


def _database_name(
    client: pymongo.MongoClient[Any] | pymongo.AsyncMongoClient[Any], db_name: str | None
) -> str:
    return db_name or client.get_default_database(default=DEFAULT_DB_NAME).name


def _conclude(
    client: pymongo.MongoClient[Any] | pymongo.AsyncMongoClient[Any],
    database: str,
    replies: Mapping[str, Mapping[str, Any]],
    allow_standalone: bool,
    backup_window: float | None,
) -> CheckReport:
    report = evaluate(
        DeploymentReplies(database=database, **replies),
        client_settings(client),
        allow_standalone=allow_standalone,
        backup_window=backup_window,
    )
    _announce_override(report)
    return report


def _announce_override(report: CheckReport) -> None:
    if not report.dev_override:
        return
    relaxed = [f.check for f in report.findings if f.status is Status.RELAXED]
    if relaxed:
        logger.warning(
            "DEVELOPMENT OVERRIDE (--dev / HAREL_DEV=1 / allow_standalone): accepting %s at %s with %s relaxed. "
            "A standalone has no majority and cannot retry writes: an acknowledged write can be lost. Never run "
            "production like this.",
            report.deployment,
            report.target,
            ", ".join(relaxed),
        )
    else:
        logger.warning(
            "DEVELOPMENT OVERRIDE (--dev / HAREL_DEV=1 / allow_standalone) is on but relaxes nothing: %s at %s "
            "passes the deployment check. Remove the override.",
            report.deployment,
            report.target,
        )


def check(
    client: pymongo.MongoClient[Any],
    *,
    db_name: str | None = None,
    allow_standalone: bool = False,
    backup_window: float | None = None,
) -> CheckReport:
    """Every finding on this client's deployment. `allow_standalone` (development only) turns the standalone
    error into "relaxed" and logs a loud warning each time. `backup_window` (seconds; default: HAREL_BACKUP_WINDOW,
    unset = no backup finding) adds the backup finding. Raises only when the deployment stops answering."""
    database = _database_name(client, db_name)
    window = backup_window if backup_window is not None else configured_window(os.environ)
    replies: dict[str, Mapping[str, Any]] = {}
    for probe in _probes(database, window):
        try:
            replies[probe.name] = client[probe.database].command(probe.command)
        except OperationFailure as error:
            replies[probe.name] = _refusal(error)
    return _conclude(client, database, replies, allow_standalone, window)


async def check_async(
    client: pymongo.AsyncMongoClient[Any],
    *,
    db_name: str | None = None,
    allow_standalone: bool = False,
    backup_window: float | None = None,
) -> CheckReport:
    """`check` for PyMongo's AsyncMongoClient."""
    database = _database_name(client, db_name)
    window = backup_window if backup_window is not None else configured_window(os.environ)
    replies: dict[str, Mapping[str, Any]] = {}
    for probe in _probes(database, window):
        try:
            replies[probe.name] = await client[probe.database].command(probe.command)
        except OperationFailure as error:
            replies[probe.name] = _refusal(error)
    return _conclude(client, database, replies, allow_standalone, window)
