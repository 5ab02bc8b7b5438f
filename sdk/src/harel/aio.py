"""The async client, for asyncio applications (FastAPI, aiohttp): start executions, send them events, cancel
them, read them and wait for them to finish, on PyMongo's AsyncMongoClient.

    from harel.aio import Client

    client = await Client.connect("mongodb://...", app)   # start-up checks included
    exe = await client.start("order", context={"total": 12})
    await client.send(exe.id, "approve")
    done = await client.wait(exe.id, timeout=60)
    await client.close()

It is the twin of `harel.client.Client`: the same calls with the same arguments and errors, awaited. Both
decide with `harel.calls`; this module only awaits AsyncMongoStore, AsyncMongoTransport and the catalog.
Workers are separate processes (`harel worker`); a client never steps an execution.
"""

from __future__ import annotations

import asyncio
from typing import Self, Unpack

from harel import calls
from harel.aio_store.mongo import AsyncMongoStore
from harel.app import App
from harel.calls import SendOptions, StartOptions
from harel.catalog import AsyncMongoCatalog
from harel.chart import Chart
from harel.connection import check_async, connect_async, embedded_backend, redact
from harel.errors import InvalidURL
from harel.executions.partitions import META, meta_find, parse_partitions
from harel.model import Event, Execution
from harel.transport.aio_mongo import AsyncMongoTransport


class Client:
    """start / send / cancel / status / wait on one deployment. Charts the App does not register are read
    from the catalog the workers publish to."""

    def __init__(
        self,
        store: AsyncMongoStore,
        transport: AsyncMongoTransport,
        app: App | None = None,
        catalog: AsyncMongoCatalog | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.app = app or App()
        self.catalog = catalog

    @classmethod
    async def connect(
        cls,
        url: str,
        app: App | None = None,
        *,
        db_name: str = "harel",
        deadline: float | None = 60.0,
        allow_standalone: bool = False,
    ) -> Client:
        """Connect (waiting up to `deadline` seconds for the deployment; None: indefinitely) and run the
        start-up checks: DeploymentRefused on errors, as for every harel client. InvalidURL for mongomock://,
        which only the sync client runs on."""
        kind = embedded_backend(url)
        if kind is not None:
            # The async store and transport speak to a server; the embedded backend's client is synchronous.
            raise InvalidURL(
                redact(url),
                f"harel.aio needs a deployment, and {kind}:// is a synchronous in-process store; give a "
                "mongodb:// or mongodb+srv:// URL (`harel dev` serves one on this machine), or use the sync "
                "harel.client.Client, which runs on it",
            )
        mongo = await connect_async(url, deadline=deadline)
        try:
            (await check_async(mongo, db_name=db_name, allow_standalone=allow_standalone)).raise_for_errors()
        except BaseException:
            await mongo.close()
            raise
        # Clients only send: a change stream to wake consumers would be wasted on them.
        partitions = parse_partitions(await meta_find().one(mongo[db_name][META]))
        transport = AsyncMongoTransport(mongo, db_name, watch=False, partitions=partitions)
        store = AsyncMongoStore(mongo, db_name, partitions=partitions)
        return cls(store, transport, app, AsyncMongoCatalog(mongo, db_name))

    async def _chart(self, chart_id: str, version: int | None = None) -> Chart:
        chart = self.app.registered_chart(chart_id, version)
        if chart is None and self.catalog is not None:
            chart = self.app.adopt(await self.catalog.get(chart_id, version))
        return calls.known_chart(chart, chart_id, version)

    async def start(self, chart_id: str, **options: Unpack[StartOptions]) -> Execution:
        """A new execution of the chart's newest version (or the existing one with `execution_id`)."""
        now = self.transport.clock.now()
        exe, events = calls.new_execution(await self._chart(chart_id), now, **options)
        if await self.store.create(exe, events, now=now):
            return exe
        return calls.same_start(await self.store.load(exe.id), exe)

    async def send(self, execution_id: str, name: str, **options: Unpack[SendOptions]) -> Event:
        """Put a user event in the execution's mailbox; refused for unknown or finished executions and for
        event names the pinned chart does not handle. Sending an event id again takes effect once."""
        exe = calls.running(await self.store.load(execution_id), execution_id)
        chart = await self._chart(exe.definition_id, exe.definition_version)
        event = calls.user_event(exe, chart, name, **options)
        return calls.delivered(await self.transport.send(execution_id, event), execution_id, event)

    async def cancel(self, execution_id: str) -> Event:
        """Queue a cancel behind the events already sent."""
        calls.running(await self.store.load(execution_id), execution_id)
        event = calls.cancel_event(execution_id)
        return calls.delivered(await self.transport.send(execution_id, event), execution_id, event)

    async def status(self, execution_id: str) -> Execution:
        return calls.found(await self.store.load(execution_id), execution_id)

    async def wait(self, execution_id: str, *, timeout: float | None = None) -> Execution:
        """The execution once it has finished; WaitTimedOut after `timeout` seconds (None: no limit)."""
        waiting = calls.Waiting(timeout)
        while not calls.finished(exe := await self.status(execution_id)):
            await asyncio.sleep(waiting.next_pause(calls.still_running(execution_id)))
        return exe

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
