"""The local server's dropIndexes: an index named by its name or by its key is dropped; an unknown one is
IndexNotFound; an `index` of another type (TypeMismatch) or none at all is refused, as on mongod."""

from __future__ import annotations

from typing import Any

import pytest

from harel_dev.engine import Engine
from harel_dev.errors import CommandError


def engine_with_indexes() -> Engine:
    engine = Engine()
    indexes = [{"key": {"due": 1}, "name": "due"}, {"key": {"owner": 1, "at": -1}, "name": "owner_at"}]
    engine.execute("createIndexes", "harel", {"createIndexes": "executions", "indexes": indexes})
    return engine


def index_names(engine: Engine) -> list[str]:
    listed = engine.execute("listIndexes", "harel", {"listIndexes": "executions"})
    return sorted(index["name"] for index in listed["cursor"]["firstBatch"])


@pytest.mark.parametrize("index", ["due", {"due": 1}, ["due"]])
def test_an_index_named_by_its_name_or_its_key_is_dropped(index: Any) -> None:
    engine = engine_with_indexes()

    reply = engine.execute("dropIndexes", "harel", {"dropIndexes": "executions", "index": index})

    assert reply == {"nIndexesWas": 3, "ok": 1.0}
    assert index_names(engine) == ["_id_", "owner_at"]


def test_an_unknown_index_is_not_found_and_nothing_is_dropped() -> None:
    engine = engine_with_indexes()

    with pytest.raises(CommandError) as refused:
        engine.execute("dropIndexes", "harel", {"dropIndexes": "executions", "index": {"due": -1}})

    assert refused.value.code == 27
    assert index_names(engine) == ["_id_", "due", "owner_at"]


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ({"index": None}, 14),
        ({"index": 5}, 14),
        ({"index": [7]}, 14),
        ({}, 40414),
    ],
)
def test_an_index_of_another_type_or_none_at_all_is_refused(command: dict[str, Any], code: int) -> None:
    engine = engine_with_indexes()

    with pytest.raises(CommandError) as refused:
        engine.execute("dropIndexes", "harel", {"dropIndexes": "executions", **command})

    assert refused.value.code == code
    assert index_names(engine) == ["_id_", "due", "owner_at"]
