"""The mailbox conformance suite: the queue seam (each execution's mailbox) on every backend.

A send appends to the target's mailbox, once per event id; a claim leases the execution due longest, of
the charts asked for, on the server's clock; the claim's commit removes the events it applied and ends
the lease in the same update as the steps; failures back off, then park the execution behind its dead
letter until an operator retries or drops it. Like the store suite, the checks raise AssertionError when a
backend breaks the contract, so broken backends can be run against them.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from harel.errors import LeaseLost, StepTooLarge, StoreConflict, UnreadableExecution
from harel.executions.fields import INBOX_LIMIT_BYTES, SEQ_STRIDE, due_from
from harel.executions.records import Delivered, StepRecord
from harel.model import TIMER_EVENT, Event, Execution
from harel.servertime import ServerClock
from harel.transport.base import Claim, Failure, SendOutcome
from tests.conformance.backends import Harness
from tests.conformance.test_store_conformance import near, raises
from tests.unreadable import KINDS, RELAY_KINDS, TIMER_KINDS, stored

CHARTS = ["order@1"]
LEASE = 30.0


def execution(execution_id: str, definition_id: str = "order", **fields: Any) -> Execution:
    return Execution(id=execution_id, definition_id=definition_id, definition_version=1, **fields)


def event(event_id: str, name: str = "go", **data: Any) -> Event:
    return Event(id=event_id, name=name, data=data)


def started(harness: Harness, execution_id: str, *events: Event, definition_id: str = "order") -> None:
    assert harness.store.create(execution(execution_id, definition_id), list(events), now=time.time())


def claim(harness: Harness, charts: list[str] = CHARTS, lease: float = LEASE) -> Claim | None:
    return harness.transport.claim(charts, lease, time.time() + 3600)


def claimed(harness: Harness, **options: Any) -> Claim:
    found = claim(harness, **options)
    assert found is not None, "nothing was claimable"
    return found


def commit(harness: Harness, taken: Claim, count: int | None = None, **options: Any) -> None:
    """Apply the first `count` pending events of `taken` as no-op steps, as a worker commits them."""
    applied = list(taken.pending[:count])
    records = [StepRecord(p.id, trace={"event": p.event.name}) for p in applied]
    harness.store.commit_claim(
        taken, taken.execution, records, applied=applied, timers_changed=False, **options
    )


def pending_ids(taken: Claim) -> list[str]:
    return [p.id for p in taken.pending]


# --- send ----------------------------------------------------------------------------------------


def test_sends_wait_in_arrival_order_once_per_id(harness: Harness) -> None:
    started(harness, "a", event("a:start", "harel.start"))
    transport = harness.transport
    assert transport.send("a", event("e1"), source="sender") is SendOutcome.QUEUED
    assert transport.send("a", event("e2")) is SendOutcome.QUEUED
    assert transport.send("a", event("e1")) is SendOutcome.DUPLICATE, "already waiting"
    taken = claimed(harness)
    assert pending_ids(taken) == ["a:start", "e1", "e2"]
    assert [p.source for p in taken.pending] == [None, "sender", None]
    commit(harness, taken)
    assert transport.send("a", event("e1")) is SendOutcome.DUPLICATE, "already processed"
    assert transport.send("nobody", event("e3")) is SendOutcome.MISSING
    harness.store.append_trace("trace-only", {"note": "no execution here"})
    assert transport.send("trace-only", event("e4")) is SendOutcome.MISSING
    assert transport.pending_count() == 0


def test_sends_from_clients_whose_clocks_disagree_are_applied_in_arrival_order(harness: Harness) -> None:
    """Two senders, one clock an hour ahead and one an hour behind, take turns: the claim lists the events
    in the order they arrived and the commit applies them in that order, whatever each entry's `at` (the
    sender's estimate of the server's time) says."""
    started(harness, "a")
    ahead = harness.sender(ServerClock(local=lambda: time.time() + 3600))
    behind = harness.sender(ServerClock(local=lambda: time.time() - 3600))
    sent = []
    for turn in range(3):
        for name, sender in (("ahead", ahead), ("behind", behind)):
            event_id = f"{name}-{turn}"
            assert sender.send("a", event(event_id), source=name) is SendOutcome.QUEUED
            sent.append(event_id)
    taken = claimed(harness)
    arrived_at = [p.at for p in taken.pending]
    assert arrived_at != sorted(arrived_at), "the senders' clocks disagree, so their stamps are out of order"
    assert pending_ids(taken) == sent
    commit(harness, taken)
    assert harness.raw("a")["processed"] == sent


def test_a_full_mailbox_refuses_sends_until_it_drains(harness: Harness) -> None:
    started(harness, "a")
    bulky = "x" * (INBOX_LIMIT_BYTES // 3)
    transport = harness.transport
    assert transport.send("a", event("big-1", blob=bulky)) is SendOutcome.QUEUED
    assert transport.send("a", event("big-2", blob=bulky)) is SendOutcome.QUEUED
    assert transport.send("a", event("big-3", blob=bulky)) is SendOutcome.FULL
    assert transport.send("a", event("big-1", blob=bulky)) is SendOutcome.DUPLICATE
    commit(harness, claimed(harness), 1)
    assert transport.send("a", event("big-3", blob=bulky)) is SendOutcome.QUEUED
    assert transport.pending_count() == 2


def test_a_step_with_more_entries_than_it_may_number_is_refused_with_nothing_written(
    harness: Harness,
) -> None:
    """A commit whose step emits and spawns more than SEQ_STRIDE entries raises StepTooLarge (its execution,
    the count and the limit) before anything is written: the events stay in the mailbox, the lease holds,
    and the same claim commits once its step fits. Exactly SEQ_STRIDE entries fit."""
    started(harness, "a")
    assert harness.transport.send("a", event("fan")) is SendOutcome.QUEUED
    taken = claimed(harness)
    before = harness.raw("a")
    emits = [("b", event(f"ping-{n}", "ping")) for n in range(SEQ_STRIDE + 1)]
    refused = raises(
        StepTooLarge,
        harness.store.commit_claim,
        taken,
        taken.execution,
        [StepRecord(p.id, emits=emits if p.id == "fan" else ()) for p in taken.pending],
        applied=list(taken.pending),
        timers_changed=False,
    )
    assert (refused.execution_id, refused.count, refused.limit) == ("a", SEQ_STRIDE + 1, SEQ_STRIDE)
    assert harness.raw("a") == before, "nothing of the step was written"
    records = [StepRecord(p.id, emits=emits[:SEQ_STRIDE] if p.id == "fan" else ()) for p in taken.pending]
    harness.store.commit_claim(
        taken, taken.execution, records, applied=list(taken.pending), timers_changed=False
    )
    after = harness.raw("a")
    assert after is not None and len(after["outbox"]) == SEQ_STRIDE and not after["inbox"]


def test_dollar_prefixed_event_ids_are_deduplicated(harness: Harness) -> None:
    """An id starting with `$` is data in every command: sent twice, it waits once and is applied once."""
    started(harness, "$exe", event("$start", "harel.start"))
    transport = harness.transport
    assert transport.send("$exe", event("$inbox")) is SendOutcome.QUEUED
    assert transport.send("$exe", event("$inbox")) is SendOutcome.DUPLICATE
    taken = claimed(harness)
    assert pending_ids(taken) == ["$start", "$inbox"]
    commit(harness, taken)
    assert transport.send("$exe", event("$inbox")) is SendOutcome.DUPLICATE
    assert harness.store.load_for_event("$exe", "$inbox")[1]
    assert claim(harness) is None


# --- claim ---------------------------------------------------------------------------------------


def test_a_claim_takes_the_execution_due_longest_and_leases_it(harness: Harness) -> None:
    started(harness, "first", event("first:start"))
    time.sleep(0.01)
    started(harness, "second", event("second:start"))
    first = claimed(harness)
    assert first.execution_id == "first"
    assert near(first.server_time, time.time()) and first.lease_until == first.server_time + LEASE
    assert first.attempts == 0 and first.previous_owner is None
    second = claimed(harness)
    assert second.execution_id == "second" and second.owner != first.owner
    assert claim(harness) is None, "both are leased"


def test_a_worker_claims_only_the_charts_it_serves(harness: Harness) -> None:
    started(harness, "billing-1", event("b:start"), definition_id="billing")
    started(harness, "order-1", event("o:start"))
    assert claimed(harness, charts=["order@1"]).execution_id == "order-1"
    assert claim(harness, charts=["order@1"]) is None
    assert claim(harness, charts=["order@2", "other@1"]) is None
    assert claimed(harness, charts=["billing@1"]).execution_id == "billing-1"


def test_the_commit_removes_what_it_applied_and_ends_the_lease(harness: Harness) -> None:
    started(harness, "a", event("e1"), event("e2"))
    taken = claimed(harness)
    harness.transport.send("a", event("e3"))  # arrives during the lease
    assert claim(harness) is None, "a send does not end a lease"
    commit(harness, taken)
    document = harness.raw("a")
    assert [entry["id"] for entry in document["inbox"]] == ["e3"]
    assert document["lease"] is None and document["version"] == 3
    assert near(document["inbox_at"], time.time()), "due again: an event arrived during the lease"
    again = claimed(harness)
    assert pending_ids(again) == ["e3"] and again.execution.version == 3
    commit(harness, again)
    assert harness.raw("a")["inbox_at"] is None, "nothing left to do"
    assert claim(harness) is None


def taken_over(harness: Harness) -> tuple[Claim, Claim]:
    """Execution "a" with one pending event, its first lease expired and taken over: (stale, holder)."""
    started(harness, "a", event("e1"))
    stale = claimed(harness, lease=0.2)
    time.sleep(0.3)
    holder = claimed(harness)
    assert holder.previous_owner == stale.owner, "the expired lease was taken over"
    return stale, holder


def test_a_takeover_of_an_expired_lease_counts_an_attempt_and_a_commit_clears_it(harness: Harness) -> None:
    """An expired lease still held means its holder's attempt at the head event failed (it stopped, or its
    step outlived the lease): the claim that takes it over counts the attempt and says so."""
    stale, holder = taken_over(harness)
    assert (stale.attempts, holder.attempts) == (0, 1)
    stored = harness.raw("a")
    assert stored["attempts"] == 1
    assert stored["last_error"] == f"LeaseExpired: the lease of {stale.owner} ran out before its step"
    assert harness.transport.release(holder)
    assert claimed(harness).attempts == 1, "a released lease is no takeover: nothing more is counted"


def test_a_lost_lease_cannot_commit(harness: Harness) -> None:
    stale, holder = taken_over(harness)
    before = harness.raw("a")
    lost = raises(LeaseLost, commit, harness, stale)
    assert isinstance(lost, StoreConflict) and lost.holder == holder.owner
    assert harness.raw("a") == before, "nothing written"
    commit(harness, holder)
    assert harness.raw("a")["processed"] == ["e1"]


@pytest.mark.semantics("sem-time")
def test_leases_run_on_the_servers_clock(harness: Harness) -> None:
    """A bound far ahead (a worker whose clock runs fast) does not let a claim take a lease early."""
    started(harness, "a", event("e1"))
    claimed(harness, lease=0.5)
    assert harness.transport.claim(CHARTS, LEASE, time.time() + 3600) is None
    time.sleep(0.6)
    assert claim(harness) is not None


def test_extend_and_release(harness: Harness) -> None:
    started(harness, "a", event("e1"))
    taken = claimed(harness, lease=0.3)
    extended = harness.transport.extend(taken, 60.0)
    assert extended is not None and extended.lease_until >= taken.lease_until + 50
    time.sleep(0.4)
    assert claim(harness) is None, "the extended lease holds"
    assert harness.transport.release(extended)
    retaken = claimed(harness)
    assert pending_ids(retaken) == ["e1"] and retaken.previous_owner is None, "released, not taken over"
    assert not harness.transport.release(extended), "only the owner releases"
    assert harness.transport.extend(extended, 60.0) is None


def test_a_lost_lease_cannot_extend_release_or_fail(harness: Harness) -> None:
    """The owner token fences every write of a claim, not only its commit: a worker whose lease was taken over
    can neither prolong it, nor hand the execution back, nor count a failed attempt against it."""
    stale, holder = taken_over(harness)
    before = harness.raw("a")
    assert harness.transport.extend(stale, 60.0) is None
    assert not harness.transport.release(stale)
    assert not harness.transport.fail(stale, failure(stale, 1))
    assert harness.raw("a") == before, "nothing written"
    commit(harness, holder)
    assert harness.raw("a")["processed"] == ["e1"]


# --- the claim's commit and relay work left pending ------------------------------------------------


def emitting(harness: Harness, taken: Claim, *emits: tuple[str, Event], **options: Any) -> Any:
    """Commit `taken`'s first pending event as one step that emits `emits` (and spawns what `spawns` says)."""
    head = taken.pending[0]
    record = StepRecord(head.id, emits=list(emits), spawns=options.pop("spawns", ()), trace={})
    return harness.store.commit_claim(
        taken, taken.execution, [record], applied=[head], timers_changed=False, **options
    )


