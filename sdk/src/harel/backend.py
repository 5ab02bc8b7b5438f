"""From a URL to a store, a transport and heartbeats — with the start-up checks for real deployments.

    mongodb://… / mongodb+srv://…   MongoStore + MongoTransport on a replica set, checked before use
    mongomock://                     the same MongoStore + MongoTransport on an in-process mongomock
    memory://                        deprecated: an alias of mongomock:// (it says so once)

The embedded backend lives and dies with the process: it serves `harel demo`, tests and experiments.
`mongomock://` is the development distribution's (harel-dev, sdk/dev), imported only when opened: without it
installed, opening it raises DevServerNotInstalled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pymongo import monitoring

from harel.catalog import Catalog, MongoCatalog
from harel.connection import CheckReport, check, connect, embedded_backend
from harel.devdist import requires_harel_dev
from harel.executions.partitions import SINGLE, Partitions
from harel.heartbeat import Heartbeats, MongoHeartbeats
from harel.partitioning import stored_partitions
from harel.servertime import ServerClock
from harel.store.base import ExecutionStore
from harel.store.mongo import MongoStore
from harel.transport.base import Transport
from harel.transport.mongo import MongoTransport

DEFAULT_URL = "mongomock://"


def is_embedded(url: str) -> bool:
    return embedded_backend(url) is not None


@dataclass
class Backend:
    url: str
    store: ExecutionStore
    transport: Transport
    heartbeats: Heartbeats
    catalog: Catalog
    client: Any
    report: CheckReport | None = None
    db_name: str = "harel"
    partitions: Partitions = SINGLE

    @property
    def embedded(self) -> bool:
        return is_embedded(self.url)

    def close(self) -> None:
        """Close the seams, the transport first: it stops its change-stream watcher before the client
        closes. Call it after `Worker.stop`, which ends the threads that use the client."""
        self.transport.close()
        self.client.close()  # the transport's client already


def open_backend(
    url: str,
    *,
    db_name: str = "harel",
    allow_standalone: bool = False,
    deadline: float | None = 60.0,
    listeners: Sequence[monitoring.CommandListener] = (),
    zones: Sequence[str] = (),
) -> Backend:
    """Connect, run the start-up checks (refusing with DeploymentRefused on errors), create the indexes and
        build the seams. A URL that names no backend raises InvalidURL (from `connect`), `mongomock://` without
        harel-dev DevServerNotInstalled; `deadline` None waits for the deployment indefinitely. `listeners` watch
        every command of a real deployment's client (the embedded backend has no command monitoring). `zones`
    (names from the partition map; empty: all) are where the transport looks for work on a partitioned
    deployment; a name the map does not have raises UnknownZone."""
    kind = embedded_backend(url)
    report = None
    clock = ServerClock()
    if kind == "mongomock":
        with requires_harel_dev("mongomock:// (the embedded backend, the default URL)"):
            from harel_dev.embedded import EmbeddedClient
        client: Any = EmbeddedClient()
        clock = ServerClock(local=client.clock, monotonic=client.clock)  # the deployment is this process
    else:
        client = connect(url, deadline=deadline, event_listeners=list(listeners))
        report = check(client, allow_standalone=allow_standalone)
        report.raise_for_errors()
    # P and the zones of a partitioned deployment (`harel partitions init`); none: one partition
    partitions = stored_partitions(client[db_name])
    heartbeats = MongoHeartbeats(client, db_name)
    backend = Backend(
        url,
        MongoStore(client, db_name, partitions=partitions),
        MongoTransport(client, db_name, clock=clock, partitions=partitions, zones=zones),
        heartbeats,
        MongoCatalog(client, db_name),
        client,
        report,
        db_name,
        partitions,
    )
    backend.store.ensure_indexes()
    backend.transport.ensure_indexes()
    heartbeats.ensure_indexes()
    return backend
