"""Finding documents the way an index would, for the local backends.

mongomock answers every query by testing each document of the collection with its full matcher; MongoDB
answers a filter on `_id` from its unique index and a range from an ordinary one. A worker's writes name
their execution by `_id`, and its claims and sweeps ask for a range of due times, so on a local backend
each of them cost a full match of every execution, completed ones included. `patch()` (applied once per
process by `harel_dev.mongomock_patches.install()`) narrows the candidates first and leaves the answer to
mongomock's matcher:

- a filter whose `_id` is a string or an ObjectId reads that one document (`_id` is unique);
- a top-level numeric range (`{"inbox_at": {"$gte": 0, "$lte": t}}`) passes over documents whose field
  is null, missing or a number outside it, which MongoDB's comparison never matches; any other value
  (an array, a boolean, a string, NaN) goes to the full matcher.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bson import ObjectId
from mongomock import collection, filtering

Bounds = list[tuple[Callable[[Any, Any], bool], float]]
# A collection's documents that may match a filter (mongomock's `Collection._iter_documents`).
Scan = Callable[[collection.Collection, Any], Iterator[dict[str, Any]]]
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def patch() -> None:
    """Patch mongomock's document iteration; once per process (`mongomock_patches.install`)."""
    # Replacing mongomock's method is the patch, which mypy refuses for a method (method-assign).
    collection.Collection._iter_documents = narrowed(collection.Collection._iter_documents)  # type: ignore[method-assign]


def narrowed(scan: Scan) -> Scan:
    """`scan` (mongomock's `Collection._iter_documents`), reading only the candidates a filter allows."""

    def iter_documents(self: collection.Collection, filter: Any) -> Iterator[dict[str, Any]]:
        if not isinstance(filter, Mapping):
            return scan(self, filter)
        key = filter.get("_id")
        # str and ObjectId only: a number would also find an equal number of another type in a dict
        if type(key) in (str, ObjectId):
            try:
                document = self._store[key]
            except KeyError:
                return iter([])
            return iter([document] if filtering.filter_applies(filter, document) else [])
        ranges = numeric_ranges(filter)
        if not ranges:
            return scan(self, filter)
        return (
            document
            for document in list(self._store.documents)
            if may_match(document, ranges) and filtering.filter_applies(filter, document)
        )

    return iter_documents


def numeric_ranges(filter: Mapping[str, Any]) -> dict[str, Bounds]:
    """The filter's top-level fields compared with numbers only (`$gt`, `$gte`, `$lt`, `$lte`)."""
    ranges: dict[str, Bounds] = {}
    for field, condition in filter.items():
        if field.startswith("$") or "." in field or not isinstance(condition, Mapping) or not condition:
            continue
        if all(op in _COMPARISONS and _is_number(bound) for op, bound in condition.items()):
            ranges[field] = [(_COMPARISONS[op], bound) for op, bound in condition.items()]
    return ranges


def may_match(document: Mapping[str, Any], ranges: Mapping[str, Bounds]) -> bool:
    """False only where MongoDB's comparison cannot match: null, missing, or a number out of range."""
    for field, bounds in ranges.items():
        value = document.get(field)
        if value is None:
            return False
        if _is_number(value) and not all(compare(value, bound) for compare, bound in bounds):
            return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
