"""How long one attempt at reaching the deployment may last, and what the deadline leaves the commands after it.

Pure: the clock is read by the caller. An attempt runs under `pymongo.timeout`, and PyMongo puts that one bound
in place of the client's serverSelectionTimeoutMS and connectTimeoutMS; so an attempt is also held to those
when the URL or the options set them lower than the attempt would last: whoever lowers them asks to hear sooner.
"""

from __future__ import annotations

from dataclasses import dataclass

# The first attempt's length and the longest attempt's. Attempts start short so a rejection the driver only
# reports when server selection gives up (a certificate the client cannot trust) is named within about a
# second; they grow so a slow handshake (TLS and authentication over a long link) still completes.
FIRST_ATTEMPT = 1.0
MAX_ATTEMPT = 10.0
# The shortest bound handed to PyMongo: it reads a zero timeout as "no timeout".
SHORTEST = 0.01


@dataclass(frozen=True)
class DriverTimeouts:
    """The client's own bounds on one operation, in seconds; None: the client sets none."""

    server_selection: float | None
    connect: float | None


def attempt_timeout(attempts_made: int, remaining: float, driver: DriverTimeouts) -> float:
    """The bound on the next attempt: growing with each failed one up to MAX_ATTEMPT, never past the time the
    deadline leaves (`remaining`, math.inf without one), nor past the client's own lower bounds."""
    grown = min(MAX_ATTEMPT, FIRST_ATTEMPT * 2.0**attempts_made)
    own = [bound for bound in (driver.server_selection, driver.connect) if bound]
    return max(SHORTEST, min(remaining, grown, *own))


def time_left(deadline: float | None, elapsed: float) -> float | None:
    """What a deadline of `deadline` seconds (None or 0: none) leaves after `elapsed`: the bound on what is
    still to be done once the deployment has answered, so the deadline bounds the whole of it."""
    if not deadline:
        return None
    return max(SHORTEST, deadline - elapsed)
