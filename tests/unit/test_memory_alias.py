"""`memory://`, deprecated: an alias of `mongomock://`, the one embedded backend, that says so once per
process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harel.backend import open_backend
from harel.connection import urls
from harel.model import Execution
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel_dev.embedded import EmbeddedClient

DEPRECATION = (
    "memory:// is deprecated and opens mongomock://, the embedded backend (MongoStore and MongoTransport on an "
    "in-process mongomock); write mongomock://"
)


@pytest.fixture
def first_use(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """A process that has not named the deprecated scheme yet, its warnings captured."""
    monkeypatch.setattr(urls, "_ALIASES_NAMED", set())
    caplog.set_level(logging.WARNING, logger="harel.connection")
    return caplog


def test_memory_opens_the_embedded_backend_and_says_so_once(first_use: pytest.LogCaptureFixture) -> None:
    open_backend("mongomock://").close()
    assert first_use.records == [], "the embedded backend's own scheme is not deprecated"

    backends = [open_backend("memory://"), open_backend("MEMORY://")]
    try:
        for backend in backends:
            assert backend.embedded
            assert isinstance(backend.client, EmbeddedClient)
            assert type(backend.store) is MongoStore and type(backend.transport) is MongoTransport
            backend.store.commit(Execution(id="e", definition_id="d", definition_version=1))
            assert backend.store.load("e") is not None
    finally:
        for backend in backends:
            backend.close()

    assert [(r.name, r.levelno, r.getMessage()) for r in first_use.records] == [
        ("harel.connection", logging.WARNING, DEPRECATION)
    ], "said once, however often the scheme is parsed"


def test_harel_check_on_memory_names_the_backend_it_checks_and_warns_once_on_stderr() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HAREL_")}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("harel")), "check", "memory://"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == "memory:// is an embedded, in-process backend (mongomock): no deployment to check.\n"
    )
    [line] = done.stderr.splitlines()
    assert line.endswith(f" WARNING harel.connection: {DEPRECATION}")