def test_a_commit_with_entries_of_its_own_takes_over_an_outbox_left_pending(harness: Harness) -> None:
    """A claim that finds another worker's outbox entries pending, and commits entries of its own, takes the
    relay work over: the commit returns those entries to deliver first, and holds the work for its own lease,
    so no background relay takes it meanwhile; the other worker's acknowledgement of what it delivered
    leaves that hold alone."""
    started(harness, "a", event("e1"))
    first = emitting(harness, claimed(harness), ("b", event("a-1")))
    assert first.taken_over is None and first.held, "nothing was pending: its own work, held"
    harness.transport.send("a", event("e2"))
    second = claimed(harness)
    assert [e.event.id for e in second.outbox_pending or ()] == ["a-1"], "the claim reads the entries"
    parts = emitting(harness, second, ("b", event("a-2")))
    assert parts.held and [e.event.id for e in parts.taken_over or ()] == ["a-1"]
    assert [e.event.id for e in parts.outbox_entries()] == ["a-1", "a-2"], "the first's entry first"
    assert near(harness.raw("a")["relay_at"], time.time() + LEASE)
    bound = time.time() + 3600
    assert harness.store.take_relay_work(LEASE, bound) is None, "held by the second committer"
    [a_1] = [e.seq for e in parts.taken_over or ()]
    harness.store.ack_delivered([Delivered("a", (a_1,), (), time.monotonic())], retry_in=0.0)
    assert [e["seq"] for e in harness.raw("a")["outbox"]] == [a_1 + SEQ_STRIDE], "a-1 acknowledged"
    assert near(harness.raw("a")["relay_at"], time.time() + LEASE), "the second's hold stays"
    assert harness.store.take_relay_work(LEASE, bound) is None


