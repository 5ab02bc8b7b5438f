"""Shared test configuration. Tier-specific fixtures live in each tier's own conftest.py."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.fake_mongod.fixtures"]

REAL_MONGO_URL = os.environ.get("HAREL_TEST_MONGO_URL")

requires_real_mongo = pytest.mark.skipif(
    not REAL_MONGO_URL, reason="HAREL_TEST_MONGO_URL is not set: no real replica set to run against"
)
