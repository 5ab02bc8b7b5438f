"""Partitions (`harel.executions.partitions`) and where a partitioned transport looks next
(`harel.transport.rotation`): pure."""

from __future__ import annotations

import pytest

from harel.commands import Find, Write
from harel.errors import PartitionsUnreadable, UnknownZone
from harel.executions import queries, writes
from harel.executions.partitions import (
    SINGLE,
    Partitions,
    Zone,
    even_zones,
    meta_document,
    parse_partitions,
    partition_of,
    root_id,
)
from harel.executions.queries import WATCH_PIPELINE
from harel.ids import child_id
from harel.model import Event, Execution
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.transport.rotation import EMPTY_BACKOFF_FIRST, EMPTY_BACKOFF_MAX, Rotation
from harel.transport.wakeups import WATCH_MAX_SHARDS, watch_pipeline
from harel_dev.embedded import EmbeddedClient


def test_a_region_and_its_regions_regions_share_their_roots_partition() -> None:
    grandchild = child_id(child_id("order/42@x", "fulfil.pay", 3), "pay.retry", 7)
    assert root_id(grandchild) == "order/42@x"
    for count in (2, 16, 256, 4096):
        assert partition_of(grandchild, count) == partition_of("order/42@x", count)


def test_the_partition_function_is_pinned() -> None:
    """The function is part of the data format (a stored `p` is found again only while it never changes):
    these values were computed once and must never change."""
    assert [partition_of(i, 256) for i in ("order-1", "order-2", "smoke-0123456789ab", "")] == [
        61,
        155,
        107,
        180,
    ]
    assert [partition_of(i, 4096) for i in ("order-1", "a")] == [573, 559]


def test_one_partition_changes_no_command() -> None:
    write = writes.send_write("x", {"id": "e", "size": 1})
    find = queries.load_find("x")
    pipeline = queries.send_diagnosis("x", "e")
    assert SINGLE.keyed(write) is write and SINGLE.keyed(find) is find
    assert SINGLE.within(write, (0,)) is write
    assert SINGLE.keyed_pipeline(pipeline) == pipeline
    assert SINGLE.key("x") == {"_id": "x"} and SINGLE.windows(200) == [(0,)]


def test_a_command_on_one_execution_carries_its_full_shard_key() -> None:
    partitions = Partitions(16)
    p = partitions.of("x")
    assert partitions.keyed(writes.send_write("x", {"id": "e", "size": 1})).filter["p"] == p
    assert partitions.keyed(Find({"_id": "x", "version": 3})).filter == {"p": p, "_id": "x", "version": 3}
    assert partitions.keyed_pipeline(queries.send_diagnosis("x", "e"))[0] == {"$match": {"p": p, "_id": "x"}}
    create = partitions.keyed(Write({"_id": "x", "version": -1}, [], upsert=True))
    assert create.filter == {"p": p, "_id": "x", "version": -1} and create.upsert
    with pytest.raises(TypeError):
        partitions.keyed(Find({"_id": {"$in": ["x"]}}))


def test_work_is_looked_for_in_windows_each_inside_one_zone() -> None:
    partitions = Partitions(10, (Zone("a", 0, 4, "s0"), Zone("b", 4, 10, "s1")))
    assert partitions.windows(3) == [(0, 1, 2), (3,), (4, 5, 6), (7, 8, 9)]
    assert partitions.windows(200, partitions.served(["b"])) == [(4, 5, 6, 7, 8, 9)]
    claim = partitions.within(writes.claim_write(["c@1"], "o", 30.0, 1e10), (4, 5))
    assert claim.filter["p"] == {"$in": [4, 5]} and claim.sort == writes.CLAIM_SORT
    with pytest.raises(UnknownZone, match="no zone z"):
        partitions.served(["z"])


