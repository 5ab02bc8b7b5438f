"""A deployment that rejects the client is named at once and never waited for, even without a deadline: a wrong
password (AuthenticationFailed, as PyMongo raises it from `connect`'s ping) and a TLS handshake that cannot
succeed (TLSFailed, naming the member and the cause). Real PyMongo clients against loopback servers
(tests/loopback.py), then the classification on the driver's own exception objects.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymongo
import pytest
from pymongo.errors import AutoReconnect, OperationFailure, ServerSelectionTimeoutError
from pymongo.helpers_shared import _check_command_response

from harel.connection import attempts, client_settings, connect, connect_async, connecting, redact
from harel.connection.rejection import rejection, tls_failure
from harel.errors import AuthenticationFailed, ConnectionFailed, TLSFailed
from tests.loopback import AUTHENTICATION_FAILED, hanging_up, mongod, untrusted_tls

PASSWORD = "pw-" + secrets.token_hex(8)


def connect_sync(url: str, deadline: float | None) -> Any:
    return connect(url, deadline=deadline)


def connect_awaiting(url: str, deadline: float | None) -> Any:
    return asyncio.run(connect_async(url, deadline=deadline))


CONNECTS = pytest.mark.parametrize("connecting_with", [connect_sync, connect_awaiting], ids=["sync", "async"])


def not_ready_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not ready (attempt" in r.getMessage()]


# --- over sockets: what PyMongo raises, and what connect makes of it -----------------------------------------


@CONNECTS
def test_a_wrong_password_fails_at_once_naming_the_user_and_the_database(
    connecting_with: Callable[[str, float | None], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with mongod(refuse_credentials=True) as server:
        url = f"mongodb://harel:{PASSWORD}@{server.host_port}/harel?authSource=admin&directConnection=true"

        # No deadline: only a failure that is not retried can end this call.
        with pytest.raises(AuthenticationFailed) as failed:
            connecting_with(url, None)

    error = failed.value
    assert (error.user, error.database, error.url) == ("harel", "admin", redact(url))
    assert str(error).startswith(
        f"authentication failed for user harel on DB admin at {error.url}: "
        "Authentication failed. (AuthenticationFailed). Fix: check the user name, the password and authSource"
    )
    assert not_ready_lines(caplog) == []
    assert PASSWORD not in str(error) + caplog.text


@CONNECTS
def test_an_untrusted_certificate_fails_at_once_naming_the_member_and_the_cause(
    connecting_with: Callable[[str, float | None], Any], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    with untrusted_tls(tmp_path) as listener:
        url = f"mongodb://harel:{PASSWORD}@{listener.address}/harel?tls=true&directConnection=true"

        # No deadline: only a failure that is not retried can end this call. The driver reports a handshake
        # failure when server selection gives up, so it is named after the first attempt (one second).
        with pytest.raises(TLSFailed) as failed:
            connecting_with(url, None)

    error = failed.value
    assert error.hosts == [listener.address]
    assert error.reason == "certificate verify failed: self-signed certificate"
    assert str(error).startswith(f"TLS handshake with {listener.address} failed at {error.url}: certificate")
    assert "tlsCAFile=" in error.fix
    assert PASSWORD not in str(error) + caplog.text


def test_a_certificate_for_another_name_fails_at_once(tmp_path: Path) -> None:
    with untrusted_tls(tmp_path) as listener:
        # The CA is trusted now, but the certificate names localhost, not 127.0.0.1.
        url = f"mongodb://{listener.address}/?tls=true&directConnection=true&tlsCAFile={tmp_path / 'server.pem'}"

        with pytest.raises(TLSFailed) as failed:
            connect(url, deadline=None)

    assert "IP address mismatch, certificate is not valid for '127.0.0.1'" in failed.value.reason


def test_a_handshake_cut_short_is_waited_for_like_any_member_not_up_yet(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A member that is restarting accepts and drops connections: an end of file mid-handshake can pass.
    # The patience runs out after the third attempt, however long each one takes on a loaded machine.
    monkeypatch.setattr(attempts, "FIRST_ATTEMPT", 0.1)
    monkeypatch.setattr(connecting, "FIRST_PAUSE", 0.02)
    monkeypatch.setattr(
        connecting.Patience, "remaining", property(lambda p: math.inf if p.attempts < 3 else 0.0)
    )
    caplog.set_level(logging.WARNING, logger="harel.connection")
    with hanging_up() as listener, pytest.raises(ConnectionFailed) as failed:
        connect(f"mongodb://{listener.address}/?tls=true&directConnection=true", deadline=1.2)

    assert "SSL handshake failed" in failed.value.last_error
    assert len(not_ready_lines(caplog)) == 2, "the first two attempts are retried, the third gives up"


# --- the classification, on the driver's exception objects ---------------------------------------------------

URL = f"mongodb://harel:{PASSWORD}@mongo1:27017,mongo2:27017/harel?replicaSet=rs0&authSource=admin"


def settings(url: str = URL) -> Any:
    return client_settings(pymongo.MongoClient(url, connect=False))


def server_failure(reply: dict[str, Any]) -> OperationFailure:
    """The OperationFailure PyMongo raises for this reply."""
    with pytest.raises(OperationFailure) as raised:
        _check_command_response(reply, max_wire_version=25)
    return raised.value


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (AUTHENTICATION_FAILED, "Authentication failed. (AuthenticationFailed)"),
        (
            {
                "ok": 0,
                "errmsg": "Received authentication for mechanism SCRAM-SHA-256 which is not enabled",
                "code": 334,
                "codeName": "MechanismUnavailable",
            },
            "Received authentication for mechanism SCRAM-SHA-256 which is not enabled (MechanismUnavailable)",
        ),
    ],
    ids=["wrong-password", "mechanism"],
)
def test_refused_credentials_are_an_authentication_failure(reply: dict[str, Any], reason: str) -> None:
    rejected = rejection(server_failure(reply), {}, settings(), URL)

    assert isinstance(rejected, AuthenticationFailed)
    assert rejected.reason == reason
    assert (rejected.user, rejected.database) == ("harel", "admin")


def test_credentials_refused_in_the_background_are_an_authentication_failure() -> None:
    # A pool that authenticates outside the ping (minPoolSize) marks the member unknown with the refusal;
    # the ping then finds no member to run on.
    server_errors = {"mongo1:27017": server_failure(AUTHENTICATION_FAILED)}

    rejected = rejection(ServerSelectionTimeoutError("no primary"), server_errors, settings(), URL)

    assert isinstance(rejected, AuthenticationFailed)
    assert rejected.reason == "Authentication failed. (AuthenticationFailed)"


def test_a_certificate_identity_is_named_as_such() -> None:
    url = "mongodb://mongo1/?authMechanism=MONGODB-X509&tls=true"

    rejected = rejection(server_failure(AUTHENTICATION_FAILED), {}, settings(url), url)

    assert isinstance(rejected, AuthenticationFailed)
    assert str(rejected).startswith(
        "authentication failed for the client certificate's subject on DB $external"
    )


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(
            OperationFailure("not authorized on admin to execute command", 13, {"ok": 0, "code": 13}),
            id="unauthorized",
        ),
        pytest.param(
            OperationFailure("not primary", 10107, {"ok": 0, "code": 10107}), id="not-writable-primary"
        ),
        pytest.param(AutoReconnect("mongo1:27017: connection closed"), id="connection-closed"),
        pytest.param(ServerSelectionTimeoutError("No servers found yet"), id="selection-timeout"),
    ],
)
def test_everything_else_may_still_come_right(error: Exception) -> None:
    server_errors = {"mongo1:27017": AutoReconnect("mongo1:27017: [Errno 111] Connection refused")}

    assert rejection(error, server_errors, settings(), URL) is None  # type: ignore[arg-type]


def test_a_member_with_an_untrusted_certificate_is_named_among_unreachable_ones() -> None:
    server_errors = {
        "mongo1:27017": AutoReconnect("mongo1:27017: [Errno 111] Connection refused"),
        "mongo2:27017": AutoReconnect(
            "mongo2:27017: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired "
            "(_ssl.c:1006)"
        ),
    }

    rejected = rejection(ServerSelectionTimeoutError("no primary"), server_errors, settings(), URL)

    assert isinstance(rejected, TLSFailed)
    assert (rejected.hosts, rejected.reason) == (
        ["mongo2:27017"],
        "certificate verify failed: certificate has expired",
    )


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        (
            "SSL handshake failed: h:1: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
            "unable to get local issuer certificate (_ssl.c:1006)",
            "certificate verify failed: unable to get local issuer certificate",
        ),
        ("h:1: [SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca (_ssl.c:2580)", "tlsv1 alert unknown ca"),
        (
            "h:1: [SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)",
            "tlsv13 alert certificate required",
        ),
        (
            "SSL handshake failed: h:1: [SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)",
            "wrong version number",
        ),
        (
            "SSL handshake failed: h:1: [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of "
            "protocol (_ssl.c:1006)",
            None,
        ),
        ("h:1: timed out", None),
        ("h:1: [Errno 104] Connection reset by peer", None),
        ("mongo1:27017: [Errno -2] Name or service not known", None),
    ],
    ids=[
        "untrusted-ca",
        "client-cert-unknown",
        "client-cert-missing",
        "not-tls",
        "eof",
        "timeout",
        "reset",
        "unresolved-name",
    ],
)
def test_which_handshake_failures_are_permanent(text: str, failure: str | None) -> None:
    assert tls_failure(text) == failure
