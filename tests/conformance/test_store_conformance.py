"""The store conformance suite: every check runs on every backend in `backends.BACKENDS`.

`harness` checks hold for every store (the memory store reports its documents in MongoStore's shape);
`mongo_harness` checks look at what a MongoDB store sends: its calls, projections, update documents and
indexes, and what a failed round trip leaves behind. The checks raise AssertionError when a store
breaks its contract (never pytest.raises, which fails with its own exception type), so
test_broken_stores.py can run them against deliberately broken stores and expect them to fail.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import bson
import pymongo.errors
import pytest

from harel.errors import ExecutionTooLarge, StoreConflict
from harel.model import DueTimer, Event, Execution, ExecutionStatus, TimerOp
from harel.store._documents import DOT_STANDIN
from tests.conformance.backends import Harness, InjectedFault

# --- builders ----------------------------------------------------------------------------------------


def execution(execution_id: str = "exe-1", definition_id: str = "order", **fields: Any) -> Execution:
    return Execution(id=execution_id, definition_id=definition_id, definition_version=1, **fields)


def event(event_id: str, name: str = "go") -> Event:
    return Event(id=event_id, name=name, data={"from": event_id})


def created(store: Any, execution_id: str = "exe-1", **fields: Any) -> Execution:
    exe = execution(execution_id, **fields)
    store.commit(exe)
    return exe


def arm(store: Any, exe: Execution, timers: dict[str, float], **commit: Any) -> None:
    """Commit `exe` with exactly `timers` armed, as the interpreter does: the ops and exe.timers agree."""
    ops = [TimerOp("cancel", path) for path in exe.timers if path not in timers]
    ops += [TimerOp("schedule", path, at) for path, at in timers.items()]
    exe.timers = dict(timers)
    store.commit(exe, timers=ops, **commit)


def raises(error: type[BaseException], call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        call(*args, **kwargs)
    except error as raised:
        return raised
    raise AssertionError(f"{getattr(call, '__name__', call)} did not raise {error.__name__}")


def stored_bytes(harness: Harness, execution_id: str) -> bytes:
    document = harness.raw(execution_id)
    assert document is not None, f"no document {execution_id!r}"
    return bson.encode(document)


def key(path: str) -> str:
    return path.replace(".", DOT_STANDIN)


def rich_commit(store: Any, exe: Execution, tag: str) -> None:
    """A commit that touches every embedded field: outbox, spawns, timers, dedupe mark and trace."""
    path = f"fork.{tag}.wait"
    exe.timers = {**exe.timers, path: 100.0}
    store.commit(
        exe,
        emits=[(f"target-{tag}", event(f"{tag}-out"))],
        spawns=[(f"{exe.id}-{tag}", f"fork.{tag}", {"tag": tag})],
        timers=[TimerOp("schedule", path, 100.0)],
        processed_event_id=f"{tag}-in",
        trace={"event": f"{tag}-in"},
    )


# --- document shape ------------------------------------------------------------------------------


def test_create_writes_every_field(harness: Harness) -> None:
    exe = execution(context={"total": 12})
    exe.timers = {"fork.A.wait": 30.0}
    harness.store.commit(
        exe,
        emits=[("exe-2", event("out-1")), (None, event("out-2"))],
        spawns=[("exe-1-A", "fork.A", {"items": [1, 2]})],
        timers=[TimerOp("schedule", "fork.A.wait", 30.0)],
        processed_event_id="in-1",
        trace={"event": "harel.start"},
    )
    assert exe.version == 1
    assert harness.raw("exe-1") == {
        "_id": "exe-1",
        "definition_id": "order",
        "version": 1,
        "data": exe.model_dump_json(),
        "outbox": [
            {"seq": 1, "target_id": "exe-2", "event": event("out-1").model_dump_json()},
            {"seq": 2, "target_id": None, "event": event("out-2").model_dump_json()},
        ],
        "spawns": [
            {
                "seq": 3,
                "parent_id": "exe-1",
                "child_id": "exe-1-A",
                "root_path": "fork.A",
                "context": {"items": [1, 2]},
            }
        ],
        "processed": ["in-1"],
        "timers": {"fork\uff0eA\uff0ewait": 30.0},
        "trace": [{"event": "harel.start", "index": 0}],
        "next_fire_at": 30.0,
    }
    assert harness.store.load("exe-1") == exe


def test_create_without_bookkeeping_seeds_empty_fields(harness: Harness) -> None:
    exe = created(harness.store)
    assert harness.raw(exe.id) == {
        "_id": "exe-1",
        "definition_id": "order",
        "version": 1,
        "data": exe.model_dump_json(),
        "outbox": [],
        "spawns": [],
        "processed": [],
        "timers": {},
        "trace": [],
    }


def test_advance_appends_to_every_array(harness: Harness) -> None:
    store = harness.store
    exe = execution()
    store.commit(exe, emits=[("exe-2", event("out-1"))], processed_event_id="in-1", trace={"step": "a"})
    exe.configuration = ["placed"]
    exe.timers = {"placed.wait": 5.0}
    store.commit(
        exe,
        emits=[("exe-3", event("out-2"))],
        spawns=[("exe-1-B", "fork.B", {})],
        timers=[TimerOp("schedule", "placed.wait", 5.0)],
        processed_event_id="in-2",
        trace={"step": "b"},
    )
    assert exe.version == 2
    assert harness.raw("exe-1") == {
        "_id": "exe-1",
        "definition_id": "order",
        "version": 2,
        "data": exe.model_dump_json(),
        "outbox": [
            {"seq": 1, "target_id": "exe-2", "event": event("out-1").model_dump_json()},
            {"seq": 2, "target_id": "exe-3", "event": event("out-2").model_dump_json()},
        ],
        "spawns": [
            {"seq": 3, "parent_id": "exe-1", "child_id": "exe-1-B", "root_path": "fork.B", "context": {}}
        ],
        "processed": ["in-1", "in-2"],
        "timers": {key("placed.wait"): 5.0},
        "trace": [{"step": "a", "index": 0}, {"step": "b", "index": 1}],
        "next_fire_at": 5.0,
    }
    assert json.loads(harness.raw("exe-1")["data"])["version"] == 2


def test_timer_schedule_and_cancel(harness: Harness) -> None:
    store = harness.store
    exe = created(store)
    arm(store, exe, {"fork.A.wait": 30.0, "fork.B.wait": 20.0})
    document = harness.raw(exe.id)
    assert document["timers"] == {"fork\uff0eA\uff0ewait": 30.0, "fork\uff0eB\uff0ewait": 20.0}
    assert document["next_fire_at"] == 20.0

    arm(store, exe, {"fork.A.wait": 30.0})
    document = harness.raw(exe.id)
    assert document["timers"] == {key("fork.A.wait"): 30.0}
    assert document["next_fire_at"] == 30.0

    arm(store, exe, {})
    document = harness.raw(exe.id)
    assert document["timers"] == {}
    assert "next_fire_at" not in document
    assert store.due_timers(1000.0) == []


def test_last_timer_op_on_a_path_wins(harness: Harness) -> None:
    store = harness.store
    exe = created(store)
    exe.timers = {"s.wait": 7.0}
    store.commit(exe, timers=[TimerOp("cancel", "s.wait"), TimerOp("schedule", "s.wait", 7.0)])
    assert harness.raw(exe.id)["timers"] == {key("s.wait"): 7.0}
    exe.timers = {}
    store.commit(exe, timers=[TimerOp("schedule", "s.wait", 9.0), TimerOp("cancel", "s.wait")])
    assert harness.raw(exe.id)["timers"] == {}


# --- one writer per version ----------------------------------------------------------------------


def test_stale_commit_conflicts_and_changes_nothing(harness: Harness) -> None:
    store = harness.store
    exe = created(store)
    stale = exe.model_copy(deep=True)
    store.commit(exe, emits=[("exe-2", event("out-1"))], processed_event_id="in-1", trace={"step": 1})
    before = stored_bytes(harness, exe.id)

    stale.context["writer"] = "stale"
    stale.timers = {"s.wait": 5.0}
    conflict = raises(
        StoreConflict,
        store.commit,
        stale,
        emits=[("exe-3", event("out-stale"))],
        spawns=[("exe-1-S", "fork.S", {})],
        timers=[TimerOp("schedule", "s.wait", 5.0)],
        processed_event_id="in-stale",
        trace={"step": "stale"},
    )
    assert (conflict.execution_id, conflict.expected, conflict.found) == ("exe-1", 1, 2)
    assert stale.version == 1
    assert stored_bytes(harness, exe.id) == before
    assert store.load(exe.id) == exe
    assert [e.event.id for e in store.pending_outbox()] == ["out-1"]
    assert store.pending_spawns() == []
    assert store.due_timers(10.0) == []
    assert not store.is_processed(exe.id, "in-stale")


def test_one_writer_per_version(harness: Harness) -> None:
    store = harness.store
    created(store)
    writers = [store.load("exe-1") for _ in range(3)]
    outcomes = []
    for number, writer in enumerate(writers):
        writer.context["writer"] = number
        try:
            store.commit(writer, processed_event_id=f"in-{number}")
            outcomes.append("won")
        except StoreConflict as conflict:
            assert (conflict.expected, conflict.found) == (1, 2)
            outcomes.append("lost")
    assert outcomes == ["won", "lost", "lost"]
    assert [w.version for w in writers] == [2, 1, 1]
    assert store.load("exe-1").context == {"writer": 0}
    assert [store.is_processed("exe-1", f"in-{n}") for n in range(3)] == [True, False, False]


def test_version_zero_create_race(harness: Harness) -> None:
    store = harness.store
    first = execution(context={"by": "first"})
    second = execution(context={"by": "second"})
    store.commit(first, processed_event_id="start-first")
    conflict = raises(StoreConflict, store.commit, second, processed_event_id="start-second")
    assert (conflict.expected, conflict.found) == (0, 1)
    assert (first.version, second.version) == (1, 0)
    assert store.load("exe-1").context == {"by": "first"}
    assert harness.raw("exe-1")["processed"] == ["start-first"]


def test_commit_to_an_absent_execution_conflicts(harness: Harness) -> None:
    ghost = execution(version=4)
    conflict = raises(StoreConflict, harness.store.commit, ghost, processed_event_id="in-1")
    assert (conflict.expected, conflict.found) == (4, None)
    assert ghost.version == 4
    assert harness.raw(ghost.id) is None


# --- dedupe --------------------------------------------------------------------------------------


def test_redelivered_event_takes_effect_once(harness: Harness) -> None:
    store = harness.store
    created(store)
    first, seen_first = store.load_for_event("exe-1", "evt-1")
    redelivered, seen_redelivered = store.load_for_event("exe-1", "evt-1")
    assert (seen_first, seen_redelivered) == (False, False)

    store.commit(first, emits=[("exe-2", event("evt-1-out"))], processed_event_id="evt-1")
    # The duplicate was loaded at the same version, so its commit loses the CAS ...
    raises(
        StoreConflict,
        store.commit,
        redelivered,
        emits=[("exe-2", event("evt-1-out"))],
        processed_event_id="evt-1",
    )
    # ... and its retry finds the event processed.
    reloaded, seen = store.load_for_event("exe-1", "evt-1")
    assert seen
    assert reloaded == first
    assert store.is_processed("exe-1", "evt-1")
    assert [e.event.id for e in store.pending_outbox()] == ["evt-1-out"]
    assert store.load_for_event("exe-1", "evt-2") == (first, False)
    assert not store.is_processed("exe-1", "evt-2")
    assert store.load_for_event("missing", "evt-1") == (None, False)


def test_dedupe_window_keeps_the_latest_ids(harness: Harness) -> None:
    small = harness.fresh(dedupe_window=3)
    exe = created(small.store)
    for number in range(1, 6):
        small.store.commit(exe, processed_event_id=f"evt-{number}")
    assert small.raw(exe.id)["processed"] == ["evt-3", "evt-4", "evt-5"]
    assert [small.store.is_processed(exe.id, f"evt-{n}") for n in range(1, 6)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert small.store.load_for_event(exe.id, "evt-2")[1] is False
    assert small.store.load_for_event(exe.id, "evt-3")[1] is True


# --- trace ---------------------------------------------------------------------------------------


def test_trace_ring_keeps_the_last_trace_max_steps(harness: Harness) -> None:
    small = harness.fresh(trace_max=3)
    exe = execution()
    for step in range(6):
        small.store.commit(exe, trace={"step": step})
    expected = [{"step": step, "index": step} for step in (3, 4, 5)]
    assert small.store.read_trace(exe.id) == expected
    assert small.raw(exe.id)["trace"] == expected


def test_append_trace_outside_a_commit(harness: Harness) -> None:
    small = harness.fresh(trace_max=3)
    store = small.store
    exe = created(store)
    store.append_trace(exe.id, {"note": "a"})
    store.append_trace(exe.id, {"note": "b"})
    store.append_trace(exe.id, {"note": "c", "index": 42})
    store.append_trace(exe.id, {"note": "d"})
    assert store.read_trace(exe.id) == [
        {"note": "b", "index": 1},
        {"note": "c", "index": 42},
        {"note": "d", "index": 2},
    ]
    assert store.read_trace("nobody") == []
    store.append_trace("nobody", {"note": "orphan"})
    assert store.read_trace("nobody") == [{"note": "orphan", "index": 0}]
    assert store.load("nobody") is None


# --- listing -------------------------------------------------------------------------------------

LISTED = [
    ("a1", "order", ExecutionStatus.RUNNING, None),
    ("a2", "invoice", ExecutionStatus.COMPLETED, None),
    ("a3", "order", ExecutionStatus.COMPLETED, "a1"),
    ("a4", "order", ExecutionStatus.RUNNING, None),
    ("a5", "invoice", ExecutionStatus.RUNNING, "a2"),
    ("a6", "order", ExecutionStatus.COMPLETED, None),
    ("a7", "order", ExecutionStatus.RUNNING, None),
]


def walk(store: Any, limit: int, **filters: Any) -> list[list[str]]:
    """Every page of a listing; each page but the last is full and carries a cursor."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = store.list_executions(limit=limit, cursor=cursor, **filters)
        pages.append([summary.id for summary in page.items])
        if page.next_cursor is None:
            return pages
        assert len(page.items) == limit
        cursor = page.next_cursor


