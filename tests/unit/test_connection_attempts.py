"""How long each attempt at reaching the deployment may last, and what the deadline leaves the check
(harel.connection.attempts), on the client options PyMongo parses from a URL."""

from __future__ import annotations

import math

import pymongo
import pytest

from harel.connection import connecting
from harel.connection.attempts import SHORTEST, DriverTimeouts, attempt_timeout, time_left

PYMONGO_DEFAULTS = DriverTimeouts(server_selection=30.0, connect=20.0)


def lengths(driver: DriverTimeouts, remaining: float = math.inf, count: int = 6) -> list[float]:
    return [attempt_timeout(made, remaining, driver) for made in range(count)]


def test_attempts_start_short_and_grow_to_the_cap() -> None:
    assert lengths(PYMONGO_DEFAULTS) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_an_attempt_never_outlasts_what_the_deadline_leaves() -> None:
    assert lengths(PYMONGO_DEFAULTS, remaining=3.0) == [1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    # Past the deadline still a bound PyMongo reads as one: a zero timeout would be none at all.
    assert attempt_timeout(4, -2.0, PYMONGO_DEFAULTS) == SHORTEST


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        (DriverTimeouts(server_selection=0.5, connect=20.0), [0.5] * 6),
        (DriverTimeouts(server_selection=30.0, connect=3.0), [1.0, 2.0, 3.0, 3.0, 3.0, 3.0]),
        (DriverTimeouts(server_selection=5.0, connect=None), [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]),
    ],
    ids=["serverSelectionTimeoutMS", "connectTimeoutMS", "connectTimeoutMS=0"],
)
def test_an_attempt_is_held_to_the_clients_own_lower_timeouts(
    driver: DriverTimeouts, expected: list[float]
) -> None:
    assert lengths(driver) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mongodb://h1/", PYMONGO_DEFAULTS),
        ("mongodb://h1/?serverSelectionTimeoutMS=500&connectTimeoutMS=700", DriverTimeouts(0.5, 0.7)),
        ("mongodb://h1/?connectTimeoutMS=0", DriverTimeouts(30.0, None)),
    ],
)
def test_the_clients_timeouts_are_read_from_its_url(url: str, expected: DriverTimeouts) -> None:
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(url, connect=False)
    try:
        assert connecting.driver_timeouts(client) == expected
    finally:
        client.close()


def test_what_the_deadline_leaves_for_the_commands_after_the_ping() -> None:
    assert time_left(5.0, 2.0) == 3.0
    assert time_left(5.0, 7.5) == SHORTEST
    assert time_left(None, 7.5) is None
    assert time_left(0, 7.5) is None  # --deadline 0: no bound
