"""Corrections to mongomock 4.3's aggregation expressions, where it answers differently from MongoDB.

The local backends (the embedded `mongomock://` client and the local server) evaluate update pipelines,
`$expr` filters and aggregations with mongomock. Where mongomock gives a *different answer* than MongoDB,
a store that is right on MongoDB would be wrong locally, or the reverse; these are corrected here:

- a field set to a missing value (`"$$REMOVE"`, or a path that does not exist) in `$set` / `$addFields` is
  removed; mongomock kept the old value;
- comparisons (`$eq`, `$ne`, `$lt`, `$lte`, `$gt`, `$gte`, `$cmp`) with a missing operand follow MongoDB's
  order (missing sorts below null and equals only missing); mongomock skipped the field or, in a `$expr`
  filter, raised KeyError. A boolean never equals a number (mongomock said `1 == true`);
- an array literal's elements are expressions (`[{"id": "$x", "at": "$$NOW"}]`), evaluated as MongoDB does
  (a missing element becomes null); mongomock returned the literal unevaluated;
- `$in` with a missing first operand is false;
- `{"$not": [expression]}` (the array form) negates the expression; mongomock negated the array;
- `$add` of a date and milliseconds gives a date; `$toLong` of a date gives its epoch milliseconds;
- `$min` and `$max` of one expression that is an array give its least or greatest element (nulls and
  missing values left out; null when none is left); mongomock iterated the expression's keys;
- the `$type` expression (the BSON type's name), and the `$unset` stage (in pipelines and update
  pipelines), which mongomock did not implement.

Expressions mongomock does not implement at all (for example `$mergeObjects`, `$reduce`, `$first` on an
array, `$toDate`, `$toDouble`) still fail loudly; the local server answers them with NotImplemented (238)
or the parse error.

`patch()` applies them; `harel_dev.mongomock_patches.install()` calls it once per process, before any local
backend is used.
"""

from __future__ import annotations

import datetime
import numbers
from collections.abc import Callable
from typing import Any, cast

from mongomock import aggregate
from pymongo.errors import OperationFailure

_MISSING = object()
_ORDERS: dict[str, Callable[[int], bool | int]] = {
    "$eq": lambda order: order == 0,
    "$ne": lambda order: order != 0,
    "$lt": lambda order: order < 0,
    "$lte": lambda order: order <= 0,
    "$gt": lambda order: order > 0,
    "$gte": lambda order: order >= 0,
    "$cmp": lambda order: order,
}
_EPOCH = datetime.datetime(1970, 1, 1)


def patch() -> None:
    """Apply the corrections to mongomock; once per process (`mongomock_patches.install`)."""
    parser = aggregate._Parser
    # Replacing mongomock's methods is the patch, which mypy refuses for a method (method-assign).
    parser.parse = _array_literals(parser.parse)  # type: ignore[method-assign]
    parser._handle_comparison_operator = _comparison(parser._handle_comparison_operator)  # type: ignore[method-assign]
    parser._handle_set_operator = _set_operator(parser._handle_set_operator)  # type: ignore[method-assign]
    parser._handle_boolean_operator = _boolean(parser._handle_boolean_operator)  # type: ignore[method-assign]
    parser._handle_arithmetic_operator = _arithmetic(parser._handle_arithmetic_operator)  # type: ignore[method-assign]
    parser._handle_type_convertion_operator = _conversion(parser._handle_type_convertion_operator)  # type: ignore[method-assign]
    parser._handle_project_operator = _extremes(parser._handle_project_operator)  # type: ignore[method-assign]
    handlers = aggregate._PIPELINE_HANDLERS
    handlers["$set"] = handlers["$addFields"] = _add_fields
    handlers["$unset"] = _unset


def _operand(parser: Any, expression: Any) -> Any:
    try:
        return parser.parse(expression)
    except KeyError:
        return _MISSING


def _array_literals(original: Callable[..., Any]) -> Callable[..., Any]:
    """Array literals evaluated, and `$type` (both where mongomock's parser first sees an expression)."""

    def parse(self: Any, expression: Any) -> Any:
        if isinstance(expression, list):
            return [None if (value := _operand(self, item)) is _MISSING else value for item in expression]
        if isinstance(expression, dict) and len(expression) == 1 and "$type" in expression:
            return _type_name(self, expression["$type"])
        return original(self, expression)

    return parse


def _comparison(original: Callable[..., Any]) -> Callable[..., Any]:
    def compare(self: Any, operator: str, values: Any) -> Any:
        if operator not in _ORDERS or not isinstance(values, list) or len(values) != 2:
            return original(self, operator, values)
        left, right = (_operand(self, value) for value in values)
        if left is _MISSING or right is _MISSING:
            return _ORDERS[operator]((left is not _MISSING) - (right is not _MISSING))
        if _is_bool_versus_number(left, right):
            # Different BSON types: numbers sort before booleans, and never equal them.
            return _ORDERS[operator](-1 if isinstance(right, bool) else 1)
        return original(self, operator, [{"$literal": left}, {"$literal": right}])

    return compare