def test_listing_pages_and_filters(harness: Harness) -> None:
    store = harness.store
    for execution_id, definition_id, status, parent_id in reversed(LISTED):
        store.commit(execution(execution_id, definition_id, status=status, parent_id=parent_id))
    ids = [row[0] for row in LISTED]

    pages = walk(store, 3)
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]
    assert len(pages[-1]) < 3

    wanted = [
        row[0] for row in LISTED if row[1] == "order" and row[2] is ExecutionStatus.RUNNING and row[3] is None
    ]
    assert walk(store, 2, definition_id="order", status="running", roots_only=True) == [
        wanted[:2],
        wanted[2:],
    ]
    assert walk(store, 10, status=ExecutionStatus.COMPLETED) == [
        [r[0] for r in LISTED if r[2] == "completed"]
    ]
    assert walk(store, 10, definition_id="invoice") == [[r[0] for r in LISTED if r[1] == "invoice"]]
    assert walk(store, 10, roots_only=True) == [[r[0] for r in LISTED if r[3] is None]]
    assert walk(store, 10, definition_id="nothing") == [[]]

    summary = store.list_executions(limit=1, cursor=None, definition_id="invoice", roots_only=False).items[0]
    assert (summary.id, summary.version, summary.status, summary.parent_id) == ("a2", 1, "completed", None)
    raises(ValueError, store.list_executions, cursor="not-a-cursor")
    raises(ValueError, store.list_executions, limit=0)


