"""`harel check` and the worker's start-up refusal, as processes talking to a server over a socket.

The check's rules are unit-tested on recorded replies (tests/unit); here the whole path runs: the CLI
connects with the production client, asks the server, prints the table or the JSON, and exits 0 or 1; a
worker refuses (exit 4) where the check finds errors, and starts there only with --dev; a worker whose
password the server refuses exits 4 at once, and so does `harel check` (within 2 s), on the test replica set
with authentication on.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from harel.cli.main import main
from harel.connection import WRITE_CONCERN_TIMEOUT_MS, connect
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, AuthenticatedFake, Deployment, FakeDeployment
from tests.loopback import mongod
from tests.wire.processes import WorkerProcesses, run_harel

pytestmark = pytest.mark.wire

PASSED, FAILED, REFUSED = 0, 1, 4


def findings(stdout: str) -> dict[str, dict[str, Any]]:
    return {finding["check"]: finding for finding in json.loads(stdout)["findings"]}


def errors(stdout: str) -> dict[str, str]:
    return {name: f["error"] for name, f in findings(stdout).items() if f["status"] == "error"}


def test_check_passes_on_the_replica_set(replica_set: Deployment) -> None:
    table = run_harel("check", "--url", replica_set.url, "--deadline", "20")
    as_json = run_harel("check", replica_set.url, "--json", "--deadline", "20")

    assert table.returncode == PASSED, table.stdout + table.stderr
    assert "passed." in table.stdout.splitlines()[-1]
    assert as_json.returncode == PASSED, as_json.stdout + as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["passed"] is True
    assert errors(as_json.stdout) == {}
    checked = findings(as_json.stdout)
    for required in (
        "feature compatibility",
        "deployment",
        "write concern",
        "read concern",
        "read preference",
        "retryable writes",
        "write concern timeout",
        "cluster default",
    ):
        assert checked[required]["status"] == "ok", checked[required]
    assert checked["write concern timeout"]["found"] == "wtimeoutMS=10000"


def test_check_as_a_least_privilege_user_passes_without_a_cluster_default_warning(
    fake_rs: FakeDeployment,
) -> None:
    # The shipped stacks' app user has readWrite on harel only: getDefaultRWConcern and getParameter are
    # refused, as a server refuses them.
    fake_rs.server.deny("getDefaultRWConcern", "getParameter")

    result = run_harel("check", fake_rs.url, "--json", "--deadline", "20")

    assert result.returncode == PASSED, result.stdout + result.stderr
    checked = findings(result.stdout)
    assert checked["cluster default"]["status"] == "ok"
    assert checked["cluster default"]["found"] == (
        "unknown (not authorized), unused: the client sets w=majority, j=true"
    )
    assert (checked["feature compatibility"]["status"], checked["feature compatibility"]["found"]) == (
        "warning",
        "unknown (not authorized)",
    )


def test_check_reports_the_feature_compatibility_version(fake_rs: FakeDeployment) -> None:
    result = run_harel("check", fake_rs.url, "--json", "--deadline", "20")

    assert findings(result.stdout)["feature compatibility"]["found"] == "8.0"


def test_check_warns_about_an_unbounded_client(fake_rs: FakeDeployment) -> None:
    result = run_harel("check", f"{fake_rs.url}&wtimeoutMS=0", "--json", "--deadline", "20")

    assert result.returncode == PASSED, result.stdout + result.stderr
    bound = findings(result.stdout)["write concern timeout"]
    assert (bound["status"], bound["found"]) == ("warning", "wtimeoutMS=0: no bound")


def test_check_fails_on_a_standalone_listing_the_violations(fake_standalone: FakeDeployment) -> None:
    table = run_harel("check", "--url", fake_standalone.url, "--deadline", "20")
    as_json = run_harel("check", "--url", fake_standalone.url, "--json", "--deadline", "20")

    assert table.returncode == FAILED, table.stdout + table.stderr
    rows = {line.split("  ")[0]: line for line in table.stdout.splitlines()}
    assert rows["deployment"].endswith("ERROR")
    assert "standalone" in rows["deployment"]
    assert rows["retryable writes"].endswith("ERROR")
    assert "refused" in table.stdout.splitlines()[-1]
    assert as_json.returncode == FAILED
    assert errors(as_json.stdout) == {
        "deployment": "StandaloneDeploymentError",
        "retryable writes": "RetryableWritesDisabledError",
    }


def test_check_fails_on_weak_client_options_over_the_replica_set(fake_rs: FakeDeployment) -> None:
    weak = f"{fake_rs.url}&w=1&readConcernLevel=local&retryWrites=false"

    result = run_harel("check", weak, "--json", "--deadline", "20")

    assert result.returncode == FAILED, result.stdout + result.stderr
    assert set(errors(result.stdout)) == {"write concern", "read concern", "retryable writes"}


def test_a_majority_write_concern_without_the_journal_is_refused_at_start_up(fake_rs: FakeDeployment) -> None:
    unjournaled = f"{fake_rs.url}&w=majority&journal=false"

    checked = run_harel("check", unjournaled, "--json", "--deadline", "20")
    assert checked.returncode == FAILED, checked.stdout + checked.stderr
    assert errors(checked.stdout) == {"write concern": "WeakWriteConcernError"}
    assert findings(checked.stdout)["write concern"]["found"] == "w=majority, j=false"

    worker = run_harel("worker", "--url", unjournaled, "--http-port", "0", "--deadline", "20")
    assert worker.returncode == REFUSED, worker.stdout + worker.stderr
    assert "refusing to start" in worker.stderr
    assert "write concern: found w=majority, j=false" in worker.stderr


def test_worker_refuses_a_standalone_without_dev(fake_standalone: FakeDeployment) -> None:
    result = run_harel("worker", "--url", fake_standalone.url, "--http-port", "0", "--deadline", "20")

    assert result.returncode == REFUSED, result.stdout + result.stderr
    assert "refusing to start" in result.stderr
    assert "standalone" in result.stderr
    with MongoClient(fake_standalone.url, **{**CLIENT_OPTIONS, "retryWrites": False}) as client:
        # Refused before any data was touched: no heartbeat, no index, no collection.
        assert client.harel.list_collection_names() == []


def test_worker_starts_on_a_standalone_with_dev(
    fake_standalone: FakeDeployment, worker_processes: WorkerProcesses
) -> None:
    worker = worker_processes.harel_worker(fake_standalone.url, "--dev", "--drain-seconds", "2")
    with MongoClient(fake_standalone.url, **{**CLIENT_OPTIONS, "retryWrites": False}) as client:
        worker.wait_registered(client)

    assert worker.terminate() == PASSED
    assert "relaxed" in worker.log()


def test_worker_exits_4_at_once_when_its_password_is_refused() -> None:
    password = "pw-" + secrets.token_hex(8)
    with mongod(refuse_credentials=True) as server:
        url = f"mongodb://harel:{password}@{server.host_port}/harel?authSource=admin&directConnection=true"

        # --deadline 0 waits as long as the deployment needs: only a failure that is not retried ends it.
        result = run_harel("worker", "--url", url, "--http-port", "0", "--deadline", "0", timeout=60)

    assert result.returncode == REFUSED, result.stdout + result.stderr
    assert "harel worker: authentication failed for user harel on DB admin" in result.stderr
    assert "not ready" not in result.stderr
    assert password not in result.stdout + result.stderr


class WriteConcerns(monitoring.CommandListener):
    """The write concern each command was sent with, by command name."""

    def __init__(self) -> None:
        self.sent: dict[str, list[dict[str, Any]]] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.setdefault(event.command_name, []).append(event.command.get("writeConcern", {}))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_start_up_index_creation_waits_for_a_majority_within_the_bound(fake_rs: FakeDeployment) -> None:
    # What a worker does at start-up after the check (harel.backend.open_backend), on connect()'s client.
    listener = WriteConcerns()
    client = connect(fake_rs.url, deadline=20, event_listeners=[listener])
    try:
        MongoStore(client, "harel").ensure_indexes()
        MongoTransport(client, "harel").ensure_indexes()
    finally:
        client.close()

    bounded = {"w": "majority", "j": True, "wtimeout": WRITE_CONCERN_TIMEOUT_MS}
    assert listener.sent["createIndexes"]
    assert all(concern == bounded for concern in listener.sent["createIndexes"])


# --- authentication on the test replica set (SCRAM, as mongod) ---------------------------------------------

AUTHENTICATION_BOUND_SECONDS = 2.0


def _harel_user(fake: AuthenticatedFake) -> tuple[str, str]:
    """The app user as the deployments create it (readWrite on harel only); its URL and password."""
    password = fake.add_user("harel", [{"role": "readWrite", "db": "harel"}])
    return fake.url("harel", password, options="w=majority&journal=true&readConcernLevel=majority"), password


def test_check_with_a_wrong_password_exits_4_at_once_naming_the_user(
    fake_rs_auth: AuthenticatedFake, capsys: pytest.CaptureFixture[str]
) -> None:
    _, password = _harel_user(fake_rs_auth)
    wrong = secrets.token_urlsafe(18)
    url = fake_rs_auth.url("harel", wrong)

    started = time.monotonic()
    code = main(["check", url, "--deadline", "0"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    as_process = run_harel("check", url, "--deadline", "0", timeout=60)

    assert code == REFUSED
    assert elapsed < AUTHENTICATION_BOUND_SECONDS, (
        f"took {elapsed:.2f}s: an authentication failure is not retried"
    )
    assert out == ""
    assert err.startswith(
        "harel check: authentication failed for user harel on DB admin at mongodb://harel:***@"
    )
    assert as_process.returncode == REFUSED, as_process.stdout + as_process.stderr
    assert as_process.stderr.startswith(
        "harel check: authentication failed for user harel on DB admin at mongodb://harel:***@"
    )
    for text in (out, err, as_process.stdout, as_process.stderr):
        assert wrong not in text and password not in text


def test_check_with_the_right_password_passes_and_reports_the_user(fake_rs_auth: AuthenticatedFake) -> None:
    url, password = _harel_user(fake_rs_auth)

    result = run_harel("check", url, "--json", "--deadline", "20")

    assert result.returncode == PASSED, result.stdout + result.stderr
    checked = findings(result.stdout)
    assert checked["authentication"]["status"] == "ok"
    assert "harel" in checked["authentication"]["found"]
    assert errors(result.stdout) == {}
    assert password not in result.stdout + result.stderr
