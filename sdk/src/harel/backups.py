"""The backup status documents: what each backup job recorded about its last attempt and its last success.

Every deployment mode runs the same backup script (`mongodump --archive --gzip --oplog`, then retention by
count), and its last step records the outcome in the harel database, collection `backups`, one document per
backup job (a Helm release, a compose project, an Ansible host). `harel check` reads them to warn when no
backup succeeded within its window; the `harel_last_backup_timestamp_seconds` gauge shows the newest success.

    {
      _id: "helm/harel/harel-stack",          the job: <mode>/<where>, as the job names itself
      last_attempt: <run>,                    the newest run, whatever its outcome
      last_success: <run>,                    the newest run that succeeded (absent until one does)
      failures_in_a_row: 0,                   runs that failed since the last success
      updated_at: 1767000000.0                server time of the last record ($$NOW, epoch seconds)
    }
    <run> = {
      run_id: "20250106T093000Z",             UTC start time of the run, also in the archive's name
      started_at, finished_at: float,         epoch seconds on the backup host's clock
      outcome: "succeeded" | "failed",
      archive: "harel-20250106T093000Z.archive.gz" | null,
      target: "pvc:/backups" | "s3://bucket/prefix" | "dir:/var/backups/harel",
      bytes: int,                             size of the archive (0 when none was written)
      kept: int,                              archives kept at the target after retention
      error: str | null                       the failing step's last line, when it failed
    }

The archive is consistent as of the end of the dump: mongodump --oplog captures the writes made while it
ran, and `mongorestore --oplogReplay` replays them up to the last one it captured (no later than
`finished_at`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pymongo.database import Database

BACKUPS_COLLECTION = "backups"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class BackupRun(BaseModel):
    """One backup run as the job recorded it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    started_at: float
    finished_at: float
    outcome: Outcome
    archive: str | None = None
    target: str
    bytes: int = Field(default=0, ge=0)
    kept: int = Field(default=0, ge=0)
    error: str | None = None


class BackupStatus(BaseModel):
    """The status document of one backup job."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    job: str = Field(alias="_id")
    last_attempt: BackupRun
    last_success: BackupRun | None = None
    failures_in_a_row: int = Field(default=0, ge=0)
    updated_at: float | None = None


def parse_statuses(documents: Iterable[Mapping[str, Any]]) -> tuple[list[BackupStatus], list[str]]:
    """The readable status documents, and one line for each unreadable one (a document written by hand or
    by another tool must not hide the others)."""
    statuses: list[BackupStatus] = []
    unreadable: list[str] = []
    for document in documents:
        try:
            statuses.append(BackupStatus.model_validate(document))
        except ValidationError as error:
            unreadable.append(f"{document.get('_id', '?')}: {error.error_count()} invalid field(s)")
    return statuses, unreadable


def latest_success(statuses: Iterable[BackupStatus]) -> BackupRun | None:
    """The newest successful run of any job."""
    successes = [status.last_success for status in statuses if status.last_success is not None]
    return max(successes, key=lambda run: run.finished_at, default=None)


def read_statuses(database: Database[Any]) -> list[Mapping[str, Any]]:
    """Every status document in `database` (a handful: one per backup job)."""
    return list(database[BACKUPS_COLLECTION].find({}))
