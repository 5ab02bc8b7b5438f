"""A backup taken mid-workflow restores into a fresh database, and the workflow completes there: nothing lost,
nothing applied twice.

Workers run the smoke workflow (fork/join, durable timers) on one database until a cut point, then stop (the
restore procedure pauses workers; a backup itself runs online, its consistency point given by the oplog it
captures). Every harel collection is exported in the archive format mongorestore reads (tests/dump_archive.py:
the Database Tools cannot be installed here, so PyMongo's `bson` writes and reads it), restored into a fresh
database, and new workers carry the workflow to its end there. The smoke checker then proves the run: every
timer fired once and not early, every child created once, the join after every region, no event twice.
"""

from __future__ import annotations

import gzip
import io
import time
import uuid
from collections.abc import Callable
from typing import Any

import bson
import pytest
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient

from harel.app import App
from harel.client import start_execution
from harel.model import ExecutionStatus
from harel.smoke import REGIONS, SmokeRun, check, gather, register_smoke
from tests.dump_archive import export_database, read_archive, restore_archive
from tests.fake_mongod.fixtures import Deployment
from tests.wire.in_process import Seam, Seams, running

pytestmark = pytest.mark.wire

# Long enough that the cut lands while timers are armed, short enough for a quick test.
TIMER_SECONDS = 1.5
TIMEOUT = 30.0


def wait_for(what: str, condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting until {what}")
        time.sleep(0.05)


def regions_resting(seam: Seam, root_id: str) -> bool:
    run = gather(seam.store, root_id, TIMEOUT)
    children = [exe for exe_id, exe in run.executions.items() if exe_id != root_id]
    return len(children) == len(REGIONS) and all(
        any(path.endswith("resting") for path in child.configuration) for child in children
    )


def root_cooling(seam: Seam, root_id: str) -> bool:
    root = seam.store.load(root_id)
    return root is not None and any(path.endswith("cooling") for path in root.configuration)


CUTS = {
    "every region resting on its timer": regions_resting,
    "after the join, the final timer armed": root_cooling,
}


def raw_collections(client: MongoClient[Any], db_name: str) -> dict[str, list[bytes]]:
    database = client.get_database(db_name, codec_options=bson.CodecOptions(document_class=RawBSONDocument))
    return {
        name: [document.raw for document in database[name].find({}).sort("_id", 1)]
        for name in sorted(database.list_collection_names())
    }


@pytest.mark.parametrize("cut", list(CUTS))
def test_a_backup_taken_mid_workflow_restores_and_the_workflow_completes(
    replica_set: Deployment, admin: MongoClient[Any], cut: str
) -> None:
    app = App("restore")
    chart_id = register_smoke(app, region_timer=TIMER_SECONDS, final_timer=TIMER_SECONDS)
    source = Seams(replica_set.url, replica_set.db_name)
    restored_db = f"{replica_set.db_name}_restored"
    target = Seams(replica_set.url, restored_db)
    try:
        seam = source.open("before-backup")
        root_id = f"restore-{uuid.uuid4().hex[:10]}"
        start_execution(seam.store, seam.transport, app, chart_id, execution_id=root_id)
        with running([seam.worker(app, lease_seconds=5), seam.worker(app, lease_seconds=5)]):
            wait_for(cut, lambda: CUTS[cut](seam, root_id))
        before: SmokeRun = gather(seam.store, root_id, TIMEOUT)
        assert before.executions[root_id].status is ExecutionStatus.RUNNING, "the cut came after the end"
        assert any(exe.timers for exe in before.executions.values()), "no timer armed at the cut"

        server_version = admin.server_info()["version"]
        archive = export_database(admin[replica_set.db_name], server_version)
        exported = raw_collections(admin, replica_set.db_name)
        assert "executions" in exported

        # The archive holds every harel collection, byte for byte, and reads back with every CRC matching.
        contents = read_archive(gzip.GzipFile(fileobj=io.BytesIO(archive)))
        assert contents.prelude.has_oplog
        assert {c.name for c in contents.prelude.collections if c.db == replica_set.db_name} == set(exported)
        for name, documents in exported.items():
            assert contents.documents[(replica_set.db_name, name)] == documents, name

        restored = restore_archive(archive, admin[restored_db], from_db=replica_set.db_name)
        assert restored == {name: len(documents) for name, documents in exported.items()}
        assert raw_collections(admin, restored_db) == exported, "a document changed on the way"
        indexes_before = {
            name: sorted(index["name"] for index in admin[replica_set.db_name][name].list_indexes())
            for name in exported
        }
        indexes_after = {
            name: sorted(index["name"] for index in admin[restored_db][name].list_indexes())
            for name in exported
        }
        assert indexes_after == indexes_before

        after_restore = target.open("after-restore")
        with running(
            [after_restore.worker(app, lease_seconds=5), after_restore.worker(app, lease_seconds=5)]
        ):
            wait_for(
                "the restored workflow completed",
                lambda: (
                    (root := after_restore.store.load(root_id)) is not None
                    and root.status is not ExecutionStatus.RUNNING
                ),
            )
        report = check(gather(after_restore.store, root_id, TIMEOUT))
        assert report.passed, report.failures

        # Everything that had taken effect before the backup is in the restored history once, unchanged.
        finished = gather(after_restore.store, root_id, TIMEOUT)
        for exe_id, trace in before.traces.items():
            handled_before = [step["event_id"] for step in trace if step.get("handled")]
            handled_after = [step["event_id"] for step in finished.traces[exe_id] if step.get("handled")]
            assert handled_after[: len(handled_before)] == handled_before, exe_id
        # The source database, with its workers stopped, is left as it was at the cut.
        assert seam.store.load(root_id).status is ExecutionStatus.RUNNING  # type: ignore[union-attr]
    finally:
        source.close()
        target.close()
        if replica_set.is_real:
            admin.drop_database(restored_db)
