"""What a backup archive holds, read from its prelude before `harel-stack restore` touches anything.

The archive is `mongodump --archive --gzip --oplog` output (the replica set's), or the sharded cluster's
`mongodump --archive --gzip --db harel` through the router with the workers paused (no oplog: the pause is its
consistency point), in the format the MongoDB Database Tools define (mongo-tools, common/archive/spec.md): a magic
number, a header document, one metadata document per collection and a terminator, then the collections' documents
in segments. The prelude alone says whether the file is such an archive, which databases and collections it
restores, and whether it carries the oplog that `mongorestore --oplogReplay` replays; mongorestore checks each
collection's CRC as it restores.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import bson
from bson import json_util

from harel_stack.errors import ArchiveError

MAGIC = (0x8199E26D).to_bytes(4, "little")
TERMINATOR = b"\xff\xff\xff\xff"
GZIP_MAGIC = b"\x1f\x8b"
# mongodump writes the oplog it captured as this namespace.
OPLOG = ("", "oplog")
# A BSON document is at most 16 MiB; mongodump's own documents (header, metadata) are far smaller.
MAX_DOCUMENT = 16 * 1024 * 1024 + 16 * 1024


def read_document(stream: BinaryIO) -> bytes | None:
    """The next BSON document's bytes, or None at the terminator. Raises ArchiveError on a cut or bad length."""
    head = stream.read(4)
    if head == TERMINATOR:
        return None
    if len(head) < 4:
        raise ArchiveError("it ends in the middle of a document: the file is truncated")
    length = int.from_bytes(head, "little", signed=True)
    if not 5 <= length <= MAX_DOCUMENT:
        raise ArchiveError(
            f"a document claims {length} bytes: the file is not a mongodump archive or is damaged"
        )
    body = stream.read(length - 4)
    if len(body) < length - 4:
        raise ArchiveError("it ends in the middle of a document: the file is truncated")
    return head + body


def decode(document: bytes) -> dict[str, Any]:
    try:
        return dict(bson.decode(document))
    except bson.errors.BSONError as error:
        raise ArchiveError(f"a document does not decode as BSON ({error})") from None


@dataclass(frozen=True)
class Collection:
    db: str
    name: str
    metadata: Mapping[str, Any]
    type: str


@dataclass(frozen=True)
class Prelude:
    header: Mapping[str, Any]
    collections: tuple[Collection, ...]

    @property
    def has_oplog(self) -> bool:
        return any((c.db, c.name) == OPLOG for c in self.collections)

    def databases(self) -> list[str]:
        return sorted({c.db for c in self.collections if c.db})

    def describe(self) -> str:
        header = self.header
        return (
            f"mongodump {header.get('tool_version', '?')} of MongoDB {header.get('server_version', '?')}: "
            f"{sum(1 for c in self.collections if c.db)} collection(s) in {', '.join(self.databases()) or 'no database'}"
            f"{', with its oplog' if self.has_oplog else ', no oplog'}"
        )


def read_prelude(stream: BinaryIO) -> Prelude:
    """The archive's header and collection list; `stream` is left at the first collection segment."""
    if stream.read(4) != MAGIC:
        raise ArchiveError("it does not start with the mongodump archive magic number")
    header = read_document(stream)
    if header is None:
        raise ArchiveError("its header is missing")
    collections = []
    while (document := read_document(stream)) is not None:
        fields = decode(document)
        try:
            # Canonical Extended JSON: {"$numberInt": "1"} is the int 1 (an index key's direction, say).
            metadata = json_util.loads(fields["metadata"]) if fields.get("metadata") else {}
            collections.append(
                Collection(fields["db"], fields["collection"], metadata, fields.get("type", ""))
            )
        except (KeyError, ValueError) as error:
            raise ArchiveError(f"a collection's metadata is malformed ({error})") from None
    return Prelude(decode(header), tuple(collections))


def open_archive(path: Path) -> BinaryIO:
    """The archive's bytes, unpacked when it is gzipped (`--gzip` compresses the whole archive)."""
    raw = path.open("rb")
    gzipped = raw.read(2) == GZIP_MAGIC
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw  # type: ignore[return-value]


def inspect(path: Path, sharded: bool = False, database: str = "harel") -> Prelude:
    """The prelude of the archive at `path`, or ArchiveError saying why it cannot be restored: with --oplogReplay
    into the replica set; or, `sharded`, into the sharded cluster through its router (`database` only, no oplog)."""
    if not path.is_file():
        raise ArchiveError("no such file", path=str(path))
    try:
        with open_archive(path) as stream:
            prelude = read_prelude(stream)
    except ArchiveError as error:
        raise ArchiveError(error.reason, path=str(path)) from None
    except (OSError, EOFError) as error:
        raise ArchiveError(f"it cannot be read as a mongodump archive ({error})", path=str(path)) from None
    if sharded:
        return _restorable_through_the_router(prelude, path, database)
    if not prelude.has_oplog:
        raise ArchiveError(
            "it holds no oplog (not made with --oplog), so it has no consistency point to replay to",
            path=str(path),
        )
    return prelude


def _restorable_through_the_router(prelude: Prelude, path: Path, database: str) -> Prelude:
    """The sharded cluster's restore replays no oplog (mongorestore refuses --oplogReplay with the namespace filter
    a restore of one database through a router needs): an archive with one is a live dump, consistent only once
    replayed, so it is refused, as is one without `database`."""
    if prelude.has_oplog:
        raise ArchiveError(
            "it holds an oplog: a replica set's backup, consistent only with the oplog replayed, which a restore "
            "through the router cannot do; move a replica set's data as docs/sharded-clusters.md, "
            '"Moving an install to a sharded cluster", says',
            path=str(path),
        )
    if database not in prelude.databases():
        raise ArchiveError(
            f"it holds no {database} database, the one the cluster's restore restores", path=str(path)
        )
    return prelude
