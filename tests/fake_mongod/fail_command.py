"""Arm the `failCommand` fail point through a client, the same way on the fake and on a real server.

A real mongod accepts `configureFailPoint` only when started with `--setParameter enableTestCommands=1`;
where it is refused, the test is skipped and says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

UNAUTHORIZED = 13
COMMAND_NOT_FOUND = 59


@contextlib.contextmanager
def fail_command(client: MongoClient[Any], mode: dict[str, int] | str, **data: Any) -> Iterator[None]:
    """`failCommand` with `mode` ({"times": N} or "alwaysOn") and `data` while the block runs; off after."""
    try:
        client.admin.command({"configureFailPoint": "failCommand", "mode": mode, "data": data})
    except OperationFailure as exc:
        if exc.code == COMMAND_NOT_FOUND:
            pytest.skip("configureFailPoint is disabled on this deployment (needs enableTestCommands=1)")
        if exc.code == UNAUTHORIZED:
            pytest.skip("the test user may not run configureFailPoint on this deployment")
        raise
    try:
        yield
    finally:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
