"""Recorded reply documents (tests/unit/replies) and clients that answer from them without a network.

`RecordedClient` / `RecordedAsyncClient` hold a real PyMongo client built with `connect=False` for its options
(so `client_settings` reads what PyMongo really parsed from the URL) and answer `command` from a scenario's
replies; a recorded failure (`ok: 0`) raises OperationFailure the way PyMongo does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pymongo
from bson import json_util
from pymongo.errors import OperationFailure

from harel.connection import DeploymentReplies, client_arguments

REPLIES = Path(__file__).parent / "replies"
SCENARIOS = ("standalone", "rs1", "rs3", "psa", "mongos", "secondary")


def scenario(name: str, **replace: str) -> dict[str, Mapping[str, Any]]:
    """The replies of one scenario by command name; `replace` swaps one for a variant:
    `scenario("rs3", getDefaultRWConcern="unauthorized_getDefaultRWConcern")`."""
    replies = json_util.loads((REPLIES / f"{name}.json").read_text())
    variants = json_util.loads((REPLIES / "variants.json").read_text())
    replies.pop("about")
    for command, variant in replace.items():
        assert command in replies, command
        replies[command] = variants[variant]
    return replies


def deployment_replies(
    replies: Mapping[str, Mapping[str, Any]], database: str = "harel"
) -> DeploymentReplies:
    return DeploymentReplies(
        database=database,
        hello=replies["hello"],
        build_info=replies["buildInfo"],
        feature_compatibility=replies["getParameter"],
        default_rw_concern=replies["getDefaultRWConcern"],
        list_collections=replies["listCollections"],
        partitions=replies.get("find harel_meta", _PARTITION_READS["find harel_meta"]),
        shard_key=replies.get("find collections", _PARTITION_READS["find collections"]),
        shards=replies.get("listShards", _PARTITION_READS["listShards"]),
    )


def safe_client(url: str) -> pymongo.MongoClient[Any]:
    """The client `connect` would build for this URL, without touching the network."""
    return pymongo.MongoClient(url, **client_arguments(url, "harel", {}))


# The reads of the partitioning rules, by the collection they read; a scenario without one answers as a
# replica set does: nothing stored, and `listShards` unknown.
_NOTHING_STORED = {"cursor": {"firstBatch": [], "id": 0}, "ok": 1}
_PARTITION_READS = {
    "find harel_meta": _NOTHING_STORED,
    "find collections": _NOTHING_STORED,
    "listShards": {
        "ok": 0,
        "code": 59,
        "codeName": "CommandNotFound",
        "errmsg": "no such command: 'listShards'",
    },
}


def _answer(replies: Mapping[str, Mapping[str, Any]], command: Mapping[str, Any]) -> Any:
    name = next(iter(command))
    if name == "find" and command["find"] in ("harel_meta", "collections"):
        name = f"find {command['find']}"
    reply = replies[name] if name in replies or name not in _PARTITION_READS else _PARTITION_READS[name]
    if not reply.get("ok"):
        raise OperationFailure(reply.get("errmsg", ""), reply.get("code"), dict(reply))
    return dict(reply)


class _Database:
    def __init__(self, client: RecordedClient, name: str) -> None:
        self.client = client
        self.name = name

    def command(self, command: Mapping[str, Any]) -> Any:
        self.client.commands.append((self.name, dict(command)))
        return _answer(self.client.replies, command)


class _AsyncDatabase(_Database):
    async def command(self, command: Mapping[str, Any]) -> Any:  # type: ignore[override]
        return super().command(command)


class RecordedClient:
    """A stand-in for a connected MongoClient: real options, recorded answers."""

    database_type: type[_Database] = _Database

    def __init__(self, client: Any, replies: Mapping[str, Mapping[str, Any]]) -> None:
        self._client = client
        self.replies = replies
        self.commands: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    @classmethod
    def for_url(cls, url: str, replies: Mapping[str, Mapping[str, Any]]) -> RecordedClient:
        return cls(safe_client(url), replies)

    @property
    def options(self) -> Any:
        return self._client.options

    @property
    def topology_description(self) -> Any:
        return self._client.topology_description

    def get_default_database(self, default: str) -> Any:
        return self._client.get_default_database(default=default)

    def __getitem__(self, name: str) -> _Database:
        return self.database_type(self, name)

    def close(self) -> None:
        # The wrapped client was built with connect=False and never opened: nothing to release.
        self.closed = True


class RecordedAsyncClient(RecordedClient):
    """A stand-in for a connected AsyncMongoClient."""

    database_type = _AsyncDatabase

    @classmethod
    def for_url(cls, url: str, replies: Mapping[str, Mapping[str, Any]]) -> RecordedAsyncClient:
        return cls(pymongo.AsyncMongoClient(url, **client_arguments(url, "harel", {})), replies)
