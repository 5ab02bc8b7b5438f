"""Every query shape the SDK sends, with the index meant to serve it.

The list is built from the SDK's own builders, so a new query that no one adds here is not covered — and
`test_every_builder_is_listed` fails when a builder module gains a query function that is not named below.
On every backend the named index must exist after `ensure_indexes` and lead with the query's fields; with
HAREL_TEST_MONGO_URL set, each query runs under `explain` on that deployment, over documents in every
state, and fails on a collection scan or a blocking (in-memory) sort.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from harel import heartbeat, stats
from harel.commands import Find
from harel.errors import UnreadableExecution
from harel.executions import commits, queries, writes
from harel.model import DueTimer, Event, Execution, ExecutionStatus
from harel.transport.base import Failure
from tests.conformance.backends import Harness
from tests.conftest import REAL_MONGO_URL, requires_real_mongo

BOUND = 4_000_000_000.0  # an upper bound of the server's time, as a worker's estimate gives it


@dataclass(frozen=True)
class Shape:
    name: str
    collection: str
    filter: dict[str, Any]
    index: str | None  # None: the `_id` index
    sort: tuple[tuple[str, int], ...] = ()
    pipeline_tail: list[dict[str, Any]] = field(default_factory=list)  # an aggregate: $match then this
    residual: tuple[str, ...] = ()  # fields checked on the documents the index found, not by the index
    # leading index fields the query leaves open: it scans the index over all their values (acceptable
    # only for a partial index that holds just the executions with something to do)
    open_leading: tuple[str, ...] = ()


def _find(name: str, found: Any, index: str | None, residual: tuple[str, ...] = ()) -> Shape:
    return Shape(name, "executions", found.filter, index, found.sort, residual=residual)


DUE = DueTimer("x", "wait", 100.0, {"wait": 100.0}, None)

SHAPES = [
    Shape(
        "claim",
        "executions",
        writes.claim_write(["order@1"], "o", 30.0, BOUND).filter,
        "wake",
        writes.CLAIM_SORT,
    ),
    Shape("send", "executions", writes.send_write("x", {"id": "e", "size": 10}).filter, None),
    Shape("extend / release / fail", "executions", writes.fenced("x", "o"), None),
    Shape("commit", "executions", {"_id": "x", "version": 3, "lease.owner": "o"}, None),
    Shape("retry", "executions", writes.retry_write("x").filter, None),
    Shape("drop", "executions", writes.drop_write("x", "e", 10).filter, None),
    Shape(
        "park by a relay",
        "executions",
        writes.park_unleased_write(UnreadableExecution("x", "outbox: KeyError: 'event'")).filter,
        None,
    ),
    _find("next wake", queries.next_wake_find(["order@1"]), "wake"),
    _find("parked", queries.parked_find(10), "parked"),
    # the mailbox's type is checked on the documents the index range found
    _find("due timers", queries.due_find(BOUND, 100), "next_fire_at_1", ("inbox",)),
    Shape("fire a timer", "executions", writes.fire_write(DUE, 100.0).filter, None),
    Shape(
        "relay take-over",
        "executions",
        writes.relay_take_write(30.0, BOUND).filter,
        "relay_at",
        writes.relay_take_write(30.0, BOUND).sort,
    ),
    Shape("relay acknowledgement", "executions", writes.relay_ack_write("x", [1], [], 1.0).filter, None),
    _find("pending relays", queries.pending_relays_find(100), "relay_at"),
    # `data` exists on every execution (a trace appended before one was created has none): filtered after
    _find("list", queries.list_find(None, None, False, 0, 20), "created", ("data",)),
    _find(
        "list by status",
        queries.list_find("running", None, True, 0, 20),
        "status_created",
        ("data", "parent_id"),
    ),
    _find("list by chart", queries.list_find(None, "order", False, 0, 20), "definition_created", ("data",)),
    _find("is processed", queries.processed_find("x", "e"), None),
    _find("load", queries.load_find("x"), None),
    _find("document", queries.document_find("x"), None),
    _find("commit outcome", queries.outcome_find("x"), None),
    _find("read trace", queries.trace_find("x"), None),
    Shape("append trace", "executions", writes.trace_write("x", {"index": 0}, 10).filter, None),
    Shape("trace counter", "counters", writes.counter_write("trace:x", 1).filter, None),
    Shape(
        "pending count",
        "executions",
        queries.PENDING_COUNT[0]["$match"],
        "wake",
        (),
        queries.PENDING_COUNT[1:],
    ),
    Shape(
        "pending by partition",
        "executions",
        queries.PENDING_BY_PARTITION[0]["$match"],
        "wake",
        (),
        queries.PENDING_BY_PARTITION[1:],
    ),
    Shape(
        "oldest due",
        "executions",
        queries.oldest_due(BOUND)[0]["$match"],
        "wake",
        pipeline_tail=queries.oldest_due(BOUND)[1:],
        open_leading=("chart",),
    ),
    Shape(
        "unserved",
        "executions",
        queries.unserved_filter(BOUND, {"order@1"}, stats.UNSERVED_AFTER_SECONDS),
        "wake",
    ),
    Shape(
        "pending count: mailboxes",
        "executions",
        queries.PENDING_COUNT[0]["$match"]["$or"][0],
        "wake",
        pipeline_tail=queries.PENDING_COUNT[1:],
        open_leading=("chart",),
    ),
    Shape("pending count: parked", "executions", queries.PENDING_COUNT[0]["$match"]["$or"][1], "parked"),
    Shape("by status", "executions", queries.status_filter(ExecutionStatus.RUNNING), "status_created"),
    Shape("parked count", "executions", queries.parked_filter(), "parked"),
    Shape(
        "relay backlog",
        "executions",
        queries.PENDING_RELAYS[0]["$match"],
        "relay_at",
        (),
        queries.PENDING_RELAYS[1:],
    ),
]
# A collection of one document per live worker (or per backup job): a scan costs what an index would.
SMALL_COLLECTIONS = {
    "live workers": (heartbeat.WORKERS, heartbeat.live_filter(BOUND, 5.0)),
}
# Builders whose filter is listed above as written out, not built: the lease fence `writes.fenced`.
NOT_QUERIES = {
    "extend_write",
    "release_write",
    "fail_write",
    "park_unreadable_write",
}
# One-off corrections of stored documents at start-up, which scan the collection once by design.
START_UP_SCANS = {"stamp_wake_write"}


# On a partitioned deployment (P > 1) the work-finding indexes lead with `p`; the queries that find work carry
# it (`Partitions.within`), the operator's and the statistics' look in every partition, on every shard.
PARTITIONED_INDEXES = {"wake": "p_wake", "relay_at": "p_relay_at", "next_fire_at_1": "p_next_fire_at"}
WINDOWED = {"claim", "next wake", "due timers", "relay take-over"}


def as_sent(harness: Harness, shape: Shape) -> Shape:
    """`shape` as the harness's store and transport send it."""
    partitions = harness.partitions
    if partitions.single:
        return shape
    if shape.name in WINDOWED:
        return dataclasses.replace(
            shape,
            filter=partitions.within(Find(shape.filter), partitions.windows(16)[0]).filter,
            index=PARTITIONED_INDEXES[shape.index or ""],
        )
    if shape.index in PARTITIONED_INDEXES:
        return dataclasses.replace(
            shape, index=PARTITIONED_INDEXES[shape.index], open_leading=("p", *shape.open_leading)
        )
    if "_id" in shape.filter:
        return dataclasses.replace(shape, filter=partitions.keyed(Find(shape.filter)).filter)
    return shape