# --- relays --------------------------------------------------------------------------------------


def test_relays_deliver_in_seq_order_and_ack(harness: Harness) -> None:
    store = harness.store
    a, b = created(store, "a"), created(store, "b")
    store.commit(a, emits=[("b", event("a-1")), (None, event("a-2"))], spawns=[("a-X", "fork.X", {"n": 1})])
    store.commit(b, emits=[("a", event("b-1"))], spawns=[("b-Y", "fork.Y", {"n": 2})])
    store.commit(a, emits=[("b", event("a-3"))])

    outbox = store.pending_outbox()
    assert [(e.target_id, e.event) for e in outbox] == [
        ("b", event("a-1")),
        (None, event("a-2")),
        ("a", event("b-1")),
        ("b", event("a-3")),
    ]
    spawns = store.pending_spawns()
    assert [(s.parent_id, s.child_id, s.root_path, s.context) for s in spawns] == [
        ("a", "a-X", "fork.X", {"n": 1}),
        ("b", "b-Y", "fork.Y", {"n": 2}),
    ]
    seqs = [e.seq for e in outbox] + [s.seq for s in spawns]
    assert [e.seq for e in outbox] == sorted(e.seq for e in outbox)
    assert len(set(seqs)) == len(seqs)
    assert store.pending_outbox(limit=2) == outbox[:2]
    assert store.pending_spawns(limit=1) == spawns[:1]

    store.ack_outbox(outbox[1].seq)
    store.ack_outbox(outbox[1].seq)
    store.ack_outbox(max(seqs) + 100)
    assert store.pending_outbox() == [outbox[0], outbox[2], outbox[3]]
    assert [entry["seq"] for entry in harness.raw("a")["outbox"]] == [outbox[0].seq, outbox[3].seq]
    store.ack_spawn(spawns[0].seq)
    assert store.pending_spawns() == spawns[1:]
    for entry in store.pending_outbox():
        store.ack_outbox(entry.seq)
    assert store.pending_outbox() == []
    assert harness.raw("a")["outbox"] == []


