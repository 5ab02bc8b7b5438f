"""Every failure a user can cause, as a real `harel` process: one line on stderr naming the problem and the
fix, the documented exit code, and never a traceback.

CASES is the list: what is done wrong, the command, the exit code, and a part of the one line it prints.
Placeholders in a command: {url} the fake replica set, {standalone} a fake standalone server, {closed} a
port nothing listens on, {busy} a port something already listens on, {charts} a folder with the ticket
chart, {huge} a file holding a 16 MiB context, {garbage} a file that is not a data file. Executions `t-open`
(running) and `t-done` (completed) exist on {url}; the folder the command runs in holds the packages
`orders` (a good App) and `broken` (whose import raises), and `held/`, a folder a running `harel dev` holds.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import bson
import pytest
from pymongo import MongoClient

from harel.calls import start_digest
from harel.cli.devstate import DevState
from harel.executions.fields import INBOX_LIMIT_BYTES
from harel.model import Event, Execution, ExecutionStatus
from harel.store.mongo import MongoStore
from harel.transport.base import SendOutcome
from harel.transport.mongo import MongoTransport
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.wire.processes import free_port, run_harel

pytestmark = pytest.mark.wire

TICKET = """
id: ticket
version: 1
initial: open
states:
  open:
    on: {assign: working}
  working:
    on: {resolve: closed}
  closed: {final: true}
"""
ORDERS_APP = """
from harel.app import App

