"""The start-up rules: from the deployment's replies and the client's settings to one finding per rule.

Pure: no I/O and no logging, so every rule is tested on recorded replies. Each error finding carries the
`harel.errors` class that names it, with what was found, what is required and the fix.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from harel.backup_check import CHECK_NAME as BACKUP_CHECK
from harel.backup_check import judge_backups
from harel.backups import BACKUPS_COLLECTION
from harel.connection.deployment import (
    ClientSettings,
    ClusterDefaults,
    DeploymentReplies,
    FeatureCompatibility,
    Shape,
    Topology,
    failure_reason,
    release,
    succeeded,
)
from harel.connection.report import CheckReport, Finding, ok, violation, warning
from harel.connection.sharding import partitioning
from harel.connection.urls import WRITE_CONCERN_TIMEOUT_MS
from harel.errors import (
    CollationError,
    FeatureCompatibilityError,
    NotPrimaryError,
    ReadPreferenceError,
    RetryableWritesDisabledError,
    StandaloneDeploymentError,
    UnsupportedServerError,
    WeakReadConcernError,
    WeakWriteConcernError,
)

DEFAULT_DB_NAME = "harel"
# Every collection the store and the transport write; a non-simple collation on any of them would make two
# different ids one key.
STORE_COLLECTIONS = ("executions", "counters", "workers", "charts")

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


def _version(build_info: Mapping[str, Any]) -> tuple[tuple[int, int], str] | None:
    if not succeeded(build_info):
        return None
    text = str(build_info.get("version", ""))
    numbers: Sequence[Any] = build_info.get("versionArray") or ()
    found = (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else release(text)
    return (found, text) if found else None


def _release(build_info: Mapping[str, Any]) -> tuple[int, int] | None:
    version = _version(build_info)
    return version[0] if version is not None else None


def _server_version(build_info: Mapping[str, Any], hello: Mapping[str, Any]) -> Finding:
    required = f"{_MIN_VERSION_TEXT} or newer"
    version = _version(build_info)
    if version is not None:
        numbers, found = version
        supported = numbers >= MIN_SERVER_VERSION
    elif succeeded(hello) and "maxWireVersion" in hello:
        found = f"wire version {hello['maxWireVersion']} (buildInfo: {failure_reason(build_info)})"
        supported = hello["maxWireVersion"] >= MIN_WIRE_VERSION
    else:
        return warning(
            "server version", "unknown (buildInfo and hello failed)", required, "make buildInfo reachable"
        )
    if supported:
        return ok("server version", found, required)
    return violation(UnsupportedServerError, found, required, _UPGRADE_FIX)


_FCV_COMMAND = "db.adminCommand({getParameter: 1, featureCompatibilityVersion: 1})"


def _feature_compatibility(reply: Mapping[str, Any], shape: Shape) -> Finding:
    required = f"{_MIN_VERSION_TEXT} or newer"
    check = FeatureCompatibilityError.check
    if shape.topology is Topology.SHARDED:
        return warning(
            check,
            "unknown: a mongos answers with its own binary's version",
            required,
            f"an administrator can read it on each shard's primary: {_FCV_COMMAND}",
        )
    fcv = FeatureCompatibility.from_reply(reply)
    if fcv is None or fcv.release is None:
        because = failure_reason(reply) if not succeeded(reply) else "no version in the reply"
        return warning(
            check,
            f"unknown ({because})",
            required,
            "reading it takes the clusterMonitor role, which the app user needs for nothing else; an "
            f"administrator can check that it is {required}: {_FCV_COMMAND}",
        )
    if fcv.release >= MIN_SERVER_VERSION:
        return ok(check, fcv.describe(), required)
    return violation(
        FeatureCompatibilityError,
        fcv.describe(),
        required,
        f"a server upgraded from an older release keeps that release's behaviour until its feature "
        f"compatibility version is raised; once every member runs {_MIN_VERSION_TEXT} or newer, as an "
        f"administrator: db.adminCommand({{setFeatureCompatibilityVersion: '{_MIN_VERSION_TEXT}'}})",
    )


_SHAPE_REQUIRED = "replica set or sharded cluster"


def _deployment(shape: Shape, allow_standalone: bool) -> Finding:
    if shape.topology in (Topology.REPLICA_SET, Topology.SHARDED):
        found = f"replica set {shape.set_name}" if shape.set_name else "sharded cluster (mongos)"
        return ok("deployment", found, _SHAPE_REQUIRED)
    if shape.topology is Topology.UNINITIATED:
        return violation(
            StandaloneDeploymentError,
            "replica-set member, set not initiated",
            _SHAPE_REQUIRED,
            "initiate the set: rs.initiate({_id: 'rs0', members: [...]})",
        )
    if shape.topology is Topology.UNKNOWN:
        return warning("deployment", "unknown (hello failed)", _SHAPE_REQUIRED, "check the server's logs")
    return violation(
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
            violation(
                NotPrimaryError,
                f"{shape.member_state} {shape.me}, direct connection (primary: {shape.primary or 'unknown'})",
                required,
                f"a secondary's reads are stale and it takes no writes: {through_the_set}, without "
                "directConnection=true",
            )
        ]
    if settings.direct_connection:
        return [
            warning(
                "primary",
                f"primary {shape.me}, direct connection",
                required,
                f"a direct connection is not followed after a failover: remove directConnection=true and "
                f"{through_the_set}",
            )
        ]
    return [ok("primary", f"primary {shape.me}", required)]


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
        return ok("write concern", found, required)
    changes = []
    if w != "majority":
        changes.append(f"w={_concern_text(w)} to w=majority" if "w" in explicit else "w=majority")
    if j is not True:
        changes.append(f"journal={_concern_text(j)} to journal=true" if "j" in explicit else "journal=true")
    fix = (
        f"{'change' if explicit else 'set'} {' and '.join(changes)} in the URL or the client options "
        "(connect() defaults to w=majority, journal=true)"
    )
    return violation(WeakWriteConcernError, found, required, fix)


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
        return ok("read concern", found, required)
    return violation(
        WeakReadConcernError,
        found,
        required,
        f"{f'change readConcernLevel={level} to' if settings.read_concern_level else 'set'} "
        "readConcernLevel=majority in the URL or the client options (connect() defaults to majority)",
    )


def _read_preference(settings: ClientSettings) -> Finding:
    if settings.read_preference == "primary":
        return ok("read preference", "primary", "primary")
    return violation(
        ReadPreferenceError,
        settings.read_preference,
        "primary",
        f"remove readPreference={settings.read_preference} from the URL or set readPreference=primary: a "
        "secondary can return a state the primary has already moved past",
    )


def _retryable_writes(settings: ClientSettings, shape: Shape, allow_standalone: bool) -> Finding:
    required = "on"
    if not settings.retry_writes:
        return violation(
            RetryableWritesDisabledError,
            "off (retryWrites=false)",
            required,
            "remove retryWrites=false from the URL or the client options",
        )
    if shape.topology is Topology.STANDALONE:
        return violation(
            RetryableWritesDisabledError,
            "on, but a standalone cannot retry writes",
            required,
            "run a replica set (one member is enough for development)",
            relaxed=allow_standalone,
        )
    if shape.topology in (Topology.REPLICA_SET, Topology.SHARDED) and not shape.sessions:
        return violation(
            RetryableWritesDisabledError,
            "on, but the server offers no sessions",
            required,
            f"run {_MIN_VERSION_TEXT} or newer on every member; a member without sessions disables them",
        )
    return ok("retryable writes", "on", required)


def _collation(reply: Mapping[str, Any], database: str) -> Finding:
    required = "simple (binary) on store collections"
    if not succeeded(reply):
        return warning(
            "collation",
            f"unknown: listing {database} failed ({failure_reason(reply)})",
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
        return violation(
            CollationError,
            found,
            required,
            f"a locale collation makes ids that differ only in case or accents one key: re-create "
            f"{', '.join(sorted(wrong))} without a collation (it cannot be changed in place: copy the documents "
            "out, drop, re-create, copy back)",
        )
    present = sorted(info["name"] for info in infos)
    if not present:
        return ok("collation", f"simple (no store collection in {database} yet)", required)
    return ok("collation", f"simple on {', '.join(present)}", required)


def _write_concern_timeout(settings: ClientSettings) -> Finding:
    check = "write concern timeout"
    required = "wtimeoutMS or timeoutMS"
    timeout = settings.operation_timeout
    wtimeout = settings.write_concern.get("wtimeout")
    if timeout:
        return ok(check, f"timeoutMS={round(timeout * 1000)} (every operation)", required)
    # With timeoutMS set, even to 0 ("no bound"), PyMongo leaves wtimeout out of every command.
    if timeout is None and wtimeout:
        return ok(check, f"wtimeoutMS={wtimeout}", required)
    if timeout is not None:
        found, change = "timeoutMS=0: no bound", "remove timeoutMS=0"
    elif wtimeout is not None:
        found, change = "wtimeoutMS=0: no bound", "remove wtimeoutMS=0"
    else:
        found, change = "none", "set wtimeoutMS"
    return warning(
        check,
        found,
        required,
        "when the deployment loses its majority every write waits for an acknowledgement that never comes: "
        f"{change} (connect() defaults to wtimeoutMS={WRITE_CONCERN_TIMEOUT_MS})",
    )


def _cluster_default(shape: Shape, defaults: ClusterDefaults, settings: ClientSettings) -> list[Finding]:
    if shape.topology not in (Topology.REPLICA_SET, Topology.SHARDED):
        return []
    required = "w=majority, or the client's own"
    w = (defaults.write_concern or {}).get("w")
    if defaults.known:
        found = f"w={_concern_text(w)} ({defaults.source})"
        if w == "majority":
            return [ok("cluster default", found, required)]
    else:
        found = f"unknown ({defaults.unknown_because})"
    own = settings.write_concern
    if own.get("w") == "majority" and own.get("j") is True:
        # Our writes never use the default; only clients that set no write concern (shells, tools) would.
        return [ok("cluster default", f"{found}, unused: the client sets w=majority, j=true", required)]
    if not defaults.known:
        fix = (
            "set w=majority and journal=true in the URL or the client options (connect() does), or have an "
            "administrator read the default with db.adminCommand({getDefaultRWConcern: 1})"
        )
    else:
        fix = (
            "set w=majority and journal=true in the URL or the client options (connect() does), or "
            "db.adminCommand({setDefaultRWConcern: 1, defaultWriteConcern: {w: 'majority'}})"
        )
    return [warning("cluster default", found, required, fix)]


def _fault_tolerance(shape: Shape) -> list[Finding]:
    if shape.topology is not Topology.REPLICA_SET:
        return []
    data, arbiters = len(shape.data_members), len(shape.arbiters)
    majority = (data + arbiters) // 2 + 1
    required = "survives one member down"
    members = shape.members()
    if data == 1 and not arbiters:
        return [
            warning(
                "fault tolerance",
                "1 member: no failover",
                required,
                "fine for development; run three data-bearing members in production",
            )
        ]
    if data - 1 < majority:
        return [
            warning(
                "fault tolerance",
                f"{members}: majority writes stall with one down",
                required,
                f"{'replace arbiters with' if arbiters else 'add'} data-bearing members: three data-bearing "
                "members keep a majority through the loss of one",
            )
        ]
    if arbiters:
        return [
            warning(
                "fault tolerance",
                f"{members}",
                required,
                "arbiters vote but hold no copy of the data: replace them with data-bearing members",
            )
        ]
    return [ok("fault tolerance", members, required)]


def _authentication(settings: ClientSettings) -> Finding:
    required = "credentials"
    if settings.authenticated:
        who = settings.username or "a certificate or external identity"
        return ok("authentication", f"as {who} (authSource {settings.auth_source})", required)
    return warning(
        "authentication",
        "none",
        required,
        "enable auth on the deployment and put the app user in the URL: mongodb://harel:<password>@...",
    )


def _tls(settings: ClientSettings) -> Finding:
    if settings.tls:
        return ok("TLS", "on", "on")
    return warning(
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
    if not succeeded(replies.backups):
        return [
            warning(
                BACKUP_CHECK,
                f"unknown: reading {replies.database}.{BACKUPS_COLLECTION} failed ({failure_reason(replies.backups)})",
                required,
                f"grant the app user readWrite on {replies.database}",
            )
        ]
    now = _server_time(replies.hello)
    if now is None:
        return [
            warning(
                BACKUP_CHECK, "unknown: the server reported no time", required, "check the server's hello"
            )
        ]
    judged = judge_backups(replies.backups.get("cursor", {}).get("firstBatch", ()), now, window)
    if judged.fix is None:
        return [ok(BACKUP_CHECK, judged.found, judged.required)]
    return [warning(BACKUP_CHECK, judged.found, judged.required, judged.fix)]


def evaluate(
    replies: DeploymentReplies,
    settings: ClientSettings,
    *,
    allow_standalone: bool = False,
    backup_window: float | None = None,
) -> CheckReport:
    """Every finding for these replies and client settings. Pure: no I/O, no logging. `backup_window` (seconds)
    adds the backup finding."""
    shape = Shape.from_hello(replies.hello)
    defaults = ClusterDefaults.from_reply(replies.default_rw_concern, shape)
    findings = (
        _server_version(replies.build_info, replies.hello),
        _feature_compatibility(replies.feature_compatibility, shape),
        _deployment(shape, allow_standalone),
        *_primary(shape, settings),
        _write_concern(settings, defaults),
        _read_concern(settings, defaults),
        _read_preference(settings),
        _retryable_writes(settings, shape, allow_standalone),
        _write_concern_timeout(settings),
        _collation(replies.list_collections, replies.database),
        *_cluster_default(shape, defaults, settings),
        *_fault_tolerance(shape),
        _authentication(settings),
        _tls(settings),
        *_backups(replies, backup_window),
        *partitioning(
            shape,
            replies.partitions,
            replies.shard_key,
            replies.shards,
            _release(replies.build_info),
            replies.router_clocks,
        ),
    )
    return CheckReport(
        target=",".join(settings.hosts) or "unknown",
        deployment=shape.describe(),
        dev_override=allow_standalone,
        findings=findings,
    )
