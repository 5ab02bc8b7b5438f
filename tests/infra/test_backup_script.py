"""helm/harel-stack/files/backup/harel-backup.sh, run for real by bash with stand-ins for the tools it drives:
mongodump, mongorestore and the aws CLI (Python scripts that check their arguments and write what the real ones
would), and mongosh (Node.js running record-backup.js, its commands written down). The commands record-backup.js
sends are then replayed against the fake replica set and read back by the SDK (harel.backups) and the
`harel check` rule: the status document's contract, from the writer in the mongo image to the reader in harel.
Compose's backup and restore services run it as `docker compose config` renders them (entrypoint, command,
environment, password files where their secrets mount), in every TLS mode.

What is not run here: the real mongodump and mongorestore (no package on PyPI, Debian or npm ships them) and
the real aws CLI against a bucket.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pytest
from pymongo import MongoClient

from harel.backup_check import judge_backups
from harel.backups import BACKUPS_COLLECTION, Outcome, parse_statuses
from harel_stack.settings import CLIENT_TLS_MODES, TlsMode
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.infra.compose_render import env_file, render, secret_value

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
SCRIPT = REPOSITORY / "helm" / "harel-stack" / "files" / "backup" / "harel-backup.sh"
RECORD_MONGOSH = Path(__file__).parent / "observability" / "record_mongosh.js"
NODE = shutil.which("node")
requires_node = pytest.mark.skipif(
    NODE is None, reason="node (Node.js) runs record-backup.js in place of mongosh"
)
ARCHIVE = re.compile(r"harel-\d{8}T\d{6}Z\.archive\.gz")

FAKE_MONGODUMP = """\
import json, pathlib, sys, os
arguments = sys.argv[1:]
log = pathlib.Path(os.environ["FAKE_TOOLS_LOG"])
config = next(a.split("=", 1)[1] for a in arguments if a.startswith("--config="))
log.open("a").write(json.dumps({"tool": TOOL, "argv": arguments, "config": pathlib.Path(config).read_text()}) + "\\n")
if os.environ.get("FAKE_TOOL_FAIL") == TOOL:
    print("2025-01-06T09:30:00.000+0000\\tconnected to: mongodb://[redacted]@mongo1:27017", file=sys.stderr)
    print("2025-01-06T09:30:05.000+0000\\tFailed: error connecting to db server: no reachable servers", file=sys.stderr)
    sys.exit(1)
if TOOL == "mongodump":
    archive = next(a.split("=", 1)[1] for a in arguments if a.startswith("--archive="))
    pathlib.Path(archive).write_bytes(b"\\x1f\\x8b archive bytes " * 10)
"""

FAKE_AWS = """\
import json, pathlib, sys, os, shutil
arguments = [a for a in sys.argv[1:] if a != "--only-show-errors"]
log = pathlib.Path(os.environ["FAKE_TOOLS_LOG"])
log.open("a").write(json.dumps({"tool": "aws", "argv": sys.argv[1:], "key": os.environ.get("AWS_SECRET_ACCESS_KEY"), "key_id": os.environ.get("AWS_ACCESS_KEY_ID")}) + "\\n")
if "--endpoint-url" in arguments:
    at = arguments.index("--endpoint-url")
    del arguments[at:at + 2]
root = pathlib.Path(os.environ["FAKE_S3_ROOT"])
def local(url):
    return root / url.removeprefix("s3://")
service, verb, *rest = arguments
if os.environ.get("FAKE_TOOL_FAIL") == "aws " + verb:
    print("upload failed: An error occurred (AccessDenied) when calling the PutObject operation", file=sys.stderr)
    sys.exit(1)