# --- timers --------------------------------------------------------------------------------------


def test_due_timers_respect_fire_at(harness: Harness) -> None:
    store = harness.store
    arm(store, created(store, "a"), {"fork.A.wait": 10.0, "fork.B.wait": 30.0})
    arm(store, created(store, "b"), {"wait": 20.0})
    created(store, "c")
    arm(store, created(store, "d"), {"wait": 40.0})

    assert store.due_timers(5.0) == []
    assert store.due_timers(10.0) == [DueTimer("a", "fork.A.wait", 10.0)]
    assert store.due_timers(25.0) == [DueTimer("a", "fork.A.wait", 10.0), DueTimer("b", "wait", 20.0)]
    everything = [
        DueTimer("a", "fork.A.wait", 10.0),
        DueTimer("b", "wait", 20.0),
        DueTimer("a", "fork.B.wait", 30.0),
        DueTimer("d", "wait", 40.0),
    ]
    assert store.due_timers(100.0) == everything
    assert store.due_timers(100.0, limit=2) == everything[:2]


def test_guarded_delete_leaves_a_rearmed_timer(harness: Harness) -> None:
    store = harness.store
    exe = created(store)
    arm(store, exe, {"fork.A.wait": 10.0})
    [due] = store.due_timers(15.0)
    arm(store, exe, {"fork.A.wait": 50.0})  # re-armed after the sweep read it

    store.delete_timer(exe.id, due.path, due.fire_at)
    assert harness.raw(exe.id)["timers"] == {key("fork.A.wait"): 50.0}
    assert store.due_timers(60.0) == [DueTimer(exe.id, "fork.A.wait", 50.0)]

    store.delete_timer(exe.id, "fork.A.wait", 50.0)
    document = harness.raw(exe.id)
    assert document["timers"] == {}
    # next_fire_at is left for the timer event's commit to recompute; meanwhile nothing is due.
    assert document["next_fire_at"] == 50.0
    assert store.due_timers(60.0) == []