app = App("orders")
app.chart('''{chart}''')
"""
BROKEN_APP = 'raise RuntimeError("the payment key is not set")\n'
HUGE_CONTEXT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    command: tuple[str, ...]
    code: int
    says: str
    environment: dict[str, str] = field(default_factory=dict)
    folder: str = ""  # run in this subfolder of the workspace


FAILED, USAGE, UNREACHABLE, REFUSED, NOT_FOUND = 1, 2, 3, 4, 5
ON = ("--url", "{url}", "--deadline", "20")

CASES = [
    # --- the app and its charts
    Case(
        "app module not found",
        ("worker", "--app", "nosuch.app:app", *ON),
        USAGE,
        "--app: no module named 'nosuch' in ",
    ),
    Case("app spec without a colon", ("worker", "--app", "orders", *ON), USAGE, "is not MODULE:ATTRIBUTE"),
    Case(
        "app attribute missing",
        ("worker", "--app", "orders.app:application", *ON),
        USAGE,
        "orders.app.application is nothing, not a harel.app.App",
    ),
    Case(
        "app module raises on import",
        ("worker", "--app", "broken.app:app", *ON),
        USAGE,
        "importing broken.app raised RuntimeError: the payment key is not set (at ",
    ),
    Case(
        "charts folder missing",
        ("worker", "--charts", "no-such-folder", *ON),
        USAGE,
        "Directory 'no-such-folder' does not exist",
    ),
    Case(
        "malformed chart",
        ("start", "ticket", "--charts", "bad-charts", *ON),
        USAGE,
        "chart 'ticket' is invalid",
    ),
    Case(
        "port in use",
        ("worker", "--charts", "{charts}", "--http-host", "127.0.0.1", "--http-port", "{busy}", *ON),
        USAGE,
        "cannot listen on 127.0.0.1:{busy} for /healthz, /readyz and /metrics (Address already in use); stop "
        "what holds the port or choose another with --http-port",
    ),
    # --- JSON given on the command line
    Case(
        "bad JSON",
        ("start", "ticket", "--charts", "{charts}", "--context", "{bad", *ON),
        USAGE,
        "Invalid value for '--context': not valid JSON (Expecting property name",
    ),
    Case(
        "NaN in a context",
        ("start", "ticket", "--charts", "{charts}", "--context", '{"total": NaN}', *ON),
        USAGE,
        "NaN is not JSON (JSON has no NaN or Infinity: use null, a number or a string)",
    ),
    Case(
        "context not an object",
        ("start", "ticket", "--charts", "{charts}", "--context", "[1, 2]", *ON),
        USAGE,
        "must be a JSON object ({...}), got list",
    ),
    Case(
        "context file missing",
        ("start", "ticket", "--charts", "{charts}", "--context", "@missing.json", *ON),
        USAGE,
        "cannot read missing.json (No such file or directory)",
    ),
    Case(
        "bad JSON in event data",
        ("send", "t-open", "assign", "--charts", "{charts}", "--data", "nope", *ON),
        USAGE,
        "Invalid value for '--data': not valid JSON",
    ),
    Case(
        "oversized context",
        ("start", "ticket", "--charts", "{charts}", "--context", "@{huge}", *ON),
        USAGE,
        "over the 8388608-byte limit; keep large data outside the context and store a reference to it",
    ),
    # --- charts, executions and events that do not exist or cannot take more
    Case(
        "unknown chart",
        ("start", "nothing", "--charts", "{charts}", *ON),
        USAGE,
        "no chart 'nothing' is registered, and no worker published it; give it with --charts DIR or --app",
    ),
    Case(
        "chart not published",
        ("send", "t-open", "assign", *ON),
        USAGE,
        "no worker published it; give it with --charts DIR or --app MODULE:APP",
    ),
    Case(
        "unknown execution",
        ("status", "nobody", *ON),
        NOT_FOUND,
        "no execution with id 'nobody'; `harel list` shows the executions there",
    ),
    Case("event to an unknown execution", ("send", "nobody", "assign", *ON), NOT_FOUND, "'nobody'"),
    Case(
        "unknown event",
        ("send", "t-open", "reopen", "--charts", "{charts}", *ON),
        USAGE,
        "chart 'ticket' has no transition on event 'reopen'; known: assign, resolve",
    ),
    Case(
        "event to a finished execution",
        ("send", "t-done", "assign", "--charts", "{charts}", *ON),
        USAGE,
        "execution 't-done' has finished (completed): it takes no more events",
    ),
    Case(
        "cancel of a finished execution",
        ("cancel", "t-done", *ON),
        USAGE,
        "has finished (completed): it takes no more events; `harel status t-done` shows how it ended",
    ),
    Case("empty execution id", ("start", "ticket", "--id", "", *ON), USAGE, "'--id': must not be empty"),
    Case(
        "a root id shaped like a region's child id",
        ("start", "ticket", "--charts", "{charts}", "--id", "o-1/fork.b@1", *ON),
        USAGE,
        "ids ending in '/<name>@<number>' are reserved for the child executions of parallel regions",
    ),
    Case(
        "a start under a taken id with another context",
        ("start", "ticket", "--charts", "{charts}", "--id", "t-open", "--context", '{"other": true}', *ON),
        USAGE,
        "execution 't-open' already exists, started on chart 'ticket' with another request",
    ),
    Case(
        "an event id the engine gives the start event",
        ("send", "t-open", "assign", "--charts", "{charts}", "--event-id", "t-open:start", *ON),
        USAGE,
        "event id 't-open:start' cannot be used: ids starting with 't-open:' are the engine's own events",
    ),
    Case(
        "bad cursor",
        ("list", "--cursor", "garbage", *ON),
        USAGE,
        "--cursor: invalid listing cursor 'garbage'; use the cursor a previous page printed",
    ),
    Case("page size zero", ("list", "--limit", "0", *ON), USAGE, "0 is not in the range x>=1"),
    Case("bad status filter", ("list", "--status", "done", *ON), USAGE, "'done' is not one of 'running'"),
    # --- where the deployment is, and whether it may be used
    Case(
        "bad URL",
        ("list", "--url", "postgres://app:secret@db/harel"),
        USAGE,
        "invalid store URL postgres://app:***@db/harel: expected a mongodb:// or mongodb+srv:// URL",
    ),
    Case(
        "client command on the in-process default",
        ("start", "ticket", "--charts", "{charts}"),
        USAGE,
        "mongomock:// (the default, an in-process store) lives only as long as this `harel start`",
    ),
    Case(
        "URL file missing",
        ("list",),
        USAGE,
        "HAREL_MONGO_URL_FILE: cannot read /no/such/url (No such file or directory)",
        {"HAREL_MONGO_URL_FILE": "/no/such/url"},
    ),
    Case(
        "deployment unreachable",
        ("list", "--url", "mongodb://127.0.0.1:{closed}/harel", "--deadline", "0.5"),
        UNREACHABLE,
        "could not reach mongodb://127.0.0.1:{closed}/harel within",
    ),
    Case(
        "standalone server",
        ("list", "--url", "{standalone}", "--deadline", "20"),
        REFUSED,
        "refusing to start on this deployment: deployment: found standalone",
    ),
    Case(
        "demo on a deployment",
        ("demo", "--url", "{url}"),
        USAGE,
        "harel demo runs in this process on mongomock://, not mongodb://",
    ),
    # --- harel dev
    Case(
        "dev port in use",
        ("dev", "--charts", "{charts}", "--port", "{busy}"),
        USAGE,
        "cannot listen on 127.0.0.1:{busy}: Address already in use; stop what holds the port, or choose "
        "another with --port (0 takes a free one)",
    ),
    Case(
        "dev data file that is not one",
        ("dev", "--charts", "{charts}", "--data", "{garbage}"),
        USAGE,
        "data file {garbage}: not a harel.local snapshot",
    ),
    Case(
        "dev already running in the folder",
        ("dev", "--charts", "{charts}"),
        USAGE,
        "another harel dev runs for {held} (pid ",
        folder="held",
    ),
    Case(
        "dev charts folder missing",
        ("dev", "--charts", "no-such-folder"),
        USAGE,
        "Directory 'no-such-folder' does not exist",
    ),
    # --- waiting, watching, dead letters
    Case(
        "async timeout over half the lease",
        ("worker", "--charts", "{charts}", "--async-timeout", "20", *ON),
        USAGE,
        "--async-timeout 20 must be under half of --lease-seconds (30)",
    ),
    Case(
        "wait timeout of zero",
        ("send", "t-open", "assign", "--charts", "{charts}", "--wait", "--timeout", "0", *ON),
        USAGE,
        "Invalid value for '--timeout': '0': give a number of seconds > 0",
    ),
    Case(
        "watch of an unknown execution",
        ("status", "nobody", "--watch", *ON),
        NOT_FOUND,
        "no execution with id 'nobody'",
    ),
    Case(
        "follow of an unknown execution",
        ("trace", "nobody", "--follow", *ON),
        NOT_FOUND,
        "no execution with id 'nobody'",
    ),
    Case(
        "watch with the stored document",
        ("status", "t-open", "--watch", "--document", *ON),
        USAGE,
        "--document, --diagram and --watch each show it their own way: give one",
    ),
    Case(
        "diagram of a chart nobody published",
        ("chart", "show", "nothing", *ON),
        USAGE,
        "harel chart: CHART: no chart 'nothing' is registered, and no worker published it; give it with "
        "--charts DIR or --app MODULE:APP",
    ),
    Case(
        "diagram of an unknown chart with no deployment",
        ("chart", "show", "nothing"),
        USAGE,
        "harel chart: CHART: no chart 'nothing' is registered, and mongomock:// (the default, an in-process "
        "store) has no catalog of published charts; give it with --charts DIR or --app MODULE:APP, or the "
        "deployment's URL with --url, HAREL_MONGO_URL or HAREL_MONGO_URL_FILE; built in: smoke (harel.smoke)",
    ),
    Case(
        "diagram in a format there is none of",
        ("status", "t-open", "--diagram", "svg", *ON),
        USAGE,
        "Invalid value for '--diagram': 'svg' is not one of 'dot', 'mermaid'.",
    ),
    Case(
        "dead retry without a dead letter",
        ("dead", "retry", "t-open", *ON),
        USAGE,
        "execution 't-open' has no dead letter: nothing of it waits for an operator; `harel dead list` shows "
        "the executions that have one",
    ),
    Case(
        "dead drop of an unknown execution",
        ("dead", "drop", "nobody", *ON),
        NOT_FOUND,
        "harel dead: no execution with id 'nobody'",
    ),
    Case(
        "dead list on the in-process default",
        ("dead", "list"),
        USAGE,
        "lives only as long as this `harel dead list`",
    ),
    # --- settings from the environment
    Case(
        "bad deadline variable",
        ("list", *ON[:2]),
        USAGE,
        "Invalid value for '--deadline' (env var: 'HAREL_CONNECT_DEADLINE'): 'soon' is not a number",
        {"HAREL_CONNECT_DEADLINE": "soon"},
    ),
    Case(
        "bad log level",
        ("list", *ON),
        USAGE,
        "HAREL_LOG_LEVEL: 'loud' is not a level",
        {"HAREL_LOG_LEVEL": "loud"},
    ),
    Case(
        "bad log format",
        ("list", *ON),
        USAGE,
        "HAREL_LOG_FORMAT: 'xml' is not a format: use text or json",
        {"HAREL_LOG_FORMAT": "xml"},
    ),
    Case(
        "bad concurrency variable",
        ("worker", *ON),
        USAGE,
        "'--concurrency' (env var: 'HAREL_CONCURRENCY'): 'many' is not a valid integer",
        {"HAREL_CONCURRENCY": "many"},
    ),
    # --- the command line itself
    Case("unknown command", ("frobnicate",), USAGE, "No such command 'frobnicate'. (see `harel --help`)"),
    Case(
        "unknown option",
        ("status", "t-open", "--colour", *ON),
        USAGE,
        "No such option '--colour'. Did you mean '--url'? (see `harel status --help`)",
    ),
    Case("missing argument", ("send", "t-open", *ON), USAGE, "Missing argument 'EVENT'"),
]


@dataclass
class Workspace:
    folder: Path
    values: dict[str, str]


@pytest.fixture
def workspace(
    tmp_path: Path, fake_rs: FakeDeployment, fake_standalone: FakeDeployment
) -> Iterator[Workspace]:
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "ticket.yaml").write_text(TICKET)
    (tmp_path / "bad-charts").mkdir()
    (tmp_path / "bad-charts" / "ticket.yaml").write_text("id: ticket\nversion: 1\ninitial: nowhere\n")
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "app.py").write_text(ORDERS_APP.format(chart=TICKET))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "app.py").write_text(BROKEN_APP)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"blob": "x" * HUGE_CONTEXT_BYTES}))
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a snapshot\n")
    (tmp_path / "held").mkdir()
    held = DevState.claim(tmp_path / "held")
    held.publish("mongodb://127.0.0.1:1/?replicaSet=rs0", None)
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        store = MongoStore(client, "harel")
        opened = Execution(id="t-open", definition_id="ticket", definition_version=1)
        store.commit(
            opened.model_copy(update={"start_request": start_digest("ticket", {})})
        )  # as `harel start`
        store.commit(
            Execution(
                id="t-done",
                definition_id="ticket",
                definition_version=1,
                status=ExecutionStatus.COMPLETED,
                configuration=["closed"],
            )
        )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield Workspace(
            tmp_path,
            {
                "url": fake_rs.url,
                "standalone": fake_standalone.url,
                "closed": str(free_port()),
                "busy": str(busy.getsockname()[1]),
                "charts": str(tmp_path / "charts"),
                "huge": str(huge),
                "garbage": str(garbage),
                "held": str(tmp_path / "held"),
            },
        )
    held.release()


def fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_failure_is_one_line_with_its_exit_code(case: Case, workspace: Workspace) -> None:
    command = [fill(part, workspace.values) for part in case.command]

    result = run_harel(*command, cwd=workspace.folder / case.folder, environment=case.environment, timeout=60)

    said = fill(case.says, workspace.values)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == case.code, result.stderr
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith(("harel ", "harel:"))]
    assert len(errors) == 1 and said in errors[0], result.stderr
    assert result.stdout == ""


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 15
    assert len({case.name for case in CASES}) == len(CASES)


def test_with_json_the_failure_is_one_json_line(workspace: Workspace) -> None:
    result = run_harel("status", "nobody", "--json", "--url", workspace.values["url"], cwd=workspace.folder)

    assert result.returncode == NOT_FOUND
    assert json.loads(result.stderr) == {
        "error": "UnknownExecution",
        "message": "no execution with id 'nobody'; `harel list` shows the executions there",
        "exit_code": NOT_FOUND,
    }


def test_a_send_to_a_full_mailbox_fails_with_mailbox_full_and_queues_nothing(
    workspace: Workspace, fake_rs: FakeDeployment
) -> None:
    """`harel send` to an execution whose mailbox is full to its 4 MiB budget (no worker drains it): MailboxFull,
    naming the execution and the limit, exit FAILED; the mailbox holds what it held, far below 16 MiB."""
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        MongoStore(client, "harel").commit(
            Execution(id="t-full", definition_id="ticket", definition_version=1)
        )
        transport = MongoTransport(client, "harel", watch=False)
        sent = 0
        for size in (1024 * 1024, 64 * 1024, 1024, 0):  # to the brim: not even an empty event fits
            while (
                transport.send("t-full", Event(id=f"fill-{sent}", name="assign", data={"blob": "x" * size}))
                is SendOutcome.QUEUED
            ):
                sent += 1
        before = client.harel.executions.find_one({"_id": "t-full"})
        result = run_harel(
            "send", "t-full", "assign", "--charts", workspace.values["charts"], "--json", "--url", fake_rs.url
        )
        after = client.harel.executions.find_one({"_id": "t-full"})
    assert "Traceback" not in result.stderr and result.returncode == FAILED, result.stderr
    assert json.loads(result.stderr) == {
        "error": "MailboxFull",
        "message": f"execution 't-full': its mailbox holds {INBOX_LIMIT_BYTES} bytes of pending events, its "
        "limit; send again once its workers have caught up",
        "exit_code": FAILED,
    }
    assert after == before, "the refused send queued nothing"
    assert after["inbox_bytes"] <= INBOX_LIMIT_BYTES and len(bson.encode(after)) < 16 * 1024 * 1024 // 3
