"""Asking the deployment: `check` / `check_async` send eight commands (nine with a backup window: the backup status
documents) and hand the replies, with the client's own options, to the pure rules. The twins differ only in their
awaits. With a `timeout` the commands together take no longer than that."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pymongo
from pymongo.errors import ExecutionTimeout, OperationFailure

from harel.backup_check import configured_window
from harel.backups import BACKUPS_COLLECTION
from harel.connection.deployment import DeploymentReplies, client_settings
from harel.connection.report import CheckReport, Status
from harel.connection.router_clocks import heard_routers
from harel.connection.rules import DEFAULT_DB_NAME, STORE_COLLECTIONS, evaluate
from harel.driver_errors import mapped
from harel.executions.fields import EXECUTIONS
from harel.executions.partitions import META, PARTITIONS_ID

logger = logging.getLogger("harel.connection")


@dataclass(frozen=True)
class _Probe:
    name: str
    database: str
    command: dict[str, Any]


def _probes(database: str, backup_window: float | None) -> Sequence[_Probe]:
    backups = (
        (_Probe("backups", database, {"find": BACKUPS_COLLECTION, "limit": 100}),) if backup_window else ()
    )
    return (
        *backups,
        _Probe("hello", "admin", {"hello": 1}),
        _Probe("build_info", "admin", {"buildInfo": 1}),
        _Probe("feature_compatibility", "admin", {"getParameter": 1, "featureCompatibilityVersion": 1}),
        _Probe("default_rw_concern", "admin", {"getDefaultRWConcern": 1}),
        _Probe("partitions", database, {"find": META, "filter": {"_id": PARTITIONS_ID}, "limit": 1}),
        _Probe(
            "shard_key",
            "config",
            {"find": "collections", "filter": {"_id": f"{database}.{EXECUTIONS}"}, "limit": 1},
        ),
        _Probe("shards", "admin", {"listShards": 1}),
        _Probe(
            "list_collections",
            database,
            {"listCollections": 1, "filter": {"name": {"$in": list(STORE_COLLECTIONS)}}, "nameOnly": False},
        ),
    )


def _refusal(error: OperationFailure) -> Mapping[str, Any]:
    """A command's failure as its reply document; a network error is not a refusal and propagates."""
    return error.details or {"ok": 0, "code": error.code, "errmsg": str(error)}


def _bounded(timeout: float | None) -> contextlib.AbstractContextManager[Any]:
    """`pymongo.timeout` over the whole check, or nothing: each command keeps the client's own bounds."""
    return pymongo.timeout(timeout) if timeout is not None else contextlib.nullcontext()


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
        DeploymentReplies(database=database, router_clocks=heard_routers(client), **replies),
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
    timeout: float | None = None,
) -> CheckReport:
    """Every finding on this client's deployment. `allow_standalone` (development only) turns the standalone
    error into "relaxed" and logs a loud warning each time. `backup_window` (seconds; default: HAREL_BACKUP_WINDOW,
    unset = no backup finding) adds the backup finding. `timeout` (seconds) bounds the commands together. Raises
    only when the deployment stops answering or the timeout runs out (DeploymentUnavailable)."""
    database = _database_name(client, db_name)
    window = backup_window if backup_window is not None else configured_window(os.environ)
    replies: dict[str, Mapping[str, Any]] = {}
    with mapped(), _bounded(timeout):
        for probe in _probes(database, window):
            try:
                replies[probe.name] = client[probe.database].command(probe.command)
            except ExecutionTimeout:  # the check's time ran out: not the server refusing the command
                raise
            except OperationFailure as error:
                replies[probe.name] = _refusal(error)
    return _conclude(client, database, replies, allow_standalone, window)


async def check_async(
    client: pymongo.AsyncMongoClient[Any],
    *,
    db_name: str | None = None,
    allow_standalone: bool = False,
    backup_window: float | None = None,
    timeout: float | None = None,
) -> CheckReport:
    """`check` for PyMongo's AsyncMongoClient."""
    database = _database_name(client, db_name)
    window = backup_window if backup_window is not None else configured_window(os.environ)
    replies: dict[str, Mapping[str, Any]] = {}
    with mapped(), _bounded(timeout):
        for probe in _probes(database, window):
            try:
                replies[probe.name] = await client[probe.database].command(probe.command)
            except ExecutionTimeout:  # the check's time ran out: not the server refusing the command
                raise
            except OperationFailure as error:
                replies[probe.name] = _refusal(error)
    return _conclude(client, database, replies, allow_standalone, window)
