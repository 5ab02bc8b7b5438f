"""`harel-stack backup` and `harel-stack restore FILE` against the fake Docker engine and compose runner of
test_stack_cli, and the archive check that runs before a restore touches anything."""

from __future__ import annotations

import gzip
import io
import stat
from pathlib import Path

import bson
import pytest

from harel_stack.archive import inspect
from harel_stack.errors import ArchiveError
from harel_stack.settings import SECRET_VARIABLES, parse_env
from tests.dump_archive import Namespace, crc64, read_archive, write_archive
from tests.unit.test_stack_cli import Harness, harness  # noqa: F401 (the fixture)


def archive_bytes(*, oplog: bool = True, documents: int = 3) -> bytes:
    namespaces = [
        Namespace(
            "harel",
            "executions",
            {"indexes": [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]},
            [bson.encode({"_id": f"exe-{n}", "version": n}) for n in range(documents)],
        ),
        Namespace("admin", "system.version", {}, [bson.encode({"_id": "featureCompatibilityVersion"})]),
    ]
    if oplog:
        namespaces.append(Namespace("", "oplog", {}))
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as packed:
        write_archive(packed, namespaces, "8.0.4")
    return buffer.getvalue()


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


# --- the archive check ------------------------------------------------------------------------------------------


def test_crc64_is_the_ecma_crc_mongodump_writes() -> None:
    # The catalogued check value of CRC-64/XZ (Go's crc64 with the ECMA table).
    assert crc64(b"123456789") == 0x995DC9BBDF1939FA
    assert crc64(b"56789", crc64(b"1234")) == crc64(b"123456789")


def test_an_archive_reads_back_whole_and_its_prelude_describes_it(tmp_path: Path) -> None:
    path = write(tmp_path, "harel-20250106T093000Z.archive.gz", archive_bytes())
    prelude = inspect(path)
    assert prelude.has_oplog
    assert prelude.databases() == ["admin", "harel"]
    assert prelude.describe() == (
        "mongodump harel-tests of MongoDB 8.0.4: 2 collection(s) in admin, harel, with its oplog"
    )
    contents = read_archive(gzip.GzipFile(path))
    assert [bson.decode(d)["_id"] for d in contents.documents[("harel", "executions")]] == [
        "exe-0",
        "exe-1",
        "exe-2",
    ]
    assert contents.documents[("", "oplog")] == []


