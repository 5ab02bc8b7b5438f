"""`harel check` and the worker's start-up refusal, as processes talking to a server over a socket.

The check's rules are unit-tested on recorded replies (tests/unit); here the whole path runs: the CLI
connects with the production client, asks the server, prints the table or the JSON, and exits 0 or 1; a
worker refuses (exit 4) where the check finds errors, and starts there only with --dev.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pymongo import MongoClient

from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment, FakeDeployment
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
    for required in ("deployment", "write concern", "read concern", "read preference", "retryable writes"):
        assert checked[required]["status"] == "ok", checked[required]


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
