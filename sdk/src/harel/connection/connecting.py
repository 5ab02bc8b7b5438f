"""Building the client and waiting for the deployment to answer: `connect` and `connect_async`.

The twins differ only in their awaits; what to do after a failed attempt (pause, give up, or stop because the
deployment rejects this client) is decided once, in `Patience.after`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pymongo
from pymongo.errors import ConnectionFailure, PyMongoError

from harel.connection.attempts import DriverTimeouts, attempt_timeout
from harel.connection.deployment import client_settings
from harel.connection.rejection import rejection
from harel.connection.router_clocks import RouterClocks, listen
from harel.connection.urls import client_arguments, redact, scrub
from harel.errors import ConnectionFailed, HarelError, InvalidArgument, InvalidURL

logger = logging.getLogger("harel.connection")

# Waiting for a deployment: the first pause between attempts and the longest (each attempt's length:
# harel.connection.attempts).
FIRST_PAUSE = 0.25
MAX_PAUSE = 5.0

# PyMongo appends its configured timeouts to every network error; they say nothing about why it failed.
_DRIVER_TIMEOUTS = re.compile(r" \(configured timeouts: [^)]*\)")

Client = TypeVar("Client", pymongo.MongoClient[Any], pymongo.AsyncMongoClient[Any])
AnyClient = pymongo.MongoClient[Any] | pymongo.AsyncMongoClient[Any]


def _new_client(factory: type[Client], url: str, arguments: Mapping[str, Any]) -> Client:
    clocks = RouterClocks()
    listeners = [*arguments.get("event_listeners", ()), clocks]
    try:
        client = factory(url, **{**arguments, "event_listeners": listeners})
    except (PyMongoError, ValueError, TypeError) as error:
        raise InvalidURL(redact(url), scrub(str(error), url)) from None
    listen(client, clocks)
    return client


def driver_timeouts(client: AnyClient) -> DriverTimeouts:
    """The client's serverSelectionTimeoutMS and connectTimeoutMS (its defaults where nothing set them)."""
    return DriverTimeouts(
        client.options.server_selection_timeout, client.options.pool_options.connect_timeout
    )


def _server_errors(client: AnyClient) -> dict[str, BaseException]:
    """Each member's last error, as the driver recorded it."""
    return {
        f"{host}:{port}": server.error
        for (host, port), server in client.topology_description.server_descriptions().items()
        if server.error is not None
    }


def _failure_text(error: PyMongoError, server_errors: Mapping[str, BaseException], url: str) -> str:
    """One line on why an attempt failed: per server when nobody could be reached (PyMongo's own message
    carries a whole topology description)."""
    text = str(error)
    if isinstance(error, ConnectionFailure):
        text = "; ".join(map(str, server_errors.values())) or text.split(", Timeout:", maxsplit=1)[0]
    return scrub(_DRIVER_TIMEOUTS.sub("", text), url)


@dataclass
class Patience:
    """Bounded exponential backoff with jitter, until a deadline or (without one) until the deployment answers.
    A deployment that rejects the client ends it at once."""

    url: str
    deadline: float | None
    started: float = field(default_factory=time.monotonic)
    attempts: int = 0
    last_failure: str = "no attempt was made"

    def __post_init__(self) -> None:
        if self.deadline is not None and self.deadline < 0:
            raise InvalidArgument(
                "deadline", f"must be a number of seconds, or 0 to wait indefinitely; got {self.deadline}"
            )

    @property
    def remaining(self) -> float:
        if not self.deadline:
            return math.inf
        return self.deadline - (time.monotonic() - self.started)

    def attempt_timeout(self, driver: DriverTimeouts) -> float:
        return attempt_timeout(self.attempts, self.remaining, driver)

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
            "MongoDB at %s not ready (attempt %d, retrying in %.1fs%s): %s",
            self.url,
            self.attempts,
            pause,
            "" if self.deadline else ", no deadline",
            failure,
        )
        return pause

    def gave_up(self) -> ConnectionFailed:
        return ConnectionFailed(self.url, time.monotonic() - self.started, self.last_failure)

    def after(self, client: AnyClient, error: PyMongoError, url: str) -> float | HarelError:
        """After a failed attempt: the pause before the next one, or the error to raise (the deployment
        rejects this client, or the deadline has passed)."""
        server_errors = _server_errors(client)
        rejected = rejection(error, server_errors, client_settings(client), url)
        if rejected is not None:
            return rejected
        pause = self.pause_after(_failure_text(error, server_errors, url))
        return self.gave_up() if pause is None else pause


def connect(
    url: str, *, app_name: str = "harel", deadline: float | None = 60.0, **options: Any
) -> pymongo.MongoClient[dict[str, Any]]:
    """A client with safe defaults (w=majority, journal, majority reads, primary reads, retryable writes, a
    bound on waiting for the majority) unless the URL or `options` set them, returned once the deployment
    answers a ping. A weak override is kept as given: `check` reports it.

    Containers start in any order, so it retries with bounded backoff, logging each failed attempt, until
    `deadline` seconds have passed, then raises ConnectionFailed (URL redacted, last failure); `deadline=None`
    or 0 waits as long as it takes. A deployment that rejects the client is not waited for:
    AuthenticationFailed or TLSFailed at once."""
    patience = Patience(redact(url), deadline)
    client = _new_client(pymongo.MongoClient, url, client_arguments(url, app_name, options))
    while True:
        try:
            with pymongo.timeout(patience.attempt_timeout(driver_timeouts(client))):
                client.admin.command("ping")
        except PyMongoError as error:
            outcome = patience.after(client, error, url)
            if isinstance(outcome, HarelError):
                client.close()
                raise outcome from None
            time.sleep(outcome)
        else:
            return client


async def connect_async(
    url: str, *, app_name: str = "harel", deadline: float | None = 60.0, **options: Any
) -> pymongo.AsyncMongoClient[dict[str, Any]]:
    """`connect` for PyMongo's AsyncMongoClient."""
    patience = Patience(redact(url), deadline)
    client = _new_client(pymongo.AsyncMongoClient, url, client_arguments(url, app_name, options))
    while True:
        try:
            with pymongo.timeout(patience.attempt_timeout(driver_timeouts(client))):
                await client.admin.command("ping")
        except PyMongoError as error:
            outcome = patience.after(client, error, url)
            if isinstance(outcome, HarelError):
                await client.close()
                raise outcome from None
            await asyncio.sleep(outcome)
        else:
            return client
