"""The backup rule of `harel check`: did any backup job succeed within the window? A pure function over the
status documents (harel.backups) and the server's time; it warns and never refuses, because a deployment
without a recent backup still runs correctly, it just cannot be brought back after a bad day. The check applies
it when HAREL_BACKUP_WINDOW names a window."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harel.backups import BackupStatus, latest_success, parse_statuses
from harel.errors import InvalidBackupWindow

# A daily schedule plus two hours for a slow dump: one missed run is enough to warn.
DEFAULT_WINDOW_SECONDS = 26 * 3600
CHECK_NAME = "backup"
# Set (to a duration such as 26h) on deployments that run backups: `harel check` then judges them.
WINDOW_VARIABLE = "HAREL_BACKUP_WINDOW"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SCHEDULE_FIX = (
    "schedule backups: Helm backup.enabled=true, compose `harel-stack backup` from cron, or the Ansible "
    "backup role (docs/backups.md)"
)


@dataclass(frozen=True)
class BackupFinding:
    """What the rule found. `ok` False is a warning; `fix` says what to do then."""

    ok: bool
    found: str
    required: str
    fix: str | None = None


def parse_window(text: str) -> float:
    """A window in seconds from 26h, 90m, 2d, 3600s or 3600; InvalidBackupWindow otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise InvalidBackupWindow(text)
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def configured_window(environ: Mapping[str, str]) -> float | None:
    """The window HAREL_BACKUP_WINDOW sets, or None when unset (no backup finding then)."""
    text = environ.get(WINDOW_VARIABLE, "")
    return parse_window(text) if text.strip() else None


def age_text(seconds: float) -> str:
    """`seconds` as the two largest units a person reads: 45s, 12m, 3h 5m, 2d 4h."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"


def _failing_jobs(statuses: list[BackupStatus], now: float) -> str:
    failing = [status for status in statuses if status.failures_in_a_row]
    if not failing:
        return ""
    parts = []
    for status in failing:
        last = status.last_attempt
        error = f": {last.error}" if last.error else ""
        parts.append(
            f"{status.job} failed {status.failures_in_a_row} time(s) in a row, last "
            f"{age_text(now - last.finished_at)} ago{error}"
        )
    return "; " + "; ".join(parts)


def judge_backups(documents: Iterable[Mapping[str, Any]], now: float, window: float) -> BackupFinding:
    """The backup finding for these status documents at server time `now` (epoch seconds)."""
    required = f"a successful backup within {age_text(window)}"
    statuses, unreadable = parse_statuses(documents)
    unreadable_text = f"; unreadable status: {', '.join(unreadable)}" if unreadable else ""
    if not statuses:
        return BackupFinding(False, f"no backup recorded{unreadable_text}", required, _SCHEDULE_FIX)
    failing = _failing_jobs(statuses, now)
    success = latest_success(statuses)
    if success is None:
        return BackupFinding(
            False,
            f"no backup has succeeded{failing}{unreadable_text}",
            required,
            "read the backup job's log for the failing step (docs/backups.md)",
        )
    job = next(status.job for status in statuses if status.last_success == success)
    age = now - success.finished_at
    found = f"last success {age_text(age)} ago ({job}, {success.archive or 'no archive name'})"
    if age <= window:
        return BackupFinding(True, found + failing + unreadable_text, required)
    fix = "read the backup job's log for the failing step (docs/backups.md)" if failing else _SCHEDULE_FIX
    return BackupFinding(False, found + failing + unreadable_text, required, fix)