def test_next_timer_at(harness: Harness) -> None:
    store = harness.store
    assert store.next_timer_at() is None
    a = created(store, "a")
    b = created(store, "b")
    assert store.next_timer_at() is None
    arm(store, a, {"wait": 30.0})
    arm(store, b, {"one": 25.0, "two": 20.0})
    assert store.next_timer_at() == 20.0
    arm(store, b, {})
    assert store.next_timer_at() == 30.0
    arm(store, a, {})
    assert store.next_timer_at() is None


# --- size ----------------------------------------------------------------------------------------

OVERSIZED = "x" * (15 * 1024 * 1024)


def test_too_large_commit_is_refused_before_it_is_sent(harness: Harness) -> None:
    store = harness.store
    big = execution("big", context={"blob": OVERSIZED})
    error = raises(ExecutionTooLarge, store.commit, big)
    assert error.execution_id == "big"
    assert error.size > 15 * 1024 * 1024
    assert (big.version, harness.raw("big")) == (0, None)

    exe = created(store)
    before = stored_bytes(harness, exe.id)
    exe.context["blob"] = OVERSIZED
    raises(ExecutionTooLarge, store.commit, exe, processed_event_id="in-1")
    assert exe.version == 1
    assert stored_bytes(harness, exe.id) == before


# --- what a MongoDB store sends --------------------------------------------------------------------


