"""Server-side cursors: first batch, `getMore`, `killCursors`.

A cursor's results are computed when it is opened (a snapshot); the server streams a live cursor instead.
Callers hold the server's execution lock.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import bson
from bson import Int64

from harel_dev.errors import CommandError
from harel_dev.topology import MAX_BSON_OBJECT_SIZE

DEFAULT_FIRST_BATCH = 101


@dataclass
class _Cursor:
    namespace: str
    documents: list[dict[str, Any]]


@dataclass
class CursorRegistry:
    _open: dict[int, _Cursor] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1_000_001))

    def open(
        self,
        namespace: str,
        documents: list[dict[str, Any]],
        batch_size: int | None,
        single_batch: bool = False,
    ) -> dict[str, Any]:
        """The `cursor` sub-document of a find/aggregate/list reply, registering the rest for getMore."""
        batch, rest = _split(documents, DEFAULT_FIRST_BATCH if batch_size is None else batch_size)
        cursor_id = 0
        if rest and not single_batch:
            cursor_id = self.new_id()
            self._open[cursor_id] = _Cursor(namespace, rest)
        return {"firstBatch": batch, "id": Int64(cursor_id), "ns": namespace}

    def new_id(self) -> int:
        """A cursor id no other cursor of this server has (for the change streams' cursors too)."""
        return next(self._ids)

    def get_more(self, cursor_id: int, batch_size: int | None) -> dict[str, Any]:
        cursor = self._open.get(cursor_id)
        if cursor is None:
            raise CommandError(43, f"cursor id {cursor_id} not found")
        batch, cursor.documents = _split(cursor.documents, batch_size or len(cursor.documents))
        if not cursor.documents:
            del self._open[cursor_id]
            cursor_id = 0
        return {"nextBatch": batch, "id": Int64(cursor_id), "ns": cursor.namespace}

    def kill(self, cursor_ids: list[int]) -> dict[str, Any]:
        killed: list[Int64] = []
        not_found: list[Int64] = []
        for cursor_id in cursor_ids:
            (killed if self._open.pop(cursor_id, None) is not None else not_found).append(Int64(cursor_id))
        return {
            "cursorsKilled": killed,
            "cursorsNotFound": not_found,
            "cursorsAlive": [],
            "cursorsUnknown": [],
        }

    def clear(self) -> None:
        self._open.clear()


def _split(documents: list[dict[str, Any]], limit: int) -> tuple[list[Any], list[Any]]:
    """At most `limit` documents, and never past 16 MiB of BSON (but at least one)."""
    size = 0
    taken = 0
    for document in documents[:limit]:
        size += len(bson.encode(document))
        if taken and size > MAX_BSON_OBJECT_SIZE:
            break
        taken += 1
    return documents[:taken], documents[taken:]
