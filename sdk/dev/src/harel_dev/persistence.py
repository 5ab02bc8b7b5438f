"""The local server's optional data file: the whole database in one file, rewritten after changes.

With `--data FILE` the server loads FILE at start (when it exists) and writes a new snapshot of everything
after changes: the first change after a write starts a short wait (`COALESCE_SECONDS`) so that a burst of
commands costs one write, then the whole state is written to `FILE.tmp`, flushed to disk (fsync) and renamed
over FILE. A clean stop (SIGTERM, SIGINT, `LocalServer.stop()`) writes a last snapshot. So:

- a crash of the server process (`kill -9`) or of the machine loses the changes of at most the last
  `COALESCE_SECONDS` plus the time one write takes; it never leaves a half-written FILE (the rename is
  atomic), so the next start sees the state of the last completed snapshot;
- acknowledged writes are therefore not durable the moment they are acknowledged, whatever the write
  concern says (`j: true` included): this is a development store;
- each snapshot rewrites everything, which suits development-sized data (megabytes), not large data.

The file holds the collections (options, indexes, documents) and the recorded retryable-write outcomes, so
a driver's retry that reaches the restarted server is still answered once. `FILE.lock` (an advisory POSIX
lock held while the server runs) keeps a second server from using the same file.

Format: a sequence of BSON documents: `{"harel.local": 1, "saved_at": <date>}`, then for each collection
`{"collection": {db, name, options, indexes, count}}` followed by its `count` documents, then
`{"retryable": [{session, txnNumber, reply}, ...]}`. The header's key names the format, "a harel.local
snapshot", after the module the server first shipped in; it stays so that the files written then still load.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import bson
from bson.errors import BSONError

from harel.errors import LocalDataError
from harel_dev.engine import CollectionDump
from harel_dev.wire import CODEC_OPTIONS

log = logging.getLogger(__name__)

FORMAT_KEY = "harel.local"
FORMAT_VERSION = 1
COALESCE_SECONDS = 0.5


@dataclass
class Snapshot:
    collections: list[CollectionDump] = field(default_factory=list)
    retryable: list[dict[str, Any]] = field(default_factory=list)

    @property
    def document_count(self) -> int:
        return sum(len(collection.documents) for collection in self.collections)


def encode(snapshot: Snapshot) -> bytes:
    parts = [_bson({FORMAT_KEY: FORMAT_VERSION, "saved_at": dt.datetime.now(dt.UTC)})]
    for collection in snapshot.collections:
        header = {
            "db": collection.db,
            "name": collection.name,
            "options": collection.options,
            "indexes": collection.indexes,
            "count": len(collection.documents),
        }
        parts.append(_bson({"collection": header}))
        parts.extend(_bson(document) for document in collection.documents)
    parts.append(_bson({"retryable": snapshot.retryable}))
    return b"".join(parts)


def decode(path: Path, stream: IO[bytes]) -> Snapshot:
    """The snapshot in `stream`; LocalDataError naming `path` when it is not one."""
    documents = _documents(path, stream)
    header = next(documents, None)
    if header is None:
        raise LocalDataError(str(path), "the file is empty (not a harel.local snapshot)")
    if header.get(FORMAT_KEY) != FORMAT_VERSION:
        raise LocalDataError(
            str(path),
            f"not a harel.local snapshot of format {FORMAT_VERSION} (first document: {sorted(header)})",
        )
    snapshot = Snapshot()
    for document in documents:
        if "collection" in document:
            spec = document["collection"]
            rows = [next(documents, None) for _ in range(int(spec["count"]))]
            if any(row is None for row in rows):
                raise LocalDataError(str(path), f"collection {spec['db']}.{spec['name']} is cut short")
            snapshot.collections.append(
                CollectionDump(spec["db"], spec["name"], spec["options"], spec["indexes"], rows)  # type: ignore[arg-type]
            )
        elif "retryable" in document:
            snapshot.retryable = document["retryable"]
            if next(documents, None) is not None:
                raise LocalDataError(str(path), "data after the final record")
            return snapshot
        else:
            raise LocalDataError(str(path), f"unexpected record {sorted(document)}")
    raise LocalDataError(str(path), "the file is cut short (no final record)")


def _documents(path: Path, stream: IO[bytes]) -> Iterator[dict[str, Any]]:
    try:
        yield from bson.decode_file_iter(stream, CODEC_OPTIONS)
    except BSONError as exc:
        raise LocalDataError(str(path), f"not a harel.local snapshot: {exc}") from exc


def _bson(document: dict[str, Any]) -> bytes:
    return bson.encode(document, codec_options=CODEC_OPTIONS)


class DataFile:
    """FILE for one running server: locked, read once, then rewritten by a background thread after each
    burst of changes (`changed()`), and a last time by `close()`."""

    def __init__(self, path: Path, take: Callable[[], Snapshot]) -> None:
        self.path = path
        self._take = take
        self._lock_file: IO[bytes] | None = None
        self._condition = threading.Condition()
        self._dirty = False
        self._closing = False
        self._failing = False
        self._writer: threading.Thread | None = None

    def open(self) -> Snapshot:
        """Lock FILE and read it (an empty snapshot when it does not exist yet); start the writer."""
        self._lock()
        try:
            snapshot = self._read()
        except BaseException:
            self._unlock()
            raise
        self._writer = threading.Thread(target=self._write_loop, name=f"harel-dev-snapshots-{self.path.name}")
        self._writer.daemon = True
        self._writer.start()
        return snapshot

    def changed(self) -> None:
        with self._condition:
            self._dirty = True
            self._condition.notify_all()

    def close(self) -> None:
        """Stop the writer and write the final snapshot if anything changed since the last one."""
        with self._condition:
            self._closing = True
            self._condition.notify_all()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._dirty:
            self._write()
        self._unlock()

    def _lock(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        lock_file = lock_path.open("ab")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            lock_file.close()
            raise LocalDataError(
                str(self.path), f"in use by another server (locked through {lock_path})"
            ) from exc
        self._lock_file = lock_file

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing releases the flock
            self._lock_file = None

    def _read(self) -> Snapshot:
        try:
            stream = self.path.open("rb")
        except FileNotFoundError:
            return Snapshot()
        except OSError as exc:
            raise LocalDataError(str(self.path), f"cannot be read: {exc.strerror}") from exc
        with stream:
            return decode(self.path, stream)

    def _write_loop(self) -> None:
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._dirty or self._closing)
                # A burst of changes costs one write: wait a moment before taking the snapshot.
                if self._closing or self._condition.wait_for(lambda: self._closing, COALESCE_SECONDS):
                    return  # close() writes the last snapshot
            self._write()

    def _write(self) -> None:
        with self._condition:
            self._dirty = False
        snapshot = self._take()
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            with temporary.open("wb") as stream:
                stream.write(encode(snapshot))
                stream.flush()
                os.fsync(stream.fileno())
            temporary.replace(self.path)
            _sync_directory(self.path.parent)
        except OSError as exc:
            with self._condition:
                self._dirty = True  # tried again after COALESCE_SECONDS, and at the stop
            if not self._failing:
                log.error(
                    "cannot write the data file %s: %s; retrying, changes are not saved meanwhile",
                    self.path,
                    exc,
                )
            self._failing = True
            return
        if self._failing:
            log.warning("the data file %s is written again", self.path)
            self._failing = False
        log.debug(
            "snapshot of %d documents in %d collections written to %s",
            snapshot.document_count,
            len(snapshot.collections),
            self.path,
        )


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