def test_a_commit_taking_relay_work_over_sends_again_only_what_goes_to_the_targets_of_its_own(
    harness: Harness,
) -> None:
    """An event may not overtake an earlier one from the same execution to the same target: the entries
    left pending to other targets are not sent again; they stay for their worker's acknowledgement, and
    that acknowledgement leaves the committer's hold alone."""
    started(harness, "a", event("e1"))
    emitting(harness, claimed(harness), ("b", event("a-1")), ("c", event("a-2")))
    harness.transport.send("a", event("e2"))
    parts = emitting(harness, claimed(harness), ("c", event("a-3")))
    assert parts.held and [e.event.id for e in parts.taken_over or ()] == ["a-2"]
    assert [e.event.id for e in parts.outbox_entries()] == ["a-2", "a-3"]
    first = [e["seq"] for e in harness.raw("a")["outbox"][:2]]
    harness.store.ack_delivered([Delivered("a", tuple(first), (), time.monotonic())], retry_in=0.0)
    assert near(harness.raw("a")["relay_at"], time.time() + LEASE), "the committer's hold stays"


def test_a_commit_leaves_pending_spawns_to_their_holder_and_its_own_entries_due_at_once(
    harness: Harness,
) -> None:
    """Spawns left pending are not taken over (a child created twice costs a read to tell a repeat): the
    commit's own entries wait with them for a relay, due at once rather than when the other holder's time
    ends; a commit with no entries of its own takes nothing over."""
    started(harness, "a", event("e1"))
    emitting(harness, claimed(harness), spawns=[("a/X@1", "fork.X", {})])
    harness.transport.send("a", event("e2"))
    harness.transport.send("a", event("e3"))
    quiet = emitting(harness, claimed(harness))
    assert quiet.taken_over is None and not quiet.held, "no entries of its own: nothing to take over"
    parts = emitting(harness, claimed(harness), ("b", event("a-2")))
    assert parts.taken_over is None and not parts.held
    work = harness.store.take_relay_work(LEASE, time.time() + 3600)
    assert work is not None and [s.child_id for s in work.spawns] == ["a/X@1"], "due now, for a relay"
    assert [e.event.id for e in work.outbox] == ["a-2"]