def test_commit_round_trips(mongo_harness: Harness) -> None:
    store, recorder = mongo_harness.store, mongo_harness.recorder
    recorder.clear()
    exe = created(store)
    assert [(c.collection, c.method) for c in recorder.calls] == [("executions", "insert_one")]

    recorder.clear()
    rich_commit(store, exe, "a")
    assert [(c.collection, c.method) for c in recorder.calls] == [
        ("counters", "find_one_and_update"),
        ("executions", "update_one"),
    ]
    assert recorder.calls[0].args[1] == {"$inc": {"n": 2}}

    recorder.clear()
    store.commit(exe, processed_event_id="in-2", trace={"step": 2})
    assert [(c.collection, c.method) for c in recorder.calls] == [("executions", "update_one")]
    cas_filter, update = recorder.calls[0].args
    assert cas_filter == {"_id": "exe-1", "version": 2}
    assert set(update) == {"$set", "$push"}
    assert update["$set"] == {
        "definition_id": "order",
        "version": 3,
        "data": exe.model_dump_json(),
        "next_fire_at": 100.0,
    }
    assert update["$push"]["processed"] == {"$each": ["in-2"], "$slice": -store.dedupe_window}
    assert update["$push"]["trace"] == {"$each": [{"step": 2, "index": 2}], "$slice": -store.trace_max}


def test_update_document_does_not_grow_with_the_execution(mongo_harness: Harness) -> None:
    store, recorder = mongo_harness.store, mongo_harness.recorder
    exe = created(store)
    updates: dict[int, tuple[dict[str, Any], str]] = {}
    for number in range(1, 1001):
        recorder.clear()
        store.commit(
            exe,
            emits=[("exe-2", event(f"out-{number:04}"))],
            processed_event_id=f"in-{number:04}",
            trace={"step": number},
        )
        if number in (10, 1000):
            [update_call] = recorder.of("executions", "update_one")
            updates[number] = (update_call.args[1], exe.model_dump_json())
    document = mongo_harness.raw(exe.id)
    assert len(document["outbox"]) == 1000
    assert len(document["processed"]) == 1000
    assert len(document["trace"]) == store.trace_max

    def size_beside_data(number: int) -> int:
        update, data = updates[number]
        assert update["$set"]["data"] == data  # the execution itself, never the document
        return len(bson.encode(update)) - len(data)

    assert size_beside_data(1000) <= size_beside_data(10)
    assert len(bson.encode(updates[1000][0])) < len(bson.encode(document)) / 100


def test_reads_fetch_only_what_they_use(mongo_harness: Harness) -> None:
    store, recorder = mongo_harness.store, mongo_harness.recorder
    exe = execution(context={"k": "v"})
    rich_commit(store, exe, "a")

    recorder.clear()
    assert store.load(exe.id) == exe
    [load] = recorder.calls
    assert (load.method, load.args) == ("find_one", ({"_id": "exe-1"}, {"data": 1}))
    assert set(load.result) <= {"_id", "data"}

    recorder.clear()
    assert store.load_for_event(exe.id, "a-in") == (exe, True)
    [aggregate] = recorder.calls
    assert aggregate.method == "aggregate"
    *_, project = aggregate.args[0]
    assert set(project["$project"]) == {"data", "hit"}

    recorder.clear()
    store.pending_outbox()
    store.pending_spawns()
    store.due_timers(200.0)
    store.list_executions()
    assert [(c.method, c.args[1]) for c in recorder.calls] == [
        ("find", {"outbox": 1}),
        ("find", {"spawns": 1}),
        ("find", {"timers": 1}),
        ("find", {"version": 1, "data": 1}),
    ]


def test_sweep_and_relays_select_only_pending_documents(mongo_harness: Harness) -> None:
    store, recorder = mongo_harness.store, mongo_harness.recorder
    arm(store, created(store, "due"), {"wait": 10.0})
    arm(store, created(store, "later"), {"wait": 30.0})
    store.commit(created(store, "sender"), emits=[("due", event("ping"))])
    created(store, "idle")

    recorder.clear()
    store.due_timers(15.0)
    store.pending_outbox()
    due_filter, outbox_filter = (c.args[0] for c in recorder.of("executions", "find"))
    executions = mongo_harness.database["executions"]
    assert [d["_id"] for d in executions.find(due_filter)] == ["due"]
    assert [d["_id"] for d in executions.find(outbox_filter)] == ["sender"]
    assert due_filter == {"next_fire_at": {"$lte": 15.0}}
    assert outbox_filter == {"outbox.seq": {"$gte": 1}}


