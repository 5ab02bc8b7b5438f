"""The store conformance suite: every check runs on every backend in `backends.BACKENDS`.

Some checks look at what a store does, others at what it sends: its calls, projections, update pipelines
and indexes, and what a failed round trip leaves behind. The checks raise AssertionError when a store
breaks its contract (never pytest.raises, which fails with its own exception type), so
test_broken_stores.py can run them against deliberately broken stores and expect them to fail.

Times are the server's: timers armed "in the past" are due, "in an hour" are not, whatever the backend.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import bson
import pymongo.errors
import pytest

from harel.errors import (
    CommitOutcomeUnknown,
    DeploymentError,
    DeploymentUnavailable,
    ExecutionTooLarge,
    StoreConflict,
)
from harel.executions import replies
from harel.executions.fields import DOT_STANDIN, RELAY_GRACE_SECONDS, SEQ_STRIDE
from harel.model import DueTimer, Event, Execution, ExecutionStatus, SpawnEntry, TimerOp
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


def near(value: Any, expected: float, slack: float = 5.0) -> bool:
    return isinstance(value, float) and abs(value - expected) <= slack


def without_relay_time(document: dict[str, Any]) -> dict[str, Any]:
    """The document with `relay_at` (a server time) checked apart."""
    return {k: v for k, v in document.items() if k != "relay_at"}


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


MAILBOX_SEED = {
    "chart": "order@1",
    "inbox": [],
    "inbox_bytes": 0,
    "inbox_at": None,
    "lease": None,
    "attempts": 0,
    "last_error": None,
    "parked": None,
}


def promoted(exe: Execution) -> dict[str, Any]:
    return {
        "status": exe.status.value,
        "parent_id": exe.parent_id,
        "created_at": exe.created_at,
        "updated_at": exe.updated_at,
    }


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
    document = harness.raw("exe-1")
    assert without_relay_time(document) == {
        "_id": "exe-1",
        **harness.key_fields("exe-1"),
        "definition_id": "order",
        **promoted(exe),
        "version": 1,
        "data": exe.model_dump_json(),
        "outbox": [
            {"seq": 0, "target_id": "exe-2", "event": event("out-1").model_dump_json(), "at": 0.0},
            {"seq": 1, "target_id": None, "event": event("out-2").model_dump_json(), "at": 0.0},
        ],
        "spawns": [
            {
                "seq": 2,
                "parent_id": "exe-1",
                "child_id": "exe-1-A",
                "root_path": "fork.A",
                "context": {"items": [1, 2]},
                "at": 0.0,
            }
        ],
        "processed": ["in-1"],
        "timers": {"fork\uff0eA\uff0ewait": 30.0},
        "trace": [{"event": "harel.start", "index": 0}],
        "next_fire_at": 30.0,
        **MAILBOX_SEED,
        "wake_at": 30.0,  # an idle mailbox: claimable once its timer is due
    }
    assert near(document["relay_at"], time.time() + RELAY_GRACE_SECONDS), "relay work held by its committer"
    assert harness.store.load("exe-1") == exe


def test_create_without_bookkeeping_seeds_empty_fields(harness: Harness) -> None:
    exe = created(harness.store)
    assert harness.raw(exe.id) == {
        "_id": "exe-1",
        **harness.key_fields("exe-1"),
        "definition_id": "order",
        **promoted(exe),
        "version": 1,
        "data": exe.model_dump_json(),
        "outbox": [],
        "spawns": [],
        "processed": [],
        "timers": {},
        "next_fire_at": None,
        "wake_at": None,
        "trace": [],
        "relay_at": None,
        **MAILBOX_SEED,
    }


def test_create_with_events_waiting(harness: Harness) -> None:
    exe = execution("with-start")
    assert harness.store.create(exe, [event("first"), event("second")], now=5.0)
    document = harness.raw("with-start")
    assert [entry["id"] for entry in document["inbox"]] == ["first", "second"]
    assert document["inbox_bytes"] == sum(entry["size"] for entry in document["inbox"]) > 0
    assert near(document["inbox_at"], time.time()), "due from the server's time of creation"
    assert document["wake_at"] == document["inbox_at"], "claimable from when its mailbox is due"
    assert document["version"] == 1 and harness.store.load("with-start") == exe.model_copy(
        update={"version": 1}
    )
    assert not harness.store.create(execution("with-start", context={"other": 1}), [event("x")], now=6.0)
    assert [entry["id"] for entry in harness.raw("with-start")["inbox"]] == ["first", "second"]


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
    assert without_relay_time(harness.raw("exe-1")) == {
        "_id": "exe-1",
        **harness.key_fields("exe-1"),
        "definition_id": "order",
        **promoted(exe),
        "version": 2,
        "data": exe.model_dump_json(),
        "outbox": [
            {"seq": 0, "target_id": "exe-2", "event": event("out-1").model_dump_json(), "at": 0.0},
            {"seq": SEQ_STRIDE, "target_id": "exe-3", "event": event("out-2").model_dump_json(), "at": 0.0},
        ],
        "spawns": [
            {
                "seq": SEQ_STRIDE + 1,
                "parent_id": "exe-1",
                "child_id": "exe-1-B",
                "root_path": "fork.B",
                "context": {},
                "at": 0.0,
            }
        ],
        "processed": ["in-1", "in-2"],
        "timers": {key("placed.wait"): 5.0},
        "trace": [{"step": "a", "index": 0}, {"step": "b", "index": 1}],
        "next_fire_at": 5.0,
        **MAILBOX_SEED,
        "wake_at": 5.0,
    }
    assert json.loads(harness.raw("exe-1")["data"])["version"] == 2


def test_timer_schedule_and_cancel(harness: Harness) -> None:
    store = harness.store
    exe = created(store)
    arm(store, exe, {"fork.A.wait": 30.0, "fork.B.wait": 20.0})
    document = harness.raw(exe.id)
    assert document["timers"] == {"fork\uff0eA\uff0ewait": 30.0, "fork\uff0eB\uff0ewait": 20.0}
    assert document["next_fire_at"] == document["wake_at"] == 20.0, "claimable when its earliest timer is due"

    arm(store, exe, {"fork.A.wait": 30.0})
    document = harness.raw(exe.id)
    assert document["timers"] == {key("fork.A.wait"): 30.0}
    assert document["next_fire_at"] == document["wake_at"] == 30.0

    arm(store, exe, {})
    document = harness.raw(exe.id)
    assert document["timers"] == {}
    assert document["next_fire_at"] is document["wake_at"] is None
    assert store.due_timers(time.time() + 3600) == []


def test_a_timer_is_due_from_its_millisecond(harness: Harness) -> None:
    """The server's clock has millisecond resolution: a timer is stored as due from the millisecond at or
    after its fire time, so it cannot be taken for due before it."""
    store = harness.store
    arm(store, created(store), {"wait": 1234.5671})
    assert harness.raw("exe-1")["next_fire_at"] == 1234.568


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
    assert store.due_timers(time.time() + 3600) == []
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


def test_dollar_prefixed_ids_are_data(harness: Harness) -> None:
    """An id that starts with `$` is compared as a value, never read as a field path."""
    store = harness.store
    exe = created(store, "$root")
    store.commit(exe, processed_event_id="$processed")
    assert store.load_for_event("$root", "$processed") == (exe, True)
    assert store.load_for_event("$root", "$data") == (exe, False)
    assert store.is_processed("$root", "$processed")


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

LISTED = [  # newest first
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


def test_listing_pages_newest_first_with_filters_on_the_server(harness: Harness) -> None:
    store = harness.store
    for age, (execution_id, definition_id, status, parent_id) in enumerate(LISTED):
        store.commit(
            execution(
                execution_id, definition_id, status=status, parent_id=parent_id, created_at=1000.0 - age
            )
        )
    store.append_trace("trace-only", {"note": "not an execution"})
    ids = [row[0] for row in LISTED]

    pages = walk(store, 3)
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]

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
    assert walk(store, 7) == [ids], "a page that holds the rest carries no cursor"

    summary = store.list_executions(limit=1, cursor=None, definition_id="invoice", roots_only=False).items[0]
    assert (summary.id, summary.version, summary.status, summary.parent_id) == ("a2", 1, "completed", None)
    raises(ValueError, store.list_executions, cursor="not-a-cursor")
    raises(ValueError, store.list_executions, limit=0)


# --- relays --------------------------------------------------------------------------------------


def test_relay_entries_are_numbered_per_execution_and_acknowledged(harness: Harness) -> None:
    store = harness.store
    a, b = created(store, "a"), created(store, "b")
    store.commit(a, emits=[("b", event("a-1")), (None, event("a-2"))], spawns=[("a-X", "fork.X", {"n": 1})])
    store.commit(b, emits=[("a", event("b-1"))], spawns=[("b-Y", "fork.Y", {"n": 2})])
    store.commit(a, emits=[("b", event("a-3"))])

    outbox = store.pending_outbox()
    assert sorted((e.source_id, e.seq, e.target_id, e.event.id) for e in outbox) == [
        ("a", SEQ_STRIDE, "b", "a-1"),
        ("a", SEQ_STRIDE + 1, None, "a-2"),
        ("a", 2 * SEQ_STRIDE, "b", "a-3"),
        ("b", SEQ_STRIDE, "a", "b-1"),
    ]
    spawns = store.pending_spawns()
    assert sorted((s.parent_id, s.seq, s.child_id, s.root_path, s.context) for s in spawns) == [
        ("a", SEQ_STRIDE + 2, "a-X", "fork.X", {"n": 1}),
        ("b", SEQ_STRIDE + 1, "b-Y", "fork.Y", {"n": 2}),
    ]
    assert len(store.pending_outbox(limit=2)) == 2

    store.ack_outbox("a", SEQ_STRIDE + 1)
    store.ack_outbox("a", SEQ_STRIDE + 1)
    store.ack_outbox("a", 99 * SEQ_STRIDE)
    assert [entry["seq"] for entry in harness.raw("a")["outbox"]] == [SEQ_STRIDE, 2 * SEQ_STRIDE]
    store.ack_spawn("a", SEQ_STRIDE + 2)
    assert [s.child_id for s in store.pending_spawns()] == ["b-Y"]
    store.ack_relay("a", [SEQ_STRIDE, 2 * SEQ_STRIDE], [], retry_in=0.0)
    assert harness.raw("a")["outbox"] == []
    assert harness.raw("a")["relay_at"] is None, "nothing left to relay"
    assert harness.raw("b")["relay_at"] is not None


def test_relay_work_goes_to_one_relay_after_its_committer_had_its_time(harness: Harness) -> None:
    store = harness.store
    a = created(store, "a")
    store.commit(a, emits=[("b", event("a-1")), ("c", event("a-2"))], spawns=[("a-X", "fork.X", {})])
    bound = time.time() + 3600
    assert store.take_relay_work(30.0, bound) is None, "the committer relays it itself first"

    store.ack_relay("a", [SEQ_STRIDE], [], retry_in=0.0)  # one delivered; the rest is due again now
    work = store.take_relay_work(30.0, bound)
    assert work is not None and work.execution_id == "a"
    assert [(e.seq, e.event.id) for e in work.outbox] == [(SEQ_STRIDE + 1, "a-2")]
    assert [s.child_id for s in work.spawns] == ["a-X"]
    assert store.take_relay_work(30.0, bound) is None, "held by the relay that took it"
    assert near(harness.raw("a")["relay_at"], time.time() + 30.0)


def test_relay_work_comes_back_longest_waiting_first_each_execution_in_seq_order(harness: Harness) -> None:
    """What a background relay picks up lists each execution's entries in seq order, the order its steps
    committed them, over several commits; the execution whose work has waited longest comes first."""
    store = harness.store
    a, b = created(store, "a"), created(store, "b")
    store.commit(a, emits=[("x", event("a-1")), ("y", event("a-2"))], spawns=[("a-X", "fork.X", {})])
    store.commit(a, emits=[("x", event("a-3"))], spawns=[("a-Y", "fork.Y", {}), ("a-Z", "fork.Z", {})])
    store.commit(b, emits=[("x", event("b-1")), ("x", event("b-2"))], spawns=[("b-X", "fork.X", {})])
    store.commit(b, emits=[("y", event("b-3"))])
    # Both past their committer's time, b's work due later than a's.
    store.ack_relay("a", [], [], retry_in=0.0)
    time.sleep(0.05)
    store.ack_relay("b", [], [], retry_in=0.0)
    committed_outbox = {"a": ["a-1", "a-2", "a-3"], "b": ["b-1", "b-2", "b-3"]}
    committed_spawns = {"a": ["a-X", "a-Y", "a-Z"], "b": ["b-X"]}

    outbox = store.pending_outbox()
    assert [e.event.id for e in outbox] == committed_outbox["a"] + committed_outbox["b"]
    spawns = store.pending_spawns()
    assert [s.child_id for s in spawns] == committed_spawns["a"] + committed_spawns["b"]
    for source in ("a", "b"):
        seqs = [e.seq for e in outbox if e.source_id == source]
        assert seqs == sorted(set(seqs)), f"{source}'s outbox out of seq order: {seqs}"
        seqs = [s.seq for s in spawns if s.parent_id == source]
        assert seqs == sorted(set(seqs)), f"{source}'s spawns out of seq order: {seqs}"

    bound = time.time() + 3600
    for expected in ("a", "b"):
        work = store.take_relay_work(30.0, bound)
        assert work is not None and work.execution_id == expected
        assert [e.event.id for e in work.outbox] == committed_outbox[expected]
        assert [s.child_id for s in work.spawns] == committed_spawns[expected]
        assert [e.seq for e in work.outbox] == [e.seq for e in outbox if e.source_id == expected]
    assert store.take_relay_work(30.0, bound) is None, "both held by the relay that took them"


def test_children_are_created_with_their_start_waiting(harness: Harness) -> None:
    store = harness.store
    seed = {"definition_id": "order", "definition_version": 1, "context": {"k": 1}, "siblings": {"x": "p/x"}}
    entries = [SpawnEntry(n, "p", f"p/{name}", f"fork.{name}", dict(seed)) for n, name in enumerate("xy")]
    assert store.create_children(entries, now=7.0) == []
    child = store.load("p/x")
    assert (child.parent_id, child.root_path, child.context, child.siblings) == (
        "p",
        "fork.x",
        {"k": 1},
        {"x": "p/x"},
    )
    assert [entry["id"] for entry in harness.raw("p/y")["inbox"]] == ["p/y:start"]
    assert store.create_children(entries, now=8.0) == ["p/x", "p/y"], "a second relay creates nothing"
    assert store.create_children([], now=9.0) == []


# --- timers --------------------------------------------------------------------------------------


def test_due_timers_are_due_on_the_servers_clock(harness: Harness) -> None:
    store = harness.store
    now = time.time()
    arm(store, created(store, "a"), {"fork.A.wait": now - 30, "fork.B.wait": now - 10})
    arm(store, created(store, "b"), {"wait": now - 20})
    created(store, "c")
    arm(store, created(store, "d"), {"wait": now + 60})

    due = store.due_timers(now + 3600)  # a bound far ahead (a worker whose clock runs fast) changes nothing
    assert [(t.execution_id, t.path) for t in due] == [("a", "fork.A.wait"), ("b", "wait")]
    assert due[0].next_fire_at == pytest.approx(now - 10, abs=0.002), "the next timer of `a`"
    assert due[1].next_fire_at is None
    assert [t.execution_id for t in store.due_timers(now + 3600, limit=1)] == ["a"]
    assert store.due_timers(now - 3600) == [], "the bound limits the index range"


def test_a_fired_timer_becomes_an_event_in_its_mailbox_once(harness: Harness) -> None:
    store = harness.store
    now = time.time()
    exe = created(store)
    arm(store, exe, {"fork.A.wait": now - 1, "fork.B.wait": now + 3600})
    [due] = store.due_timers(now + 3600)
    assert store.fire_timer(due, now=now)
    document = harness.raw(exe.id)
    [entry] = document["inbox"]
    assert entry["id"] == f"exe-1:timer:fork.A.wait@{now - 1!r}"
    assert entry["timer"] == {"key": "fork\uff0eA\uff0ewait", "fire_at": now - 1}, (
        "the timer, not its event's JSON"
    )
    assert replies.parse_inbox(document)[0].event.data == {"path": "fork.A.wait", "fire_at": now - 1}
    assert document["next_fire_at"] == pytest.approx(now + 3600, abs=0.002)
    assert near(document["inbox_at"], time.time())
    assert document["wake_at"] == document["inbox_at"], "claimable from when its mailbox is due"
    assert store.due_timers(now + 3600) == []
    assert store.fire_timer(due, now=now), "a second sweep holding the same read fires nothing new"
    assert len(harness.raw(exe.id)["inbox"]) == 1


def test_a_timer_rearmed_after_the_sweep_read_it_is_left_alone(harness: Harness) -> None:
    store = harness.store
    now = time.time()
    exe = created(store)
    arm(store, exe, {"fork.A.wait": now - 1})
    [due] = store.due_timers(now + 3600)
    arm(store, exe, {"fork.A.wait": now + 3600})  # re-armed after the sweep read it
    assert not store.fire_timer(due, now=now)
    document = harness.raw(exe.id)
    assert document["inbox"] == []
    assert document["next_fire_at"] == pytest.approx(now + 3600, abs=0.002)


def test_a_timer_not_yet_due_is_not_fired(harness: Harness) -> None:
    """The fire's own check is on the server's clock: a sweep whose read is stale cannot fire early."""
    store = harness.store
    now = time.time()
    exe = created(store)
    arm(store, exe, {"wait": now + 3600})
    stored = {key("wait"): now + 3600}
    assert not store.fire_timer(DueTimer(exe.id, "wait", now + 3600, stored, None), now=now + 3600)
    assert harness.raw(exe.id)["inbox"] == []


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


def test_every_commit_is_one_update(harness: Harness) -> None:
    store, recorder = harness.store, harness.recorder
    recorder.clear()
    exe = created(store)
    assert [(c.collection, c.method) for c in recorder.calls] == [("executions", "update_one")]
    assert recorder.calls[0].kwargs == {"upsert": True}
    key = harness.partitions.key("exe-1")
    assert recorder.calls[0].args[0] == {**key, "version": -1}, "an upsert that can only insert"

    recorder.clear()
    rich_commit(store, exe, "a")
    assert [(c.collection, c.method) for c in recorder.calls] == [("executions", "update_one")]

    recorder.clear()
    store.commit(exe, processed_event_id="in-2", trace={"step": 2})
    [call] = recorder.calls
    cas_filter, pipeline = call.args
    assert cas_filter == {**key, "version": 2}
    [stage] = pipeline
    assert set(stage["$set"]) == {
        "definition_id",
        "status",
        "parent_id",
        "created_at",
        "updated_at",
        "version",
        "data",
        "processed",
        "trace",
    }, "only what this step changed"
    assert stage["$set"]["data"] == {"$literal": exe.model_dump_json()}
    assert stage["$set"]["processed"] == {
        "$slice": [
            {"$concatArrays": [{"$ifNull": ["$processed", []]}, {"$literal": ["in-2"]}]},
            -store.dedupe_window,
        ]
    }


def test_update_document_does_not_grow_with_the_execution(harness: Harness) -> None:
    store, recorder = harness.store, harness.recorder
    exe = created(store)
    updates: dict[int, tuple[list[dict[str, Any]], str]] = {}
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
    document = harness.raw(exe.id)
    assert len(document["outbox"]) == 1000
    assert len(document["processed"]) == 1000
    assert len(document["trace"]) == store.trace_max

    def size_beside_data(number: int) -> int:
        pipeline, data = updates[number]
        assert pipeline[0]["$set"]["data"] == {"$literal": data}  # the execution itself, never the document
        return len(bson.encode({"u": pipeline})) - len(data)

    assert size_beside_data(1000) <= size_beside_data(10)
    assert len(bson.encode({"u": updates[1000][0]})) < len(bson.encode(document)) / 100


def test_reads_fetch_only_what_they_use(harness: Harness) -> None:
    store, recorder = harness.store, harness.recorder
    exe = execution(context={"k": "v"})
    rich_commit(store, exe, "a")

    recorder.clear()
    assert store.load(exe.id) == exe
    [load] = recorder.calls
    assert (load.method, load.args) == ("find_one", (harness.partitions.key("exe-1"), {"data": 1}))
    assert set(load.result) <= {"_id", "data"}

    recorder.clear()
    assert store.load_for_event(exe.id, "a-in") == (exe, True)
    [aggregate] = recorder.calls
    assert aggregate.method == "aggregate"
    *_, project = aggregate.args[0]
    assert set(project["$project"]) == {"data", "hit"}

    recorder.clear()
    store.pending_outbox()
    store.due_timers(time.time())
    store.list_executions()
    assert [(c.method, c.args[1]) for c in recorder.calls] == [
        ("find", {"outbox": 1, "spawns": 1}),
        ("find", {"timers": 1, "next_fire_at": 1}),
        ("find", {"version": 1, "data": 1}),
    ]


def test_sweep_and_relays_select_only_pending_documents(harness: Harness) -> None:
    store, recorder = harness.store, harness.recorder
    now = time.time()
    arm(store, created(store, "due"), {"wait": now - 10})
    arm(store, created(store, "later"), {"wait": now + 3600})
    store.commit(created(store, "sender"), emits=[("due", event("ping"))])
    created(store, "idle")

    recorder.clear()
    assert [t.execution_id for t in store.due_timers(now + 60)] == ["due"]
    assert [e.source_id for e in store.pending_outbox()] == ["sender"]
    due_filter, outbox_filter = (c.args[0] for c in recorder.of("executions", "find"))
    assert due_filter["next_fire_at"] == {"$gte": 0, "$lte": now + 60}, "an index range, bounded"
    assert "$expr" in due_filter, "due on the server's clock"
    assert outbox_filter == {"relay_at": {"$gte": 0}}


def test_ensure_indexes_is_idempotent(harness: Harness) -> None:
    executions = harness.database["executions"]
    executions.create_index("outbox.seq", name="outbox.seq_1", sparse=True)  # an earlier release's
    executions.create_index([("chart", 1), ("inbox_at", 1)], name="mailbox")  # the claim's before wake_at
    harness.store.ensure_indexes()
    harness.store.ensure_indexes()
    harness.transport.ensure_indexes()
    indexes = executions.index_information()
    listings = {
        "created": [("created_at", -1), ("_id", 1)],
        "status_created": [("status", 1), ("created_at", -1), ("_id", 1)],
        "definition_created": [("definition_id", 1), ("created_at", -1), ("_id", 1)],
        "parked": [("parked.at", 1)],
    }
    if harness.partitions.single:
        wanted = {
            **listings,
            "next_fire_at_1": [("next_fire_at", 1)],
            "relay_at": [("relay_at", 1)],
            "wake": [("chart", 1), ("wake_at", 1)],
        }
        timers, claims = "next_fire_at_1", "wake"
        assert indexes[timers].get("sparse") is True
    else:  # the work-finding indexes lead with the partition; the shard key has its own
        wanted = {
            **listings,
            "shard_key": [("p", 1), ("_id", 1)],
            "p_next_fire_at": [("p", 1), ("next_fire_at", 1)],
            "p_relay_at": [("p", 1), ("relay_at", 1)],
            "p_wake": [("p", 1), ("chart", 1), ("wake_at", 1)],
        }
        timers, claims = "p_next_fire_at", "p_wake"
        assert indexes[timers]["partialFilterExpression"] == {"next_fire_at": {"$gte": 0}}
    for name, keys in wanted.items():
        assert [tuple(k) for k in indexes[name]["key"]] == keys
    assert indexes[claims]["partialFilterExpression"] == {"wake_at": {"$gte": 0}}
    assert set(indexes) == {"_id_", *wanted}, "retired indexes are dropped"


@pytest.mark.parametrize(
    "server_error",
    [
        pymongo.errors.WriteError("BSONObjectTooLarge", 10334),
        pymongo.errors.WriteError("Resulting document after update is larger than 16777216", 17419),
        pymongo.errors.DocumentTooLarge("BSON document too large"),
    ],
    ids=["BSONObjectTooLarge", "update-result-too-large", "DocumentTooLarge"],
)
def test_server_size_errors_are_typed(harness: Harness, server_error: Exception) -> None:
    store = harness.store
    exe = created(store)
    harness.recorder.fail_write(1, error=server_error)
    error = raises(ExecutionTooLarge, store.commit, exe, processed_event_id="in-1")
    assert error.__cause__ is server_error
    assert exe.version == 1


def test_other_server_errors_are_deployment_errors_caused_by_the_drivers(harness: Harness) -> None:
    store = harness.store
    exe = created(store)
    failure = pymongo.errors.WriteError("not too large", 2)
    harness.recorder.fail_write(1, error=failure)
    error = raises(DeploymentError, store.commit, exe)
    assert type(error) is DeploymentError and error.__cause__ is failure
    assert (error.kind, error.message, str(error)) == (
        "WriteError",
        "not too large",
        "WriteError: not too large",
    )
    assert exe.version == 1


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_commit_cut_off_by_the_network_has_an_unknown_outcome(harness: Harness, when: str) -> None:
    """Lost on its way (`before`) or its reply lost (`after`): the store cannot tell, so it says so."""
    store = harness.store
    exe = created(store)
    lost = pymongo.errors.AutoReconnect("connection closed")
    harness.recorder.fail_write(1, when, error=lost)
    error = raises(CommitOutcomeUnknown, store.commit, exe, processed_event_id="in-1")
    assert (error.execution_id, error.kind, error.__cause__) == (exe.id, "AutoReconnect", lost)
    assert exe.version == 1


def test_any_other_write_cut_off_by_the_network_is_deployment_unavailable(harness: Harness) -> None:
    store, transport = harness.store, harness.transport
    exe = created(store)
    timed_out = pymongo.errors.NetworkTimeout("db:27017: timed out")
    harness.recorder.fail_write(1, error=timed_out)
    error = raises(DeploymentUnavailable, store.ack_relay, exe.id, [], [], retry_in=1.0)
    assert not isinstance(error, CommitOutcomeUnknown) and error.__cause__ is timed_out
    harness.recorder.fail_write(1, error=timed_out)
    error = raises(DeploymentUnavailable, transport.send, exe.id, event("ping"))
    assert str(error) == "NetworkTimeout: db:27017: timed out" and error.__cause__ is timed_out


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


def test_commit_is_all_or_nothing_when_a_round_trip_fails(harness: Harness) -> None:
    """A fault before or after the write of a commit (a lost request or a lost reply) leaves the document
    as it was or fully committed; a retry then completes it exactly once."""
    store, recorder = harness.store, harness.recorder
    for when in ("before", "after"):
        exe = created(store, f"exe-{when}")
        before = stored_bytes(harness, exe.id)
        recorder.fail_write(1, when)
        try:
            rich_commit(store, exe, "a")
        except InjectedFault:
            assert exe.version == 1
        recorder.clear()
        after = harness.raw(exe.id)
        assert bson.encode(after) == before or landed_whole(after, "a"), (when, after)

        reloaded, processed = store.load_for_event(exe.id, "a-in")
        if not processed:
            rich_commit(store, reloaded, "a")
        assert landed_whole(harness.raw(exe.id), "a"), when
        # Nothing lost and nothing doubled: one outbox entry, one spawn, one timer.
        assert [e.event.id for e in store.pending_outbox() if e.source_id == exe.id] == ["a-out"]
        assert [s.child_id for s in store.pending_spawns() if s.parent_id == exe.id] == [f"{exe.id}-a"]
        assert harness.raw(exe.id)["timers"] == {key("fork.a.wait"): 100.0}