# --- failures and dead letters --------------------------------------------------------------------


def failure(taken: Claim, attempts: int, *, park: bool = False, retry_in: float = 0.3) -> Failure:
    return Failure(taken.pending[0], f"RuntimeError: attempt {attempts}", attempts, park, retry_in)


def test_a_failed_attempt_backs_off_with_later_events_waiting(harness: Harness) -> None:
    started(harness, "a", event("poison"), event("later"))
    taken = claimed(harness)
    assert harness.transport.fail(taken, failure(taken, 1))
    document = harness.raw("a")
    assert (document["attempts"], document["last_error"]) == (1, "RuntimeError: attempt 1")
    assert document["lease"] is None and document["version"] == 1, "nothing applied"
    assert claim(harness) is None, "backing off"
    time.sleep(0.35)
    retried = claimed(harness)
    assert pending_ids(retried) == ["poison", "later"] and retried.attempts == 1


def test_a_commit_records_the_applied_prefix_and_the_failure_after_it(harness: Harness) -> None:
    started(harness, "a", event("ok"), event("poison"), event("later"))
    taken = claimed(harness)
    applied = [taken.pending[0]]
    harness.store.commit_claim(
        taken,
        taken.execution,
        [StepRecord("ok")],
        applied=applied,
        failure=Failure(taken.pending[1], "RuntimeError: no", 1, False, 0.3),
        timers_changed=False,
    )
    document = harness.raw("a")
    assert [entry["id"] for entry in document["inbox"]] == ["poison", "later"]
    assert (document["processed"], document["attempts"], document["version"]) == (["ok"], 1, 2)
    assert claim(harness) is None
    time.sleep(0.35)
    assert pending_ids(claimed(harness)) == ["poison", "later"]


