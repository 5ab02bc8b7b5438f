"""The `harel` commands that wait, watch, follow and operate, as processes over sockets against the fake replica
set: `start --wait` (the exit code says how the execution ended), `send --wait` (handled, ignored,
dead-lettered), `status --watch` and `trace --follow` on a pipe and on a terminal and with `--timeout`, the
mailbox in `harel status`, `harel dead list | retry | drop`, and the diagrams (`harel chart show`, `harel status
--diagram`).

The worker runs in the test process (a real Worker over real PyMongo clients) with two attempts per event,
so an event is dead-lettered in about a second; its `flaky` action raises while the test says so.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, App
from harel.backend import Backend
from harel.catalog import MongoCatalog
from harel.chart import load_chart
from harel.connection import connect
from harel.diagram import render_dot, render_mermaid
from harel.errors import PermanentError
from harel.heartbeat import MongoHeartbeats
from harel.logs import JsonFormatter
from harel.metrics import Metrics
from harel.serve import start_worker
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.fake_mongod.fixtures import FakeDeployment
from tests.unreadable import deep, outbox_entry_without_event, status_a_number, timers_not_a_map
from tests.wire.processes import HAREL, clean_environment, run_harel, wait_until
from tests.wire.test_cli_over_wire import on_a_terminal

pytestmark = pytest.mark.wire

TICKET = {
    "id": "ticket",
    "version": 1,
    "initial": "open",
    "states": {
        "open": {
            "on": {
                "assign": "working",
                "poke": {"actions": ["flaky"]},
                "misuse": {"actions": ["misused"]},
                "refuse": {"actions": ["refused"]},
            }
        },
        "working": {"on": {"resolve": "closed"}},
        "closed": {"final": True},
    },
}
QUICK = {
    "id": "quick",
    "version": 1,
    "initial": "waiting",
    "states": {"waiting": {"after": {"300ms": "done"}}, "done": {"final": True}},
}
FORK = {
    "id": "fork",
    "version": 1,
    "initial": "both",
    "states": {
        "both": {
            "parallel": {
                "left": {
                    "initial": "waiting",
                    "states": {"waiting": {"on": {"ship": "shipped"}}, "shipped": {"final": True}},
                },
                "right": {
                    "initial": "idle",
                    "states": {"idle": {"on": {"stop": "halted"}}, "halted": {"final": True}},
                },
            },
            "on_done": "over",
        },
        "over": {"final": True},
    },
}
ORPHAN = "id: orphan\nversion: 1\ninitial: a\nstates:\n  a: {on: {go: b}}\n  b: {final: true}\n"
MAX_ATTEMPTS = 2
FAILURE = "RuntimeError: the card service is down"


class CardRejected(PermanentError):
    """What the app knows no retry can change."""


@dataclass
class Running:
    url: str
    failing: threading.Event
    worker: Worker


@pytest.fixture
def running(fake_rs: FakeDeployment) -> Iterator[Running]:
    failing = threading.Event()
    app = App("waits")
    app.chart(TICKET)
    app.chart(QUICK)
    app.chart(FORK)

    @app.action("flaky")
    def flaky(ctx: ActionContext) -> ActionResult:
        if failing.is_set():
            raise RuntimeError("the card service is down")
        return ActionResult(context={"poked": ctx.context.get("poked", 0) + 1})

    @app.action("misused")
    def misused(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"total": ctx.context.get("total", "12") + 1})  # a bug: str + int

    @app.action("refused")
    def refused(ctx: ActionContext) -> ActionResult:
        raise CardRejected("card 4242 is blocked")

    client = connect(fake_rs.url, deadline=15)
    transport = MongoTransport(client, max_attempts=MAX_ATTEMPTS, watch=False)
    backend = Backend(
        fake_rs.url, MongoStore(client), transport, MongoHeartbeats(client), MongoCatalog(client), client
    )
    backend.store.ensure_indexes()
    transport.ensure_indexes()
    worker = start_worker(backend, app, WorkerConfig(concurrency=2, heartbeat_seconds=0.5), Metrics())
    yield Running(fake_rs.url, failing, worker)
    worker.stop(drain_seconds=2)
    backend.close()


def harel(running: Running, *arguments: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_harel(*arguments, "--url", running.url, "--deadline", "20", timeout=timeout)


def follow(running: Running, *arguments: str) -> subprocess.Popen[str]:
    """A command that runs until the execution finishes, its output on a pipe (not a terminal)."""
    return subprocess.Popen(
        [HAREL, *arguments, "--url", running.url, "--deadline", "20"],
        env=clean_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    assert "Traceback" not in out + err, err
    return process.returncode, out, err


def started(running: Running, execution_id: str, chart: str = "ticket") -> None:
    result = harel(running, "start", chart, "--id", execution_id)
    assert result.returncode == 0, result.stderr


def document(running: Running, execution_id: str) -> dict[str, Any]:
    result = harel(running, "status", execution_id, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --- start --wait ------------------------------------------------------------------------------------------


def test_start_wait_returns_when_it_finishes(running: Running) -> None:
    result = harel(running, "start", "quick", "--id", "q-1", "--wait")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "q-1 started (quick v1)\nq-1 completed in done (quick v1)\n"

    result = harel(running, "start", "quick", "--id", "q-2", "--wait", "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout) == {
        "id": "q-2",
        "created": True,
        "definition_id": "quick",
        "definition_version": 1,
        "status": "completed",
        "configuration": ["done"],
    }


def test_start_wait_exits_1_when_it_is_cancelled(running: Running) -> None:
    waiting = follow(running, "start", "ticket", "--id", "t-c", "--wait")
    wait_until(lambda: harel(running, "status", "t-c").returncode == 0, 30, "t-c to exist")
    assert harel(running, "cancel", "t-c").returncode == 0

    code, out, _ = finish(waiting)

    assert code == 1
    assert out.splitlines()[-1] == "t-c cancelled in - (ticket v1)"


def test_start_wait_gives_up_after_its_timeout(running: Running) -> None:
    result = harel(running, "start", "ticket", "--id", "t-t", "--wait", "--timeout", "0.5")

    assert result.returncode == 6
    assert result.stderr.strip() == (
        "harel start: execution 't-t' is still running after 0.5s; it goes on without this wait"
    )
    assert document(running, "t-t")["status"] == "running", "the execution goes on"


# --- send --wait -------------------------------------------------------------------------------------------


def test_send_wait_says_whether_the_event_was_handled_or_ignored(running: Running) -> None:
    started(running, "t-s")

    handled = harel(running, "send", "t-s", "assign", "--wait")
    ignored = harel(running, "send", "t-s", "assign", "--wait", "--json")

    assert handled.returncode == 0, handled.stderr
    assert handled.stdout.splitlines()[-1] == "assign handled by t-s: open → working"
    assert ignored.returncode == 1, "an event nothing took is not a success"
    outcome = json.loads(ignored.stdout)
    assert outcome["outcome"] == "ignored"
    assert outcome["step"]["reason"] == "no active state handles 'assign'"


def test_send_wait_says_when_the_event_went_on_to_a_region(running: Running) -> None:
    started(running, "f-1", chart="fork")
    wait_until(lambda: len(document(running, "f-1")["children"]) == 2, 30, "the regions to start")
    [left] = [child for child in document(running, "f-1")["children"] if "/both.left@" in child]

    forwarded = harel(running, "send", "f-1", "ship", "--wait")
    outcome = json.loads(harel(running, "send", "f-1", "stop", "--wait", "--json").stdout)

    assert forwarded.returncode == 0, forwarded.stderr
    assert forwarded.stdout.splitlines()[-1] == f"ship forwarded by f-1 to its regions {left}"
    assert outcome["outcome"] == "forwarded" and len(outcome["forwarded_to"]) == 1
    trace = harel(running, "trace", "f-1").stdout
    assert "forwarded to 1 region" in trace


def test_send_wait_reports_failed_attempts_then_the_dead_letter(running: Running) -> None:
    started(running, "t-d")
    running.failing.set()

    result = harel(running, "send", "t-d", "poke", "--wait")

    assert result.returncode == 1
    assert f"attempt 1 at poke failed: {FAILURE}; it is retried" in result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"poke dead-lettered at t-d after {MAX_ATTEMPTS} attempts: {FAILURE}; "
        "`harel dead retry t-d` or `harel dead drop t-d`"
    )


def test_send_wait_says_when_no_live_worker_serves_the_chart(running: Running, tmp_path: Path) -> None:
    (tmp_path / "orphan.yaml").write_text(ORPHAN)
    assert harel(running, "start", "orphan", "--charts", str(tmp_path), "--id", "o-1").returncode == 0

    result = harel(running, "send", "o-1", "go", "--charts", str(tmp_path), "--wait", "--timeout", "1.5")

    assert result.returncode == 6
    notes = result.stderr.splitlines()
    assert (
        "no live worker serves orphan v1, so the events wait (live workers serve fork v1, quick v1, ticket v1)"
        in notes
    )
    assert notes[-1].startswith("harel send: go (") and notes[-1].endswith(
        ") is not applied yet at o-1 after 1.5s; it goes on without this wait"
    )
    status = harel(running, "status", "o-1")
    assert "mailbox    2 waiting: harel.start, go" in status.stdout
    assert "no live worker serves orphan v1, so the events wait" in status.stdout


# --- the mailbox and dead letters --------------------------------------------------------------------------


def park(running: Running, execution_id: str) -> None:
    """`poke` dead-lettered at the execution, and `assign` waiting behind it."""
    started(running, execution_id)
    running.failing.set()
    assert harel(running, "send", execution_id, "poke").returncode == 0
    assert harel(running, "send", execution_id, "assign").returncode == 0
    wait_until(
        lambda: document(running, execution_id)["mailbox"]["dead_letter"] is not None, 30, "the dead letter"
    )


def test_status_shows_the_dead_letter_and_what_waits_behind_it(running: Running) -> None:
    park(running, "t-p")

    shown = [" ".join(line.split()) for line in harel(running, "status", "t-p").stdout.splitlines()]
    mailbox = document(running, "t-p")["mailbox"]

    assert "mailbox 2 waiting: poke, assign" in shown
    [dead] = [line for line in shown if line.startswith("dead letter poke (")]
    assert dead.endswith(f") after {MAX_ATTEMPTS} attempts: {FAILURE}")
    assert "the events behind it wait: `harel dead retry t-p` or `harel dead drop t-p`" in shown
    assert [e["event"] for e in mailbox["pending"]] == ["poke", "assign"]
    assert (mailbox["dead_letter"]["event"], mailbox["dead_letter"]["attempts"]) == ("poke", MAX_ATTEMPTS)
    assert mailbox["served"] is True, "a live worker serves ticket v1: it is the operator who is awaited"


def test_dead_list_retry_and_drop(running: Running) -> None:
    park(running, "t-r")
    park(running, "t-x")

    listed = harel(running, "dead", "list")
    as_json = json.loads(harel(running, "dead", "list", "--json").stdout)

    assert listed.returncode == 0
    header, _, *rows = listed.stdout.splitlines()
    assert header.split() == [
        "execution",
        "chart",
        "event",
        "attempts",
        "parked",
        "waiting",
        "error",
        "raised",
        "at",
    ]
    assert [row.split()[:3] for row in rows] == [["t-r", "ticket", "v1"], ["t-x", "ticket", "v1"]]
    assert [(d["execution_id"], d["event"], d["attempts"], d["waiting"]) for d in as_json] == [
        ("t-r", "poke", MAX_ATTEMPTS, 1),
        ("t-x", "poke", MAX_ATTEMPTS, 1),
    ]

    running.failing.clear()
    retried = harel(running, "dead", "retry", "t-r")
    assert retried.returncode == 0, retried.stderr
    assert "is attempted again now, its attempts reset; 1 event(s) wait behind it" in retried.stdout
    wait_until(lambda: document(running, "t-r")["configuration"] == ["working"], 30, "t-r to go on")
    assert document(running, "t-r")["context"] == {"poked": 1}, "the retried event took effect, then assign"

    running.failing.set()  # the drop must not depend on the action working again
    dropped = harel(running, "dead", "drop", "t-x", "--json")
    assert dropped.returncode == 0, dropped.stderr
    assert json.loads(dropped.stdout)["outcome"] == "dropped"
    wait_until(lambda: document(running, "t-x")["configuration"] == ["working"], 30, "t-x to go on")
    assert document(running, "t-x")["context"] == {}, "the dropped event never took effect"
    assert json.loads(harel(running, "dead", "list", "--json").stdout) == []
    assert harel(running, "dead", "list").stderr.strip() == "no dead letters: nothing waits for an operator"


def test_an_unreadable_execution_is_parked_shown_listed_and_retried_once_repaired(running: Running) -> None:
    """Documents stored past the SDK's checks (the context 199 levels deep, `status` a number) are parked by
    the worker's first claim with what could not be read; `harel status` (and `--json`) show them from what can
    be read, `harel dead list` lists them, and `harel dead retry` refuses by name while the document is still
    unreadable, then retries it once repaired."""
    client = connect(running.url, deadline=15)
    executions = client["harel"]["executions"]
    try:
        executions.insert_one(deep("t-u", "ticket"))
        executions.insert_one(status_a_number("t-n", "ticket"))
        wait_until(
            lambda: len(json.loads(harel(running, "dead", "list", "--json").stdout)) == 2, 30, "both parked"
        )
        deep_reason = "data: Invalid JSON: recursion limit exceeded"

        shown = harel(running, "status", "t-u")
        as_json = document(running, "t-u")
        listed = harel(running, "dead", "list")
        refused = harel(running, "dead", "retry", "t-u")

        assert shown.returncode == 0 and "Traceback" not in shown.stdout + shown.stderr, shown.stderr
        lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
        assert lines[:3] == [
            "execution t-u",
            "chart ticket v1",
            "status unreadable (stored as running, version 0)",
        ]
        assert any(line.startswith(f"reason {deep_reason}") for line in lines), lines
        assert any(line.startswith("dead letter poke (t-u:poke): UnreadableExecution: ") for line in lines)
        assert as_json["unreadable"].startswith(deep_reason)
        assert (as_json["id"], as_json["status"], as_json["chart"]) == ("t-u", "running", "ticket@1")
        assert as_json["dead_letter"]["error"] == as_json["last_error"]
        assert as_json["last_error"].startswith(
            f"UnreadableExecution: execution 't-u' cannot be read: {deep_reason}"
        )
        assert document(running, "t-n")["unreadable"].startswith("data.status: Input should be")
        rows = listed.stdout.splitlines()[2:]
        assert sorted(row.split()[:5] for row in rows) == [
            ["t-n", "ticket", "v1", "poke", "(t-n:poke)"],
            ["t-u", "ticket", "v1", "poke", "(t-u:poke)"],
        ]
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"harel dead: execution 't-u' cannot be read: {deep_reason}")
        assert "Traceback" not in refused.stderr
        assert running.worker.counters["dead_lettered"] == 2, "each parked once, by the first claim"

        readable = json.loads(executions.find_one({"_id": "t-u"})["data"])
        executions.update_one({"_id": "t-u"}, {"$set": {"data": json.dumps({**readable, "context": {}})}})
        retried = harel(running, "dead", "retry", "t-u")
        assert retried.returncode == 0, retried.stderr
        wait_until(
            lambda: document(running, "t-u").get("context") == {"poked": 1}, 30, "the repaired t-u to go on"
        )
    finally:
        client.close()


def test_relay_work_or_timers_that_cannot_be_read_are_parked_listed_and_retried_once_repaired(
    running: Running,
) -> None:
    """An outbox entry without its event and timers that are not a map are parked by the relay and the sweep
    that met them, each once; `harel status` shows the dead letter, `harel dead list` lists them, and `harel
    dead retry` refuses by name while what the relay reads is still unreadable, then retries it once
    repaired."""
    client = connect(running.url, deadline=15)
    executions = client["harel"]["executions"]
    try:
        executions.insert_one(outbox_entry_without_event("t-o", "ticket"))
        executions.insert_one(timers_not_a_map("t-t", "ticket"))
        wait_until(
            lambda: len(json.loads(harel(running, "dead", "list", "--json").stdout)) == 2, 30, "both parked"
        )

        shown = harel(running, "status", "t-o")
        listed = harel(running, "dead", "list")
        refused = harel(running, "dead", "retry", "t-o")

        assert shown.returncode == 0, shown.stderr
        lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
        reason = "UnreadableExecution: execution 't-o' cannot be read: outbox: KeyError: 'event'"
        assert any(line.startswith(f"dead letter - (-): {reason}") for line in lines), lines
        rows = listed.stdout.splitlines()[2:]
        assert sorted(row.split()[:5] for row in rows) == [
            ["t-o", "ticket", "v1", "-", "(-)"],
            ["t-t", "ticket", "v1", "-", "(-)"],
        ]
        assert refused.returncode == 1
        assert refused.stderr.startswith("harel dead: execution 't-o' cannot be read: outbox: KeyError")
        assert running.worker.counters["dead_lettered"] == 2, "each parked once"

        executions.update_one({"_id": "t-o"}, {"$set": {"outbox": []}})
        assert harel(running, "dead", "retry", "t-o").returncode == 0
        wait_until(
            lambda: executions.find_one({"_id": "t-o"})["relay_at"] is None,
            30,
            "the repaired relay work done",
        )
        assert [d["execution_id"] for d in json.loads(harel(running, "dead", "list", "--json").stdout)] == [
            "t-t"
        ]
    finally:
        client.close()


# --- status --watch and trace --follow ---------------------------------------------------------------------


def test_status_watch_on_a_pipe_prints_each_change_until_it_finishes(running: Running) -> None:
    started(running, "t-w")
    wait_until(lambda: document(running, "t-w")["configuration"] == ["open"], 30, "t-w to start")
    watching = follow(running, "status", "t-w", "--watch")
    time.sleep(1.0)
    assert harel(running, "send", "t-w", "assign", "--wait").returncode == 0
    time.sleep(1.0)
    assert harel(running, "send", "t-w", "resolve").returncode == 0

    code, out, _ = finish(watching)

    assert code == 0
    views = out.split("\n\n")
    actives = [line.split()[1] for view in views for line in view.splitlines() if line.startswith("active")]
    assert actives[0] == "open" and actives[-1] == "closed" and "working" in actives
    assert len(views) == len(set(views)), "a view is printed again only when something changed"
    assert "status     completed" in views[-1]


def test_status_watch_with_json_prints_one_line_per_change(running: Running) -> None:
    watching = follow(running, "start", "quick", "--id", "q-w")
    watching.wait(timeout=60)
    code, out, _ = finish(follow(running, "status", "q-w", "--watch", "--json"))

    assert code == 0
    documents = [json.loads(line) for line in out.splitlines()]
    assert documents[-1]["status"] == "completed" and documents[-1]["mailbox"]["pending"] == []


def test_trace_follow_prints_each_step_as_it_is_recorded(running: Running) -> None:
    started(running, "t-f")
    following = follow(running, "trace", "t-f", "--follow")
    time.sleep(1.0)
    for event in ("assign", "resolve"):
        assert harel(running, "send", "t-f", event, "--wait").returncode == 0

    code, out, _ = finish(following)

    assert code == 0
    header, rule, *rows = out.splitlines()
    assert header.split() == ["#", "at", "event", "from", "to", "note"] and set(rule) == {"-", " "}
    assert [row.split()[2:5] for row in rows] == [
        ["harel.start", "-", "open"],
        ["assign", "open", "working"],
        ["resolve", "working", "closed"],
    ]
    lines = harel(running, "trace", "t-f", "--follow", "--json").stdout.splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["harel.start", "assign", "resolve"]


def test_trace_follow_exits_1_when_the_execution_is_cancelled(running: Running) -> None:
    started(running, "t-k")
    following = follow(running, "trace", "t-k", "--follow")
    time.sleep(0.5)
    assert harel(running, "cancel", "t-k").returncode == 0

    code, out, _ = finish(following)

    assert code == 1
    assert out.splitlines()[-1].split()[2:4] == ["harel.cancel", "open"]


def test_status_watch_gives_up_after_its_timeout(running: Running) -> None:
    started(running, "t-wt")

    result = harel(running, "status", "t-wt", "--watch", "--timeout", "1")

    assert result.returncode == 6
    assert "active     open" in result.stdout, "it showed the execution until it gave up"
    assert result.stderr.strip() == (
        "harel status: execution 't-wt' is still running after 1s; it goes on without this wait"
    )
    assert document(running, "t-wt")["status"] == "running", "the execution goes on"


def test_trace_follow_gives_up_after_its_timeout(running: Running) -> None:
    started(running, "t-ft")

    result = harel(running, "trace", "t-ft", "--follow", "--timeout", "1", "--json")

    assert result.returncode == 6
    assert [json.loads(line)["event"] for line in result.stdout.splitlines()] == ["harel.start"]
    assert json.loads(result.stderr) == {
        "error": "WaitTimedOut",
        "message": "execution 't-ft' is still running after 1s; it goes on without this wait",
        "exit_code": 6,
    }
    assert harel(running, "send", "t-ft", "assign", "--wait").returncode == 0, "the execution goes on"


def test_status_watch_on_a_terminal_redraws_in_place(running: Running) -> None:
    started(running, "t-l")

    def move_on() -> None:
        time.sleep(2.0)
        for event in ("assign", "resolve"):
            harel(running, "send", "t-l", event, "--wait")

    mover = threading.Thread(target=move_on)
    mover.start()
    seen = on_a_terminal("status", "t-l", "--watch", "--url", running.url, environment={"NO_COLOR": "1"})
    mover.join()

    assert "\x1b[2K" in seen or "\x1b[1A" in seen, "the view is redrawn over itself, not printed again"
    assert "completed" in seen.rsplit("execution", 1)[-1], "the last drawing shows how it ended"


# --- diagrams ------------------------------------------------------------------------------------------


def test_chart_show_draws_from_the_catalog_or_a_folder(running: Running, tmp_path: Path) -> None:
    from_catalog = harel(running, "chart", "show", "ticket")
    (tmp_path / "ticket.json").write_text(json.dumps(TICKET))
    offline = run_harel("chart", "show", "ticket", "--charts", str(tmp_path), "--format", "dot")

    assert from_catalog.returncode == 0, from_catalog.stderr
    assert from_catalog.stdout == render_mermaid(load_chart(TICKET))
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout == render_dot(load_chart(TICKET)), "no deployment needed for a chart in a folder"


def test_status_diagram_marks_the_active_states(running: Running) -> None:
    started(running, "t-g")
    assert harel(running, "send", "t-g", "assign", "--wait").returncode == 0

    drawn = harel(running, "status", "t-g", "--diagram")
    as_json = json.loads(harel(running, "status", "t-g", "--diagram", "dot", "--json").stdout)

    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout == render_mermaid(load_chart(TICKET), active={"working"})
    assert (as_json["chart"], as_json["format"], as_json["active"]) == ("ticket", "dot", ["working"])
    assert as_json["diagram"] == render_dot(load_chart(TICKET), active={"working"})


# --- failures with their traceback ------------------------------------------------------------------------


@pytest.mark.semantics("sem-actions-errors")
def test_a_failing_action_shows_its_traceback_in_the_log_and_in_status(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    raising = next(
        n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "raise RuntimeError" in line
    )
    caplog.set_level("WARNING", logger="harel.worker")
    park(running, "t-tb")

    logged = [r for r in caplog.records if r.getMessage() == "attempt failed, will retry"]
    assert logged and logged[0].exc_info is not None, "the attempt's exception is logged with it"
    line = json.loads(JsonFormatter().format(logged[0]))
    assert f'test_cli_waits.py", line {raising}, in flaky' in line["exc"], "JSON lines carry the traceback"
    dead = document(running, "t-tb")["mailbox"]["dead_letter"]
    assert dead["error"] == FAILURE
    assert f'test_cli_waits.py", line {raising}, in flaky' in dead["traceback"]
    assert dead["traceback"].rstrip().endswith(FAILURE)
    shown = [" ".join(line.split()) for line in harel(running, "status", "t-tb").stdout.splitlines()]
    assert any(
        s.startswith("raised at ") and s.endswith(f"test_cli_waits.py:{raising} in flaky") for s in shown
    )
    listed = json.loads(harel(running, "dead", "list", "--json").stdout)
    [letter] = [entry for entry in listed if entry["execution_id"] == "t-tb"]
    assert letter["raised_at"].endswith(f"test_cli_waits.py:{raising} in flaky")


@pytest.mark.semantics("sem-actions-errors")
@pytest.mark.parametrize(
    ("event", "error"),
    [
        ("misuse", "TypeError: "),
        ("refuse", "CardRejected: card 4242 is blocked"),
    ],
)
def test_a_failure_no_retry_can_change_parks_at_once(running: Running, event: str, error: str) -> None:
    started(running, f"t-{event}")
    assert harel(running, "send", f"t-{event}", event).returncode == 0
    wait_until(
        lambda: document(running, f"t-{event}")["mailbox"]["dead_letter"] is not None, 30, "the dead letter"
    )
    dead = document(running, f"t-{event}")["mailbox"]["dead_letter"]
    assert dead["attempts"] == 1, "parked at its first attempt, not retried"
    assert dead["error"].startswith(error)