def _is_bool_versus_number(left: Any, right: Any) -> bool:
    if isinstance(left, bool) == isinstance(right, bool):
        return False
    return isinstance(left, numbers.Number) and isinstance(right, numbers.Number)


def _set_operator(original: Callable[..., Any]) -> Callable[..., Any]:
    def set_operator(self: Any, operator: str, values: Any) -> Any:
        if operator == "$in" and isinstance(values, list) and len(values) == 2:
            needle, haystack = _operand(self, values[0]), _operand(self, values[1])
            if not isinstance(haystack, list):
                found = "missing" if haystack is _MISSING else type(haystack).__name__
                raise OperationFailure(f"$in requires an array as a second argument, found: {found}", 40081)
            return needle is not _MISSING and needle in haystack
        return original(self, operator, values)

    return set_operator


def _boolean(original: Callable[..., Any]) -> Callable[..., Any]:
    def boolean(self: Any, operator: str, values: Any) -> Any:
        if operator == "$not" and isinstance(values, list):
            if len(values) != 1:
                raise OperationFailure(
                    f"Expression $not takes exactly 1 arguments. {len(values)} were passed in."
                )
            return original(self, operator, values[0])
        return original(self, operator, values)

    return boolean


def _arithmetic(original: Callable[..., Any]) -> Callable[..., Any]:
    def arithmetic(self: Any, operator: str, values: Any) -> Any:
        if operator != "$add" or not isinstance(values, list):
            return original(self, operator, values)
        operands = [_operand(self, value) for value in values]
        dates = [operand for operand in operands if isinstance(operand, datetime.datetime)]
        if not dates:
            return original(self, operator, values)
        if len(dates) > 1:
            raise OperationFailure("only one date allowed in an $add expression", 16612)
        if any(operand is None or operand is _MISSING for operand in operands):
            return None
        milliseconds = sum(operand for operand in operands if operand is not dates[0])
        return dates[0] + datetime.timedelta(milliseconds=milliseconds)

    return arithmetic


def _conversion(original: Callable[..., Any]) -> Callable[..., Any]:
    def conversion(self: Any, operator: str, values: Any) -> Any:
        if operator == "$toLong":
            value = _operand(self, values)
            if isinstance(value, datetime.datetime):
                return (value.replace(tzinfo=None) - _EPOCH) // datetime.timedelta(milliseconds=1)
        return original(self, operator, values)

    return conversion


def _extremes(original: Callable[..., Any]) -> Callable[..., Any]:
    def project(self: Any, operator: str, values: Any) -> Any:
        if operator not in ("$min", "$max") or not isinstance(values, dict):
            return original(self, operator, values)
        array = _operand(self, values)
        if not isinstance(array, list):
            return None if array is _MISSING else array
        present = [item for item in array if item is not None]
        if not present:
            return None
        return min(present) if operator == "$min" else max(present)

    return project


# BSON type names of `$type`, by the Python type a document's value has (bool before int: a bool is an int).
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (int, "long"),
    (float, "double"),
    (str, "string"),
    (dict, "object"),
    (list, "array"),
    (datetime.datetime, "date"),
    (bytes, "binData"),
    (type(None), "null"),
)


def _type_name(parser: Any, operand: Any) -> str:
    value = _operand(parser, operand[0] if isinstance(operand, list) and len(operand) == 1 else operand)
    if value is _MISSING:
        return "missing"
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
        return "int"
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


def _add_fields(documents: list[dict[str, Any]], database: Any, options: dict[str, Any]) -> list[Any]:
    """`$set` / `$addFields`: every field evaluated against the input document; a missing value removes
    the field, as MongoDB does."""
    if not options:
        raise OperationFailure(
            "Invalid $addFields :: caused by :: specification must have at least one field"
        )
    results = []
    for document in documents:
        result = dict(document)
        for path, expression in options.items():
            try:
                value = aggregate._parse_expression(expression, document, ignore_missing_keys=True)
            except KeyError:
                _remove(result, path.split("."))
                continue
            _assign(result, path.split("."), value)
        results.append(result)
    return results


def _assign(document: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        child = document.get(part)
        child = dict(child) if isinstance(child, dict) else {}
        document[part] = child
        document = child
    document[parts[-1]] = value


def _remove(document: dict[str, Any], parts: list[str]) -> None:
    for part in parts[:-1]:
        child = document.get(part)
        if not isinstance(child, dict):
            return
        child = dict(child)
        document[part] = child
        document = child
    document.pop(parts[-1], None)


def _unset(documents: list[dict[str, Any]], database: Any, options: Any) -> list[Any]:
    """`$unset: "field"` or `$unset: [fields]`: an exclusion projection of those fields."""
    fields = [options] if isinstance(options, str) else options
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f for f in fields):
        raise OperationFailure(
            "$unset specification must be a string or an array of non-empty strings", 31002
        )
    projected = aggregate._handle_project_stage(documents, database, dict.fromkeys(fields, 0))
    return cast(list[Any], projected)  # mongomock's stage handlers are untyped
