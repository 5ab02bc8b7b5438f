"""Which shards a filter on a sharded collection reaches, as the router decides it (after `$$NOW` binding).

For `{p: 1, _id: 1}`: an equality on `p` (a value, or `{$eq: v}`) or `p: {$in: [...]}`, at the top level or
inside `$and`, targets the shards owning those values; anything else reaches every shard holding chunks of
the collection. For `{_id: "hashed"}` the same shapes on `_id` target through the pinned hash. Ranges (`$gt`,
`$lt`) are not used to target here, although a real mongos targets them: such a filter counts as a scatter.
"""

from __future__ import annotations

import math
from typing import Any

from .chunks import PARTITION, ShardedCollection, is_number, pinned_hash

_UNCONSTRAINED = None


def pinned_values(query: Any, name: str) -> list[Any] | None:
    """The values `query` pins the top-level field `name` to (equality, `$eq`, `$in`, also under `$and`);
    None when it does not pin it."""
    if not isinstance(query, dict):
        return _UNCONSTRAINED
    found: list[Any] | None = _UNCONSTRAINED
    if name in query:
        found = _condition_values(query[name])
    for clause in query.get("$and", []) if isinstance(query.get("$and"), list) else []:
        narrowed = pinned_values(clause, name)
        if narrowed is not None:
            found = narrowed if found is None else [value for value in found if _member(value, narrowed)]
    return found


def exact_value(query: Any, name: str) -> tuple[bool, Any]:
    """(True, value) when `query` pins `name` to exactly one value."""
    values = pinned_values(query, name)
    if values is not None and len(values) == 1:
        return True, values[0]
    return False, None


def has_exact_shard_key(query: Any, collection: ShardedCollection) -> bool:
    """The filter names one full shard key: both `p` and `_id` (or `_id` for the hashed key)."""
    if not exact_value(query, "_id")[0]:
        return False
    return collection.hashed or exact_value(query, PARTITION)[0]


def target(query: Any, collection: ShardedCollection) -> list[str]:
    """The shards (sorted) a command with this filter is sent to."""
    name = "_id" if collection.hashed else PARTITION
    values = pinned_values(query, name)
    if values is None:
        return sorted(collection.shards())
    return sorted({collection.owner(_placed(value, collection)) for value in values})


def _placed(value: Any, collection: ShardedCollection) -> float:
    if collection.hashed:
        return float(pinned_hash(value))
    if is_number(value):
        return float(value)
    # BSON order: null sorts before numbers, strings and the rest after them.
    return -math.inf if value is None else collection.chunks[-1].low


def _condition_values(condition: Any) -> list[Any] | None:
    if not isinstance(condition, dict) or not any(str(key).startswith("$") for key in condition):
        return [condition]
    if "$eq" in condition:
        return [condition["$eq"]]
    if isinstance(condition.get("$in"), list):
        return [value for value in condition["$in"] if not isinstance(value, dict)] or []
    return _UNCONSTRAINED


def _member(value: Any, values: list[Any]) -> bool:
    return any(value == other for other in values)
