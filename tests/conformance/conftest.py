"""Fixtures of the store conformance suite: one harness per backend in `backends.BACKENDS`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.backends import Harness, HarnessPool, StoreOptions, params


@pytest.fixture(params=params())
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Every backend: its collection calls are recorded and can be made to fail."""
    pool = HarnessPool(request.param)
    try:
        yield pool.open(StoreOptions())
    finally:
        pool.close()