def _prefix_covers(keys: list[str], shape: Shape) -> bool:
    """The index leads with the fields the query constrains (the equality and range fields), then sorts."""
    constrained = [*shape.open_leading] + [
        f for f in shape.filter if not f.startswith("$") and f not in shape.residual
    ]
    sorted_fields = [f for f, _ in shape.sort]
    wanted = constrained + [f for f in sorted_fields if f not in constrained]
    return set(wanted) <= set(keys[: len(wanted)])


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_the_index_meant_for_each_query_exists_and_leads_with_its_fields(
    harness: Harness, shape: Shape
) -> None:
    shape = as_sent(harness, shape)
    harness.store.ensure_indexes()
    harness.transport.ensure_indexes()
    indexes = harness.database[shape.collection].index_information()
    if shape.index is None:
        assert "_id" in shape.filter
        return
    keys = [key for key, _ in indexes[shape.index]["key"]]
    assert _prefix_covers(keys, shape), (shape.name, keys, shape.filter)
    assert not any(f.startswith(("outbox.", "spawns.", "inbox.")) for f, _ in shape.sort), "no multikey sort"


def test_every_builder_is_listed() -> None:
    """A new query builder in the executions document's or the heartbeats' modules must be added to SHAPES
    above."""
    listed_builders = {
        "claim_write",
        "send_write",
        "retry_write",
        "drop_write",
        "park_unleased_write",
        "fire_write",
        "relay_take_write",
        "relay_ack_write",
        "trace_write",
        "counter_write",
        "parked_find",
        "next_wake_find",
        "due_find",
        "pending_relays_find",
        "list_find",
        "processed_find",
        "load_find",
        "document_find",
        "outcome_find",
        "trace_find",
        "oldest_due",
        "unserved_filter",
        "status_filter",
        "parked_filter",
        "live_filter",
    }
    builders = {
        name
        for module in (queries, writes, commits, stats, heartbeat)
        for name, value in vars(module).items()
        if callable(value)
        and getattr(value, "__module__", None) == module.__name__
        and name.endswith(("_find", "_filter", "_claim", "_write", "oldest_due", "unserved"))
    }
    assert builders - listed_builders - NOT_QUERIES - START_UP_SCANS == set()


