"""The benchmarks' quick mode runs in the test command, so `make bench` keeps working.

Counts are asserted (round trips, documents returned, bytes trends, events processed); timings never are.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from bench import context_size, end_to_end, interpreter_speed, round_trips, smoke_workload
from bench.deployments import LATENCY_LABEL, SLOW_LATENCY_LABEL
from bench.labels import CLIENT, Labelled, loop_of_current_thread
from bench.report import render
from bench.sizes import QUICK
from bench.suite import Results, run
from bench.worker_pool import PROCESSES, THREADS
from harel.executions.commits import STATE_WARN_BYTES
from harel.smoke import REGIONS
from tests.accounting import UNLABELLED, CommandAccounting
from tests.conftest import REAL_MONGO_URL

pytestmark = pytest.mark.wire

# Bytes a partial update may vary by across the history: the version's decimal digits in the JSON snapshot.
VERSION_DIGITS_SLACK = 16


@pytest.fixture(scope="module")
def results() -> Iterator[Results]:
    yield run(QUICK)


def test_the_hot_path_costs_one_claim_and_one_commit_per_claimed_execution(results: Results) -> None:
    for counted in results.round_trips:
        assert counted.passed, counted.failures
        assert counted.processed == smoke_workload.EVENTS_PER_RUN
        assert 0 < counted.claims <= counted.processed
        assert counted.commands["claim"] == counted.claims
        assert counted.commands["commit"] == counted.claims, "one update per claim, every step in it"
        assert counted.commands["conflict read"] == 0, "one worker: nothing refused"
        assert counted.hot_path <= round_trips.HOT_PATH_TARGET * counted.processed
        assert set(counted.commands) <= {*round_trips.HOT_PATH, *round_trips.REPORTED_ELSEWHERE}


def test_the_relays_move_every_entry_and_the_claims_fire_every_timer_of_the_run(results: Results) -> None:
    spawns, greetings, dones = len(REGIONS), len(REGIONS), len(REGIONS)
    for counted in results.round_trips:
        assert counted.relay_entries == spawns + greetings + dones
        assert counted.timers_fired == smoke_workload.TIMERS_PER_RUN
        # the fork's children in one bulk write; each event one send; the acknowledgements ride on the next
        # commits or go in bulk, fewer than one per delivering commit
        assert counted.commands["relay"] == 1 + greetings + dones + counted.acknowledgements
        assert 1 <= counted.acknowledgements < 1 + greetings + dones
        assert counted.commands["background relay"] >= 0


def test_a_fork_costs_its_regions_claim_commit_and_done_plus_a_fixed_part(results: Results) -> None:
    """Per region the child's claim, commit and done; for the fork the root's two claims and commits (its
    start; its join, every done taken in one claim: the children, created together, are due before it), one
    bulk creation and its bulk acknowledgements."""
    for cost in results.forks:
        assert cost.completed
        regions = cost.regions
        assert cost.commands["claim"] == cost.commands["commit"] == regions + 2, cost.commands
        assert cost.commands["conflict read"] == 0
        acknowledgements = cost.commands["relay"] - 1 - regions
        assert 1 <= acknowledgements <= 3, cost.commands


def test_a_commit_sends_the_same_bytes_however_long_the_history_while_the_baseline_grows(
    results: Results,
) -> None:
    for sent in results.commit_bytes:
        points = sent.checkpoints
        assert [p.events for p in points] == list(QUICK.history_checkpoints)
        assert all(p.same_document for p in points)
        ours = [p.ours for p in points]
        assert max(ours) - min(ours) <= VERSION_DIGITS_SLACK
        baseline = [p.baseline for p in points]
        assert baseline == sorted(baseline) and len(set(baseline)) == len(baseline)
        for point in points:
            assert point.ours < point.document <= point.baseline


def test_claims_select_the_due_executions_only_and_fire_their_timers_where_the_seed_scans_every_one(
    results: Results,
) -> None:
    idle = results.idle_claims
    assert idle.executions == QUICK.idle_executions
    assert idle.ours_selected == idle.timers_fired == QUICK.idle_due, "each due timer fired by a claim"
    assert idle.claims == QUICK.idle_due + 1, "one claim per due execution, then one that found nothing"
    assert idle.seed_returned == QUICK.idle_executions
    if REAL_MONGO_URL:
        assert idle.examined is not None
        assert idle.examined.ours == idle.examined.ours_returned == 1
        assert idle.examined.seed == idle.examined.seed_returned == QUICK.idle_executions
    else:
        assert idle.examined is None


def test_both_interpreters_complete_every_run(results: Results) -> None:
    speed = results.interpreter
    # the parent's start, then per region the child's start, its event, its timer and its done
    steps_per_run = 1 + 4 * len(interpreter_speed.REGIONS)
    assert speed.harel.runs == speed.harel_traced.runs == speed.sismic.runs == QUICK.interpreter_runs
    assert speed.harel.steps == speed.harel_traced.steps == steps_per_run * QUICK.interpreter_runs
    assert speed.sismic.steps >= QUICK.interpreter_runs


def test_end_to_end_processes_every_event_for_each_worker_count_and_backend(results: Results) -> None:
    backends = {flow.backend for flow in results.end_to_end}
    assert {end_to_end.EMBEDDED_LABEL, LATENCY_LABEL, SLOW_LATENCY_LABEL} <= backends
    assert len(backends) == len(results.targets)
    for backend in backends:
        counts = [flow.workers for flow in results.end_to_end if flow.backend == backend]
        assert counts == list(QUICK.end_to_end_workers)
    for flow in results.end_to_end:
        which = f"{flow.backend}, {flow.workers} workers"
        assert flow.failures == [], which
        runs = QUICK.end_to_end_runs
        assert (flow.runs, flow.in_flight) == (runs, QUICK.end_to_end_in_flight), which
        assert flow.events == runs * smoke_workload.EVENTS_PER_RUN
        assert flow.tallies.processed == flow.events, which
        assert len(flow.load_lateness) == runs * smoke_workload.TIMERS_PER_RUN, which
        assert len(flow.paced_lateness) == QUICK.end_to_end_paced_runs * smoke_workload.TIMERS_PER_RUN, which
        assert min(flow.load_lateness + flow.paced_lateness) >= 0, which


def test_end_to_end_runs_wire_workers_as_processes_and_embedded_ones_as_threads(results: Results) -> None:
    setups = {flow.setup for flow in results.end_to_end}
    for setup in setups:
        embedded = setup.url == end_to_end.EMBEDDED_URL
        assert setup.workers_as == (THREADS if embedded else PROCESSES)
        assert setup.counts_commands == (not embedded)
        assert setup.scaling_target == (setup.label == LATENCY_LABEL)
    scaling_rows = [
        row for row in results.rows() if row.bench == 5 and "per processed event with" in row.figure
    ]
    assert len(scaling_rows) == len(setups)
    counts = ", ".join(map(str, QUICK.end_to_end_workers))
    assert all(row.figure.endswith(f"with {counts} workers") for row in scaling_rows)


def test_the_per_event_figures_are_the_workers_tallies_under_load_over_the_events(results: Results) -> None:
    """Every claim that leased an execution was followed by its commit, so a wire flow sent at least two
    commands per claim; one worker loses no CAS to another; no lease runs out in a clean run."""
    for flow in results.end_to_end:
        which = f"{flow.backend}, {flow.workers} workers"
        tallies = flow.tallies
        assert 0 < tallies.claims <= tallies.processed, which
        assert tallies.empty_claims >= 0 and tallies.lease_steals == 0, which
        if flow.workers == 1:
            assert tallies.conflicts == 0, which
        if flow.setup.counts_commands:
            assert tallies.commands >= 2 * tallies.claims, which
        else:
            assert tallies.commands == 0, which
        contended = tallies.empty_claims + tallies.conflicts + tallies.lease_steals
        assert flow.contention == contended / flow.events, which
        assert flow.per_event(tallies.commands) == tallies.commands / flow.events, which


def test_the_scaling_figure_is_how_far_each_count_strays_from_one_workers() -> None:
    assert end_to_end.drift([4.0, 4.4, 3.8, 4.8]) == pytest.approx(0.2)
    assert end_to_end.drift([0.0, 0.0]) == 0.0
    assert end_to_end.drift([0.0, 0.5]) is None


def test_an_event_reads_and_writes_the_whole_state_at_every_context_size(results: Results) -> None:
    # the state's JSON around the context, the mailbox entry read and the commit's own fields: a few KB
    overhead = 4 * 1024
    assert [m.target for m in results.context_size] == [s.target for s in results.commit_bytes], (
        "as benchmark 2"
    )
    for measured in results.context_size:
        sizes = [cost.context_bytes for cost in measured.costs]
        assert [round(size, -3) for size in sizes] == list(context_size.CONTEXT_BYTES)
        for cost in measured.costs:
            assert cost.events == cost.claims == cost.commits == QUICK.context_events, "one claim, one commit"
            assert cost.context_bytes < cost.state_bytes < cost.context_bytes + overhead
            assert cost.state_bytes < cost.read_per_claim < cost.state_bytes + overhead
            assert cost.state_bytes < cost.written_per_commit < cost.state_bytes + overhead
            assert cost.warned == (cost.events if cost.state_bytes > STATE_WARN_BYTES else 0)
        assert [cost.warned > 0 for cost in measured.costs] == [False, False, True], "the 1 MB context only"


class _Stalled:
    kind = "stalled"

    def processed(self) -> int:
        return 5


def test_a_flow_that_stops_progressing_fails_after_the_stall_time_not_a_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(end_to_end, "STALL_SECONDS", 0.05)
    failures: list[str] = []
    seen: list[int] = []
    end_to_end._wait_for(_Stalled(), 10, failures, seen.append)
    assert failures == ["5 of 10 events; none processed in the last 0.05 s"]
    assert seen == [5]


def test_every_worker_command_on_a_sharded_cluster_reaches_one_shard(results: Results) -> None:
    cost = results.sharded
    assert cost.passed and cost.processed == 14, "the smoke workflow's 14 events"
    assert cost.non_targeted == dict.fromkeys(cost.non_targeted, 0)
    assert cost.scatter_reads == 0
    assert cost.shard_requests == sum(cost.by_command.values()) > 2 * cost.processed, (
        "claims and commits at least"
    )


def test_the_table_names_machine_versions_and_every_benchmark(results: Results) -> None:
    table = render(results.rows(), mode=QUICK.name, targets=results.targets)
    for header in ("- date: ", "- machine: ", "cores", "python ", "pymongo ", "mongomock ", "harel "):
        assert header in table
    rows = table.splitlines()[table.splitlines().index("| # | figure | harel | baseline | note |") + 2 :]
    assert {row.split("|")[1].strip() for row in rows} == {"1", "2", "3", "4", "5", "6", "7"}
    assert len(rows) == len(results.rows())
    assert "n/a (no server)" in table or REAL_MONGO_URL


def test_a_nearest_rank_quantile_picks_a_measured_value() -> None:
    samples = [0.4, 0.1, 0.3, 0.2]
    assert end_to_end.quantile(samples, 0.5) == 0.2
    assert end_to_end.quantile(samples, 0.99) == 0.4
    assert end_to_end.quantile([0.7], 0.99) == 0.7


def test_commands_map_to_the_phase_of_the_call_that_sent_them() -> None:
    assert round_trips.category("consume:claim", "executions", "findAndModify") == "claim"
    assert round_trips.category("consume:commit_claim", "executions", "update") == "commit"
    assert round_trips.category("consume:commit_claim", "executions", "find") == "conflict read"
    assert round_trips.category("consume:send", "executions", "update") == "relay"
    assert round_trips.category("consume:create_children", "executions", "update") == "relay"
    assert round_trips.category("relay:send", "executions", "update") == "background relay"
    assert round_trips.category("relay:ack_delivered", "executions", "update") == "relay"
    assert round_trips.category("leaving:ack_delivered", "executions", "update") == "relay"
    assert round_trips.category("consume:plan_next_wake", "executions", "find") == "idle"
    assert round_trips.category(UNLABELLED, "executions", "aggregate") == "other"
    assert round_trips.category(f"{CLIENT}:load", "executions", "find") is None


class _Queue:
    def claim(self) -> None:
        return None

    def send(self, target: str) -> str:
        return f"sent to {target}"


def test_labelled_calls_return_what_the_target_returns_and_count_calls_and_none_results() -> None:
    labelled = Labelled(_Queue(), CommandAccounting())
    assert labelled.send("x") == "sent to x"
    assert labelled.claim() is None
    assert labelled.claim() is None
    assert labelled.returned_none["claim"] == 2
    assert labelled.returned_none["send"] == 0
    assert labelled.calls == {"send": 1, "claim": 2}


@pytest.mark.parametrize(
    ("thread_name", "loop"),
    [
        ("harel-consumer-0", "consume"),
        ("harel-consumer-3", "consume"),
        ("harel-relay", "relay"),
        ("harel-lease", "lease"),
        ("harel-heartbeat", "heartbeat"),
        ("MainThread", CLIENT),
    ],
)
def test_the_loop_is_read_from_the_worker_thread_name(thread_name: str, loop: str) -> None:
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(loop_of_current_thread()), name=thread_name)
    thread.start()
    thread.join()
    assert seen == [loop]
