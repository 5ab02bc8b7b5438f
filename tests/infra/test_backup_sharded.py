"""The sharded mode of helm/harel-stack/files/backup/harel-backup.sh (HAREL_BACKUP_ROUTERS), run for real by bash
with the real mongosh (tests/tools) running pause-workers.js and record-backup.js through the fake cluster's
routers (tests/fake_mongod), and stand-ins for mongodump and mongorestore that also write down what the cluster
looked like when they ran. The workers are stand-ins too, beating as `harel.heartbeat` does: one that pauses when
its beat returns the request, one of a version that never acknowledges. The compose stack's backup and restore
one-shots (compose/sharded.yml) run here too, with the environment Compose's own binary renders for them.

What is not run here: the real mongodump and mongorestore, a real mongos (its balancer, `balancerStop` waiting
for a round), and authentication: the fake cluster has none, so the mongosh used here drops the credentials
from the URLs the scripts build (`STRIP_CREDENTIALS`); the roles the backup user needs for the pause and the
balancer are not checked by any test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harel.backups import BACKUPS_COLLECTION, Outcome, parse_statuses
from harel.heartbeat import MongoHeartbeats
from harel.pausing import MongoPauses
from harel_stack.cli import Dependencies
from harel_stack.compose import DockerCompose
from harel_stack.project import Project
from harel_stack.settings import load_settings
from tests.fake_mongod.deployment import ClusterDeployment
from tests.fake_mongod.fixtures import CLIENT_OPTIONS
from tests.infra.compose_render import REPOSITORY_ROOT, env_file
from tests.infra.test_backup_script import FAKE_MONGODUMP, SCRIPT, Backups, stand_in
from tests.infra.test_compose_sharded import rendered_command
from tests.tools.mongosh import MONGOSH

pytestmark = pytest.mark.infra

requires_mongosh = pytest.mark.skipif(not MONGOSH.exists(), reason="mongosh is installed by `make venv`")

# Loaded before each script: `new Mongo(url)` without the user and password (the fake cluster has no users).
STRIP_CREDENTIALS = """\
const RealMongo = Mongo;
Mongo = function (url) { return new RealMongo(url.replace(/\\/\\/[^@/]*@/, '//')); };
"""

# Before doing what the stand-in does: what the cluster looked like, written down with the call.
OBSERVE = """\
import json, os, pathlib
from pymongo import MongoClient
with MongoClient(os.environ["FAKE_OBSERVE_URL"], serverSelectionTimeoutMS=5000) as observed:
    seen = {
        "balancer": observed.admin.command("balancerStatus")["mode"],
        "pause": observed.harel.harel_meta.find_one({"_id": "pause"}) is not None,
        "paused": sorted(w["_id"] for w in observed.harel.workers.find({"paused_at": {"$exists": True}})),
    }
