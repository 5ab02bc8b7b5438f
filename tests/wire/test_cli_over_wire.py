"""The execution commands of `harel` as processes over sockets: start (idempotent), send, status, list,
trace, cancel — with their exit codes — against the fake replica set and a `harel worker` process; and a
parent stranded at its fork, as `list --status failed` and `status` show it."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from harel.cli.views import UNDELIVERED_SHOWN
from harel.ids import child_id
from harel.inspection import UNDELIVERED_AFTER_SECONDS
from harel.model import Execution
from harel.store.mongo import MongoStore
from tests.fake_mongod.fixtures import FakeDeployment
from tests.wire.processes import HAREL, WorkerProcesses, clean_environment, run_harel, wait_until
from tests.wire.shutdown_app import PINGS

pytestmark = pytest.mark.wire

CHART = """
id: ticket
version: 1
initial: open
states:
  open:
    on:
      assign: working
  working:
    after: {1h: escalated}
    on:
      resolve: closed
  escalated: {}
  closed: {final: true}
"""


@pytest.fixture
def charts(tmp_path: Path) -> Path:
    (tmp_path / "ticket.yaml").write_text(CHART)
    return tmp_path


def harel(url: str, *arguments: str) -> tuple[int, str, str]:
    result = run_harel(*arguments, "--url", url, "--deadline", "20")
    return result.returncode, result.stdout, result.stderr


def wait_for(url: str, execution_id: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        _, out, _ = harel(url, "status", execution_id)
        if text in out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def test_execution_commands_end_to_end(
    fake_rs: FakeDeployment, charts: Path, worker_processes: WorkerProcesses
) -> None:
    url = fake_rs.url
    code, out, _ = harel(
        url, "start", "ticket", "--charts", str(charts), "--id", "t-1", "--context", '{"who": "ann"}'
    )
    assert code == 0 and out == "t-1 started (ticket v1)\n"
    code, out, _ = harel(
        url, "start", "ticket", "--charts", str(charts), "--id", "t-1", "--context", '{"who": "ann"}'
    )
    assert code == 0 and out.startswith("t-1 already exists"), "an id is an idempotency key"
    code, _, err = harel(url, "start", "ticket", "--charts", str(charts), "--id", "t-1")
    assert code == 2 and "already exists, started on chart 'ticket' with another request" in err

    worker_processes.harel_worker(url, "--charts", str(charts), "--drain-seconds", "2")
    assert "active     open" in wait_for(url, "t-1", "active     open")

    # no --charts: the chart comes from the catalog the worker published to
    code, out, err = harel(url, "send", "t-1", "assign", "--data", '{"to": "bob"}')
    assert code == 0 and out.startswith("queued assign"), err
    status = wait_for(url, "t-1", "active     working")
    assert "active     working" in status
    assert "timers     working  fires in" in status, "the durable timer is shown with its time to fire"

    code, out, _ = harel(url, "list", "--definition", "ticket", "--json")
    assert code == 0 and [item["id"] for item in json.loads(out)["items"]] == ["t-1"]

    code, out, _ = harel(url, "trace", "t-1")
    assert code == 0 and "harel.start" in out and "assign" in out

    code, out, _ = harel(url, "cancel", "t-1")
    assert code == 0
    assert "status     cancelled" in wait_for(url, "t-1", "status     cancelled")
    code, out, _ = harel(url, "status", "t-1", "--document")
    document = json.loads(out)
    assert document["_id"] == "t-1" and document["timers"] == {}, "cancel disarmed the timer"


def test_a_large_context_comes_from_a_file_or_standard_input(
    fake_rs: FakeDeployment, charts: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    context = {"lines": [f"line {n:06d} " + "x" * 90 for n in range(2000)]}
    text = json.dumps(context)
    assert len(text) > 200_000, "more than one command-line argument may carry"
    context_file = tmp_path_factory.mktemp("context") / "context.json"
    context_file.write_text(text)

    from_file = run_harel(
        "start",
        "ticket",
        "--charts",
        str(charts),
        "--id",
        "t-file",
        "--context",
        f"@{context_file}",
        "--url",
        fake_rs.url,
    )
    from_stdin = run_harel(
        "start",
        "ticket",
        "--charts",
        str(charts),
        "--id",
        "t-stdin",
        "--context",
        "-",
        "--url",
        fake_rs.url,
        stdin=text,
    )

    assert from_file.returncode == 0, from_file.stderr
    assert from_stdin.returncode == 0, from_stdin.stderr
    for execution_id in ("t-file", "t-stdin"):
        code, out, _ = harel(fake_rs.url, "status", execution_id, "--json")
        assert code == 0 and json.loads(out)["context"] == context


def test_start_send_and_cancel_print_json(fake_rs: FakeDeployment, charts: Path) -> None:
    url = fake_rs.url

    code, out, _ = harel(url, "start", "ticket", "--charts", str(charts), "--id", "t-j", "--json")
    assert code == 0
    assert json.loads(out) == {
        "id": "t-j",
        "created": True,
        "definition_id": "ticket",
        "definition_version": 1,
        "status": "running",
    }
    code, out, _ = harel(url, "send", "t-j", "assign", "--charts", str(charts), "--event-id", "e-1", "--json")
    assert code == 0
    sent = json.loads(out)
    assert (sent["execution_id"], sent["event"]["id"], sent["event"]["name"], sent["outcome"]) == (
        "t-j",
        "e-1",
        "assign",
        "queued",
    )
    code, out, _ = harel(url, "cancel", "t-j", "--json")
    assert code == 0
    assert json.loads(out) == {"execution_id": "t-j", "event_id": "t-j:cancel", "outcome": "queued"}


def test_list_prints_a_header_and_keeps_the_filters_in_its_hint(
    fake_rs: FakeDeployment, charts: Path
) -> None:
    url = fake_rs.url
    for n in range(3):
        assert harel(url, "start", "ticket", "--charts", str(charts), "--id", f"t-{n}")[0] == 0

    code, out, err = harel(
        url, "list", "--status", "running", "--roots", "--definition", "ticket", "--limit", "2"
    )

    assert code == 0
    header, rule, *rows = out.splitlines()
    assert header.split() == ["id", "status", "chart", "active", "updated"]
    assert set(rule) == {"-", " "}
    assert [row.split()[:3] for row in rows] == [
        ["t-2", "running", "ticket"],
        ["t-1", "running", "ticket"],
    ], "newest first"
    hint = err.strip()
    assert hint.startswith(
        "more: harel list --status running --definition ticket --roots --limit 2 --cursor "
    )
    code, out, err = harel(url, *hint.removeprefix("more: harel ").split())
    assert code == 0 and [row.split()[0] for row in out.splitlines()[2:]] == ["t-0"] and err == ""


def test_the_url_can_come_from_a_file(fake_rs: FakeDeployment, charts: Path) -> None:
    secret = charts / "mongodb-url"
    secret.write_text(fake_rs.url + "\n")  # as a mounted secret often ends
    run_harel("start", "ticket", "--charts", str(charts), "--id", "t-f", "--url", fake_rs.url)

    result = run_harel("status", "t-f", environment={"HAREL_MONGO_URL_FILE": str(secret)})

    assert result.returncode == 0, result.stderr
    assert "execution  t-f" in result.stdout


COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-8]|9[0-7])[;m]")


def on_a_terminal(*arguments: str, environment: dict[str, str]) -> str:
    """`harel ARGUMENTS` with a pseudo-terminal as its stdout and stderr: what a person sees."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [HAREL, *arguments],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env={**clean_environment(), "TERM": "xterm-256color", **environment},
    )
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process has gone
            break
        if not chunk:
            break
        seen += chunk
    os.close(controller)
    assert process.wait(timeout=30) == 0, seen
    return seen.decode()