if verb == "cp":
    local(rest[1]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(rest[0], local(rest[1]))
elif verb == "ls":
    for path in sorted(local(rest[0]).iterdir()):
        print(f"2025-01-06 09:30:00 {path.stat().st_size:>10} {path.name}")
elif verb == "rm":
    local(rest[0]).unlink()
"""


@dataclass
class Backups:
    """One backup host: the script's settings, the stand-in tools, and what they were asked."""

    tmp: Path
    env: dict[str, str]
    # a run's bound: the real mongosh (the sharded mode's) starts slowly on a busy machine
    timeout: float = 60.0

    @property
    def directory(self) -> Path:
        return Path(self.env["HAREL_BACKUP_DIR"])

    def run(self, *arguments: str, **overrides: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *arguments],
            env={**self.env, **overrides},
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )

    def tool_calls(self, tool: str) -> list[dict[str, Any]]:
        log = Path(self.env["FAKE_TOOLS_LOG"])
        if not log.exists():
            return []
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        return [call for call in calls if call["tool"] == tool]

    def recorded(self) -> list[dict[str, Any]]:
        log = Path(self.env["FAKE_MONGOSH_LOG"])
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def archives(self) -> list[str]:
        return sorted(path.name for path in self.directory.iterdir() if ARCHIVE.fullmatch(path.name))


def stand_in(directory: Path, name: str, source: str) -> None:
    path = directory / name
    path.write_text(f"#!{sys.executable}\nTOOL = {name!r}\n{source}")
    path.chmod(0o755)


@pytest.fixture
def backups(tmp_path: Path) -> Backups:
    assert NODE is not None
    tools = tmp_path / "bin"
    tools.mkdir()
    stand_in(tools, "mongodump", FAKE_MONGODUMP)
    stand_in(tools, "mongorestore", FAKE_MONGODUMP)
    stand_in(tools, "aws", FAKE_AWS)
    mongosh = tools / "mongosh"
    mongosh.write_text(f'#!/bin/sh\nexec "{NODE}" "{RECORD_MONGOSH}" "$@"\n')
    mongosh.chmod(0o755)
    env = {
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "TMPDIR": str(tmp_path),
        "FAKE_TOOLS_LOG": str(tmp_path / "tools.log"),
        "FAKE_MONGOSH_LOG": str(tmp_path / "mongosh.log"),
        "FAKE_S3_ROOT": str(tmp_path / "s3"),
        "HAREL_BACKUP_HOSTS": "mongo1:27017,mongo2:27017,mongo3:27017",
        "HAREL_BACKUP_REPLICA_SET": "rs0",
        "HAREL_BACKUP_USER": "harel-backup",
        "HAREL_BACKUP_PASSWORD": "it's-a-secret-" + "x" * 12,
        "HAREL_BACKUP_DATABASE": "harel",
        "HAREL_BACKUP_DIR": str(tmp_path / "backups"),
        "HAREL_BACKUP_KEEP": "3",
        "HAREL_BACKUP_JOB": "compose/harel",
        "HAREL_BACKUP_TARGET": "dir:./backups",
    }
    return Backups(tmp_path, env)


@pytest.fixture
def status_db(fake_rs: FakeDeployment) -> Iterator[Any]:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as client:
        yield client["harel"]


def replay(backups: Backups, database: Any) -> None:
    """The commands record-backup.js sent, against the fake replica set, as mongosh would have sent them."""
    for entry in backups.recorded():
        assert entry["db"] == database.name
        reply = database.command(entry["command"])
        assert reply["ok"] == 1 and not reply.get("writeErrors"), reply
    Path(backups.env["FAKE_MONGOSH_LOG"]).unlink()


# --- a directory target (compose, Ansible, a PVC) ----------------------------------------------------------------