def test_zones_spread_the_partitions_evenly_and_the_map_reads_back() -> None:
    zones = even_zones(256, ["s0", "s1", "s2"])
    assert [(z.start, z.stop, z.shard) for z in zones] == [(0, 85, "s0"), (85, 170, "s1"), (170, 256, "s2")]
    partitions = Partitions(256, zones)
    assert parse_partitions(meta_document(partitions, 1.0)) == partitions
    assert parse_partitions(None) == SINGLE


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"count": 0}, "count must be a whole number from 1 to 4096"),
        ({"count": "8"}, "count must be"),
        ({"count": 8, "zones": [{"name": "a", "start": 0, "stop": 4}]}, "must cover partitions 0 to 7"),
        ({"count": 8, "zones": [{"name": "a", "start": 0, "stop": 9}]}, "outside 0..8"),
        ({"count": 8, "zones": [{"start": 0, "stop": 8}]}, "a zone needs a name"),
    ],
)
def test_a_partition_map_that_cannot_be_used_is_refused_by_name(
    document: dict[str, object], problem: str
) -> None:
    with pytest.raises(PartitionsUnreadable, match=problem):
        parse_partitions({"_id": "partitions", **document})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_window_found_empty_is_tried_last_until_its_backoff_ends_and_never_left_out() -> None:
    clock = Clock()
    rotation = Rotation([(0,), (1,), (2,)], clock)
    assert rotation.order() == [(0,), (1,), (2,)]
    rotation.empty((0,))
    assert rotation.order() == [(1,), (2,), (0,)], "every window is still tried"
    rotation.found((1,))
    assert rotation.order() == [(2,), (1,), (0,)], "the turn moves past the window that found work"
    clock.now += EMPTY_BACKOFF_FIRST
    assert rotation.order() == [(2,), (0,), (1,)]


def test_an_empty_windows_backoff_doubles_to_a_bound_and_a_wake_up_ends_it() -> None:
    clock = Clock()
    rotation = Rotation([(0, 1), (2, 3)], clock)
    for _ in range(10):
        rotation.empty((0, 1))
    clock.now += EMPTY_BACKOFF_MAX - 0.01
    assert rotation.order()[-1] == (0, 1)
    rotation.woken(1)
    assert rotation.order() == [(0, 1), (2, 3)]
    rotation.empty((2, 3))
    rotation.woken(None)
    assert rotation.order() == [(0, 1), (2, 3)], "a wake-up from an unknown partition wakes every window"


def test_a_worker_serving_some_zones_watches_their_partitions_and_none_past_the_shard_bound() -> None:
    zones = (Zone("harel-a", 0, 2, "a"), Zone("harel-b", 2, 4, "b"))
    partitions = Partitions(4, zones)
    assert watch_pipeline(partitions, partitions.served([])) == WATCH_PIPELINE, "all of them: no filter"
    first, *rest = watch_pipeline(partitions, partitions.served(["harel-b"])) or []
    assert first == {"$match": {"documentKey.p": {"$in": [2, 3]}}} and rest == WATCH_PIPELINE
    many = Partitions(64, even_zones(64, [f"s{n}" for n in range(WATCH_MAX_SHARDS + 1)]))
    assert watch_pipeline(many, many.zones) is None, "a stream would tail every shard's oplog: poll instead"
    assert watch_pipeline(SINGLE, SINGLE.zones) == WATCH_PIPELINE


def test_a_transport_looks_for_work_in_its_zones_only_and_names_an_unknown_one() -> None:
    from harel.errors import UnknownZone

    partitions = Partitions(4, (Zone("harel-a", 0, 2, "a"), Zone("harel-b", 2, 4, "b")))
    client = EmbeddedClient()
    transport = MongoTransport(client, watch=False, partitions=partitions, zones=["harel-b"])
    assert transport.zones == (partitions.zones[1],)
    with pytest.raises(UnknownZone, match="no zone harel-c in this deployment's partition map"):
        MongoTransport(client, watch=False, partitions=partitions, zones=["harel-c"])

    in_a = next(f"order-{n}" for n in range(100) if partitions.of(f"order-{n}") < 2)
    store = MongoStore(client, partitions=partitions)
    exe = Execution(id=in_a, definition_id="order", definition_version=1)
    assert store.create(exe, [Event(id="go", name="go")], now=0.0)
    assert transport.claim(["order@1"], 30.0, 1e10) is None, "its zone holds nothing"
    serving_a = MongoTransport(client, watch=False, partitions=partitions, zones=["harel-a"])
    claimed = serving_a.claim(["order@1"], 30.0, 1e10)
    assert claimed is not None and claimed.execution_id == in_a
