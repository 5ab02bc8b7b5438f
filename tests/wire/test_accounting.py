"""Command accounting over real clients: counts and bytes per command, collection and phase."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import DuplicateKeyError

from tests.accounting import UNLABELLED, CommandAccounting
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment

pytestmark = pytest.mark.wire


def test_counts_per_command_collection_and_phase(fake_rs: FakeDeployment) -> None:
    accounting = CommandAccounting()
    with MongoClient(fake_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:
        db = client.harel
        with accounting.phase("seed"):
            db.executions.insert_many([{"_id": i} for i in range(3)])
            db.queue.insert_one({"_id": "m"})
        with accounting.phase("commit"):
            for i in range(3):
                db.executions.update_one({"_id": i}, {"$set": {"v": 1}})
            with pytest.raises(DuplicateKeyError):
                db.queue.insert_one({"_id": "m"})
        db.command("ping")

    assert accounting.tally(phase="seed").commands == 2
    assert accounting.tally(phase="commit", command="update", collection="executions").commands == 3
    assert accounting.tally(phase="commit", command="insert").commands == 1
    assert accounting.tally(phase=UNLABELLED, command="ping").commands == 1
    assert accounting.tally(command="ping", collection="executions").commands == 0
    assert accounting.group_by("phase", "collection").keys() >= {("seed", "executions"), ("seed", "queue")}
    assert accounting.group_by("command")[("update",)].commands == 3
    for tally in accounting.group_by("phase", "command").values():
        assert tally.request_bytes > 0
        assert tally.reply_bytes > 0
    rows = accounting.rows()
    assert {(r["phase"], r["collection"], r["command"], r["commands"]) for r in rows} >= {
        ("commit", "executions", "update", 3),
        ("seed", "queue", "insert", 1),
    }


def test_bytes_grow_with_the_documents(fake_rs: FakeDeployment) -> None:
    accounting = CommandAccounting()
    with MongoClient(fake_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:
        with accounting.phase("small"):
            client.harel.docs.insert_one({"payload": "x"})
            client.harel.docs.find_one({"payload": "x"})
        with accounting.phase("large"):
            client.harel.docs.insert_one({"payload": "x" * 10_000})
            client.harel.docs.find_one({"payload": {"$ne": "x"}})

    small_insert = accounting.tally(phase="small", command="insert")
    large_insert = accounting.tally(phase="large", command="insert")
    assert large_insert.request_bytes - small_insert.request_bytes >= 9_999
    large_find = accounting.tally(phase="large", command="find")
    assert large_find.reply_bytes - accounting.tally(phase="small", command="find").reply_bytes >= 9_999


def test_phases_are_per_thread_and_per_task(fake_rs: FakeDeployment) -> None:
    accounting = CommandAccounting()
    with MongoClient(fake_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:
        start = threading.Barrier(4)

        def work(label: str) -> None:
            with accounting.phase(label):
                start.wait()
                for _ in range(10):
                    client.harel.command("ping")

        threads = [threading.Thread(target=work, args=(f"thread-{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    async def tasks() -> None:
        async with AsyncMongoClient(fake_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:

            async def work(label: str, times: int) -> None:
                with accounting.phase(label):
                    for _ in range(times):
                        await client.harel.command("ping")

            await asyncio.gather(work("task-a", 3), work("task-b", 5))

    asyncio.run(tasks())

    grouped = accounting.group_by("phase", "command")
    per_phase = {phase: tally.commands for (phase, command), tally in grouped.items() if command == "ping"}
    assert per_phase == {
        "thread-0": 10,
        "thread-1": 10,
        "thread-2": 10,
        "thread-3": 10,
        "task-a": 3,
        "task-b": 5,
    }


def test_clear_starts_over(fake_rs: FakeDeployment) -> None:
    accounting = CommandAccounting()
    with MongoClient(fake_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:
        client.harel.command("ping")
        accounting.clear()
        client.harel.command("ping")
        client.harel.command("ping")
        counts: dict[Any, int] = {
            key: tally.commands for key, tally in accounting.group_by("command").items()
        }
    assert counts == {("ping",): 2}
