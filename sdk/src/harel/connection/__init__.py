"""Connecting to MongoDB with safe defaults, and the start-up checks that refuse a deployment that can lose
acknowledged writes.

    urls         which backend a URL names, the client's safe defaults, redaction             (pure)
    deployment   what the rules read: reply documents, client settings, the deployment's shape (pure)
    rules        replies + client settings -> one finding per rule (`evaluate`)              (pure)
    report       Finding, CheckReport                                                          (pure)
    rejection    a deployment that rejects the client (authentication, TLS) vs one not up yet  (pure)
    attempts     how long one attempt may last; what the deadline leaves after the ping        (pure)
    connecting   `connect` / `connect_async`: build the client, wait for the deployment        (I/O)
    checking     `check` / `check_async`: ask the deployment, evaluate the replies             (I/O)
"""

from harel.connection.checking import check, check_async
from harel.connection.connecting import connect, connect_async
from harel.connection.deployment import ClientSettings, DeploymentReplies, client_settings
from harel.connection.report import CheckReport, Finding, Status, embedded_report
from harel.connection.rules import DEFAULT_DB_NAME, MIN_SERVER_VERSION, STORE_COLLECTIONS, evaluate
from harel.connection.urls import (
    SAFE_DEFAULTS,
    SOCKET_TIMEOUT_MS,
    WRITE_CONCERN_TIMEOUT_MS,
    client_arguments,
    embedded_backend,
    redact,
    scrub,
)

__all__ = [
    "DEFAULT_DB_NAME",
    "MIN_SERVER_VERSION",
    "SAFE_DEFAULTS",
    "SOCKET_TIMEOUT_MS",
    "STORE_COLLECTIONS",
    "WRITE_CONCERN_TIMEOUT_MS",
    "CheckReport",
    "ClientSettings",
    "DeploymentReplies",
    "Finding",
    "Status",
    "check",
    "check_async",
    "client_arguments",
    "client_settings",
    "connect",
    "connect_async",
    "embedded_backend",
    "embedded_report",
    "evaluate",
    "redact",
    "scrub",
]