def test_colour_on_a_terminal_unless_no_color(fake_rs: FakeDeployment, charts: Path) -> None:
    assert harel(fake_rs.url, "start", "ticket", "--charts", str(charts), "--id", "t-c")[0] == 0
    command = ("list", "--url", fake_rs.url)

    coloured = on_a_terminal(*command, environment={})
    plain = on_a_terminal(*command, environment={"NO_COLOR": "1"})
    piped = run_harel(*command)

    cyan = "\x1b[36m"
    assert f"{cyan}running" in coloured, "a running execution's status is cyan on a terminal"
    assert COLOUR.search(plain) is None and "running" in plain, "NO_COLOR: bold and dim only"
    assert "\x1b[" not in piped.stdout and "t-c  running" in piped.stdout, "plain text into a pipe"


def test_log_level_and_format_come_from_the_environment(fake_rs: FakeDeployment) -> None:
    quiet = run_harel("list", "--url", fake_rs.url, environment={"HAREL_LOG_FORMAT": "text"})
    verbose = run_harel(
        "list", "--url", fake_rs.url, environment={"HAREL_LOG_LEVEL": "debug", "HAREL_LOG_FORMAT": "json"}
    )

    assert (quiet.returncode, quiet.stderr) == (0, "no executions match\n"), "warnings only, by default"
    assert verbose.returncode == 0
    lines = [json.loads(line) for line in verbose.stderr.splitlines() if line.startswith("{")]
    assert lines and {line["level"] for line in lines} >= {"debug"}