@pytest.mark.semantics("sem-unreadable")
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_unreadable_execution_is_parked_by_the_claim_that_read_it_fenced_by_its_lease(
    harness: Harness, kind: str
) -> None:
    """A document stored past the SDK's checks (too deep, a field of the wrong type, a malformed mailbox entry)
    fails its claim with UnreadableExecution, which names what could not be read and carries the claim's lease;
    the park that write fences is the claim's own: once parked, nothing claims it again."""
    make, said = KINDS[kind]
    harness.database["executions"].insert_one(make("u", "order"))
    transport = harness.transport

    unreadable = raises(UnreadableExecution, claim, harness)

    assert (unreadable.execution_id, unreadable.event_id) == ("u", "u:poke")
    assert unreadable.what.startswith(said), unreadable.what
    assert harness.raw("u")["lease"]["owner"] == unreadable.owner, "the claim holds the lease while it parks"
    assert transport.park_unreadable(unreadable)
    assert not transport.park_unreadable(unreadable), "fenced by the claim's lease: it ended with the park"
    stored = harness.raw("u")
    error = f"UnreadableExecution: execution 'u' cannot be read: {unreadable.what}"
    assert (stored["lease"], stored["inbox_at"], stored["attempts"], stored["last_error"]) == (
        None,
        None,
        1,
        error,
    )
    [parked] = transport.parked()
    assert (parked.execution_id, parked.chart, parked.event_id, parked.error, parked.attempts) == (
        "u",
        "order@1",
        "u:poke",
        error,
        1,
    )
    assert claim(harness) is None, "parked: not claimed again"