# --- on a real deployment ----------------------------------------------------------------------------------


def _populate(harness: Harness) -> None:
    """Executions in every state a query looks for: due, leased, backing off, parked, with timers and relay
    work, finished — enough that a scan and an index scan differ."""
    store, transport = harness.store, harness.transport
    now = time.time()
    for n in range(60):
        exe = Execution(id=f"e{n:02d}", definition_id="order", definition_version=1, created_at=now - n)
        exe.timers = {"wait": now + (n - 30)}
        if n % 4 == 0:
            exe.status = ExecutionStatus.COMPLETED
        store.create(exe, [Event(id=f"e{n:02d}:start", name="harel.start")], now=now)
    taken = transport.claim(["order@1"], 30.0, now + 60)
    assert taken is not None
    transport.fail(taken, Failure(taken.pending[0], "RuntimeError: x", 8, True, 0.0))


def _explain(harness: Harness, shape: Shape) -> dict[str, Any]:
    collection = harness.database[shape.collection]
    if shape.pipeline_tail:
        pipeline = [{"$match": shape.filter}, *shape.pipeline_tail]
        return harness.database.command(
            "explain",
            {"aggregate": shape.collection, "pipeline": pipeline, "cursor": {}},
            verbosity="executionStats",
        )
    cursor = collection.find(shape.filter)
    if shape.sort:
        cursor = cursor.sort(list(shape.sort))
    return cursor.explain()


def _stages(plan: Any) -> list[str]:
    found: list[str] = []
    if isinstance(plan, dict):
        if "stage" in plan:
            found.append(plan["stage"])
        for value in plan.values():
            found += _stages(value)
    elif isinstance(plan, list):
        for item in plan:
            found += _stages(item)
    return found


@requires_real_mongo
@pytest.mark.real
def test_no_query_scans_a_collection_or_sorts_in_memory_on_a_real_deployment(harness: Harness) -> None:
    assert REAL_MONGO_URL is not None
    if not harness.backend.startswith("real"):
        pytest.skip("runs on the real deployment only")
    harness.store.ensure_indexes()
    harness.transport.ensure_indexes()
    _populate(harness)
    problems = []
    for shape in SHAPES:
        stages = _stages(_explain(harness, shape))
        if "COLLSCAN" in stages:
            problems.append(f"{shape.name}: collection scan")
        if "SORT" in stages:
            problems.append(f"{shape.name}: blocking sort")
    assert problems == []
