"""Per-operation deadlines (`harel.deadlines`): inside `per_operation`, each call of a boundary class runs under a
deadline of its own, the code between the calls under none; a call inside another shares the outer one's; and
what a deadline cut short is an unavailable deployment.

PyMongo has no public reader of the deadline in force, so these read its `_csot` module, as its own tests do.
"""

from __future__ import annotations

import asyncio
import time

import pymongo
import pytest
from pymongo import _csot
from pymongo.errors import BulkWriteError

from harel.deadlines import per_operation
from harel.driver_errors import translating
from harel.errors import DeploymentUnavailable


@translating
class Boundary:
    def timeout(self) -> float | None:
        return _csot.get_timeout()

    def remaining_after_a_nested_call(self, pause: float) -> float | None:
        time.sleep(pause)
        return self.remaining()

    def remaining(self) -> float | None:
        return _csot.remaining()

    async def awaited_timeout(self) -> float | None:
        return _csot.get_timeout()

    def create(self) -> None:
        # what a bulk write whose majority wait ran out raises, in no driver error class of its own
        raise BulkWriteError(
            {"writeConcernErrors": [{"code": 50, "errmsg": "operation exceeded time limit"}]}
        )


def test_each_call_inside_per_operation_has_its_own_deadline_and_the_code_between_none() -> None:
    boundary = Boundary()
    assert boundary.timeout() is None, "no deadline unless a caller asks for one"
    with per_operation(2.5):
        assert boundary.timeout() == 2.5
        assert _csot.get_timeout() is None, "what runs between two calls (a step's actions) is not bounded"
        assert boundary.timeout() == 2.5, "a fresh deadline for the next call"
        assert asyncio.run(boundary.awaited_timeout()) == 2.5, "coroutine methods too"
    assert boundary.timeout() is None


def test_a_call_inside_another_shares_its_deadline() -> None:
    with per_operation(2.0):
        remaining = Boundary().remaining_after_a_nested_call(0.2)
    assert remaining is not None and remaining <= 1.8


def test_the_callers_own_shorter_deadline_is_kept() -> None:
    with pymongo.timeout(0.5), per_operation(5.0):
        remaining = Boundary().remaining()
    assert remaining is not None and remaining <= 0.5


def test_a_write_its_deadline_cut_short_is_an_unavailable_deployment() -> None:
    with pytest.raises(DeploymentUnavailable) as raised:
        Boundary().create()
    assert isinstance(raised.value.__cause__, BulkWriteError)