def test_a_damaged_document_fails_its_collections_crc() -> None:
    raw = bytearray(gzip.decompress(archive_bytes()))
    document = bson.encode({"_id": "exe-1", "version": 1})
    at = raw.index(document)
    raw[at + len(document) - 2] ^= 0x01  # the version's value, still valid BSON
    with pytest.raises(AssertionError, match=r"\('harel', 'executions'\): CRC mismatch"):
        read_archive(io.BytesIO(bytes(raw)))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"not an archive at all, just text", "does not start with the mongodump archive magic number"),
        (gzip.compress(b"\x00" * 64), "does not start with the mongodump archive magic number"),
        (archive_bytes()[:40], "cannot be read as a mongodump archive"),
        (gzip.compress(gzip.decompress(archive_bytes())[:30]), "truncated"),
        (archive_bytes(oplog=False), "holds no oplog (not made with --oplog)"),
    ],
    ids=["text", "other gzip", "cut gzip", "cut archive", "no oplog"],
)
def test_a_file_that_cannot_be_restored_is_named_with_the_reason(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = write(tmp_path, "suspect.archive.gz", content)
    with pytest.raises(ArchiveError) as refused:
        inspect(path)
    assert reason in str(refused.value)
    assert str(refused.value).startswith(f"{path}: not a backup archive harel-stack can restore: ")
    assert refused.value.exit_code == 2


# --- harel-stack backup -----------------------------------------------------------------------------------------


def test_backup_runs_the_backup_one_shot_as_the_caller_into_a_private_directory(
    harness: Harness,  # noqa: F811
) -> None:
    assert harness.run("up") == 0
    assert harness.run("backup") == 0
    backups = harness.root / "compose" / "backups"
    assert backups.is_dir()
    assert stat.S_IMODE(backups.stat().st_mode) == 0o700
    runner = harness.composes[-1]
    # As the caller: compose/observability.yml takes the uid and gid from the variables harel-stack's compose runner
    # sets (test_stack_parts checks those).
    assert runner.calls == [(("run", "--rm", "backup"), False)]
    assert runner.profiles == [("backup",)]
    assert f"into {backups} (keeping 7)" in harness.out.getvalue()


def test_a_failed_backup_exits_1_saying_where_it_is_recorded(harness: Harness) -> None:  # noqa: F811
    assert harness.run("up") == 0
    harness.compose_codes["backup"] = 1
    assert harness.run("backup") == 1
    assert "the backup failed (exit 1)" in harness.err.getvalue()
    assert "recorded in harel.backups" in harness.err.getvalue()


def test_backup_completes_an_env_file_written_before_backups_existed(harness: Harness) -> None:  # noqa: F811
    env_file = harness.root / "compose" / ".env"
    env_file.write_text("HAREL_MONGO_ROOT_PASSWORD=r00t\nHAREL_APP_PASSWORD=app\n", encoding="utf-8")
    env_file.chmod(0o600)
    assert harness.run("backup") == 0
    values = parse_env(env_file.read_text(encoding="utf-8"))
    assert set(SECRET_VARIABLES) <= set(values)
    assert values["HAREL_MONGO_ROOT_PASSWORD"] == "r00t"
    assert len(values["HAREL_BACKUP_PASSWORD"]) == 32
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


# --- harel-stack restore ----------------------------------------------------------------------------------------


def test_restore_pauses_the_workers_restores_resets_the_users_and_starts_them(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    archive = write(tmp_path, "harel-20250106T093000Z.archive.gz", archive_bytes())
    assert harness.run("up") == 0
    assert harness.run("restore", str(archive), "--yes") == 0
    runner = harness.composes[-1]
    mount = f"{archive.resolve()}:/restore/archive.gz:ro"
    assert runner.calls == [
        (("stop", "worker"), False),
        (("run", "--rm", "--no-deps", "--volume", mount, "restore"), False),
        (("run", "--rm", "--no-deps", "mongo-init"), False),
        (("run", "--rm", "--no-deps", "mongo-ops-users"), False),
        (("start", "worker"), False),
    ]
    assert runner.profiles == [(), ("backup",), (), ("backup",), ()]
    out = harness.out.getvalue()
    assert "harel-20250106T093000Z.archive.gz: mongodump harel-tests of MongoDB 8.0.4" in out
    assert "restored harel-20250106T093000Z.archive.gz; workers started" in out


def test_restore_without_yes_says_what_it_would_replace_and_touches_nothing(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    archive = write(tmp_path, "harel-20250106T093000Z.archive.gz", archive_bytes())
    assert harness.run("up") == 0
    calls_before = len(harness.compose_calls)
    assert harness.run("restore", str(archive)) == 2
    assert "anything written since is lost. Run again with --yes" in harness.err.getvalue()
    assert len(harness.compose_calls) == calls_before


def test_restore_refuses_a_file_that_is_not_a_backup_before_stopping_anything(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    assert harness.run("up") == 0
    calls_before = len(harness.compose_calls)
    missing = tmp_path / "nope.archive.gz"
    assert harness.run("restore", str(missing), "--yes") == 2
    assert harness.err.getvalue() == (
        f"{missing}: not a backup archive harel-stack can restore: no such file; nothing was changed\n"
    )
    without_oplog = write(tmp_path, "old.archive.gz", archive_bytes(oplog=False))
    assert harness.run("restore", str(without_oplog), "--yes") == 2
    assert "holds no oplog" in harness.err.getvalue()
    assert len(harness.compose_calls) == calls_before


def test_a_failed_restore_leaves_the_workers_stopped_and_says_so(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    archive = write(tmp_path, "harel-20250106T093000Z.archive.gz", archive_bytes())
    assert harness.run("up") == 0
    harness.compose_codes["restore"] = 1
    assert harness.run("restore", str(archive), "--yes") == 1
    runner = harness.composes[-1]
    assert [call[0][0] for call in runner.calls] == ["stop", "run"]
    assert "The workers stay stopped" in harness.err.getvalue()


def test_users_that_cannot_be_reset_after_a_restore_keep_the_workers_stopped(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    archive = write(tmp_path, "harel-20250106T093000Z.archive.gz", archive_bytes())
    assert harness.run("up") == 0
    harness.compose_codes["mongo-init"] = 1
    assert harness.run("restore", str(archive), "--yes") == 1
    assert "restored, but mongo-init failed" in harness.err.getvalue()
    assert ("start", "worker") not in [call[0] for call in harness.composes[-1].calls]
