"""The planted bugs: each a small edit of the SDK's source, the tests that must fail when it is planted, and
where it lives. `python -m tests.mutants` (`make mutate`) plants them one at a time in a scratch copy of the
SDK and runs their tests against it (tests/mutants/runner.py); the working tree is never edited.

An edit is anchored on code, not on line numbers: its `anchor` must occur exactly once in its file, or the
mutant no longer applies and says so (`MutantNoLongerApplies`; tests/mutants/test_catalog.py checks every
mutant against the current source). A bug of MongoStore/MongoTransport is planted once, in the shared
document builders of `harel.executions`, so it is in the sync and the async twins, on every backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SDK_PACKAGE = Path(__file__).resolve().parents[2] / "sdk" / "src" / "harel"


class MutantNoLongerApplies(Exception):
    """A mutant's anchor is gone from its file (or is no longer unique): the catalog must be updated."""


@dataclass(frozen=True)
class Edit:
    """Replace the one occurrence of `anchor` in `path` (relative to the `harel` package) by `replacement`."""

    path: str
    anchor: str
    replacement: str


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # what the planted bug does, in one line
    edits: tuple[Edit, ...]
    killed_by: tuple[str, ...]  # pytest node ids, relative to the repository root

    @property
    def where(self) -> str:
        return ", ".join(sorted({edit.path for edit in self.edits}))


def mutated_sources(mutant: Mutant, read: Mapping[str, str]) -> dict[str, str]:
    """The changed files' new text, from `read` (path -> current text); MutantNoLongerApplies when an
    anchor is missing or ambiguous."""
    changed: dict[str, str] = {}
    for edit in mutant.edits:
        text = changed.get(edit.path, read[edit.path])
        found = text.count(edit.anchor)
        if found != 1:
            where = "is gone from" if found == 0 else f"occurs {found} times in"
            raise MutantNoLongerApplies(
                f"mutant {mutant.name} no longer applies: its anchor {edit.anchor.strip()!r} {where} "
                f"sdk/src/harel/{edit.path}"
            )
        changed[edit.path] = text.replace(edit.anchor, edit.replacement)
    return changed


def current_sources(mutant: Mutant, package: Path = SDK_PACKAGE) -> dict[str, str]:
    return {edit.path: (package / edit.path).read_text(encoding="utf-8") for edit in mutant.edits}


WORKER = "worker.py"
COMMITS = "executions/commits.py"
QUERIES = "executions/queries.py"
WRITES = "executions/writes.py"
REPLIES = "executions/replies.py"
MONGO_STORE = "store/mongo.py"
INTERPRETER = "interpreter.py"
CHART = "chart.py"
RULES = "connection/rules.py"
PARTITIONS = "executions/partitions.py"
SHARDING_RULES = "connection/sharding.py"

STORE_CHECKS = "tests/conformance/test_store_conformance.py"
MAILBOX_CHECKS = "tests/conformance/test_mailbox_conformance.py"
UNIT_WORKER = "tests/unit/test_worker.py"
CRASH_WINDOWS = "tests/wire/test_crash_windows.py"
FAULTS = "tests/wire/test_faults.py"
DEGRADED = "tests/wire/test_degraded.py"
INTERPRETER_CHECKS = "tests/unit/test_interpreter.py"
REGION_CHECKS = "tests/unit/test_regions.py"
ORDERING = "tests/wire/test_ordering.py"
RTC_CHECKS = "tests/unit/test_run_to_completion.py"
LANGUAGE_CHECKS = "tests/unit/test_chart_language.py"
SHARDED = "tests/wire/test_sharded_cluster.py"
PARTITION_CHECKS = "tests/unit/test_partitions.py"
WAKEUPS = "transport/wakeups.py"
TRANSPORT_CHECKS = "tests/unit/test_transport.py"


def _on(module: str, *tests: str, ids: tuple[str, ...] = ("",)) -> tuple[str, ...]:
    """`module::test[id]` for each test and id ("" for a test without parameters)."""
    return tuple(f"{module}::{test}" + (f"[{i}]" if i else "") for test in tests for i in ids)


