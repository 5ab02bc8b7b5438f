"""Telling a deployment that rejects this client from one that is not answering yet.

A wrong password or a certificate the client cannot trust stays wrong however long the client waits, so
`connect` stops at once with a named error instead of retrying until its deadline. Pure: it reads the
driver's exception and what the driver recorded for each server, and touches no network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from harel.connection.deployment import ClientSettings
from harel.connection.urls import redact, scrub
from harel.errors import AuthenticationFailed, ConnectionRejected, TLSFailed

# The server's codes for credentials it will not accept: a wrong password or unknown user (18), a mechanism
# the user has no credentials for (334).
AUTHENTICATION_CODES = frozenset({18, 334})

# OpenSSL's reasons for a handshake that fails the same way every time: a certificate one side cannot trust
# or does not have, or no protocol both sides speak. An end of file, a reset or a timeout in the middle of a
# handshake is not among them: a member that is restarting causes those.
PERMANENT_TLS_REASONS = frozenset(
    {
        "CERTIFICATE_VERIFY_FAILED",
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
        "TLSV1_ALERT_PROTOCOL_VERSION",
        "UNSUPPORTED_PROTOCOL",
        "NO_PROTOCOLS_AVAILABLE",
        "WRONG_VERSION_NUMBER",
    }
)

# How Python's ssl module words an error: "[SSL: REASON] what happened (_ssl.c:1006)". The driver keeps only
# the text of a server's last error (it drops the exception's cause), so the reason is read from the text.
_SSL_REASON = re.compile(r"\[SSL: (?P<reason>[A-Z0-9_]+)\] (?P<text>[^(]*?)\s*(?:\(_ssl\.c:\d+\)|$)")


def tls_failure(text: str) -> str | None:
    """What went wrong, when `text` (a driver's error message) reports a handshake that retrying cannot fix."""
    match = _SSL_REASON.search(text)
    if match is None or match["reason"] not in PERMANENT_TLS_REASONS:
        return None
    return match["text"].strip() or match["reason"]


def _authentication_failure(
    error: BaseException, settings: ClientSettings, url: str
) -> AuthenticationFailed | None:
    if not isinstance(error, OperationFailure) or error.code not in AUTHENTICATION_CODES:
        return None
    details = error.details or {}
    reason = details.get("errmsg") or str(error)
    code_name = details.get("codeName")
    return AuthenticationFailed(
        settings.username,
        settings.auth_source or "admin",
        redact(url),
        scrub(f"{reason} ({code_name})" if code_name else reason, url),
    )


def rejection(
    error: PyMongoError,
    server_errors: Mapping[str, BaseException],
    settings: ClientSettings,
    url: str,
) -> ConnectionRejected | None:
    """The named error when `error` (an attempt's failure) means the deployment rejects this client; None when
    the deployment may still come up. `server_errors` maps each member the driver knows to its last error:
    when no member could be selected, the reason is there (a pool that failed to authenticate in the
    background, a monitor whose handshake failed)."""
    rejected = _authentication_failure(error, settings, url)
    if rejected is not None or not isinstance(error, ConnectionFailure):
        return rejected
    for server_error in server_errors.values():
        rejected = _authentication_failure(server_error, settings, url)
        if rejected is not None:
            return rejected
    failures = {host: tls_failure(str(server_error)) for host, server_error in server_errors.items()}
    hosts = sorted(host for host, failure in failures.items() if failure)
    if not hosts:
        return None
    reasons = sorted({failure for failure in failures.values() if failure})
    return TLSFailed(hosts, scrub("; ".join(reasons), url), redact(url))