def parked_by_a_pass(harness: Harness, unreadable: UnreadableExecution) -> dict[str, Any]:
    """Park what the relay or the sweep could not read: not again once parked; the stored document."""
    assert unreadable.execution_id == "u" and unreadable.owner is None
    assert harness.store.park_unreadable(unreadable)
    document = harness.raw("u")
    error = f"UnreadableExecution: execution 'u' cannot be read: {unreadable.what}"
    assert (document["lease"], document["inbox_at"], document["attempts"], document["last_error"]) == (
        None,
        None,
        1,
        error,
    )
    assert (document["relay_at"], document["next_fire_at"]) == (None, None), "neither pass takes it again"
    [parked] = harness.transport.parked()
    assert (parked.execution_id, parked.chart, parked.event_id, parked.error, parked.attempts) == (
        "u",
        "order@1",
        "-",
        error,
        1,
    )
    return document


@pytest.mark.semantics("sem-unreadable")
@pytest.mark.parametrize("kind", list(RELAY_KINDS))
def test_relay_work_that_cannot_be_read_parks_its_execution_until_the_operator_settles_it(
    harness: Harness, kind: str
) -> None:
    """No entry of it is relayed (the others would overtake the one that cannot be read), the relay does not
    take it again while it is parked, and a retry makes the work due at once (here: unreadable still)."""
    make, said = RELAY_KINDS[kind]
    harness.database["executions"].insert_one(make("u", "order"))
    store = harness.store

    unreadable = raises(UnreadableExecution, store.take_relay_work, LEASE, time.time() + 3600)

    assert unreadable.what.startswith(said), unreadable.what
    held = harness.raw("u")["relay_at"]
    document = parked_by_a_pass(harness, unreadable)
    assert document["parked"]["relay_at"] == held, "the dead letter keeps the relay's hold"
    assert store.take_relay_work(LEASE, time.time() + 3600) is None, "parked: the relay leaves it"
    assert harness.transport.retry("u")
    assert near(harness.raw("u")["relay_at"], time.time()), "retried: its relay work is due now"
    raises(UnreadableExecution, store.take_relay_work, LEASE, time.time() + 3600)


@pytest.mark.semantics("sem-unreadable")
@pytest.mark.parametrize("kind", list(TIMER_KINDS))
def test_timers_that_cannot_be_read_park_their_execution_and_the_other_timers_fire(
    harness: Harness, kind: str
) -> None:
    make, said = TIMER_KINDS[kind]
    executions = harness.database["executions"]
    executions.insert_one(make("u", "order"))
    executions.insert_one({**stored("t", "order", inbox=[]), "timers": {"open": 2.0}, "next_fire_at": 2.0})
    store = harness.store

    readable, unreadable = store.due_timers(time.time() + 3600)

    assert (readable.execution_id, readable.fire_at) == ("t", 2.0), "one unreadable timer holds up no other"
    assert isinstance(unreadable, UnreadableExecution) and unreadable.what.startswith(said), unreadable
    document = parked_by_a_pass(harness, unreadable)
    assert document["parked"]["next_fire_at"] == 1.0
    assert [due.execution_id for due in store.due_timers(time.time() + 3600)] == ["t"], "parked: not swept"
    assert harness.transport.drop("u", "-")
    assert harness.raw("u")["next_fire_at"] == 1.0, "settled: its earliest timer is due as it was"


def test_a_timer_of_an_execution_whose_mailbox_is_not_an_array_holds_up_no_other_timer(
    harness: Harness,
) -> None:
    """Firing into a mailbox that is not an array fails on the server: the sweep leaves such an execution out,
    rather than fail at it, before the timers due after it, at every pass."""
    executions = harness.database["executions"]
    bad = {**stored("u", "order", inbox=[]), "inbox": "x", "inbox_at": None}
    executions.insert_one({**bad, "timers": {"open": 1.0}, "next_fire_at": 1.0})
    executions.insert_one({**stored("t", "order", inbox=[]), "timers": {"open": 2.0}, "next_fire_at": 2.0})

    [due] = harness.store.due_timers(time.time() + 3600)

    assert due.execution_id == "t"
    assert harness.store.fire_timer(due, now=time.time())


