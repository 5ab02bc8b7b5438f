"""The mongodump archive format (mongo-tools, common/archive/spec.md), written and read whole with PyMongo's
`bson`: the test double of mongodump and mongorestore.

The MongoDB Database Tools cannot be installed here (no package on PyPI, Debian or npm ships mongodump or
mongorestore), so the restore tests export collections with `write_archive` and restore them with
`restore_archive` in the byte format the tools use: magic number, header, collection metadata (canonical Extended
JSON, indexes included), terminator, then each collection's documents in segments closed by an EOF header with
the CRC-64 (ECMA) of its documents. The prelude is parsed by the product's own reader (harel_stack.archive), the
one `harel-stack restore` checks a file with. The reader was checked against archives written by mongodump
itself (the mongo-tools repository's test archives, with and without an oplog) while it was written.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import bson
from bson import json_util
from bson.raw_bson import RawBSONDocument
from pymongo.database import Database

from harel_stack.archive import MAGIC, OPLOG, TERMINATOR, Prelude, decode, read_document, read_prelude

# Go's hash/crc64 with the ECMA table, as mongodump computes it: reflected polynomial, all-ones init and xorout.
_ECMA = 0xC96C5795D7870F42
_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ _ECMA if _crc & 1 else _crc >> 1
    _TABLE.append(_crc)


def crc64(data: bytes, crc: int = 0) -> int:
    """CRC-64/ECMA of `data`, continuing from `crc` (0 to start)."""
    crc ^= 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFFFFFFFFFF


@dataclass
class Namespace:
    db: str
    collection: str
    metadata: Mapping[str, Any]
    documents: list[bytes] = field(default_factory=list)


def _namespace_header(db: str, collection: str, eof: bool, crc: int) -> bytes:
    # The CRC is a uint64 stored in an int64 field.
    signed = crc - (1 << 64) if crc >= 1 << 63 else crc
    return bson.encode({"db": db, "collection": collection, "EOF": eof, "CRC": bson.Int64(signed)})


def write_archive(stream: BinaryIO, namespaces: Iterable[Namespace], server_version: str) -> None:
    """An archive of `namespaces` (the oplog is the namespace ("", "oplog")), each in one segment."""
    namespaces = list(namespaces)
    stream.write(MAGIC)
    stream.write(
        bson.encode(
            {
                "concurrent_collections": 1,
                "version": "0.1",
                "server_version": server_version,
                "tool_version": "harel-tests",
            }
        )
    )
    for ns in namespaces:
        metadata = (
            json_util.dumps(ns.metadata, json_options=json_util.CANONICAL_JSON_OPTIONS) if ns.db else ""
        )
        stream.write(
            bson.encode(
                {"db": ns.db, "collection": ns.collection, "metadata": metadata, "size": 0, "type": ""}
            )
        )
    stream.write(TERMINATOR)
    for ns in namespaces:
        crc = 0
        if ns.documents:
            stream.write(_namespace_header(ns.db, ns.collection, False, 0))
            for document in ns.documents:
                stream.write(document)
                crc = crc64(document, crc)
            stream.write(TERMINATOR)
        stream.write(_namespace_header(ns.db, ns.collection, True, crc))
        stream.write(TERMINATOR)


def _segment_header(stream: BinaryIO) -> dict[str, Any] | None:
    """The next namespace header, or None at the end of the archive."""
    head = stream.read(4)
    if not head:
        return None
    body = stream.read(int.from_bytes(head, "little", signed=True) - 4)
    return decode(head + body)


@dataclass(frozen=True)
class Archive:
    prelude: Prelude
    documents: dict[tuple[str, str], list[bytes]]


def read_archive(stream: BinaryIO) -> Archive:
    """Every namespace's documents, each namespace's CRC checked; AssertionError names what is wrong."""
    prelude = read_prelude(stream)
    documents: dict[tuple[str, str], list[bytes]] = {(c.db, c.name): [] for c in prelude.collections}
    crcs = dict.fromkeys(documents, 0)
    finished: set[tuple[str, str]] = set()
    while (header := _segment_header(stream)) is not None:
        key = (header["db"], header["collection"])
        assert key in documents, f"segment of {key}, which the prelude does not list"
        assert key not in finished, f"segment of {key} after its EOF"
        if header["EOF"]:
            assert read_document(stream) is None, f"{key}: no terminator after its EOF header"
            assert header["CRC"] % (1 << 64) == crcs[key], f"{key}: CRC mismatch"
            finished.add(key)
            continue
        while (document := read_document(stream)) is not None:
            documents[key].append(document)
            crcs[key] = crc64(document, crcs[key])
    assert finished == set(documents), f"no EOF for {sorted(set(documents) - finished)}"
    return Archive(prelude, documents)


def export_database(database: Database[Any], server_version: str) -> bytes:
    """Every collection of `database` with its indexes, as a gzipped archive (what `mongodump --archive --gzip`
    writes for it), plus an empty oplog: the tests' deployments have none to capture."""
    namespaces = [Namespace(*OPLOG, {})]
    for name in sorted(database.list_collection_names()):
        collection = database[name]
        indexes = [dict(index) for index in collection.list_indexes()]
        raw = database.get_collection(name, codec_options=bson.CodecOptions(document_class=RawBSONDocument))
        namespaces.append(
            Namespace(
                database.name,
                name,
                {"options": {}, "indexes": indexes, "collectionName": name, "type": "collection"},
                [document.raw for document in raw.find({}).sort("_id", 1)],
            )
        )
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as packed:
        write_archive(packed, namespaces, server_version)
    return buffer.getvalue()


def restore_archive(archive: bytes, database: Database[Any], from_db: str) -> dict[str, int]:
    """What `mongorestore --archive --gzip --drop --nsFrom <from_db>.* --nsTo <database>.*` does with `archive`:
    each collection of `from_db` dropped, re-created with its indexes and filled. Documents restored, by collection."""
    contents = read_archive(gzip.GzipFile(fileobj=io.BytesIO(archive), mode="rb"))
    restored: dict[str, int] = {}
    for collection in contents.prelude.collections:
        if collection.db != from_db:
            continue
        target = database[collection.name]
        target.drop()
        database.create_collection(collection.name)
        for index in collection.metadata.get("indexes", []):
            if index["name"] == "_id_":
                continue
            options = {key: value for key, value in index.items() if key not in {"key", "v", "ns"}}
            target.create_index(list(index["key"].items()), **options)
        documents = [bson.decode(raw) for raw in contents.documents[(collection.db, collection.name)]]
        if documents:
            target.insert_many(documents, ordered=True)
        restored[collection.name] = len(documents)
    return restored
