"""What may enter the store as an execution id or as context: pure checks, used wherever such values enter.

Ids. A region of a parallel state runs as a child execution whose id the engine derives from its parent:
`<parent id>/<parallel path>.<region>@<parent version at the fork>` (`order-42/fulfilling.payment@3`). The
form is reserved: a root id that ends in `/<anything>@<digits>` could be the id of a future child of some
other execution, whose parent would then wait for a region that can never start. An empty id is refused too.

Event ids. A target deduplicates the events it applies by id, so a client's id must never equal one the
engine derives. The engine's are `<execution id>:<kind>...` for the events it makes for that execution
(`:start`, `:cancel`, `:timer:...`, `:fail:...`) and `<sender id>@<version>#<n>` for the events a step
sends (a region's `harel.done` among them). A client may not choose an id of either form, nor an empty one.

Context. The execution's context is stored as JSON, so it must be strict JSON: objects with string keys,
arrays (lists), strings, booleans, null, integers MongoDB can store (64 bits) and finite floats. NaN and
Infinity are refused (JSON has neither; they would silently become null), as are tuples, sets, bytes, dates
and any other Python object. Values nest at most MAX_NESTING levels deep: below MongoDB's 100 levels of
BSON and the JSON parsers' recursion limits, so that everything stored can be read back. The error names
the key path of the first offending value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from harel.errors import InvalidContext, InvalidEventId, InvalidExecutionId

CHILD_ID = re.compile(r"/[^/]+@[0-9]+$")
SENT_EVENT_ID = re.compile(r"@[0-9]+#[0-9]+$")
REGIONS_KEY = "regions"  # context key under which a parent records its regions' results
INT64 = (-(2**63), 2**63 - 1)
MAX_NESTING = 64


def child_id(parent_id: str, region_path: str, parent_version: int) -> str:
    """The id of the child execution that runs `region_path` for the parent at `parent_version`."""
    return f"{parent_id}/{region_path}@{parent_version}"


def is_child_id(execution_id: str) -> bool:
    return CHILD_ID.search(execution_id) is not None


def check_root_id(execution_id: str) -> str:
    """`execution_id` when a client may start an execution under it; InvalidExecutionId otherwise."""
    if not execution_id:
        raise InvalidExecutionId(execution_id, "an id cannot be empty")
    if is_child_id(execution_id):
        raise InvalidExecutionId(
            execution_id,
            "ids ending in '/<name>@<number>' are reserved for the child executions of parallel regions "
            "(<parent>/<parallel>.<region>@<version>); choose an id without that ending",
        )
    return execution_id


def check_client_event_id(event_id: str, execution_id: str) -> str:
    """`event_id` when a client may send it to `execution_id`; InvalidEventId otherwise."""
    if not event_id.strip():
        raise InvalidEventId(event_id, "an id cannot be empty; leave it out to have one generated")
    if event_id.startswith(f"{execution_id}:"):
        raise InvalidEventId(
            event_id,
            f"ids starting with '{execution_id}:' are the engine's own events for that execution "
            "(its start, cancel, timers and failures); choose an id without that prefix",
        )
    if SENT_EVENT_ID.search(event_id):
        raise InvalidEventId(
            event_id,
            "ids ending in '@<number>#<number>' are the ids of events the engine's steps send "
            "(a region's done among them); choose an id without that ending",
        )
    return event_id


def check_context(context: Any, origin: str) -> None:
    """Raise InvalidContext unless `context` is a JSON object (str keys) of strict JSON values that a client
    or an action may write: `regions` is the engine's."""
    if not isinstance(context, Mapping):
        raise InvalidContext(origin, "", f"context must be a JSON object, not {type(context).__name__}")
    if REGIONS_KEY in context:
        raise InvalidContext(origin, REGIONS_KEY, "the key is written by the engine (the results of regions)")
    check_json(context, origin)


def check_json(value: Any, origin: str) -> None:
    """Raise InvalidContext naming the key path of the first value in `value` that is not strict JSON."""
    problem = _first_problem(value)
    if problem is not None:
        path, reason = problem
        raise InvalidContext(origin, ".".join(str(part) for part in reversed(path)), reason)


def _first_problem(value: Any, depth: int = 0) -> tuple[list[str | int], str] | None:
    """(key path, innermost key first; reason) of the first non-JSON value, or None. Builds the path only on
    the way out of a failure, so a valid value costs one type check per node."""
    if depth > MAX_NESTING:
        return [], f"the value nests deeper than {MAX_NESTING} levels of objects and lists, the limit"
    if value is None or isinstance(value, str | bool):
        return None
    if isinstance(value, int):
        if INT64[0] <= value <= INT64[1]:
            return None
        return [], f"integer {value} does not fit in 64 bits (MongoDB stores at most 64-bit integers)"
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return [], f"{value!r} is not a JSON number (JSON has no NaN or Infinity)"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return [repr(key)], f"key {key!r} is a {type(key).__name__}; JSON object keys are strings"
            problem = _first_problem(item, depth + 1)
            if problem is not None:
                problem[0].append(key)
                return problem
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _first_problem(item, depth + 1)
            if problem is not None:
                problem[0].append(index)
                return problem
        return None
    return (
        [],
        f"{type(value).__name__} is not a JSON value (use objects, lists, strings, numbers, booleans, null)",
    )