@pytest.mark.semantics("sem-unreadable")
def test_a_pass_parks_only_an_execution_no_claim_holds(harness: Harness) -> None:
    """The relay and the sweep hold no lease: a park of theirs waits while a claim's lease runs, and takes
    over one that ran out (its holder's commit then fails, as after any takeover)."""
    make, _ = RELAY_KINDS["outbox-entry-without-event"]
    executions = harness.database["executions"]
    executions.insert_one({**make("u", "order"), "lease": {"owner": "w", "until": time.time() + 3600}})
    unreadable = raises(UnreadableExecution, harness.store.take_relay_work, LEASE, time.time() + 3600)

    assert not harness.store.park_unreadable(unreadable), "a claim holds it"
    assert harness.raw("u")["parked"] is None and harness.raw("u")["lease"]["owner"] == "w"
    executions.update_one({"_id": "u"}, {"$set": {"lease.until": 1.0}})
    parked_by_a_pass(harness, unreadable)


def test_after_max_attempts_the_execution_is_parked_until_an_operator_acts(harness: Harness) -> None:
    transport = harness.transport
    started(harness, "a", event("poison", "charge"), event("later"))
    taken = claimed(harness)
    assert transport.fail(taken, failure(taken, transport.max_attempts, park=True))
    [parked] = transport.parked()
    assert (parked.execution_id, parked.chart, parked.event_id, parked.event_name) == (
        "a",
        "order@1",
        "poison",
        "charge",
    )
    assert (parked.attempts, parked.error, parked.waiting) == (
        transport.max_attempts,
        "RuntimeError: attempt 8",
        1,
    )
    assert transport.send("a", event("after")) is SendOutcome.QUEUED, "sends are kept, behind it"
    assert claim(harness) is None, "parked: nothing overtakes the dead letter"
    assert transport.pending_count() == 3

    assert not transport.retry("nobody") and not transport.drop("a", "later")
    assert transport.retry("a")
    again = claimed(harness)
    assert pending_ids(again) == ["poison", "later", "after"] and again.attempts == 0
    assert transport.fail(again, failure(again, transport.max_attempts, park=True))
    assert transport.drop("a", "poison")
    assert transport.parked() == []
    assert harness.store.is_processed("a", "poison"), "a dropped event cannot come back"
    assert transport.send("a", event("poison")) is SendOutcome.DUPLICATE
    assert pending_ids(claimed(harness)) == ["later", "after"]


def test_a_claim_fires_each_due_timer_once_and_leaves_the_others_armed(harness: Harness) -> None:
    """The claim of an execution whose earliest timer is due appends that timer's event to the mailbox in
    its own command (no sweep); a timer not yet due stays armed and names the next wake-up. A timer whose
    event already waits — appended by the seed's sweep, or by a claim whose lease ran out — is not appended
    again."""
    now = time.time()
    later = now + 3600
    timers = {"open": now - 1, "open\uff0elater": later}
    executions = harness.database["executions"]
    for execution_id in ("t", "swept"):
        document = {**stored(execution_id, "order", inbox=[]), "inbox_at": None, "timers": timers}
        executions.insert_one({**document, "next_fire_at": due_from(now - 1), "wake_at": due_from(now - 1)})
    [due] = [d for d in harness.store.due_timers(now + 60) if d.execution_id == "swept"]
    assert harness.store.fire_timer(due, now=now), "the seed's sweep appends it first"

    claimed_ids = []
    for _ in range(2):
        first = claimed(harness, lease=0.05)
        claimed_ids.append(first.execution_id)
        fired = [(p.event.name, p.event.data) for p in first.pending]
        assert fired == [(TIMER_EVENT, {"path": "open", "fire_at": now - 1})], "the due timer, once"
        stored_now = harness.raw(first.execution_id)
        assert stored_now["next_fire_at"] == due_from(later), "the timer still to come names the next wake-up"
        assert stored_now["wake_at"] == stored_now["lease"]["until"], "leased: claimable when the lease ends"
    assert sorted(claimed_ids) == ["swept", "t"]
    time.sleep(0.2)  # both leases run out on the server's clock
    for _ in range(2):
        again = claimed(harness)
        assert [p.event.data["path"] for p in again.pending] == ["open"], (
            "a waiting timer is not appended twice"
        )
