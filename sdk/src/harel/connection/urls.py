"""Store URLs: which backend a URL names, the client's safe defaults, and keeping passwords out of every message.

Pure: no client is built and nothing touches the network here. The one side effect is the log line a
deprecated scheme (`memory://`) earns, once per process.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

from harel.errors import InvalidURL

logger = logging.getLogger("harel.connection")

MONGODB_SCHEMES = frozenset({"mongodb", "mongodb+srv"})
EMBEDDED_SCHEMES = frozenset({"mongomock"})
# Deprecated schemes and the one each now opens. memory:// named a second embedded backend, a pure-Python
# copy of the store and the transport; it is the one embedded backend now, so URLs written for it still work.
ALIASES = {"memory": "mongomock"}
_ALIASES_NAMED: set[str] = set()  # the deprecated schemes already named in the log: once per process

# How long a write waits for a majority to acknowledge it, in milliseconds, when the URL and the options set no
# bound. A deployment that lost its majority but kept its primary (two data-bearing members and an arbiter,
# one of them down) takes every write and never acknowledges it: without a bound each commit, claim and
# `ensure_indexes` at start-up would wait forever. A majority that is there acknowledges in milliseconds;
# ten seconds without one is an outage, and the write fails with a write-concern error the caller can act on.
# wtimeoutMS rather than timeoutMS: under timeoutMS PyMongo retries a retryable operation as often as the
# time allows, where without it a write whose reply was lost is retried exactly once.
WRITE_CONCERN_TIMEOUT_MS = 10_000

# How long a reply may take once a command is sent, in milliseconds, when the URL and the options set no
# bound. A primary that stops answering without closing its connections (a stalled process, a partition that
# drops packets) would otherwise hold every find, claim and commit of a worker forever: PyMongo's own default
# is no bound. Past it the command fails with a network timeout the worker reports as a degraded deployment;
# a retryable write is retried once. Every command the SDK sends answers in well under a second when the
# deployment is healthy, change-stream waits included (one second each); building a new index on a large
# collection can take longer, so add indexes while all members are up (the build goes on at the server).
# A worker's own commands run under a tighter deadline each, which replaces this bound and the write-concern
# one for them (`harel.deadlines`).
SOCKET_TIMEOUT_MS = 30_000

# Each safe default: the option names that set it (lower-cased, as PyMongo matches them), the name we pass,
# the value. A default is applied only when neither the URL nor the caller's options name any of them.
# A caller's timeoutMS is a bound too: PyMongo leaves wtimeout out of every command while it is set.
SAFE_DEFAULTS: tuple[tuple[frozenset[str], str, Any], ...] = (
    (frozenset({"w"}), "w", "majority"),
    (frozenset({"journal"}), "journal", True),
    (frozenset({"readconcernlevel"}), "readConcernLevel", "majority"),
    (frozenset({"readpreference", "read_preference"}), "readPreference", "primary"),
    (frozenset({"retrywrites"}), "retryWrites", True),
    (frozenset({"wtimeoutms", "wtimeout", "timeoutms"}), "wTimeoutMS", WRITE_CONCERN_TIMEOUT_MS),
    (frozenset({"sockettimeoutms", "timeoutms"}), "socketTimeoutMS", SOCKET_TIMEOUT_MS),
)

_SECRET_QUERY_OPTIONS = re.compile(
    r"(?i)\b(tlsCertificateKeyFilePassword|sslPEMKeyPassword|sslClientCertificateKeyPassword"
    r"|authMechanismProperties)=([^&#]*)"
)


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
    """`mongomock` when the URL names the embedded, in-process backend (the deprecated `memory://` too,
    saying so in the log the first time); None otherwise."""
    scheme = _scheme(url)
    if scheme in ALIASES:
        _name_deprecated(scheme)
        scheme = ALIASES[scheme]
    return scheme if scheme in EMBEDDED_SCHEMES else None


def _name_deprecated(scheme: str) -> None:
    if scheme in _ALIASES_NAMED:
        return
    _ALIASES_NAMED.add(scheme)
    logger.warning(
        "%s:// is deprecated and opens %s://, the embedded backend (MongoStore and MongoTransport on an "
        "in-process mongomock); write %s://",
        scheme,
        ALIASES[scheme],
        ALIASES[scheme],
    )


def _named_options(url: str, options: Mapping[str, Any]) -> set[str]:
    _, _, query = url.partition("?")
    names = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
    return names | {name.lower() for name in options}


def client_arguments(url: str, app_name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for the client: the safe defaults the URL and `options` leave unset, the app
    name, then `options` as given. Raises InvalidURL for anything that is not a MongoDB URL."""
    scheme = _scheme(url)
    if embedded_backend(url) is not None:
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
