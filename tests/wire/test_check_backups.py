"""`harel check` and the backup status documents, over a socket: with HAREL_BACKUP_WINDOW set, the check reads
harel.backups and warns when no backup succeeded within the window (at the server's time); unset, it asks nothing.
The rule itself is unit-tested in tests/unit/test_backup_check.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest
from pymongo import MongoClient

from harel.backups import BACKUPS_COLLECTION
from harel.connection import check, connect
from harel.errors import InvalidBackupWindow
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.wire.processes import HAREL, REPOSITORY_ROOT, clean_environment

pytestmark = pytest.mark.wire


def backup_run(hours_ago: float) -> dict[str, Any]:
    finished = time.time() - hours_ago * 3600
    return {
        "run_id": "20251229T030000Z",
        "started_at": finished - 60,
        "finished_at": finished,
        "outcome": "succeeded",
        "archive": "harel-20251229T030000Z.archive.gz",
        "target": "dir:./backups",
        "bytes": 1024,
        "kept": 3,
        "error": None,
    }


def record(fake_rs: FakeDeployment, hours_ago: float) -> None:
    run = backup_run(hours_ago)
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        client.harel[BACKUPS_COLLECTION].replace_one(
            {"_id": "compose/harel"},
            {
                "last_attempt": run,
                "last_success": run,
                "failures_in_a_row": 0,
                "updated_at": run["finished_at"],
            },
            upsert=True,
        )


def harel_check(fake_rs: FakeDeployment, window: str | None) -> subprocess.CompletedProcess[str]:
    environment = clean_environment()
    if window is not None:
        environment["HAREL_BACKUP_WINDOW"] = window
    return subprocess.run(
        [HAREL, "check", fake_rs.url, "--json", "--deadline", "20"],
        cwd=REPOSITORY_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def backup_finding(completed: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    assert completed.returncode == 0, completed.stdout + completed.stderr
    found = [f for f in json.loads(completed.stdout)["findings"] if f["check"] == "backup"]
    return found[0] if found else None


def test_without_a_window_nothing_is_asked(fake_rs: FakeDeployment) -> None:
    assert backup_finding(harel_check(fake_rs, None)) is None


def test_no_backup_recorded_is_a_warning_that_does_not_refuse(fake_rs: FakeDeployment) -> None:
    finding = backup_finding(harel_check(fake_rs, "26h"))
    assert finding is not None
    assert finding["status"] == "warning"
    assert finding["found"] == "no backup recorded"
    assert "harel-stack backup" in finding["fix"]


def test_a_recent_backup_passes_and_an_old_one_warns(fake_rs: FakeDeployment) -> None:
    record(fake_rs, hours_ago=2)
    recent = backup_finding(harel_check(fake_rs, "26h"))
    assert recent is not None and recent["status"] == "ok"
    assert recent["found"].startswith("last success 2h ago (compose/harel")
    stale = backup_finding(harel_check(fake_rs, "1h"))
    assert stale is not None and stale["status"] == "warning"
    assert stale["required"] == "a successful backup within 1h"


def test_the_python_api_takes_the_window_directly(
    fake_rs: FakeDeployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(fake_rs, hours_ago=30)
    monkeypatch.delenv("HAREL_BACKUP_WINDOW", raising=False)
    client = connect(fake_rs.url, deadline=10)
    try:
        report = check(client, backup_window=26 * 3600)
        [finding] = [f for f in report.findings if f.check == "backup"]
        assert finding.status.value == "warning"
        assert report.passed
        monkeypatch.setenv("HAREL_BACKUP_WINDOW", "two days")
        with pytest.raises(InvalidBackupWindow, match="HAREL_BACKUP_WINDOW: 'two days' is not a duration"):
            check(client)
    finally:
        client.close()


def test_a_bad_window_is_a_named_error_from_the_cli(fake_rs: FakeDeployment) -> None:
    completed = harel_check(fake_rs, "soon")
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "HAREL_BACKUP_WINDOW: 'soon' is not a duration" in completed.stderr
    assert os.environ.get("HAREL_BACKUP_WINDOW") is None
