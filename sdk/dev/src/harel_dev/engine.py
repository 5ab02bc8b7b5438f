"""Data commands executed on mongomock: CRUD, cursors, aggregation, indexes and collections.

`Engine.execute` runs one command, with `$$NOW` bound once from the engine's clock (`harel_dev.now`) and
mongomock's expressions corrected (`harel_dev.expressions`). Callers hold `lock` (the server's execution
lock), so each command sees and leaves a consistent state and single-document atomicity holds between
concurrent clients; a change stream's `getMore` releases it while it waits for an event. Replies have the
server's shape. Writes to a watched collection are recorded in the change log (`harel_dev.changes`) that
change streams (`harel_dev.change_streams`) read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

import mongomock
from bson import Int64, json_util
from mongomock import filtering
from pymongo.errors import DuplicateKeyError, OperationFailure

from harel_dev import mongomock_patches
from harel_dev.change_streams import ChangeStreams, opens_change_stream
from harel_dev.changes import ChangeLog
from harel_dev.cursors import CursorRegistry
from harel_dev.errors import CommandError, not_modelled
from harel_dev.now import Clock, bind_command, server_now

Reply = dict[str, Any]
# The data commands that change what is stored (a snapshot is due after them).
WRITES = frozenset(
    {
        "insert",
        "update",
        "delete",
        "findAndModify",
        "findandmodify",
        "create",
        "drop",
        "dropDatabase",
        "createIndexes",
        "dropIndexes",
    }
)

# System collections the server keeps its own records in (the users), which mongomock leaves out of listings.
SYSTEM_COLLECTIONS = (("admin", "system.users"),)

# Index options mongomock honours (unique, sparse, partial) or keeps and lists (expireAfterSeconds: no TTL).
_INDEX_OPTIONS = ("unique", "sparse", "partialFilterExpression", "expireAfterSeconds")
_INDEX_IGNORED = frozenset({"key", "name", "v", "background"})
_SIMPLE_COLLATION = {"locale": "simple"}
_UNMODELLED_FIND_OPTIONS = frozenset(
    {"tailable", "awaitData", "let", "min", "max", "returnKey", "showRecordId"}
)


@dataclass
class CollectionDump:
    """One collection as a snapshot keeps it."""

    db: str
    name: str
    options: dict[str, Any]
    indexes: list[dict[str, Any]]
    documents: list[dict[str, Any]]


@dataclass
class Engine:
    """`change_log`: a change log shared with other engines under the same `lock` (a test double's shards,
    whose router serves one merged change stream); by default the engine keeps its own."""

    clock: Clock = time.time
    lock: threading.Lock = field(default_factory=threading.Lock)
    _client: mongomock.MongoClient[dict[str, Any]] = field(default_factory=mongomock.MongoClient)
    # Options given to `create` (mongomock keeps none): listed by listCollections, never applied to queries.
    _options: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    cursors: CursorRegistry = field(default_factory=CursorRegistry)
    changes: ChangeLog = field(init=False)
    streams: ChangeStreams = field(init=False)
    _handlers: dict[str, Callable[[str, dict[str, Any]], Reply]] = field(init=False)
    change_log: InitVar[ChangeLog | None] = None

    def __post_init__(self, change_log: ChangeLog | None) -> None:
        mongomock_patches.install()
        self.changes = ChangeLog(self.lock, self.clock) if change_log is None else change_log
        self.streams = ChangeStreams(self.changes, self.cursors.new_id, self._stored)
        self._handlers = {
            "insert": self.insert,
            "update": self.update,
            "delete": self.delete,
            "findAndModify": self.find_and_modify,
            "findandmodify": self.find_and_modify,
            "find": self.find,
            "getMore": self.get_more,
            "killCursors": self.kill_cursors,
            "aggregate": self.aggregate,
            "count": self.count,
            "distinct": self.distinct,
            "createIndexes": self.create_indexes,
            "listIndexes": self.list_indexes,
            "dropIndexes": self.drop_indexes,
            "listCollections": self.list_collections,
            "listDatabases": self.list_databases,
            "create": self.create,
            "drop": self.drop,
            "dropDatabase": self.drop_database,
        }

    def serves(self, name: str) -> bool:
        return name in self._handlers

    def collection(self, db: str, name: str) -> mongomock.Collection[dict[str, Any]]:
        """A collection as it is stored, for the server's own records (the users)."""
        return self._collection(db, name)

    def execute(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        """Run one data command, `$$NOW` bound to the clock's time as the command starts."""
        return self._handlers[name](db, bind_command(command, server_now(self.clock())))

    def reset(self) -> None:
        for name in self._client.list_database_names():
            self._client.drop_database(name)
        self._options.clear()
        self.cursors.clear()
        self.streams.clear()
        self.changes.clear()

    # --- writes --------------------------------------------------------------------------------------

    def insert(self, db: str, cmd: dict[str, Any]) -> Reply:
        coll = self._collection(db, cmd["insert"])
        watched = self._watched(coll)
        written, errors = 0, []
        for index, document in enumerate(cmd.get("documents", [])):
            try:
                coll.insert_one(document)
                written += 1
                if watched:
                    self.changes.inserted(_namespace(coll), document)
            except OperationFailure as exc:
                errors.append(_write_error(index, exc, coll, document))
                if cmd.get("ordered", True):
                    break
        return _write_reply({"n": written}, errors)

    def update(self, db: str, cmd: dict[str, Any]) -> Reply:
        coll = self._collection(db, cmd["update"])
        matched, modified, upserted, errors = 0, 0, [], []
        for index, statement in enumerate(cmd.get("updates", [])):
            try:
                n, n_modified, upserted_id = self._update_statement(coll, statement, cmd.get("let"))
            except OperationFailure as exc:
                errors.append(_write_error(index, exc, coll, None))
                if cmd.get("ordered", True):
                    break
                continue
            matched += n
            modified += n_modified
            if upserted_id is not None:
                upserted.append({"index": index, "_id": upserted_id})
        reply: Reply = {"n": matched, "nModified": modified}
        if upserted:
            reply["upserted"] = upserted
        return _write_reply(reply, errors)

    def _update_statement(
        self, coll: mongomock.Collection[dict[str, Any]], statement: dict[str, Any], let: Any
    ) -> tuple[int, int, Any]:
        for unsupported in ("sort", "hint"):
            if unsupported in statement:
                raise not_modelled(f"'{unsupported}' in an update statement")
        _refuse_collation(statement)
        query, update = statement.get("q") or {}, statement["u"]
        upsert, multi = bool(statement.get("upsert")), bool(statement.get("multi"))
        options: dict[str, Any] = {"upsert": upsert}
        if let is not None:
            options["let"] = let
        replacement = _is_replacement(update)
        if replacement and multi:
            raise CommandError(9, "multi update is not supported for replacement-style update")
        # What the update will match, read first when a change stream wants the difference (under the lock,
        # so it is what the update then finds).
        watched = self._watched(coll)
        before = []
        if watched:
            before = list(coll.find(query)) if multi else [d for d in [coll.find_one(query)] if d is not None]
        if replacement:
            result = coll.replace_one(query, update, **options)
        else:
            if statement.get("arrayFilters"):
                options["array_filters"] = statement["arrayFilters"]
            result = (coll.update_many if multi else coll.update_one)(query, update, **options)
        upserted_id = result.upserted_id
        if watched:
            self._record_update(coll, before, upserted_id, replacement)
        return result.matched_count + (upserted_id is not None), result.modified_count, upserted_id

    def _record_update(
        self,
        coll: mongomock.Collection[dict[str, Any]],
        before: list[dict[str, Any]],
        upserted_id: Any,
        replacement: bool,
    ) -> None:
        namespace = _namespace(coll)
        if upserted_id is not None:
            inserted = coll.find_one({"_id": upserted_id})
            if inserted is not None:
                self.changes.inserted(namespace, inserted)
            return
        for old in before:
            new = coll.find_one({"_id": old["_id"]})
            if new is None or new == old:
                continue
            if replacement:
                self.changes.replaced(namespace, new)
            else:
                self.changes.updated(namespace, old, new)

    def delete(self, db: str, cmd: dict[str, Any]) -> Reply:
        coll = self._collection(db, cmd["delete"])
        watched = self._watched(coll)
        removed = 0
        for statement in cmd.get("deletes", []):
            _refuse_collation(statement)
            query = statement.get("q") or {}
            single = statement.get("limit") == 1
            projection = self.changes.key_projection(_namespace(coll))
            keys = list(coll.find(query, projection, limit=1 if single else 0)) if watched else []
            result = coll.delete_one(query) if single else coll.delete_many(query)
            removed += result.deleted_count
            for key in keys:
                self.changes.deleted(_namespace(coll), key)
        return {"n": removed, "ok": 1.0}

    def find_and_modify(self, db: str, cmd: dict[str, Any]) -> Reply:
        coll = self._collection(db, cmd.get("findAndModify", cmd.get("findandmodify")))
        _refuse_collation(cmd)
        if "arrayFilters" in cmd:
            raise not_modelled("arrayFilters")
        query, fields = cmd.get("query") or {}, cmd.get("fields") or None
        # The match's key alone (its _id, and a shard key's fields for a delete event): mongomock copies every
        # document a find returns, and a claim matches many.
        key_projection = self.changes.key_projection(_namespace(coll))
        existing = coll.find_one(query, key_projection, sort=_sort(cmd.get("sort")))
        if cmd.get("remove"):
            value = coll.find_one({"_id": existing["_id"]}, fields) if existing else None
            if existing:
                coll.delete_one({"_id": existing["_id"]})
                if self._watched(coll):
                    self.changes.deleted(_namespace(coll), existing)
            return {"lastErrorObject": {"n": int(existing is not None)}, "value": value, "ok": 1.0}
        update = cmd.get("update")
        if update is None:
            raise CommandError(9, "Either an update or remove=true must be specified")
        try:
            return self._find_and_update(coll, query, update, existing, fields, cmd)
        except DuplicateKeyError as exc:
            error = _duplicate_key(coll, None, exc)
            raise CommandError(11000, error["errmsg"], extra=_key_details(error)) from exc

    def _find_and_update(
        self,
        coll: mongomock.Collection[dict[str, Any]],
        query: dict[str, Any],
        update: Any,
        existing: dict[str, Any] | None,
        fields: dict[str, Any] | None,
        cmd: dict[str, Any],
    ) -> Reply:
        replacement = _is_replacement(update)
        write = coll.replace_one if replacement else coll.update_one
        new = bool(cmd.get("new"))
        watched = self._watched(coll)
        if existing is not None:
            by_id = {"_id": existing["_id"]}
            before = None if new else coll.find_one(by_id, fields)
            old = coll.find_one(by_id) if watched else None
            write(by_id, update)
            value = coll.find_one(by_id, fields) if new else before
            if old is not None:
                self._record_update(coll, [old], None, replacement)
            return {"lastErrorObject": {"n": 1, "updatedExisting": True}, "value": value, "ok": 1.0}
        if not cmd.get("upsert"):
            return {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None, "ok": 1.0}
        upserted_id = write(query, update, upsert=True).upserted_id
        if watched:
            self._record_update(coll, [], upserted_id, replacement)
        value = coll.find_one({"_id": upserted_id}, fields) if new else None
        last_error = {"n": 1, "updatedExisting": False, "upserted": upserted_id}
        return {"lastErrorObject": last_error, "value": value, "ok": 1.0}

    # --- reads ---------------------------------------------------------------------------------------

    def find(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["find"]
        _refuse_collation(cmd)
        for unsupported in _UNMODELLED_FIND_OPTIONS & {key for key, value in cmd.items() if value}:
            raise not_modelled(f"'{unsupported}' in find")
        limit = int(cmd.get("limit") or 0)
        single_batch = bool(cmd.get("singleBatch")) or limit < 0
        documents = list(
            self._collection(db, name).find(
                cmd.get("filter") or {},
                cmd.get("projection") or None,
                sort=_sort(cmd.get("sort")),
                skip=int(cmd.get("skip") or 0),
                limit=abs(limit),
            )
        )
        cursor = self.cursors.open(f"{db}.{name}", documents, cmd.get("batchSize"), single_batch)
        return {"cursor": cursor, "ok": 1.0}

    def get_more(self, db: str, cmd: dict[str, Any]) -> Reply:
        cursor_id = int(cmd["getMore"])
        if self.streams.holds(cursor_id):
            max_time_ms = cmd.get("maxTimeMS")
            cursor = self.streams.get_more(
                cursor_id, cmd.get("batchSize"), None if max_time_ms is None else int(max_time_ms)
            )
            return {"cursor": cursor, "ok": 1.0}
        return {"cursor": self.cursors.get_more(cursor_id, cmd.get("batchSize")), "ok": 1.0}

    def kill_cursors(self, db: str, cmd: dict[str, Any]) -> Reply:
        cursor_ids = [int(i) for i in cmd.get("cursors", [])]
        streams = self.streams.kill(cursor_ids)
        reply = self.cursors.kill([cursor_id for cursor_id in cursor_ids if cursor_id not in streams])
        reply["cursorsKilled"] = [Int64(cursor_id) for cursor_id in streams] + reply["cursorsKilled"]
        return {**reply, "ok": 1.0}

    def aggregate(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["aggregate"]
        stream = opens_change_stream("aggregate", cmd)
        if not isinstance(name, str):
            raise not_modelled(
                "change streams on a database or the cluster" if stream else "database-level aggregate"
            )
        if cmd.get("explain"):
            raise not_modelled("explain")
        _refuse_collation(cmd)
        pipeline = cmd.get("pipeline", [])
        cursor_options = cmd.get("cursor") or {}
        if stream:
            cursor = self.streams.open(
                _namespace(self._collection(db, name)), pipeline, cursor_options.get("batchSize")
            )
            return {"cursor": cursor, "ok": 1.0}
        if any("$changeStream" in stage for stage in pipeline):
            raise CommandError(40602, "$changeStream is only valid as the first stage in a pipeline")
        options = {"let": cmd["let"]} if "let" in cmd else {}
        documents = list(self._collection(db, name).aggregate(pipeline, **options))
        cursor = self.cursors.open(f"{db}.{name}", documents, cursor_options.get("batchSize"))
        return {"cursor": cursor, "ok": 1.0}

    def count(self, db: str, cmd: dict[str, Any]) -> Reply:
        _refuse_collation(cmd)
        options: dict[str, Any] = {key: int(cmd[key]) for key in ("skip", "limit") if cmd.get(key)}
        n = self._collection(db, cmd["count"]).count_documents(cmd.get("query") or {}, **options)
        return {"n": n, "ok": 1.0}

    def distinct(self, db: str, cmd: dict[str, Any]) -> Reply:
        _refuse_collation(cmd)
        values = self._collection(db, cmd["distinct"]).distinct(cmd["key"], cmd.get("query") or {})
        return {"values": values, "ok": 1.0}

    # --- indexes -------------------------------------------------------------------------------------

    def create_indexes(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["createIndexes"]
        created_collection = not self._exists(db, name)
        coll = self._collection(db, name)
        before = len(coll.index_information()) if not created_collection else 1
        for spec in cmd.get("indexes", []):
            self._create_index(db, coll, spec)
        after = len(coll.index_information())
        reply: Reply = {"numIndexesBefore": before, "numIndexesAfter": after}
        reply["createdCollectionAutomatically"] = created_collection
        if after == before:
            reply["note"] = "all indexes already exist"
        return {**reply, "ok": 1.0}

    def _create_index(
        self, db: str, coll: mongomock.Collection[dict[str, Any]], spec: dict[str, Any]
    ) -> None:
        key, index_name = list(spec["key"].items()), spec["name"]
        unknown = set(spec) - _INDEX_IGNORED - set(_INDEX_OPTIONS) - {"collation"}
        if unknown:
            raise not_modelled(f"index options {sorted(unknown)}")
        _refuse_collation(spec)
        options = {option: spec[option] for option in _INDEX_OPTIONS if option in spec}
        for existing_name, info in coll.index_information().items():
            existing_options = {option: info[option] for option in _INDEX_OPTIONS if option in info}
            if existing_name == index_name and info["key"] != key:
                raise CommandError(
                    86,
                    f"An existing index has the same name as the requested index but a different key: "
                    f"{index_name}",
                )
            if info["key"] == key and existing_options == options and existing_name == index_name:
                return
            if info["key"] == key:
                raise CommandError(
                    85, f"Index already exists with a different name or options: {existing_name}"
                )
        try:
            coll.create_index(key, name=index_name, **options)
        except DuplicateKeyError as exc:
            raise CommandError(
                11000,
                f"Index build failed: E11000 duplicate key error collection: {db}.{coll.name} "
                f"index: {index_name}",
            ) from exc

    def list_indexes(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["listIndexes"]
        if not self._exists(db, name):
            raise CommandError(26, f"ns does not exist: {db}.{name}")
        indexes = [
            {"v": info.get("v", 2), "key": dict(info["key"]), "name": index_name}
            | {option: info[option] for option in _INDEX_OPTIONS if option in info}
            for index_name, info in self._collection(db, name).index_information().items()
        ]
        cursor = self.cursors.open(f"{db}.{name}", indexes, (cmd.get("cursor") or {}).get("batchSize"))
        return {"cursor": cursor, "ok": 1.0}

    def drop_indexes(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["dropIndexes"]
        if not self._exists(db, name):
            raise CommandError(26, f"ns not found {db}.{name}")
        if "index" not in cmd:
            raise CommandError(40414, "BSON field 'dropIndexes.index' is missing but a required field")
        coll = self._collection(db, name)
        info = coll.index_information()
        target = cmd["index"]
        if target == "*":
            coll.drop_indexes()
        else:
            names = target if isinstance(target, list) else [target]
            for index in names:
                index_name = _index_name(info, index)
                if index_name not in info:
                    raise CommandError(27, f"index not found with name [{index_name}]")
                coll.drop_index(index_name)
        return {"nIndexesWas": len(info), "ok": 1.0}

    # --- collections and databases -------------------------------------------------------------------

    def list_collections(self, db: str, cmd: dict[str, Any]) -> Reply:
        collections = [
            {
                "name": name,
                "type": "collection",
                "options": self._options.get((db, name), {}),
                "info": {"readOnly": False},
                "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            }
            for name in self._names(db)
        ]
        matching = [c for c in collections if filtering.filter_applies(cmd.get("filter") or {}, c)]
        if cmd.get("nameOnly"):
            matching = [{"name": c["name"], "type": c["type"]} for c in matching]
        batch_size = (cmd.get("cursor") or {}).get("batchSize")
        return {"cursor": self.cursors.open(f"{db}.$cmd.listCollections", matching, batch_size), "ok": 1.0}

    def list_databases(self, db: str, cmd: dict[str, Any]) -> Reply:
        names = sorted(self._client.list_database_names())
        if cmd.get("nameOnly"):
            return {"databases": [{"name": name} for name in names], "ok": 1.0}
        databases = [{"name": name, "sizeOnDisk": 0, "empty": False} for name in names]
        return {"databases": databases, "totalSize": 0, "totalSizeMb": 0, "ok": 1.0}

    def create(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["create"]
        if self._exists(db, name):
            raise CommandError(48, f"Collection {db}.{name} already exists.")
        options = {key: value for key, value in cmd.items() if key not in GENERIC_FIELDS and key != "create"}
        if set(options) - {"collation"}:
            raise not_modelled(f"collection options {sorted(set(options) - {'collation'})}")
        self._client[db].create_collection(name)
        if options:
            self._options[(db, name)] = options
        return {"ok": 1.0}

    def drop(self, db: str, cmd: dict[str, Any]) -> Reply:
        name = cmd["drop"]
        if not self._exists(db, name):
            return {"ok": 1.0}  # MongoDB 7.0+: dropping a missing collection succeeds
        indexes = len(self._collection(db, name).index_information())
        self._client[db].drop_collection(name)
        self._options.pop((db, name), None)
        return {"nIndexesWas": indexes, "ns": f"{db}.{name}", "ok": 1.0}

    def drop_database(self, db: str, cmd: dict[str, Any]) -> Reply:
        self._client.drop_database(db)
        for key in [key for key in self._options if key[0] == db]:
            del self._options[key]
        return {"ok": 1.0}

    # --- snapshots -----------------------------------------------------------------------------------

    def dump(self) -> list[CollectionDump]:
        """Every collection with its options, indexes and documents."""
        dumps = []
        for db in sorted(self._client.list_database_names()):
            for name in self._names(db):
                coll = self._client[db][name]
                indexes = [
                    {"name": index_name, "key": dict(info["key"])}
                    | {option: info[option] for option in _INDEX_OPTIONS if option in info}
                    for index_name, info in coll.index_information().items()
                    if index_name != "_id_"
                ]
                options = self._options.get((db, name), {})
                dumps.append(CollectionDump(db, name, options, indexes, list(coll.find())))
        return dumps

    def load(self, dumps: list[CollectionDump]) -> None:
        """Replace everything stored with `dumps`."""
        self.reset()
        for dump in dumps:
            self._client[dump.db].create_collection(dump.name)
            if dump.options:
                self._options[(dump.db, dump.name)] = dict(dump.options)
            coll = self._client[dump.db][dump.name]
            for spec in dump.indexes:
                self._create_index(dump.db, coll, spec)
            if dump.documents:
                coll.insert_many(dump.documents)

    # --- helpers -------------------------------------------------------------------------------------

    def _collection(self, db: str, name: Any) -> mongomock.Collection[dict[str, Any]]:
        if not isinstance(name, str) or not name:
            raise CommandError(73, f"Invalid collection name: {name!r}")
        return self._client[db][name]

    def _watched(self, coll: mongomock.Collection[dict[str, Any]]) -> bool:
        return self.changes.watched(_namespace(coll))

    def _stored(self, namespace: str, key: Any) -> dict[str, Any] | None:
        """A document as stored now, by namespace and _id (a change stream's updateLookup)."""
        db, name = namespace.split(".", 1)
        found: dict[str, Any] | None = self._collection(db, name).find_one({"_id": key})
        return found

    def _exists(self, db: str, name: str) -> bool:
        return name in self._names(db)

    def _names(self, db: str) -> list[str]:
        """The collections of `db`, sorted; mongomock hides `system.*` ones, so those the server keeps are
        added when they exist."""
        names = self._client[db].list_collection_names()
        names += [
            name
            for kept_db, name in SYSTEM_COLLECTIONS
            if kept_db == db and self._client[db][name].find_one()
        ]
        return sorted(names)


# Fields any command may carry that are not options of the command itself.
GENERIC_FIELDS = frozenset(
    {
        "$db",
        "$clusterTime",
        "$readPreference",
        "lsid",
        "txnNumber",
        "writeConcern",
        "readConcern",
        "comment",
        "maxTimeMS",
        "apiVersion",
        "apiStrict",
        "apiDeprecationErrors",
    }
)


def _namespace(coll: mongomock.Collection[dict[str, Any]]) -> str:
    return f"{coll.database.name}.{coll.name}"


def _sort(sort: Any) -> list[tuple[str, Any]] | None:
    return list(sort.items()) if sort else None


def _is_replacement(update: Any) -> bool:
    return isinstance(update, dict) and not any(key.startswith("$") for key in update)


def _refuse_collation(options: dict[str, Any]) -> None:
    collation = options.get("collation")
    if collation is not None and dict(collation) != _SIMPLE_COLLATION:
        raise not_modelled("collations in queries and indexes")


def _index_name(info: Mapping[str, Any], index: Any) -> str:
    """The name of the index `dropIndexes` names by its name or by its key (`index_information()`)."""
    if isinstance(index, str):
        return index
    if not isinstance(index, dict):
        raise CommandError(
            14, "BSON field 'dropIndexes.index' is the wrong type, expected types '[string, object, array]'"
        )
    wanted = list(index.items())
    return next((name for name, found in info.items() if found["key"] == wanted), str(index))


def _write_reply(reply: Reply, errors: list[dict[str, Any]]) -> Reply:
    if errors:
        reply["writeErrors"] = errors
    reply["ok"] = 1.0
    return reply


def _write_error(
    index: int,
    exc: OperationFailure,
    coll: mongomock.Collection[dict[str, Any]],
    document: dict[str, Any] | None,
) -> dict[str, Any]:
    if isinstance(exc, DuplicateKeyError):
        return {"index": index, **_duplicate_key(coll, document, exc)}
    return {"index": index, "code": exc.code or 2, "errmsg": str(exc)}


def _duplicate_key(
    coll: mongomock.Collection[dict[str, Any]], document: dict[str, Any] | None, exc: DuplicateKeyError
) -> dict[str, Any]:
    """The server's E11000 error, naming the unique index the document collides on when that is known."""
    namespace = f"{coll.database.name}.{coll.name}"
    error: dict[str, Any] = {"code": 11000, "errmsg": f"E11000 duplicate key error collection: {namespace}"}
    if document is None:
        return error
    for index_name, info in coll.index_information().items():
        if index_name != "_id_" and not info.get("unique"):
            continue
        key_pattern = dict(info["key"])
        key_value = {field_name: _dotted(document, field_name) for field_name in key_pattern}
        if coll.find_one(key_value) is not None:
            shown = ", ".join(f"{name}: {json_util.dumps(value)}" for name, value in key_value.items())
            error["errmsg"] += f" index: {index_name} dup key: {{ {shown} }}"
            error["keyPattern"] = key_pattern
            error["keyValue"] = key_value
            return error
    return error


def _dotted(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _key_details(error: dict[str, Any]) -> dict[str, Any]:
    return {key: error[key] for key in ("keyPattern", "keyValue") if key in error}