@requires_node
def test_a_run_dumps_with_the_oplog_keeps_the_newest_and_records_success(
    backups: Backups, status_db: Any
) -> None:
    backups.directory.mkdir()
    older = [f"harel-2024120{day}T030000Z.archive.gz" for day in range(1, 6)]
    for name in older:
        (backups.directory / name).write_bytes(b"old")
    (backups.directory / "notes.txt").write_text("not an archive: never pruned")

    completed = backups.run("run")

    assert completed.returncode == 0, completed.stderr
    [dump] = backups.tool_calls("mongodump")
    assert {"--gzip", "--oplog"} <= set(dump["argv"])
    assert not [argument for argument in dump["argv"] if backups.env["HAREL_BACKUP_PASSWORD"] in argument]
    assert dump["config"] == (
        "uri: 'mongodb://harel-backup@mongo1:27017,mongo2:27017,mongo3:27017/?replicaSet=rs0&authSource=admin'\n"
        "password: 'it''s-a-secret-xxxxxxxxxxxx'\n"
    )
    [new] = [name for name in backups.archives() if name not in older]
    assert backups.archives() == [*older[-2:], new], "the newest 3 are kept"
    assert (backups.directory / "notes.txt").exists()
    assert stat.S_IMODE((backups.directory / new).stat().st_mode) == 0o600
    assert not list(backups.directory.glob("*.partial"))
    assert f"succeeded: {new}, 170 bytes, 3 archive(s) kept" in completed.stderr
    # The temporary mongodump config (it holds the password) is gone.
    assert not [p for p in backups.tmp.iterdir() if p.is_file() and p.name.startswith("tmp")]

    [record] = backups.recorded()
    assert record["url"].startswith("mongodb://harel-backup:it's-a-secret-")
    assert "replicaSet=rs0&authSource=admin" in record["url"]
    assert record["command"]["writeConcern"] == {"w": "majority"}
    replay(backups, status_db)
    statuses, unreadable = parse_statuses(status_db[BACKUPS_COLLECTION].find())
    assert unreadable == []
    [status] = statuses
    assert status.job == "compose/harel"
    assert status.failures_in_a_row == 0
    assert status.last_success == status.last_attempt
    run = status.last_attempt
    assert run.outcome is Outcome.SUCCEEDED
    assert (run.archive, run.bytes, run.kept, run.target, run.error) == (new, 170, 3, "dir:./backups", None)
    assert run.run_id in new
    assert run.started_at <= run.finished_at
    assert judge_backups(status_db[BACKUPS_COLLECTION].find(), run.finished_at + 60, 26 * 3600).ok


@requires_node
def test_a_failed_dump_is_recorded_keeps_the_last_success_and_fails_the_run(
    backups: Backups, status_db: Any
) -> None:
    assert backups.run("run").returncode == 0
    replay(backups, status_db)
    kept = backups.archives()

    completed = backups.run("run", FAKE_TOOL_FAIL="mongodump")

    assert completed.returncode == 1
    assert "Failed: error connecting to db server: no reachable servers" in completed.stderr
    assert backups.archives() == kept, "a failed run removes nothing and leaves no partial archive"
    assert not list(backups.directory.glob("*.partial"))
    replay(backups, status_db)
    [status] = parse_statuses(status_db[BACKUPS_COLLECTION].find())[0]
    assert status.failures_in_a_row == 1
    assert status.last_attempt.outcome is Outcome.FAILED
    assert status.last_attempt.error is not None
    assert status.last_attempt.error.endswith("Failed: error connecting to db server: no reachable servers")
    assert status.last_success is not None and status.last_success.archive == kept[0]
    # A day later, `harel check` names the failing job and its error.
    finding = judge_backups(
        status_db[BACKUPS_COLLECTION].find(), status.last_success.finished_at + 27 * 3600, 26 * 3600
    )
    assert not finding.ok
    assert "compose/harel failed 1 time(s) in a row" in finding.found


# --- an S3 target (Helm) -------------------------------------------------------------------------------------


