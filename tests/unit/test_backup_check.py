"""The backup status documents (harel.backups) and the rule `harel check` applies to them
(harel.backup_check): pure functions over documents and the server's time."""

from __future__ import annotations

from typing import Any

import pytest

from harel.backup_check import (
    DEFAULT_WINDOW_SECONDS,
    age_text,
    configured_window,
    judge_backups,
    parse_window,
)
from harel.backups import latest_success, parse_statuses
from harel.errors import InvalidBackupWindow

NOW = 1_767_000_000.0
HOUR = 3600.0


def run(finished_hours_ago: float, outcome: str = "succeeded", **fields: Any) -> dict[str, Any]:
    finished = NOW - finished_hours_ago * HOUR
    return {
        "run_id": "20251229T030000Z",
        "started_at": finished - 120,
        "finished_at": finished,
        "outcome": outcome,
        "archive": "harel-20251229T030000Z.archive.gz" if outcome == "succeeded" else None,
        "target": "dir:./backups",
        "bytes": 52_428_800,
        "kept": 7,
        "error": None if outcome == "succeeded" else "mongodump: Failed: no reachable servers",
        **fields,
    }


def status(
    job: str, attempt: dict[str, Any], success: dict[str, Any] | None, failures: int = 0
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "_id": job,
        "last_attempt": attempt,
        "failures_in_a_row": failures,
        "updated_at": NOW,
    }
    if success is not None:
        document["last_success"] = success
    return document


def test_a_recent_success_is_ok() -> None:
    recent = run(3)
    finding = judge_backups([status("compose/harel", recent, recent)], NOW, DEFAULT_WINDOW_SECONDS)
    assert finding.ok
    assert finding.found == "last success 3h ago (compose/harel, harel-20251229T030000Z.archive.gz)"
    assert finding.required == "a successful backup within 1d 2h"
    assert finding.fix is None


def test_no_status_document_warns_and_says_how_to_schedule_backups() -> None:
    finding = judge_backups([], NOW, DEFAULT_WINDOW_SECONDS)
    assert not finding.ok
    assert finding.found == "no backup recorded"
    assert finding.fix is not None
    assert "backup.enabled=true" in finding.fix and "harel-stack backup" in finding.fix


def test_an_old_success_warns() -> None:
    old = run(30)
    finding = judge_backups([status("helm/harel/harel-stack", old, old)], NOW, DEFAULT_WINDOW_SECONDS)
    assert not finding.ok
    assert finding.found.startswith("last success 1d 6h ago (helm/harel/harel-stack")


def test_failing_runs_are_named_with_their_error() -> None:
    failed = run(1, "failed")
    document = status("ansible/mongo3", failed, run(49), failures=2)
    finding = judge_backups([document], NOW, DEFAULT_WINDOW_SECONDS)
    assert not finding.ok
    assert (
        "ansible/mongo3 failed 2 time(s) in a row, last 1h ago: mongodump: Failed: no reachable servers"
        in finding.found
    )
    assert finding.fix is not None and "log" in finding.fix


def test_a_job_that_never_succeeded() -> None:
    failed = run(2, "failed")
    finding = judge_backups([status("compose/harel", failed, None, failures=5)], NOW, DEFAULT_WINDOW_SECONDS)
    assert not finding.ok
    assert finding.found.startswith("no backup has succeeded; compose/harel failed 5 time(s) in a row")


def test_the_newest_success_of_any_job_counts() -> None:
    documents = [status("helm/a/x", run(40), run(40)), status("compose/harel", run(2), run(2))]
    assert judge_backups(documents, NOW, DEFAULT_WINDOW_SECONDS).ok
    statuses, _ = parse_statuses(documents)
    newest = latest_success(statuses)
    assert newest is not None and newest.finished_at == NOW - 2 * HOUR


def test_the_window_is_the_callers() -> None:
    recent = run(3)
    documents = [status("compose/harel", recent, recent)]
    assert not judge_backups(documents, NOW, 2 * HOUR).ok
    assert judge_backups(documents, NOW, 4 * HOUR).ok


def test_an_unreadable_document_is_named_and_does_not_hide_the_others() -> None:
    good = run(1)
    documents = [
        {"_id": "by-hand", "last_attempt": {"outcome": "maybe"}},
        status("compose/harel", good, good),
    ]
    finding = judge_backups(documents, NOW, DEFAULT_WINDOW_SECONDS)
    assert finding.ok
    assert "unreadable status: by-hand" in finding.found
    assert not judge_backups(documents[:1], NOW, DEFAULT_WINDOW_SECONDS).ok


def test_a_success_from_a_clock_ahead_counts_as_just_now() -> None:
    ahead = run(-0.5)
    finding = judge_backups([status("compose/harel", ahead, ahead)], NOW, DEFAULT_WINDOW_SECONDS)
    assert finding.ok
    assert finding.found.startswith("last success 0s ago")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (600, "10m"),
        (3600, "1h"),
        (3 * 3600 + 300, "3h 5m"),
        (86400, "1d"),
        (93600, "1d 2h"),
    ],
)
def test_ages_read_as_two_units(seconds: float, text: str) -> None:
    assert age_text(seconds) == text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("26h", 93600.0),
        ("90m", 5400.0),
        ("2d", 172800.0),
        ("3600s", 3600.0),
        ("3600", 3600.0),
        (" 1.5h ", 5400.0),
    ],
)
def test_a_window_reads_as_a_duration(text: str, seconds: float) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "26 hours", "-1h", "0", "1w"])
def test_a_window_that_is_no_duration_is_refused_by_name(text: str) -> None:
    with pytest.raises(InvalidBackupWindow) as refused:
        parse_window(text)
    assert str(refused.value).startswith(f"HAREL_BACKUP_WINDOW: {text!r} is not a duration")


def test_the_window_comes_from_the_environment_or_is_off() -> None:
    assert configured_window({}) is None
    assert configured_window({"HAREL_BACKUP_WINDOW": "  "}) is None
    assert configured_window({"HAREL_BACKUP_WINDOW": "26h"}) == DEFAULT_WINDOW_SECONDS
