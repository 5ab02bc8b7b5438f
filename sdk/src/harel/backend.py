"""From a URL to a store, a transport and heartbeats — with the start-up checks for real deployments.

    mongodb://… / mongodb+srv://…   MongoStore + MongoTransport on a replica set, checked before use
    mongomock://                     the same MongoStore + MongoTransport on an in-process mongomock
    memory://                        the pure in-memory store and transport

The embedded schemes live and die with the process: they serve `harel demo`, tests and experiments.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from harel.catalog import Catalog, MemoryCatalog, MongoCatalog
from harel.errors import InvalidURL
from harel.heartbeat import Heartbeats, MemoryHeartbeats, MongoHeartbeats
from harel.store.base import ExecutionStore
from harel.transport.base import Transport

log = logging.getLogger("harel.backend")

DEPLOYMENT_SCHEMES = ("mongodb://", "mongodb+srv://")
EMBEDDED_SCHEMES = ("mongomock://", "memory://")
DEFAULT_URL = "mongomock://"


@dataclass
class Backend:
    url: str
    store: ExecutionStore
    transport: Transport
    heartbeats: Heartbeats
    catalog: Catalog
    client: Any | None = None
    report: Any | None = None

    @property
    def embedded(self) -> bool:
        return self.url.startswith(EMBEDDED_SCHEMES)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def is_embedded(url: str) -> bool:
    return url.startswith(EMBEDDED_SCHEMES)


def open_backend(
    url: str,
    *,
    db_name: str = "harel",
    allow_standalone: bool = False,
    deadline: float = 60.0,
    ensure_indexes: bool = True,
) -> Backend:
    """Connect, run the start-up checks (refusing with DeploymentRefused on errors), and build the seams."""
    from harel.store.memory import MemoryStore
    from harel.store.mongo import MongoStore
    from harel.transport.memory import MemoryTransport
    from harel.transport.mongo import MongoTransport

    if url.startswith("memory://"):
        return Backend(url, MemoryStore(), MemoryTransport(), MemoryHeartbeats(), MemoryCatalog())
    if url.startswith("mongomock://"):
        from harel.embedded import EmbeddedClient

        client: Any = EmbeddedClient()
        report = None
    elif url.startswith(DEPLOYMENT_SCHEMES):
        from harel.connection import check, connect

        client = connect(url, deadline=deadline)
        report = check(client, allow_standalone=allow_standalone)
        report.raise_for_errors()
    else:
        from harel.connection import redact

        raise InvalidURL(redact(url), "expected mongodb://, mongodb+srv://, mongomock:// or memory://")
    backend = Backend(
        url,
        MongoStore(client, db_name),
        MongoTransport(client, db_name),
        MongoHeartbeats(client, db_name),
        MongoCatalog(client, db_name),
        client,
        report,
    )
    if ensure_indexes:
        backend.store.ensure_indexes()
        backend.transport.ensure_indexes()
    return backend