@requires_node
def test_an_s3_target_uploads_prunes_the_bucket_and_clears_the_scratch_space(
    backups: Backups, status_db: Any
) -> None:
    s3 = {
        "HAREL_BACKUP_S3_BUCKET": "harel-backups",
        "HAREL_BACKUP_S3_PREFIX": "prod/harel",
        "HAREL_BACKUP_S3_ENDPOINT": "https://minio.example.invalid:9000",
        "HAREL_BACKUP_TARGET": "s3://harel-backups/prod/harel",
    }
    bucket = backups.tmp / "s3" / "harel-backups" / "prod" / "harel"
    bucket.mkdir(parents=True)
    for day in range(1, 5):
        (bucket / f"harel-2024120{day}T030000Z.archive.gz").write_bytes(b"old")

    # As the Helm CronJob runs it: the password from a mounted file.
    password_file = backups.tmp / "backup-password"
    password_file.write_text(backups.env["HAREL_BACKUP_PASSWORD"] + "\n")
    s3["HAREL_BACKUP_PASSWORD_FILE"] = str(password_file)
    s3["HAREL_BACKUP_PASSWORD"] = ""
    key_file = backups.tmp / "secret-access-key"
    key_file.write_text("wJalrXUtnFEMI-example-key\n")
    s3["AWS_SECRET_ACCESS_KEY_FILE"] = str(key_file)
    s3["AWS_ACCESS_KEY_ID"] = "AKIAEXAMPLE"
    for step in ("dump", "upload-s3", "record"):
        completed = backups.run(step, **s3)
        assert completed.returncode == 0, f"{step}: {completed.stderr}"

    assert backups.archives() == [], "the scratch copy is removed once uploaded"
    in_bucket = sorted(path.name for path in bucket.iterdir())
    assert len(in_bucket) == 3
    assert in_bucket[:2] == ["harel-20241203T030000Z.archive.gz", "harel-20241204T030000Z.archive.gz"]
    assert all(
        call["argv"][:2] == ["--endpoint-url", s3["HAREL_BACKUP_S3_ENDPOINT"]]
        for call in backups.tool_calls("aws")
    )
    # The credentials reached the aws CLI's environment, the key from its file.
    assert {(call["key_id"], call["key"]) for call in backups.tool_calls("aws")} == {
        ("AKIAEXAMPLE", "wJalrXUtnFEMI-example-key")
    }
    [dump] = backups.tool_calls("mongodump")
    assert "password: 'it''s-a-secret-xxxxxxxxxxxx'\n" in dump["config"]
    [record] = backups.recorded()
    assert record["url"].startswith("mongodb://harel-backup:it's-a-secret-")
    replay(backups, status_db)
    [status] = parse_statuses(status_db[BACKUPS_COLLECTION].find())[0]
    assert status.last_attempt.target == "s3://harel-backups/prod/harel"
    assert status.last_attempt.archive == in_bucket[-1]
    assert status.last_attempt.kept == 3


@requires_node
def test_a_failed_upload_is_recorded_as_the_runs_failure(backups: Backups, status_db: Any) -> None:
    s3 = {
        "HAREL_BACKUP_S3_BUCKET": "harel-backups",
        "HAREL_BACKUP_S3_PREFIX": "harel",
        "HAREL_BACKUP_TARGET": "s3",
    }
    assert backups.run("dump", **s3).returncode == 0
    assert backups.run("upload-s3", **s3, FAKE_TOOL_FAIL="aws cp").returncode == 0, (
        "the chain goes on to record"
    )
    record = backups.run("record", **s3)
    assert record.returncode == 1
    replay(backups, status_db)
    [status] = parse_statuses(status_db[BACKUPS_COLLECTION].find())[0]
    assert status.last_success is None
    assert status.last_attempt.error is not None
    assert status.last_attempt.error.startswith("upload to s3://harel-backups/harel: upload failed: An error")


def test_record_without_a_dump_says_so(backups: Backups) -> None:
    completed = backups.run("record")
    assert completed.returncode == 1
    assert "no run to continue" in completed.stderr


# --- restore -------------------------------------------------------------------------------------------------


def test_restore_replays_the_oplog_and_drops_as_the_restore_user(backups: Backups) -> None:
    archive = backups.tmp / "harel-20250106T093000Z.archive.gz"
    archive.write_bytes(b"\x1f\x8b")
    completed = backups.run(
        "restore", str(archive), HAREL_RESTORE_USER="root", HAREL_RESTORE_PASSWORD="r00t-password"
    )
    assert completed.returncode == 0, completed.stderr
    [restore] = backups.tool_calls("mongorestore")
    assert set(restore["argv"]) >= {f"--archive={archive}", "--gzip", "--oplogReplay", "--drop"}
    assert "r00t-password" not in " ".join(restore["argv"])
    assert "password: 'r00t-password'" in restore["config"]
    assert "mongodb://root@mongo1:27017" in restore["config"]

    failed = backups.run(
        "restore",
        str(archive),
        HAREL_RESTORE_USER="root",
        HAREL_RESTORE_PASSWORD="x",
        FAKE_TOOL_FAIL="mongorestore",
    )
    assert failed.returncode == 1
    assert "restore failed" in failed.stderr
    missing = backups.run(
        "restore", str(backups.tmp / "nope"), HAREL_RESTORE_USER="root", HAREL_RESTORE_PASSWORD="x"
    )
    assert missing.returncode == 2


