"""Fixtures of the store conformance suite: one harness per backend in `backends.BACKENDS`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.backends import Harness, HarnessPool, StoreOptions, params


def _harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    pool = HarnessPool(request.param)
    try:
        yield pool.open(StoreOptions())
    finally:
        pool.close()


@pytest.fixture(params=params())
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Every backend, the memory store included."""
    yield from _harness(request)


@pytest.fixture(params=params(mongo_only=True))
def mongo_harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The MongoDB backends: their collection calls are recorded and can be made to fail."""
    yield from _harness(request)
