"""Shared test configuration. Tier-specific fixtures live in each tier's own conftest.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.nodeid import NodeId

pytest_plugins = ["tests.fake_mongod.fixtures"]

REAL_MONGO_URL = os.environ.get("HAREL_TEST_MONGO_URL")
# Set by the mutation run (tests/mutants/runner.py): the scratch copy of the SDK, with a bug planted, that
# this run must import instead of the working tree's.
MUTANT_SDK = os.environ.get("HAREL_MUTANT_SDK")

# The test environment's own commands first, for the tests and every process they start: node and npm from
# PyPI (see the Makefile), ansible-playbook, harel.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

requires_real_mongo = pytest.mark.skipif(
    not REAL_MONGO_URL, reason="HAREL_TEST_MONGO_URL is not set: no real replica set to run against"
)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LoadGroupIds(), "harel-load-group-ids")
    if MUTANT_SDK:
        import harel

        imported = Path(harel.__file__).resolve().parent
        if imported != Path(MUTANT_SDK).resolve():
            pytest.exit(
                f"the mutation run imported harel from {imported}, not the planted copy {MUTANT_SDK}", 3
            )


# The scopes a fixture shares between the tests of one module.
SHARED_SCOPES = {"module", "class", "package"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs the tests in parallel (pytest-xdist, `--dist loadgroup`): each test goes to whichever
    worker is free, except that tests sharing a module-scoped fixture (a rendered chart, an installed role,
    `make demo`), directly or through another test that shares one with both, stay on one worker, so that
    fixture is made once. A fixture cheap enough to make in every worker is session-scoped instead (it is then
    made once per worker). Tests with a group of their own (`xdist_group`) keep it."""
    component: dict[str, str] = {}

    def root(name: str) -> str:
        while component[name] != name:
            name = component[name]
        return name

    shared_by: dict[pytest.Function, list[str]] = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is not None or not isinstance(item, pytest.Function):
            continue
        # `module.fixture`: no `::` in a group name, which the junit report would split the test's name at.
        names = [
            f"{item.module.__name__}.{name}"
            for name, chain in item._fixtureinfo.name2fixturedefs.items()
            if any(definition.scope in SHARED_SCOPES for definition in chain)
        ]
        if names:
            shared_by[item] = names
            for name in names:
                component.setdefault(name, name)
            for name in names[1:]:
                component[root(name)] = root(names[0])
    for item, names in shared_by.items():
        item.add_marker(pytest.mark.xdist_group(root(names[0])))


class LoadGroupIds:
    """Gives each grouped test the id `--dist loadgroup` schedules by: its id with `@group` appended.

    pytest-xdist 3.8 appends it by assigning `item._nodeid`, which pytest 9 no longer reads (it keeps the id in
    `item._id`): the suffix was lost, every group ignored, and a module-scoped fixture made again on each worker
    its tests landed on (the worker role's install, the mongodb role's configuration runs). This runs after
    xdist's hook and leaves an id that already ends with the suffix as it is."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not config.getoption("loadgroup", default=False):
            return
        for item in items:
            # Joined as xdist joins them, for a test with several groups.
            groups = sorted(
                {
                    str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                    for mark in item.iter_markers("xdist_group")
                }
            )
            suffix = f"@{'_'.join(groups)}"
            if groups and not item.nodeid.endswith(suffix):
                item._id = NodeId.parse(item.nodeid + suffix)


# What a skip outside the real-server tier means: a tool the tests run for real is missing.
MISSING_TOOL_HINT = (
    "a skip outside the real-server tier fails the run (tests/README.md, 'No silent skips'): install what it "
    "names. `.ci/run` installs the system tools with apt-get (graphviz, prometheus, faketime, systemd); "
    "`make test` installs the pinned ones (Node.js from PyPI, mongosh, checkov, docker compose: tests/tools/)"
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """Only the real-server tier (marker `real`, run when HAREL_TEST_MONGO_URL is set) may be skipped: any
    other skip is reported as a failure saying why, so a missing tool can never pass unnoticed."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or item.get_closest_marker("real") is not None:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped: {reason}\n{MISSING_TOOL_HINT}"


@pytest.fixture
def eager_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond, so that writers interleave inside one command: a race that the
    default interval rarely shows then shows on every run (the embedded client's lock is what prevents it)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)