# --- the compose services, as rendered ---------------------------------------------------------------------------


def _on_this_machine(value: str, mounts: dict[str, Path]) -> str:
    """A path inside the container as the test's directories hold it (mounts: container path -> local path)."""
    for target, source in mounts.items():
        if value == target or value.startswith(f"{target}/"):
            return f"{source}{value.removeprefix(target)}"
    return value


def _run_rendered(backups: Backups, rendered: dict[str, Any], name: str) -> subprocess.CompletedProcess[str]:
    """Service `name` of the rendered compose project, run as its container would: its entrypoint and command, its
    environment, its secrets written as compose writes them (the value alone, mode 0400), the stand-in tools."""
    mounts = {
        "/harel/backup": SCRIPT.parent,
        "/backups": backups.directory,
        "/run/secrets": backups.tmp / "secrets",
        "/restore": backups.tmp / "restore",
        "/tmp": backups.tmp,
    }
    service = rendered["services"][name]
    for secret in service["secrets"]:
        path = Path(_on_this_machine(secret["target"], mounts))
        path.parent.mkdir(exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_text(secret_value(rendered["secrets"][secret["source"]]["environment"]))
        path.chmod(int(secret["mode"], 8))
    environment = {key: _on_this_machine(value, mounts) for key, value in service["environment"].items()}
    tools = {
        key: value
        for key, value in backups.env.items()
        if key in {"PATH", "TMPDIR"} or key.startswith("FAKE_")
    }
    return subprocess.run(
        [_on_this_machine(argument, mounts) for argument in [*service["entrypoint"], *service["command"]]],
        env={**tools, **environment},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@requires_node
@pytest.mark.parametrize("mode", get_args(TlsMode))
def test_compose_backup_and_restore_read_their_password_files_and_use_tls_from_prefer_tls_on(
    backups: Backups, mode: str
) -> None:
    rendered = render(env_file(backups.tmp, HAREL_TLS_MODE=mode), "backup")
    tls = "&tls=true&tlsCAFile=/tls/ca.crt" if mode in CLIENT_TLS_MODES else ""
    members = "mongo1:27017,mongo2:27017,mongo3:27017/?replicaSet=rs0&authSource=admin"

    backup = _run_rendered(backups, rendered, "backup")

    assert backup.returncode == 0, backup.stderr
    [dump] = backups.tool_calls("mongodump")
    assert dump["config"] == (
        f"uri: 'mongodb://harel-backup@{members}{tls}'\npassword: '{secret_value('HAREL_BACKUP_PASSWORD')}'\n"
    )
    [record] = backups.recorded()
    assert record["url"] == (
        f"mongodb://harel-backup:{secret_value('HAREL_BACKUP_PASSWORD')}@{members}&serverSelectionTimeoutMS=30000"
        + tls.replace("/tls/ca.crt", "%2Ftls%2Fca.crt")
    )
    assert len(backups.archives()) == 1

    (backups.tmp / "restore").mkdir()
    shutil.copy(backups.directory / backups.archives()[0], backups.tmp / "restore" / "archive.gz")
    restore = _run_rendered(backups, rendered, "restore")

    assert restore.returncode == 0, restore.stderr
    [mongorestore] = backups.tool_calls("mongorestore")
    assert mongorestore["config"] == (
        f"uri: 'mongodb://root@{members}{tls}'\npassword: '{secret_value('HAREL_MONGO_ROOT_PASSWORD')}'\n"
    )
    assert {"--oplogReplay", "--drop"} <= set(mongorestore["argv"])


def test_an_unknown_step_prints_the_usage(backups: Backups) -> None:
    completed = backups.run("backup-everything")
    assert completed.returncode == 2
    assert completed.stderr.startswith("usage: harel-backup.sh dump|upload-s3|record|run|restore ARCHIVE")
