"""Shared test configuration. Tier-specific fixtures live in each tier's own conftest.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.fake_mongod.fixtures"]

REAL_MONGO_URL = os.environ.get("HAREL_TEST_MONGO_URL")

# The test environment's own commands first, for the tests and every process they start: node and npm from
# PyPI (see the Makefile), ansible-playbook, harel.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

requires_real_mongo = pytest.mark.skipif(
    not REAL_MONGO_URL, reason="HAREL_TEST_MONGO_URL is not set: no real replica set to run against"
)