SPLIT_CHART = """
id: split
version: 1
initial: idle
states:
  idle:
    on: {go: split}
  split:
    parallel:
      left: {initial: working, states: {working: {on: {finish: finished}}, finished: {final: true}}}
      right: {initial: working, states: {working: {on: {finish: finished}}, finished: {final: true}}}
    on_done: joined
  joined: {final: true}
"""


def test_a_stranded_parent_is_listed_as_failed_and_its_status_names_why(
    fake_rs: FakeDeployment, tmp_path: Path, worker_processes: WorkerProcesses
) -> None:
    """A region whose child id is already taken (written past the clients' id check) can never start: the
    parent fails at the fork, `list --status failed` finds it, and `status` gives the reason."""
    (tmp_path / "split.yaml").write_text(SPLIT_CHART)
    url = fake_rs.url
    assert harel(url, "start", "split", "--charts", str(tmp_path), "--id", "p")[0] == 0
    worker_processes.harel_worker(url, "--charts", str(tmp_path), "--drain-seconds", "2")
    assert "active     idle" in wait_for(url, "p", "active     idle")
    with MongoClient(url) as client:
        store = MongoStore(client, "harel")
        version = store.load("p").version
        squatter = Execution(
            id=child_id("p", "split.left", version), definition_id="split", definition_version=1
        )
        assert store.create(squatter, now=time.time())

    assert harel(url, "send", "p", "go")[0] == 0
    status = wait_for(url, "p", "status     failed")

    assert "status     failed" in status, status
    [reason] = [line for line in status.splitlines() if line.startswith("reason")]
    assert squatter.id in reason and "taken" in reason, reason
    code, out, _ = harel(url, "list", "--status", "failed")
    assert code == 0 and [row.split()[:2] for row in out.splitlines()[2:]] == [["p", "failed"]], out
    code, out, _ = harel(url, "status", "p", "--json")
    assert code == 0 and squatter.id in json.loads(out)["reason"], out


def test_status_names_the_events_a_sender_could_not_deliver_yet(
    fake_rs: FakeDeployment, worker_processes: WorkerProcesses
) -> None:
    """An execution that sent 200 pings to one that does not exist yet: once they waited past the report
    threshold, `harel status` names the first few and counts the rest (`--json` lists all); once the target
    exists the relay delivers them, in order, and status names none."""
    url = fake_rs.url
    worker_processes.harel_worker(url, "--app", "tests.wire.shutdown_app:fanout", "--drain-seconds", "2")
    app = ("--app", "tests.wire.shutdown_app:fanout")
    assert harel(url, "start", "shutdown.fanout", *app, "--id", "fan")[0] == 0
    assert harel(url, "send", "fan", "go", "--data", '{"to": "sink"}', "--wait")[0] == 0
    status = wait_for(url, "fan", "not delivered after", timeout=UNDELIVERED_AFTER_SECONDS + 30)

    sent = [line for line in status.splitlines() if "not delivered after" in line]
    assert len(sent) == UNDELIVERED_SHOWN and "sent       ping (fan@" in sent[0], status
    assert f"and {PINGS - UNDELIVERED_SHOWN} more to sink" in status, status
    code, out, _ = harel(url, "status", "fan", "--json")
    undelivered = json.loads(out)["undelivered"]
    assert code == 0 and len(undelivered) == PINGS and {u["target"] for u in undelivered} == {"sink"}

    assert harel(url, "start", "shutdown.sink", *app, "--id", "sink")[0] == 0

    def seen() -> list[int]:
        return json.loads(harel(url, "status", "sink", "--json")[1])["context"].get("seen", [])

    wait_until(lambda: len(seen()) >= PINGS, 60, "every ping to reach the sink", poll=0.2)
    assert seen() == list(range(PINGS)), "each delivered once, in the order sent"
    assert "not delivered" not in harel(url, "status", "fan")[1]
