"""Writes to a sharded collection through the router: `insert`, `update`, `delete` and `findAndModify`.

Statements are split per shard and each sub-batch sent as one request; `writeErrors` indexes are mapped back
to the client's statement indexes; an ordered batch stops at its first error (the sub-batches are runs of
consecutive statements bound for one shard), an unordered one sends one sub-batch per shard.

A statement that reaches more than one shard runs on its own:
- `multi: true` updates and `limit: 0` deletes go to every targeted shard (`scatterGatherWrites`);
- a single-document write (`multi: false`, `limit: 1`, `findAndModify`) without the shard key, in "8.0"
  mode, runs as the two-phase protocol's emulation: the filter is read on every targeted shard (with the
  statement's `sort`), and the write is sent to the shard of the first match with `{$and: [filter,
  {_id}]}`; an update or a delete with an `_id` equality is broadcast instead, as mongos does. "7.0" mode
  refuses them as 7.0 does, except the `_id` equality of an update or a delete, which 7.0 broadcasts.
- an update that may change `p` (a pipeline, a replacement, an operator on `p`) is simulated on each
  document it matches first, and refused with ImmutableField (66) if `p` would change: a real 4.2+ changes
  a shard key inside a transaction or a retryable write; the fake refuses always.

Refused, whatever the mode: an upsert without the full shard key (61), an insert without `p` (61: a real
cluster puts it in the MinKey chunk, but a partitioned execution without `p` is an engine bug).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import mongomock
from bson import json_util
from mongomock import aggregate

from harel_dev.errors import CommandError

from .chunks import PARTITION, ShardedCollection
from .gateway import ShardGateway
from .targeting import exact_value, has_exact_shard_key, target

Reply = dict[str, Any]
SHARD_KEY_NOT_FOUND = 61
IMMUTABLE_FIELD = 66
INVALID_OPTIONS = 72
UPSERT_WITHOUT_KEY = "Failed to target upsert by query :: could not extract exact shard key"
FIND_AND_MODIFY_WITHOUT_KEY = "Query for sharded findAndModify must contain the shard key"
UPDATE_WITHOUT_KEY = (
    "A {multi:false} update on a sharded collection must contain an exact match on _id (and have the "
    "collection default collation) or contain the shard key (and have the simple collation)"
)
DELETE_WITHOUT_KEY = (
    "A single delete on a sharded collection must contain an exact match on _id (and have the collection "
    "default collation) or contain the shard key (and have the simple collation)"
)
_LISTS = {"insert": "documents", "update": "updates", "delete": "deletes"}


@dataclass
class _OnShard:
    """A statement sent in a sub-batch to `shard`; `check` (if any), called just before the sub-batch is
    sent, gives the ImmutableField error that refuses it instead."""

    shard: str
    check: Callable[[], dict[str, Any] | None] | None = None
    counters: tuple[str, ...] = ()


@dataclass
class _Refused:
    error: dict[str, Any]


@dataclass
class _Alone:
    """A statement run by itself; its result has `n`, maybe `nModified`, `upserted`, `writeErrors` (index 0)."""

    run: Callable[[], Reply]
    counters: tuple[str, ...] = ()


_Plan = _OnShard | _Refused | _Alone


class ShardedWrites:
    def __init__(self, gateway: ShardGateway) -> None:
        self._gateway = gateway
        self._metrics = gateway.metrics
        self._scratch: mongomock.Collection[dict[str, Any]] = mongomock.MongoClient()["scratch"]["documents"]

    # --- batch commands ------------------------------------------------------------------------------

    def write(self, name: str, db: str, command: dict[str, Any], collection: ShardedCollection) -> Reply:
        statements = list(command.get(_LISTS[name]) or [])
        planner = {"insert": self._plan_insert, "update": self._plan_update, "delete": self._plan_delete}[
            name
        ]
        plans = [planner(db, command, statement, collection) for statement in statements]
        return self._execute(name, db, command, statements, plans)

    def _execute(
        self, name: str, db: str, command: dict[str, Any], statements: list[Any], plans: list[_Plan]
    ) -> Reply:
        ordered = bool(command.get("ordered", True))
        merged = _Merged(name)
        if ordered:
            index = 0
            while index < len(plans):
                plan = plans[index]
                if not isinstance(plan, _OnShard):
                    reply = (
                        self._run_alone(plan)
                        if isinstance(plan, _Alone)
                        else {"n": 0, "writeErrors": [plan.error]}
                    )
                    merged.add(reply, [index])
                    if reply.get("writeErrors"):
                        break
                    index += 1
                    continue
                end, refused = index, None
                while end < len(plans):
                    following = plans[end]
                    if not _bound_for(following, plan.shard):
                        break
                    refused = _checked(following)
                    if refused is not None:
                        break
                    end += 1
                if end > index:
                    indexes = list(range(index, end))
                    self._count_sent(plans[index:end])
                    reply = self._sub_batch(name, db, command, plan.shard, [statements[i] for i in indexes])
                    merged.add(reply, indexes)
                    if reply.get("writeErrors"):
                        break
                if refused is not None:
                    merged.add({"n": 0, "writeErrors": [refused]}, [end])
                    break
                index = end
            return merged.reply()
        by_shard: dict[str, list[int]] = {}
        for index, plan in enumerate(plans):
            if isinstance(plan, _OnShard):
                refused = _checked(plan)
                if refused is None:
                    by_shard.setdefault(plan.shard, []).append(index)
                else:
                    merged.add({"n": 0, "writeErrors": [refused]}, [index])
            elif isinstance(plan, _Alone):
                merged.add(self._run_alone(plan), [index])
            else:
                merged.add({"n": 0, "writeErrors": [plan.error]}, [index])
        for shard, indexes in sorted(by_shard.items()):
            self._count_sent([plans[i] for i in indexes])
            merged.add(self._sub_batch(name, db, command, shard, [statements[i] for i in indexes]), indexes)
        return merged.reply()

    def _run_alone(self, plan: _Alone) -> Reply:
        self._count_sent([plan])
        return plan.run()

    def _count_sent(self, plans: list[_Plan]) -> None:
        for plan in plans:
            for counter in plan.counters if isinstance(plan, _OnShard | _Alone) else ():
                self._metrics.count(counter)

    def _sub_batch(
        self, name: str, db: str, command: dict[str, Any], shard: str, statements: list[Any]
    ) -> Reply:
        return self._gateway.send(shard, name, db, {**command, _LISTS[name]: statements})

    def _alone(self, name: str, db: str, command: dict[str, Any], shard: str, statement: Any) -> Reply:
        return self._sub_batch(name, db, command, shard, [statement])

    # --- planning each statement ---------------------------------------------------------------------

    def _plan_insert(
        self, db: str, command: dict[str, Any], document: Any, collection: ShardedCollection
    ) -> _Plan:
        value = collection.key_value(document) if isinstance(document, dict) else None
        if value is None:
            shown = json_util.dumps(document)
            return _Refused(
                {
                    "index": 0,
                    "code": SHARD_KEY_NOT_FOUND,
                    "errmsg": f"Document {shown} does not contain shard key for pattern {_pattern(collection)}"
                    " (the fake cluster refuses what a real one would place in the MinKey chunk)",
                }
            )
        return _OnShard(collection.owner(value))

    def _plan_update(
        self, db: str, command: dict[str, Any], statement: Any, collection: ShardedCollection
    ) -> _Plan:
        query = statement.get("q") or {}
        multi, upsert = bool(statement.get("multi")), bool(statement.get("upsert"))
        if upsert and not has_exact_shard_key(query, collection):
            return _Refused({"index": 0, "code": SHARD_KEY_NOT_FOUND, "errmsg": UPSERT_WITHOUT_KEY})
        shards = target(query, collection)
        checked = _may_change_key(statement["u"], collection)

        def check() -> dict[str, Any] | None:
            return self._key_change(db, _name(command), statement, collection, shards)

        if len(shards) == 1:
            counters = () if multi else ("updateOneTargetedShardedCount",)
            return _OnShard(shards[0], check if checked else None, counters)
        if multi:
            return _Alone(
                lambda: self._update_each(db, command, statement, collection, shards, checked),
                ("scatterGatherWrites",),
            )
        with_id = ("updateOneWithoutShardKeyWithIdCount",) if exact_value(query, "_id")[0] else ()
        if with_id and "sort" not in statement:
            return _Alone(
                lambda: self._update_each(db, command, statement, collection, shards, checked),
                ("updateOneNonTargetedShardedCount", *with_id),
            )
        if self._gateway.cluster.mode == "7.0":
            return _Refused(
                {
                    "index": 0,
                    "code": INVALID_OPTIONS,
                    "errmsg": f"{UPDATE_WITHOUT_KEY}. {_shown(statement, collection)}",
                }
            )
        return _Alone(
            lambda: self._update_two_phase(db, command, statement, collection, shards, checked),
            ("updateOneNonTargetedShardedCount", *with_id),
        )

    def _plan_delete(
        self, db: str, command: dict[str, Any], statement: Any, collection: ShardedCollection
    ) -> _Plan:
        query = statement.get("q") or {}
        shards = target(query, collection)
        if statement.get("limit") != 1:
            if len(shards) == 1:
                return _OnShard(shards[0])
            return _Alone(
                lambda: self._summed("delete", db, command, statement, shards), ("scatterGatherWrites",)
            )
        if len(shards) == 1:
            return _OnShard(shards[0], counters=("deleteOneTargetedShardedCount",))
        non_targeted = ("deleteOneNonTargetedShardedCount",)
        if exact_value(query, "_id")[0]:
            return _Alone(lambda: self._summed("delete", db, command, statement, shards), non_targeted)
        if self._gateway.cluster.mode == "7.0":
            return _Refused({"index": 0, "code": INVALID_OPTIONS, "errmsg": DELETE_WITHOUT_KEY})

        def two_phase() -> Reply:
            found = self._first_match(db, _name(command), query, None, shards)
            if found is None:
                return {"n": 0}
            shard, document = found
            return self._alone("delete", db, command, shard, {**statement, "q": _pinned(query, document)})

        return _Alone(two_phase, non_targeted)

    # --- statements on their own ---------------------------------------------------------------------

    def _summed(
        self, name: str, db: str, command: dict[str, Any], statement: Any, shards: list[str]
    ) -> Reply:
        total: Reply = {"n": 0, "nModified": 0}
        for shard in shards:
            reply = self._alone(name, db, command, shard, statement)
            total["n"] += reply.get("n", 0)
            total["nModified"] += reply.get("nModified", 0)
            if reply.get("writeErrors"):
                total["writeErrors"] = reply["writeErrors"]
                break
        return total

    def _update_each(
        self,
        db: str,
        command: dict[str, Any],
        statement: dict[str, Any],
        collection: ShardedCollection,
        shards: list[str],
        checked: bool,
    ) -> Reply:
        if checked:
            error = self._key_change(db, _name(command), statement, collection, shards)
            if error is not None:
                return {"n": 0, "nModified": 0, "writeErrors": [error]}
        total: Reply = {"n": 0, "nModified": 0}
        for shard in shards:
            reply = self._alone("update", db, command, shard, statement)
            total["n"] += reply.get("n", 0)
            total["nModified"] += reply.get("nModified", 0)
            for field in ("upserted", "writeErrors"):
                if reply.get(field):
                    total[field] = reply[field]
            if reply.get("writeErrors"):
                break
        return total

    def _update_two_phase(
        self,
        db: str,
        command: dict[str, Any],
        statement: dict[str, Any],
        collection: ShardedCollection,
        shards: list[str],
        checked: bool,
    ) -> Reply:
        query = statement.get("q") or {}
        found = self._first_match(db, _name(command), query, statement.get("sort"), shards)
        if found is None:
            return {"n": 0, "nModified": 0}
        shard, document = found
        pinned = {key: value for key, value in statement.items() if key != "sort"} | {
            "q": _pinned(query, document)
        }
        return self._update_each(db, command, pinned, collection, [shard], checked)

    def _first_match(
        self, db: str, name: str, query: Any, sort: Any, shards: list[str]
    ) -> tuple[str, dict[str, Any]] | None:
        """The two-phase protocol's read, sent to every targeted shard: the document a single-document write
        would take (the first by `sort`, else the first shard's), and its shard."""
        candidates: list[tuple[str, dict[str, Any]]] = []
        for shard in shards:
            find: dict[str, Any] = {"find": name, "filter": query, "limit": 1}
            if sort:
                find["sort"] = sort
            _, documents = self._gateway.read(shard, "find", db, find)
            candidates += [(shard, document) for document in documents]
        if not candidates:
            return None
        if sort:
            ordered = list(
                aggregate.process_pipeline([d for _, d in candidates], None, [{"$sort": sort}], None)
            )
            best = ordered[0]
            return next((shard, d) for shard, d in candidates if d is best or d == best)
        return candidates[0]

    # --- findAndModify -------------------------------------------------------------------------------

    def find_and_modify(self, db: str, command: dict[str, Any], collection: ShardedCollection) -> Reply:
        name = _name(command)
        query = command.get("query") or {}
        if command.get("upsert") and not has_exact_shard_key(query, collection):
            raise CommandError(SHARD_KEY_NOT_FOUND, UPSERT_WITHOUT_KEY)
        shards = target(query, collection)
        if len(shards) == 1:
            self._metrics.count("findAndModifyTargetedShardedCount")
            shard, pinned = shards[0], command
        else:
            if self._gateway.cluster.mode == "7.0":
                raise CommandError(SHARD_KEY_NOT_FOUND, FIND_AND_MODIFY_WITHOUT_KEY)
            self._metrics.count("findAndModifyNonTargetedShardedCount")
            found = self._first_match(db, name, query, command.get("sort"), shards)
            if found is None:
                return {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None, "ok": 1.0}
            shard, document = found
            pinned = {key: value for key, value in command.items() if key != "sort"} | {
                "query": _pinned(query, document)
            }
        update = command.get("update")
        if update is not None and not command.get("remove") and _may_change_key(update, collection):
            statement = {"q": pinned.get("query") or {}, "u": update, "upsert": bool(command.get("upsert"))}
            if command.get("sort"):
                statement["sort"] = command["sort"]
            error = self._key_change(db, name, statement, collection, [shard])
            if error is not None:
                raise CommandError(IMMUTABLE_FIELD, error["errmsg"])
        return self._gateway.send(shard, "findAndModify", db, {"findAndModify": name, **pinned})

    # --- shard key changes ---------------------------------------------------------------------------

    def _key_change(
        self, db: str, name: str, statement: dict[str, Any], collection: ShardedCollection, shards: list[str]
    ) -> dict[str, Any] | None:
        """The ImmutableField error when applying the statement would change `p` of a document it matches
        (or give an upserted one another `p` than the filter's), else None. Nothing is written."""
        query, update = statement.get("q") or {}, statement["u"]
        matched: list[dict[str, Any]] = []
        for shard in shards:
            find: dict[str, Any] = {"find": name, "filter": query}
            if not statement.get("multi"):
                find["limit"] = 1
                if statement.get("sort"):
                    find["sort"] = statement["sort"]
            matched += self._gateway.peek(shard, db, find)
        array_filters = statement.get("arrayFilters")
        if not matched and statement.get("upsert"):
            self._scratch.delete_many({})
            result = _apply(self._scratch, query, update, array_filters, upsert=True)
            after = (
                self._scratch.find_one({"_id": result.upserted_id})
                if result.upserted_id is not None
                else None
            )
            wanted = exact_value(query, PARTITION)[1]
            if after is not None and after.get(PARTITION) != wanted:
                return _immutable(collection, after)
            return None
        for document in matched:
            self._scratch.delete_many({})
            self._scratch.insert_one(document)
            _apply(self._scratch, {"_id": document["_id"]}, update, array_filters, upsert=False)
            after = self._scratch.find_one({"_id": document["_id"]}) or {}
            if PARTITION not in after or after[PARTITION] != document.get(PARTITION):
                return _immutable(collection, document)
        return None


def _bound_for(plan: _Plan, shard: str) -> TypeGuard[_OnShard]:
    return isinstance(plan, _OnShard) and plan.shard == shard


def _checked(plan: _OnShard) -> dict[str, Any] | None:
    return plan.check() if plan.check is not None else None


class _Merged:
    """The client's reply to a batch assembled from sub-batch replies."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._n = 0
        self._modified = 0
        self._upserted: list[dict[str, Any]] = []
        self._errors: list[dict[str, Any]] = []

    def add(self, reply: Reply, indexes: list[int]) -> None:
        self._n += int(reply.get("n", 0))
        self._modified += int(reply.get("nModified", 0))
        for entry in reply.get("upserted") or []:
            self._upserted.append({**entry, "index": indexes[int(entry["index"])]})
        for error in reply.get("writeErrors") or []:
            self._errors.append({**error, "index": indexes[int(error["index"])]})

    def reply(self) -> Reply:
        reply: Reply = {"n": self._n}
        if self._name == "update":
            reply["nModified"] = self._modified
            if self._upserted:
                reply["upserted"] = sorted(self._upserted, key=lambda entry: int(entry["index"]))
        if self._errors:
            reply["writeErrors"] = sorted(self._errors, key=lambda error: int(error["index"]))
        reply["ok"] = 1.0
        return reply


def _name(command: dict[str, Any]) -> str:
    return str(next(iter(command.values())))


def _pinned(query: Any, document: dict[str, Any]) -> dict[str, Any]:
    """The filter narrowed to the document the two-phase read chose (its `_id` is unique on its shard)."""
    return {"$and": [query, {"_id": document["_id"]}]} if query else {"_id": document["_id"]}


def _pattern(collection: ShardedCollection) -> str:
    return (
        "{ "
        + ", ".join(f"{field}: {json_util.dumps(value)}" for field, value in collection.key.items())
        + " }"
    )


def _shown(statement: Any, collection: ShardedCollection) -> str:
    return f"Update request: {json_util.dumps(statement)}, shard key pattern: {_pattern(collection)}"


def _may_change_key(update: Any, collection: ShardedCollection) -> bool:
    """The update could change `p`: a pipeline, a replacement, or an operator naming `p` (or inside it)."""
    if not collection.key_fields:
        return False
    if isinstance(update, list) or not any(str(key).startswith("$") for key in update):
        return True
    for operator, fields in update.items():
        if not isinstance(fields, dict):
            continue
        for path, value in fields.items():
            named = [path, value] if operator == "$rename" else [path]
            if any(isinstance(p, str) and (p == PARTITION or p.startswith(PARTITION + ".")) for p in named):
                return True
    return False


def _apply(
    scratch: mongomock.Collection[dict[str, Any]],
    query: Any,
    update: Any,
    array_filters: Any,
    *,
    upsert: bool,
) -> Any:
    if not isinstance(update, list) and not any(str(key).startswith("$") for key in update):
        return scratch.replace_one(query, update, upsert=upsert)
    options: dict[str, Any] = {"upsert": upsert}
    if array_filters:
        options["array_filters"] = array_filters
    return scratch.update_one(query, update, **options)


def _immutable(collection: ShardedCollection, document: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": 0,
        "code": IMMUTABLE_FIELD,
        "errmsg": f"Performing an update on the path '{PARTITION}' would modify the shard key of the document "
        f"with _id {json_util.dumps(document.get('_id'))} in {collection.namespace}: the fake cluster refuses "
        "every shard key change (a real one allows it only in a transaction or a retryable write)",
    }