MONGO = ("mongomock",)
FAKE_RS = ("fake-rs",)

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "cas-without-version",
        "a commit's CAS filter matches `_id` alone, not `{_id, version}`",
        (
            Edit(
                COMMITS,
                'cas = {"_id": parts.execution_id, "version": parts.expected}',
                'cas = {"_id": parts.execution_id}',
            ),
        ),
        _on(
            STORE_CHECKS,
            "test_stale_commit_conflicts_and_changes_nothing",
            "test_one_writer_per_version",
            ids=MONGO,
        )
        + _on(UNIT_WORKER, "test_a_rival_commit_loses_nothing")
        + _on(
            FAULTS,
            "test_concurrent_commits_over_the_wire_have_one_winner_per_version",
            "test_concurrent_async_commits_have_one_winner_per_version",
            ids=FAKE_RS,
        ),
    ),
    Mutant(
        "commit-ignores-lease-owner",
        "a claim's commit is not fenced by the lease's owner token",
        (Edit(COMMITS, 'cas["lease.owner"] = claim.owner', "pass"),),
        _on(MAILBOX_CHECKS, "test_a_lost_lease_cannot_commit", ids=MONGO)
        + _on(FAULTS, "test_a_lease_expiring_during_a_slow_action_cannot_double_the_event", ids=FAKE_RS),
    ),
    Mutant(
        "takeover-not-counted",
        "a claim that takes over an expired lease counts no attempt, so an action outliving its lease runs forever",
        (Edit(WRITES, '{"$add": [_ATTEMPTS, 1]}', '"$attempts"'),),
        _on(
            MAILBOX_CHECKS,
            "test_a_takeover_of_an_expired_lease_counts_an_attempt_and_a_commit_clears_it",
            ids=MONGO,
        )
        + _on(
            "tests/unit/test_leases.py",
            "test_an_action_outliving_the_maximum_step_time_is_parked_after_at_most_max_attempts_runs",
        ),
    ),
    Mutant(
        "lease-fence-ignores-owner",
        "a claim's extend, release and failed attempt are not fenced by the lease's owner token",
        (
            Edit(
                WRITES,
                "return fenced(claim.execution_id, claim.owner)",
                'return {"_id": claim.execution_id}',
            ),
        ),
        _on(MAILBOX_CHECKS, "test_a_lost_lease_cannot_extend_release_or_fail", ids=MONGO),
    ),
    Mutant(
        "send-cuts-the-lease-short",
        "a send to a leased execution makes it claimable at once",
        (Edit(WRITES, '{"$ifNull": ["$inbox_at", NOW]},', "NOW,"),),
        _on(UNIT_WORKER, "test_two_workers_racing_never_step_one_execution_at_once"),
    ),
    Mutant(
        "dedupe-hit-ignored",
        "a send of an event id already processed is queued again",
        (Edit(WRITES, '"processed": {"$ne": new["id"]},', ""),),
        _on(MAILBOX_CHECKS, "test_sends_wait_in_arrival_order_once_per_id", ids=MONGO)
        + _on(UNIT_WORKER, "test_an_expired_lease_is_taken_over_and_the_late_commit_refused")
        + _on(FAULTS, "test_relay_stopping_between_send_and_ack_resends_and_dedupe_absorbs_it", ids=FAKE_RS),
    ),
    Mutant(
        "dedupe-window-unbounded",
        "the processed ids are appended without the window's bound",
        (
            Edit(
                COMMITS,
                '_appended("processed", parts.processed, dedupe_window)',
                '_appended("processed", parts.processed)',
            ),
        ),
        _on(STORE_CHECKS, "test_dedupe_window_keeps_the_latest_ids", ids=MONGO),
    ),
    Mutant(
        "sweep-early",
        "the sweep finds and fires timers by the worker's estimate (its bound), not the server's `$$NOW`",
        (
            Edit(QUERIES, '            "$expr": {"$lte": ["$next_fire_at", NOW]},\n', ""),
            Edit(WRITES, '            "$expr": {"$lte": [literal(due_from(due.fire_at)), NOW]},\n', ""),
        ),
        _on(
            STORE_CHECKS,
            "test_due_timers_are_due_on_the_servers_clock",
            "test_a_timer_not_yet_due_is_not_fired",
            ids=MONGO,
        ),
    ),
    Mutant(
        "claim-fires-timers-early",
        "the claim appends the events of timers due within the hour, not of those due by the server's `$$NOW`",
        (
            Edit(
                WRITES,
                '{compare: [_due_at("$$t.v"), NOW]}',
                '{compare: [_due_at("$$t.v"), {"$add": [NOW, 3600]}]}',
            ),
        ),
        _on(MAILBOX_CHECKS, "test_a_claim_fires_each_due_timer_once_and_leaves_the_others_armed", ids=MONGO),
    ),
    Mutant(
        "claim-fires-a-waiting-timer-again",
        "the claim appends a due timer's event even when it waits in the mailbox already (fired by the sweep or "
        "by a claim whose lease ran out)",
        (
            Edit(
                WRITES,
                '"cond": {"$not": [{"$in": [{"key": "$$t.k", "fire_at": "$$t.v"}, _WAITING_TIMERS]}]},',
                '"cond": True,',
            ),
        ),
        _on(MAILBOX_CHECKS, "test_a_claim_fires_each_due_timer_once_and_leaves_the_others_armed", ids=MONGO),
    ),
    Mutant(
        "deferred-ack-trims-undelivered",
        "the committing worker defers the acknowledgement of its relay work when an entry could not be "
        "delivered yet, and counts it as delivered: the next commit trims it",
        (
            Edit(WORKER, "        if own and len(delivered) == len(work.outbox):\n", "        if own:\n"),
            Edit(
                WORKER,
                "                    work.execution_id, tuple(delivered), tuple(spawned), time.monotonic()\n",
                "                    work.execution_id, tuple(e.seq for e in work.outbox), tuple(spawned), "
                "time.monotonic()\n",
            ),
        ),
        _on(UNIT_WORKER, "test_relay_work_not_delivered_in_full_is_acknowledged_at_once_and_never_trimmed"),
    ),
    Mutant(
        "relay-ack-before-send",
        "the relay acknowledges the outbox before it sends the events",
        (
            Edit(
                WORKER,
                "        for entry in work.outbox:\n",
                "        self.store.ack_relay(work.execution_id, [e.seq for e in work.outbox], [], retry_in=1.0)\n"
                "        for entry in work.outbox:\n",
            ),
        ),
        _on(
            CRASH_WINDOWS,
            "test_the_committing_worker_dying_between_round_trips",
            ids=("fake-rs-after-transport.send#1",),
        )
        + _on(
            CRASH_WINDOWS,
            "test_the_background_relay_dying_between_round_trips",
            ids=("fake-rs-after-transport.send#1",),
        ),
    ),
    Mutant(
        "spawn-ack-before-create",
        "the relay acknowledges the spawns before it creates the children",
        (
            Edit(
                WORKER,
                "            self._check_existing(work, self.store.create_children(work.spawns, now=now))\n",
                "            self.store.ack_relay(work.execution_id, [], [s.seq for s in work.spawns], retry_in=1.0)\n"
                "            self._check_existing(work, self.store.create_children(work.spawns, now=now))\n",
            ),
        ),
        _on(
            CRASH_WINDOWS,
            "test_the_committing_worker_dying_between_round_trips",
            ids=("fake-rs-before-store.create_children#1",),
        )
        + _on(
            CRASH_WINDOWS,
            "test_the_background_relay_dying_between_round_trips",
            ids=("fake-rs-before-store.create_children#1",),
        ),
    ),
    Mutant(
        "unknown-outcome-assumed-applied",
        "a commit whose reply was lost is taken as applied without reading its outcome",
        (Edit(WORKER, "if self.store.is_processed(claim.execution_id, last_event_id):", "if True:"),),
        _on(
            UNIT_WORKER,
            "test_an_unknown_commit_outcome_is_resolved",
            ids=("lost-before-applying",),
        )
        + _on(
            FAULTS,
            "test_a_commit_cut_short_by_its_deadline_is_read_back_and_sent_again",
            "test_not_writable_primary_until_the_deadline_is_resolved_by_the_dedupe_mark",
            ids=FAKE_RS,
        ),
    ),
    Mutant(
        "commands-without-deadline",
        "the worker's commands run without their deadline, bounded only by the client's 30 s reply bound",
        (
            Edit(
                WORKER,
                "return per_operation(self.config.op_timeout_seconds)",
                "return contextlib.nullcontext()",
            ),
        ),
        _on(
            DEGRADED,
            "test_a_worker_is_not_ready_while_the_primary_does_not_answer_and_recovers",
            "test_a_partition_that_drops_packets_delays_commits_by_little_more_than_itself",
        ),
    ),
    Mutant(
        "join-after-the-first-region",
        "the join (`on_done`) fires when the first region is done",
        (Edit(INTERPRETER, "if other.fork == ref.fork and not other.done:", "if False:"),),
        _on(INTERPRETER_CHECKS, "test_the_join_fires_once_when_every_region_is_done")
        + _on(
            REGION_CHECKS, "test_each_done_records_the_region_result_before_the_join_guards_and_actions_run"
        )
        + _on(UNIT_WORKER, "test_smoke_workflow_passes_with_three_workers"),
    ),
    Mutant(
        "region-result-dropped",
        "a region's result replaces the results recorded before it",
        (
            Edit(
                INTERPRETER,
                "merged = dict(results) if results and isinstance(results, Mapping) else {}",
                "merged = {}",
            ),
        ),
        _on(
            REGION_CHECKS,
            "test_each_done_records_the_region_result_before_the_join_guards_and_actions_run",
            "test_region_results_are_listed_in_the_chart_order_whatever_order_the_dones_arrive_in",
        )
        + _on(ORDERING, "test_a_regions_last_event_reaches_its_parent_before_its_done", ids=FAKE_RS),
    ),
    Mutant(
        "unreadable-not-parked",
        "a claim that cannot read its execution is logged as parked but not parked, so it is claimed again at "
        "every lease",
        (
            Edit(
                WORKER, "        if not self.transport.park_unreadable(unreadable):\n", "        if False:\n"
            ),
        ),
        _on(
            UNIT_WORKER,
            "test_an_unreadable_execution_is_parked_by_its_first_claim_not_tried_again_at_every_lease",
            ids=("nested-199", "status-a-number", "malformed-inbox-entry"),
        ),
    ),
    Mutant(
        "unreadable-park-unfenced",
        "the park of an unreadable execution is not fenced by the lease of the claim that read it",
        (
            Edit(
                WRITES,
                "fenced(unreadable.execution_id, unreadable.owner),",
                '{"_id": unreadable.execution_id},',
            ),
        ),
        _on(
            MAILBOX_CHECKS,
            "test_an_unreadable_execution_is_parked_by_the_claim_that_read_it_fenced_by_its_lease",
            ids=("mongomock-nested-199",),
        )
        + _on(
            UNIT_WORKER,
            "test_the_park_of_an_unreadable_execution_is_fenced_by_the_lease_of_the_claim_that_read_it",
        ),
    ),
    Mutant(
        "unreadable-relay-work-not-parked",
        "relay work or timers the relay or the sweep cannot read are logged as parked but not parked, so every "
        "pass meets them again",
        (Edit(WORKER, "        if not self.store.park_unreadable(unreadable):\n", "        if False:\n"),),
        _on(
            UNIT_WORKER,
            "test_relay_work_or_timers_that_cannot_be_read_park_their_execution_once_not_at_every_pass",
            ids=(
                "outbox-entry-without-event",
                "spawn-entry-without-child",
                "timer-not-a-number",
                "timers-not-a-map",
            ),
        ),
    ),
    Mutant(
        "unreadable-relay-park-unfenced",
        "the park by a relay or the sweep of what it cannot read takes the execution from a claim that holds it",
        (
            Edit(
                WRITES,
                '{"_id": unreadable.execution_id, "data": {"$exists": True}, "$expr": _UNLEASED},',
                '{"_id": unreadable.execution_id, "data": {"$exists": True}},',
            ),
        ),
        _on(MAILBOX_CHECKS, "test_a_pass_parks_only_an_execution_no_claim_holds", ids=("mongomock",)),
    ),
    Mutant(
        "check-accepts-w1",
        "`harel check` accepts a write concern of w=1",
        (Edit(RULES, 'if w == "majority" and j is True:', 'if w in ("majority", 1) and j is True:'),),
        _on("tests/unit/test_connection.py", "test_a_weak_url_reports_all_four_violations_in_one_run")
        + _on(
            "tests/wire/test_check_over_wire.py",
            "test_check_fails_on_weak_client_options_over_the_replica_set",
        ),
    ),
    Mutant(
        "lease-on-the-callers-clock",
        "a claim takes what is due by the worker's estimate (its bound), not the server's `$$NOW`",
        (Edit(WRITES, '            "$expr": {"$lte": ["$wake_at", NOW]},\n', ""),),
        _on(MAILBOX_CHECKS, "test_leases_run_on_the_servers_clock", ids=MONGO)
        + _on(
            "tests/wire/test_clock_skew.py",
            "test_a_skewed_worker_takes_a_lease_over_only_once_it_expired",
            ids=("fake-rs-ahead-takes-over-from-behind",),
        ),
    ),
    Mutant(
        "mailbox-out-of-order",
        "a send puts its event at the head of the mailbox",
        (
            Edit(
                WRITES,
                '"inbox": {"$concatArrays": [array("inbox"), literal([dict(new)])]},',
                '"inbox": {"$concatArrays": [literal([dict(new)]), array("inbox")]},',
            ),
        ),
        _on(MAILBOX_CHECKS, "test_sends_wait_in_arrival_order_once_per_id", ids=MONGO)
        + _on(UNIT_WORKER, "test_events_to_one_execution_apply_in_the_order_sent")
        + _on(
            "tests/wire/test_ordering.py",
            "test_a_later_event_never_overtakes_a_slow_earlier_one",
            ids=FAKE_RS,
        ),
    ),
    Mutant(
        "claim-orders-by-sender-clock",
        "a claim lists the pending events by their senders' clocks (`at`), not in arrival order",
        (
            Edit(
                REPLIES,
                "    return tuple(pending)\n",
                "    return tuple(sorted(pending, key=lambda p: p.at))\n",
            ),
        ),
        _on(
            MAILBOX_CHECKS,
            "test_sends_from_clients_whose_clocks_disagree_are_applied_in_arrival_order",
            ids=MONGO,
        ),
    ),
    Mutant(
        "relay-outbox-reversed",
        "relay work lists an execution's outbox entries in reverse seq order",
        (
            Edit(
                REPLIES,
                'sorted((parse_outbox_entry(document["_id"], e) for e in entries), key=lambda e: e.seq)',
                'sorted((parse_outbox_entry(document["_id"], e) for e in entries), key=lambda e: -e.seq)',
            ),
        ),
        _on(
            STORE_CHECKS,
            "test_relay_work_comes_back_longest_waiting_first_each_execution_in_seq_order",
            ids=MONGO,
        ),
    ),
    Mutant(
        "relay-takes-newest-first",
        "a background relay takes the execution whose relay work waited least, not longest",
        (Edit(WRITES, 'sort=(("relay_at", 1),),', 'sort=(("relay_at", -1),),'),),
        _on(
            STORE_CHECKS,
            "test_relay_work_comes_back_longest_waiting_first_each_execution_in_seq_order",
            ids=MONGO,
        ),
    ),
    Mutant(
        "guarded-alternatives-first",
        "a state's guarded alternatives are tried before an unguarded one written ahead of them",
        (
            Edit(
                INTERPRETER,
                "        for edge in alternatives:\n",
                "        for edge in sorted(alternatives, key=lambda e: e.guard is None):\n",
            ),
        ),
        _on(
            RTC_CHECKS,
            "test_an_unguarded_alternative_written_first_wins_over_a_later_guard_that_passes",
            "test_an_unguarded_alternative_between_guards_is_taken_where_it_is_written",
            "test_an_unguarded_eventless_alternative_written_first_wins_over_a_later_guard_that_passes",
        ),
    ),
    Mutant(
        "eventless-limit-off-by-one",
        "a step that takes exactly 100 eventless transitions in a row is refused",
        (Edit(INTERPRETER, "if fired > MAX_EVENTLESS:", "if fired >= MAX_EVENTLESS:"),),
        _on(RTC_CHECKS, "test_an_eventless_chain_of_exactly_the_limit_comes_to_rest"),
    ),
    Mutant(
        "pattern-matches-any-continuation",
        "`key.*` also matches names that merely start with `key` (`keys`, `keyx.a`)",
        (Edit(CHART, 'name[len(prefix) : len(prefix) + 1] == "."', "True"),),
        _on(LANGUAGE_CHECKS, "test_a_pattern_matches_its_prefix_token_by_token_and_a_plain_name_only_itself"),
    ),
    Mutant(
        "reenter-ignored",
        "`reenter: true` on a transition into its own source is ignored: the source is not left",
        (Edit(CHART, "if inside and not transition.reenter:", "if inside:"),),
        _on(LANGUAGE_CHECKS, "test_reenter_exits_and_enters_the_source_again"),
    ),
    Mutant(
        "shallow-history-restores-the-leaf",
        "a shallow history state records (and restores) the active leaf, as a deep one does",
        (Edit(INTERPRETER, 'if self.nodes[path].history == "deep":', "if True:"),),
        _on(LANGUAGE_CHECKS, "test_shallow_history_enters_the_child_left_and_deep_history_the_leaf")
        + _on(
            "tests/unit/test_chart_language_runs.py",
            "test_each_example_runs_on_the_embedded_store",
            ids=("wizard",),
        ),
    ),
    Mutant(
        "cancelled-send-still-held",
        "cancelling a delayed send disarms its timer but keeps the event held",
        (Edit(INTERPRETER, "                del self._own_delayed()[sent.id]\n", ""),),
        _on(
            LANGUAGE_CHECKS,
            "test_a_cancelled_delayed_send_never_fires_and_a_send_with_a_pending_id_replaces_it",
        )
        + _on(
            "tests/unit/test_chart_language_runs.py",
            "test_each_example_runs_on_the_embedded_store",
            ids=("reminder",),
        ),
    ),
    Mutant(
        "check-ignores-journal",
        "`harel check` accepts w=majority with journal=false",
        (Edit(RULES, 'if w == "majority" and j is True:', 'if w == "majority":'),),
        _on(
            "tests/unit/test_connection.py",
            "test_a_majority_write_concern_without_the_journal_is_refused_as_weak",
            ids=("journal=false", "JOURNAL=false"),
        )
        + _on(
            "tests/wire/test_check_over_wire.py",
            "test_a_majority_write_concern_without_the_journal_is_refused_at_start_up",
        ),
    ),
    Mutant(
        "command-without-its-partition",
        "a command on one execution carries `_id` alone, not its full shard key `{p, _id}`",
        (Edit(PARTITIONS, 'return {"p": self.of(execution_id), **filter_}', "return dict(filter_)"),),
        _on(SHARDED, "test_the_smoke_workflow_runs_with_every_hot_command_on_one_shard")
        + _on(STORE_CHECKS, "test_every_commit_is_one_update", ids=("mongomock-partitioned",)),
    ),
    Mutant(
        "partition-of-the-region-not-the-root",
        "`p` is hashed from the execution's own id, so a region lands in another partition than its root",
        (Edit(PARTITIONS, "blake2b(root_id(execution_id).encode()", "blake2b(execution_id.encode()"),),
        _on(PARTITION_CHECKS, "test_a_region_and_its_regions_regions_share_their_roots_partition"),
    ),
    Mutant(
        "claims-across-zones",
        "a window of partitions spans every zone, so each claim reaches every shard",
        (
            Edit(
                PARTITIONS,
                "for zone in zones if zones is not None else self.zones:",
                'for zone in (Zone("all", 0, self.count),):',
            ),
        ),
        _on(SHARDED, "test_the_smoke_workflow_runs_with_every_hot_command_on_one_shard")
        + _on(PARTITION_CHECKS, "test_work_is_looked_for_in_windows_each_inside_one_zone"),
    ),
    Mutant(
        "check-accepts-an-unpartitioned-cluster",
        "`harel check` accepts a sharded cluster whose `executions` is not partitioned",
        (
            Edit(
                SHARDING_RULES,
                "    return violation(ShardingError, found, required, _INIT)\n\n\ndef _shards_finding",
                "    return ok(ShardingError.check, found, required)\n\n\ndef _shards_finding",
            ),
        ),
        _on(
            "tests/unit/test_sharding_rules.py",
            "test_executions_not_partitioned_as_the_engine_needs_are_refused_by_name",
            ids=("unsharded",),
        )
        + _on(
            "tests/wire/test_partitions_cli.py",
            "test_check_refuses_an_unpartitioned_cluster_by_name_and_passes_it_once_partitioned",
        ),
    ),
    Mutant(
        "watcher-reads-while-busy",
        "the watcher reads its change stream while no consumer waits: every busy worker reads every change",
        (
            Edit(
                WAKEUPS,
                "self._waiting.wait_for(lambda: self.waiters > 0 or self._closed.is_set(), UNREAD_SECONDS)",
                "pass",
            ),
        ),
        _on(TRANSPORT_CHECKS, "test_the_watch_reads_its_stream_only_while_a_consumer_waits"),
    ),
    Mutant(
        "extension-plans-a-wake-up",
        "a lease extension a real server reports as `lease.until` plans a wake-up at the holder's lease end",
        (Edit(WAKEUPS, "if self._echo(change) or _extension(change):", "if self._echo(change):"),),
        _on(TRANSPORT_CHECKS, "test_a_lease_extension_reported_as_a_dotted_field_plans_no_wake_up"),
    ),
    Mutant(
        "relay-polls-at-a-fixed-pace",
        "the background relay polls every second however long it finds nothing",
        (
            Edit(
                WORKER,
                "pause = first if moved or postponed or self._postponed.is_set() else min(longest, pause * 2)",
                "pause = first",
            ),
        ),
        _on(
            UNIT_WORKER,
            "test_an_idle_relay_loop_backs_off_and_a_postponed_delivery_keeps_it_at_the_retry_pace",
        ),
    ),
    Mutant(
        "takeover-overtakes-the-pending-outbox",
        "a commit that takes relay work over sends its own entries without the pending ones to the same targets",
        (
            Edit(
                COMMITS,
                "    return [entry for entry in pending if entry.target_id in targets]",
                "    return []",
            ),
        ),
        _on(
            MAILBOX_CHECKS,
            "test_a_commit_with_entries_of_its_own_takes_over_an_outbox_left_pending",
            ids=MONGO,
        )
        + _on(
            UNIT_WORKER,
            "test_a_commit_made_while_another_worker_relays_takes_the_relay_over_and_delivers_at_once",
        ),
    ),
    Mutant(
        "acknowledgement-ends-a-takers-hold",
        "acknowledging delivered work makes what is left due for a background relay, though a committer holds it",
        (
            Edit(
                WRITES,
                'retry_at = {"$max": ["$relay_at", now_plus(retry_in)]} if others_hold else now_plus(retry_in)',
                "retry_at = now_plus(retry_in)",
            ),
        ),
        _on(
            MAILBOX_CHECKS,
            "test_a_commit_with_entries_of_its_own_takes_over_an_outbox_left_pending",
            "test_a_commit_taking_relay_work_over_sends_again_only_what_goes_to_the_targets_of_its_own",
            ids=MONGO,
        ),
    ),
)