def test_ensure_indexes_is_idempotent(mongo_harness: Harness) -> None:
    mongo_harness.store.ensure_indexes()
    mongo_harness.store.ensure_indexes()
    indexes = mongo_harness.database["executions"].index_information()
    wanted = {
        "definition_id_1": ([("definition_id", 1)], False),
        "next_fire_at_1": ([("next_fire_at", 1)], True),
        "outbox.seq_1": ([("outbox.seq", 1)], True),
        "spawns.seq_1": ([("spawns.seq", 1)], True),
    }
    for name, (keys, sparse) in wanted.items():
        assert [tuple(k) for k in indexes[name]["key"]] == keys
        assert bool(indexes[name].get("sparse")) is sparse
    assert set(indexes) == {"_id_", *wanted}


@pytest.mark.parametrize(
    "server_error",
    [
        pymongo.errors.WriteError("BSONObjectTooLarge", 10334),
        pymongo.errors.WriteError("Resulting document after update is larger than 16777216", 17419),
        pymongo.errors.DocumentTooLarge("BSON document too large"),
    ],
    ids=["BSONObjectTooLarge", "update-result-too-large", "DocumentTooLarge"],
)
def test_server_size_errors_are_typed(mongo_harness: Harness, server_error: Exception) -> None:
    store = mongo_harness.store
    exe = created(store)
    mongo_harness.recorder.fail_write(1, error=server_error)
    error = raises(ExecutionTooLarge, store.commit, exe, processed_event_id="in-1")
    assert error.__cause__ is server_error
    assert exe.version == 1


def test_other_server_errors_pass_through(mongo_harness: Harness) -> None:
    store = mongo_harness.store
    exe = created(store)
    failure = pymongo.errors.WriteError("not too large", 2)
    mongo_harness.recorder.fail_write(1, error=failure)
    assert raises(pymongo.errors.WriteError, store.commit, exe) is failure


def landed_whole(document: dict[str, Any], tag: str) -> bool:
    return (
        document["version"] == 2
        and json.loads(document["data"])["version"] == 2
        and [e["target_id"] for e in document["outbox"]] == [f"target-{tag}"]
        and [s["child_id"] for s in document["spawns"]] == [f"{document['_id']}-{tag}"]
        and document["processed"] == [f"{tag}-in"]
        and document["timers"] == {key(f"fork.{tag}.wait"): 100.0}
        and document["next_fire_at"] == 100.0
        and [t["event"] for t in document["trace"]] == [f"{tag}-in"]
    )


def test_commit_is_all_or_nothing_when_a_round_trip_fails(mongo_harness: Harness) -> None:
    """A fault before or after each write call of a commit (a lost request or a lost reply) leaves the
    document as it was or fully committed; a retry then completes it exactly once."""
    store, recorder = mongo_harness.store, mongo_harness.recorder
    for nth in (1, 2, 3):
        for when in ("before", "after"):
            exe = created(store, f"exe-{nth}-{when}")
            before = stored_bytes(mongo_harness, exe.id)
            recorder.fail_write(nth, when)
            try:
                rich_commit(store, exe, "a")
            except InjectedFault:
                assert exe.version == 1
            recorder.clear()
            after = mongo_harness.raw(exe.id)
            assert bson.encode(after) == before or landed_whole(after, "a"), (nth, when, after)

            reloaded, processed = store.load_for_event(exe.id, "a-in")
            if not processed:
                rich_commit(store, reloaded, "a")
            assert landed_whole(mongo_harness.raw(exe.id), "a"), (nth, when)
            # Nothing lost and nothing doubled: one outbox entry, one spawn, one timer.
            [sent] = store.pending_outbox()
            [spawn] = store.pending_spawns()
            assert (sent.event.id, spawn.child_id) == ("a-out", f"{exe.id}-a")
            assert store.due_timers(100.0) == [DueTimer(exe.id, "fork.a.wait", 100.0)]
            store.ack_outbox(sent.seq)
            store.ack_spawn(spawn.seq)
            store.delete_timer(exe.id, "fork.a.wait", 100.0)
