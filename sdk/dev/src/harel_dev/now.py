"""`$$NOW` for mongomock: the server's clock inside expressions, bound once per command.

MongoDB evaluates `$$NOW` to the server's current time, one value for the whole command; leases, mailbox
due times and timers rely on it, so no worker's own clock decides them. mongomock does not evaluate system
variables (it drops the field that uses one), so every local backend binds `$$NOW` before handing a command
to mongomock: each `"$$NOW"` in an expression context becomes `{"$literal": <now>}`.

Expression contexts are the ones MongoDB evaluates: an update given as a pipeline, an aggregation pipeline,
and `$expr` inside a query filter (also under `$and`, `$or` and `$nor`). Everywhere else `"$$NOW"` is data
(a document being inserted, a classic `$set` value, an equality in a filter) and is left alone, as is
anything under `$literal`.

Over the wire, `bind_command` binds a whole command document (its filters, update pipelines and
aggregation pipeline) to one instant, read once from the server's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

Clock = Callable[[], float]
"""A clock: epoch seconds, like `time.time`; injectable so a test can run a server whose clock differs."""

NOW = "$$NOW"
_LOGICAL = ("$and", "$or", "$nor")
# Where each command keeps its query filter(s): top-level field, or (list field, filter field) per statement.
_FILTERS = {"find": "filter", "count": "query", "distinct": "query", "findAndModify": "query"}


def server_now(epoch_seconds: float) -> datetime:
    """`$$NOW` as MongoDB gives it: a UTC datetime with millisecond precision (a BSON date), naive as
    mongomock stores dates."""
    millis = int(epoch_seconds * 1000)
    return datetime.fromtimestamp(millis / 1000, UTC).replace(tzinfo=None)


def bind_expression(expression: Any, now: datetime) -> Any:
    """`expression` with every `$$NOW` replaced by the literal `now`; `$literal` values are kept as given."""
    if expression == NOW:
        return {"$literal": now}
    if isinstance(expression, Mapping):
        return {
            key: value if key == "$literal" else bind_expression(value, now)
            for key, value in expression.items()
        }
    if isinstance(expression, list):
        return [bind_expression(item, now) for item in expression]
    return expression


def bind_filter(query: Any, now: datetime) -> Any:
    """A query filter with `$$NOW` bound inside its `$expr` clauses, and nowhere else."""
    if not isinstance(query, Mapping):
        return query
    bound: dict[str, Any] = {}
    for key, value in query.items():
        if key == "$expr":
            bound[key] = bind_expression(value, now)
        elif key in _LOGICAL and isinstance(value, list):
            bound[key] = [bind_filter(clause, now) for clause in value]
        else:
            bound[key] = value
    return bound


def bind_update(update: Any, now: datetime) -> Any:
    """An update with `$$NOW` bound when it is a pipeline; classic operator updates hold data only."""
    return bind_expression(update, now) if isinstance(update, list) else update


def bind_pipeline(pipeline: Any, now: datetime) -> Any:
    """An aggregation pipeline with `$$NOW` bound in every stage; a `$match` stage is a query filter."""
    if not isinstance(pipeline, list):
        return pipeline
    return [
        {"$match": bind_filter(stage["$match"], now)}
        if isinstance(stage, Mapping) and set(stage) == {"$match"}
        else bind_expression(stage, now)
        for stage in pipeline
    ]


def bind_command(command: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A wire command with `$$NOW` bound to `now` in every expression context it has: the query filter of
    find/count/distinct/findAndModify, each statement of update and delete, the update of findAndModify
    and of each update statement (when a pipeline), and an aggregate's pipeline."""
    bound = dict(command)
    name = next(iter(command), "")
    if name == "findandmodify":
        name = "findAndModify"
    if name in _FILTERS and _FILTERS[name] in bound:
        bound[_FILTERS[name]] = bind_filter(bound[_FILTERS[name]], now)
    if name == "findAndModify" and "update" in bound:
        bound["update"] = bind_update(bound["update"], now)
    if name == "update" and isinstance(bound.get("updates"), list):
        bound["updates"] = [_bind_statement(statement, now, update=True) for statement in bound["updates"]]
    if name == "delete" and isinstance(bound.get("deletes"), list):
        bound["deletes"] = [_bind_statement(statement, now, update=False) for statement in bound["deletes"]]
    if name == "aggregate" and "pipeline" in bound:
        bound["pipeline"] = bind_pipeline(bound["pipeline"], now)
    return bound


def _bind_statement(statement: Any, now: datetime, *, update: bool) -> Any:
    if not isinstance(statement, Mapping):
        return statement
    bound = dict(statement)
    if "q" in bound:
        bound["q"] = bind_filter(bound["q"], now)
    if update and "u" in bound:
        bound["u"] = bind_update(bound["u"], now)
    return bound