pathlib.Path(os.environ["FAKE_OBSERVED_LOG"]).open("a").write(json.dumps({"tool": TOOL, **seen}) + "\\n")
"""

HEARTBEAT = 0.2  # the stand-in workers' interval; the script is told 1 s, so a worker is live for 3 s


@dataclass
class StandInWorker:
    """Beats into `workers` through the routers as a harel worker does; `obeys`: it pauses when told (at once:
    no step in flight), and says so in its next beat."""

    client: MongoClient[dict[str, Any]]
    worker_id: str
    obeys: bool = True
    stop: threading.Event = field(default_factory=threading.Event)
    told: bool = False

    def run(self) -> None:
        beats = MongoHeartbeats(self.client)
        while not self.stop.is_set():
            beat = beats.beat(
                self.worker_id, {"host": "stand-in", "pid": 1}, {}, paused=self.told and self.obeys
            )
            self.told = beat.pause_requested
            self.stop.wait(HEARTBEAT)


@dataclass
class Cluster:
    deployment: ClusterDeployment
    client: MongoClient[dict[str, Any]]
    workers: list[StandInWorker] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def worker(self, worker_id: str, *, obeys: bool = True) -> StandInWorker:
        worker = StandInWorker(self.client, worker_id, obeys)
        thread = threading.Thread(target=worker.run, name=f"stand-in-{worker_id}", daemon=True)
        thread.start()
        self.workers.append(worker)
        self.threads.append(thread)
        return worker

    def balancer(self) -> str:
        return str(self.client.admin.command("balancerStatus")["mode"])

    def flagged(self) -> list[str]:
        return sorted(
            w["_id"]
            for w in self.client.harel.workers.find(
                {"$or": [{"pause_requested": {"$exists": True}}, {"paused_at": {"$exists": True}}]}
            )
        )


@pytest.fixture
def cluster(fake_cluster: ClusterDeployment) -> Iterator[Cluster]:
    with MongoClient(fake_cluster.url, **CLIENT_OPTIONS) as client:
        state = Cluster(fake_cluster, client)
        yield state
        for worker in state.workers:
            worker.stop.set()
        for thread in state.threads:
            thread.join(5)


@pytest.fixture
def sharded(tmp_path: Path, cluster: Cluster) -> Backups:
    tools = tmp_path / "bin"
    tools.mkdir()
    stand_in(tools, "mongodump", OBSERVE + FAKE_MONGODUMP)
    stand_in(tools, "mongorestore", OBSERVE + FAKE_MONGODUMP)
    preamble = tmp_path / "strip-credentials.js"
    preamble.write_text(STRIP_CREDENTIALS)
    mongosh = tools / "mongosh"
    # the script's own arguments, the preamble before the script (its last argument)
    mongosh.write_text(f'#!/usr/bin/env bash\nexec "{MONGOSH}" "${{@:1:$#-1}}" "{preamble}" "${{@: -1}}"\n')
    mongosh.chmod(0o755)
    routers = ",".join(router.host_port for router in cluster.deployment.routers)
    env = {
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "TMPDIR": str(tmp_path),
        "FAKE_TOOLS_LOG": str(tmp_path / "tools.log"),
        "FAKE_OBSERVED_LOG": str(tmp_path / "observed.log"),
        "FAKE_OBSERVE_URL": cluster.deployment.url,
        "HAREL_BACKUP_ROUTERS": routers,
        "HAREL_BACKUP_USER": "harel-backup",
        "HAREL_BACKUP_PASSWORD": "a-secret-" + "x" * 16,
        "HAREL_BACKUP_DATABASE": "harel",
        "HAREL_BACKUP_DIR": str(tmp_path / "backups"),
        "HAREL_BACKUP_KEEP": "3",
        "HAREL_BACKUP_JOB": "k8s/harel",
        "HAREL_BACKUP_TARGET": "pvc:harel-backups",
        "HAREL_BACKUP_HEARTBEAT_SECONDS": "1",
        "HAREL_BACKUP_PAUSE_TIMEOUT": "20",
    }
    return Backups(tmp_path, env, timeout=240.0)


def observed(backups: Backups) -> list[dict[str, Any]]:
    log = Path(backups.env["FAKE_OBSERVED_LOG"])
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def last_run(cluster: Cluster) -> Any:
    [status] = parse_statuses(cluster.client.harel[BACKUPS_COLLECTION].find())[0]
    return status


@requires_mongosh
def test_a_sharded_run_dumps_through_the_routers_quiesced_then_resumes_and_records(
    sharded: Backups, cluster: Cluster
) -> None:
    cluster.worker("w-1")
    cluster.worker("w-2")
    assert cluster.balancer() == "full"

    completed = sharded.run("run")

    assert completed.returncode == 0, completed.stderr
    [dump] = sharded.tool_calls("mongodump")
    assert "--oplog" not in dump["argv"] and {"--gzip", "--db=harel"} <= set(dump["argv"])
    routers = sharded.env["HAREL_BACKUP_ROUTERS"]
    assert dump["config"] == (
        f"uri: 'mongodb://harel-backup@{routers}/?authSource=admin'\npassword: '{sharded.env['HAREL_BACKUP_PASSWORD']}'\n"
    )
    [seen] = observed(sharded)
    assert seen == {"tool": "mongodump", "balancer": "off", "pause": True, "paused": ["w-1", "w-2"]}, (
        "the dump ran with the balancer stopped and every live worker paused"
    )
    assert "2 live worker(s) paused: w-1, w-2" in completed.stderr
    assert cluster.balancer() == "full", "the balancer runs again"
    assert MongoPauses(cluster.client).status().request is None, "the workers were resumed"
    assert cluster.flagged() == []
    assert len(sharded.archives()) == 1
    status = last_run(cluster)
    assert status.last_attempt.outcome is Outcome.SUCCEEDED
    assert status.last_attempt.archive == sharded.archives()[0]
    assert sharded.env["HAREL_BACKUP_PASSWORD"] not in completed.stderr


@requires_mongosh
def test_workers_that_never_acknowledge_fail_the_run_and_everything_is_resumed(
    sharded: Backups, cluster: Cluster
) -> None:
    cluster.worker("w-1")
    cluster.worker("old", obeys=False)

    completed = sharded.run("run", HAREL_BACKUP_PAUSE_TIMEOUT="3")

    assert completed.returncode == 1
    assert sharded.tool_calls("mongodump") == [], "nothing is dumped while a worker may still write"
    assert sharded.archives() == []
    assert cluster.balancer() == "full"
    assert MongoPauses(cluster.client).status().request is None
    assert cluster.flagged() == [], "w-1 runs again, and old was never stopped"
    run = last_run(cluster).last_attempt
    assert run.outcome is Outcome.FAILED
    assert run.error is not None
    assert run.error.startswith("the workers did not pause: ")
    assert run.error.endswith("1 live worker(s) did not acknowledge the pause within 3s: old")


@requires_mongosh
def test_a_failed_dump_still_resumes_and_is_recorded(sharded: Backups, cluster: Cluster) -> None:
    cluster.worker("w-1")

    completed = sharded.run("run", FAKE_TOOL_FAIL="mongodump")

    assert completed.returncode == 1
    assert [seen["paused"] for seen in observed(sharded)] == [["w-1"]]
    assert cluster.balancer() == "full"
    assert MongoPauses(cluster.client).status().request is None
    run = last_run(cluster).last_attempt
    assert run.outcome is Outcome.FAILED
    assert run.error is not None and run.error.startswith("mongodump: ")


@requires_mongosh
def test_a_pause_and_a_balancer_stop_that_were_there_before_are_left_as_they_were(
    sharded: Backups, cluster: Cluster
) -> None:
    cluster.client.admin.command("balancerStop")
    operators = MongoPauses(cluster.client).request("the operator's")
    cluster.worker("w-1")

    completed = sharded.run("run")

    assert completed.returncode == 0, completed.stderr
    assert cluster.balancer() == "off", "it was off before the run"
    status = MongoPauses(cluster.client, heartbeat_seconds=1).status()
    assert status.request == operators, "the operator's pause stands"
    assert [w.worker_id for w in status.waiting] == []


@requires_mongosh
def test_a_sharded_restore_keeps_the_workers_paused_and_says_what_comes_next(
    sharded: Backups, cluster: Cluster
) -> None:
    cluster.worker("w-1")
    archive = sharded.tmp / "harel-20250106T093000Z.archive.gz"
    archive.write_bytes(b"\x1f\x8b")

    completed = sharded.run(
        "restore", str(archive), HAREL_RESTORE_USER="root", HAREL_RESTORE_PASSWORD="r00t-password"
    )

    assert completed.returncode == 0, completed.stderr
    [restore] = sharded.tool_calls("mongorestore")
    assert "--oplogReplay" not in restore["argv"]
    assert {
        f"--archive={archive}",
        "--gzip",
        "--drop",
        "--nsInclude=harel.*",
        "--nsExclude=harel.workers",
    } <= set(restore["argv"])
    assert restore["config"].startswith(
        f"uri: 'mongodb://root@{sharded.env['HAREL_BACKUP_ROUTERS']}/?authSource=admin'"
    )
    assert [(seen["balancer"], seen["paused"]) for seen in observed(sharded)] == [("off", ["w-1"])]
    assert cluster.balancer() == "full", "the balancer runs again: `harel partitions init` needs it"
    assert MongoPauses(cluster.client).status().request is not None, "the workers stay paused"
    assert "harel partitions init" in completed.stderr and "harel resume" in completed.stderr
    assert "the mongo image has" in completed.stderr


@requires_mongosh
def test_a_restore_whose_workers_do_not_pause_does_not_start(sharded: Backups, cluster: Cluster) -> None:
    cluster.worker("old", obeys=False)
    archive = sharded.tmp / "harel-20250106T093000Z.archive.gz"
    archive.write_bytes(b"\x1f\x8b")

    completed = sharded.run(
        "restore",
        str(archive),
        HAREL_RESTORE_USER="root",
        HAREL_RESTORE_PASSWORD="x",
        HAREL_BACKUP_PAUSE_TIMEOUT="2",
    )

    assert completed.returncode == 1
    assert "restore not started: the workers did not pause" in completed.stderr
    assert sharded.tool_calls("mongorestore") == []
    assert cluster.balancer() == "full"
    assert MongoPauses(cluster.client).status().request is None


@requires_mongosh
def test_a_run_stopped_while_it_waits_resumes_what_it_stopped(sharded: Backups, cluster: Cluster) -> None:
    cluster.worker("old", obeys=False)
    process = subprocess.Popen(
        ["bash", str(SCRIPT), "run"],
        env={**sharded.env, "HAREL_BACKUP_PAUSE_TIMEOUT": "300"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while cluster.flagged() != ["old"] or cluster.balancer() != "off":
            assert time.monotonic() < deadline, "the run did not pause the workers"
            time.sleep(0.1)
        time.sleep(3)  # the pause is written: the waiter (a mongosh of its own) runs by now
        process.send_signal(signal.SIGTERM)
        # well before the pause's timeout: a waiter left running would hold the run (and its pipes) that long
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    assert cluster.balancer() == "full"
    assert MongoPauses(cluster.client).status().request is None
    assert cluster.flagged() == []
    time.sleep(1.5)
    assert cluster.flagged() == [], "the waiter was stopped too: nothing flags the workers again"


# --- the compose stack's one-shots (compose/sharded.yml's backup and restore) ---------------------------------------


def compose_environment(service: str, tmp_path: Path) -> dict[str, str]:
    """The environment Compose's own binary renders for the sharded stack's `service` (`harel-stack backup`'s command
    line, the backup profile added), as the container gets it."""
    tmp_path.mkdir()
    env = env_file(tmp_path, HAREL_SHARDED="1")
    runner = Dependencies().compose(Project(REPOSITORY_ROOT), load_settings(env))
    assert isinstance(runner, DockerCompose)
    rendered = rendered_command(runner.command("config", profiles=["backup"]), env)
    return {key: str(value) for key, value in rendered["services"][service]["environment"].items()}


@requires_mongosh
def test_the_compose_one_shots_environment_runs_the_sharded_mode_and_its_restore(
    sharded: Backups, cluster: Cluster
) -> None:
    """What compose gives the container, with only what differs here put in: the fake cluster's router for mongos,
    and the host's paths for the container's (the password files compose mounts, /backups, HOME)."""
    cluster.worker("w-1")
    secrets = sharded.tmp / "secrets"
    secrets.mkdir()
    (secrets / "backup_password").write_text(sharded.env["HAREL_BACKUP_PASSWORD"] + "\n")
    (secrets / "mongo_root_password").write_text("r00t-password\n")
    routers = sharded.env["HAREL_BACKUP_ROUTERS"]
    tools = {
        key: sharded.env[key]
        for key in sharded.env
        if key.startswith("FAKE_") or key in ("PATH", "PYTHONPATH")
    }

    def container(service: str) -> dict[str, str]:
        rendered = compose_environment(service, sharded.tmp / service)
        assert rendered.pop("HAREL_BACKUP_ROUTERS") == "mongos:27017"
        assert rendered.pop("HAREL_BACKUP_DIR") == "/backups"
        assert rendered.pop("HOME") == "/tmp"
        for key, value in list(rendered.items()):
            if key.endswith("_PASSWORD_FILE"):
                rendered[key] = str(secrets / Path(value).relative_to("/run/secrets"))
        return {
            **tools,
            **rendered,
            "TMPDIR": str(sharded.tmp),
            "HOME": str(sharded.tmp),
            "HAREL_BACKUP_ROUTERS": routers,
            "HAREL_BACKUP_DIR": str(sharded.directory),
        }

    backup = Backups(sharded.tmp, container("backup"), timeout=240.0)
    completed = backup.run("run")
    assert completed.returncode == 0, completed.stderr
    [dump] = backup.tool_calls("mongodump")
    assert "--oplog" not in dump["argv"] and "--db=harel" in dump["argv"]
    assert dump["config"].startswith(f"uri: 'mongodb://harel-backup@{routers}/?authSource=admin'")
    assert [(seen["balancer"], seen["paused"]) for seen in observed(backup)] == [("off", ["w-1"])]
    assert MongoPauses(cluster.client).status().request is None, "the workers were resumed"
    status = last_run(cluster)
    assert status.last_attempt.outcome is Outcome.SUCCEEDED
    assert status.last_attempt.archive == backup.archives()[0]

    restore = Backups(sharded.tmp, container("restore"), timeout=240.0)
    archive = sharded.directory / backup.archives()[0]
    completed = restore.run("restore", str(archive))
    assert completed.returncode == 0, completed.stderr
    [restored] = restore.tool_calls("mongorestore")
    assert "--oplogReplay" not in restored["argv"] and "--nsInclude=harel.*" in restored["argv"]
    assert restored["config"].startswith(f"uri: 'mongodb://root@{routers}/?authSource=admin'")
    assert MongoPauses(cluster.client).status().request is not None, "the workers stay paused"
    assert "harel partitions init" in completed.stderr and "harel resume" in completed.stderr
