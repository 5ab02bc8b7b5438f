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
from tests.unit.test_stack_cli import FakeClusterProbe, Harness, harness  # noqa: F401 (the fixture)


def archive_bytes(
    *, oplog: bool = True, documents: int = 3, admin: bool = True, database: str = "harel"
) -> bytes:
    """A replica set's archive (every database, the oplog); `oplog=False, admin=False`: the sharded cluster's (the
    app database only, through the router)."""
    namespaces = [
        Namespace(
            database,
            "executions",
            {"indexes": [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]},
            [bson.encode({"_id": f"exe-{n}", "version": n}) for n in range(documents)],
        ),
    ]
    if admin:
        namespaces.append(
            Namespace("admin", "system.version", {}, [bson.encode({"_id": "featureCompatibilityVersion"})])
        )
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


# --- the sharded cluster (compose/sharded.yml's backup and restore: harel-backup.sh through the router) -----------


def cluster_archive() -> bytes:
    return archive_bytes(oplog=False, admin=False)


def up_sharded(harness: Harness) -> None:  # noqa: F811
    harness.probe = FakeClusterProbe(harness.clock)
    assert harness.run("up", "--sharded") == 0


def test_backup_of_a_cluster_up_sharded_started_runs_the_one_shot_with_the_clusters_files(
    harness: Harness,  # noqa: F811
) -> None:
    up_sharded(harness)
    assert harness.run("backup") == 0
    runner = harness.composes[-1]
    # The containers say it is the cluster (compose/.env does not): compose/sharded.yml and its profile, whose
    # backup one-shot reaches the router.
    assert runner.sharded is True
    assert runner.calls == [(("run", "--rm", "backup"), False)]
    assert runner.profiles == [("backup",)]
    backups = harness.root / "compose" / "backups"
    assert stat.S_IMODE(backups.stat().st_mode) == 0o700
    out = harness.out.getvalue()
    assert (
        f"backing up the sharded cluster's harel database through the router into {backups} (keeping 7)"
        in out
    )
    assert "the workers paused for the dump" in out


def test_backup_with_nothing_running_follows_harel_sharded(harness: Harness) -> None:  # noqa: F811
    up_sharded(harness)
    assert harness.run("down") == 0
    env_file = harness.root / "compose" / ".env"
    env_file.write_text(env_file.read_text(encoding="utf-8") + "HAREL_SHARDED=1\n", encoding="utf-8")
    assert harness.run("backup") == 0
    assert harness.composes[-1].sharded is True
    assert "backing up the sharded cluster's" in harness.out.getvalue()


def test_a_failed_backup_of_the_cluster_exits_1_saying_where_it_is_recorded(
    harness: Harness,  # noqa: F811
) -> None:
    up_sharded(harness)
    harness.compose_codes["backup"] = 1
    assert harness.run("backup") == 1
    assert "the backup failed (exit 1)" in harness.err.getvalue()
    assert "recorded in harel.backups" in harness.err.getvalue()


def test_restore_into_the_cluster_leaves_the_workers_running_and_paused_and_says_what_is_next(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    archive = write(tmp_path, "harel-20250106T093000Z.archive.gz", cluster_archive())
    up_sharded(harness)
    assert harness.run("restore", str(archive), "--yes") == 0
    runner = harness.composes[-1]
    assert runner.sharded is True
    mount = f"{archive.resolve()}:/restore/archive.gz:ro"
    # No stop and start of the workers: the script pauses them and leaves them paused. No users reset: the archive
    # holds the harel database only.
    assert runner.calls == [(("run", "--rm", "--no-deps", "--volume", mount, "restore"), False)]
    assert runner.profiles == [("backup",)]
    out = harness.out.getvalue()
    assert (
        "harel-20250106T093000Z.archive.gz: mongodump harel-tests of MongoDB 8.0.4: 1 collection(s) in harel, no oplog"
        in out
    )
    assert "restored harel-20250106T093000Z.archive.gz; the workers stay paused" in out
    compose = (
        "docker compose -f compose/docker-compose.yml -f compose/sharded.yml --env-file compose/.env -p harel "
        "--profile sharded"
    )
    partitions, resume = out.index("`harel partitions init`"), out.index("`harel resume`")
    assert partitions < resume
    assert f"  {compose} run --rm --no-deps sharded-init\n" in out
    assert f"  {compose} exec worker harel resume\n" in out


def test_restore_into_the_cluster_refuses_a_replica_sets_archive_and_one_without_harel(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    up_sharded(harness)
    calls_before = len(harness.compose_calls)
    replica_set = write(tmp_path, "rs.archive.gz", archive_bytes())
    assert harness.run("restore", str(replica_set), "--yes") == 2
    assert "it holds an oplog: a replica set's backup" in harness.err.getvalue()
    assert harness.err.getvalue().endswith("nothing was changed\n")
    other = write(tmp_path, "other.archive.gz", archive_bytes(oplog=False, admin=False, database="shop"))
    assert harness.run("restore", str(other), "--yes") == 2
    assert "it holds no harel database" in harness.err.getvalue()
    # Without --yes: what it would replace, nothing run.
    archive = write(tmp_path, "harel.archive.gz", cluster_archive())
    assert harness.run("restore", str(archive)) == 2
    assert "replaces the harel database's collections" in harness.err.getvalue()
    assert len(harness.compose_calls) == calls_before


def test_the_replica_set_refuses_the_clusters_archive(harness: Harness, tmp_path: Path) -> None:  # noqa: F811
    assert harness.run("up") == 0
    archive = write(tmp_path, "harel.archive.gz", cluster_archive())
    assert harness.run("restore", str(archive), "--yes") == 2
    assert "holds no oplog" in harness.err.getvalue()


def test_a_failed_restore_into_the_cluster_says_the_script_tells_whether_the_workers_stay_paused(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    archive = write(tmp_path, "harel.archive.gz", cluster_archive())
    up_sharded(harness)
    harness.compose_codes["restore"] = 1
    assert harness.run("restore", str(archive), "--yes") == 1
    assert [call[0][0] for call in harness.composes[-1].calls] == ["run"]
    assert "the restore failed (exit 1)" in harness.err.getvalue()
    assert "whether the workers stay paused" in harness.err.getvalue()
    assert "restored" not in harness.out.getvalue()
