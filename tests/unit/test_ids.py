"""Ids a client may use, and strict-JSON context: the pure checks of harel.ids."""

from __future__ import annotations

import math
from collections import OrderedDict
from types import MappingProxyType
from typing import Any

import pytest

from harel.errors import InvalidContext, InvalidEventId, InvalidExecutionId
from harel.ids import check_client_event_id, check_context, check_json, check_root_id, child_id, is_child_id
from harel.model import start_event_id, timer_event_id


@pytest.mark.semantics("sem-ids-reserved")
def test_child_ids_have_the_reserved_form_and_roots_may_not_take_it() -> None:
    made = child_id("order-42", "fulfilling.payment", 3)
    assert made == "order-42/fulfilling.payment@3"
    assert is_child_id(made)
    assert is_child_id(child_id(made, "a.b.inner.x", 0))  # a grandchild too
    with pytest.raises(InvalidExecutionId) as caught:
        check_root_id(made)
    assert caught.value.execution_id == made
    assert "reserved for the child executions of parallel regions" in str(caught.value)
    with pytest.raises(InvalidExecutionId, match="an id cannot be empty"):
        check_root_id("")


@pytest.mark.parametrize("fine", ["order-42", "orders/42", "a@1", "x/y@v2", "tenant/order@", "o/p.r@1/more"])
def test_ordinary_ids_are_accepted(fine: str) -> None:
    assert check_root_id(fine) == fine
    assert not is_child_id(fine)


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"a": 1, "b": -2.5, "c": "x", "d": None, "e": True, "f": [1, [2, {"g": []}]]},
        {"big": 2**63 - 1, "small": -(2**63)},
        OrderedDict(a=1),
        MappingProxyType({"a": {"b": 1}}),
    ],
)
def test_strict_json_passes(value: Any) -> None:
    check_context(value, "test")


@pytest.mark.parametrize(
    ("value", "key_path", "reason"),
    [
        ({"a": math.nan}, "a", "nan is not a JSON number (JSON has no NaN or Infinity)"),
        ({"a": {"b": [0, -math.inf]}}, "a.b.1", "-inf is not a JSON number (JSON has no NaN or Infinity)"),
        (
            {"a": 2**63},
            "a",
            f"integer {2**63} does not fit in 64 bits (MongoDB stores at most 64-bit integers)",
        ),
        (
            {"a": (1,)},
            "a",
            "tuple is not a JSON value (use objects, lists, strings, numbers, booleans, null)",
        ),
        (
            {"a": {1, 2}},
            "a",
            "set is not a JSON value (use objects, lists, strings, numbers, booleans, null)",
        ),
        (
            {"a": b"x"},
            "a",
            "bytes is not a JSON value (use objects, lists, strings, numbers, booleans, null)",
        ),
        ({"a": {None: 1}}, "a.None", "key None is a NoneType; JSON object keys are strings"),
    ],
)
def test_what_is_not_strict_json_is_named_by_its_key_path(value: Any, key_path: str, reason: str) -> None:
    with pytest.raises(InvalidContext) as caught:
        check_json(value, "start context")
    assert (caught.value.origin, caught.value.key_path, caught.value.reason) == (
        "start context",
        key_path,
        reason,
    )
    assert str(caught.value) == f"start context at {key_path!r}: {reason}"
    assert isinstance(caught.value, ValueError)


def test_a_context_is_an_object() -> None:
    with pytest.raises(InvalidContext, match="context must be a JSON object, not list"):
        check_context([1], "start context")
    with pytest.raises(InvalidContext) as caught:
        check_json(math.nan, "a value")
    assert str(caught.value) == "a value: nan is not a JSON number (JSON has no NaN or Infinity)"


@pytest.mark.semantics("sem-ids-reserved")
@pytest.mark.parametrize(
    ("event_id", "reason"),
    [
        ("", "cannot be empty"),
        ("   ", "cannot be empty"),
        (start_event_id("X"), "the engine's own events for that execution"),
        ("X:cancel", "the engine's own events for that execution"),
        (timer_event_id("X", "waiting", 12.5), "the engine's own events for that execution"),
        ("X/fork.a@1@2#0", "ids of events the engine's steps send"),  # a region's harel.done to its parent
        ("X@7#3", "ids of events the engine's steps send"),
    ],
)
def test_a_client_may_not_choose_an_event_id_the_engine_gives_its_own_events(
    event_id: str, reason: str
) -> None:
    with pytest.raises(InvalidEventId, match=reason) as caught:
        check_client_event_id(event_id, "X")
    assert caught.value.event_id == event_id


@pytest.mark.parametrize("fine", ["tick-1", "Y:start", "X-start", "order@3", "a#1", "urn:uuid:1234"])
def test_other_event_ids_are_accepted(fine: str) -> None:
    assert check_client_event_id(fine, "X") == fine
