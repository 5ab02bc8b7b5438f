"""The replica-set init and reconcile (compose/mongo-init/rs_init.py) run as the Helm init Job runs it - a process
with `--config init-config.json`, `--timeout` and its secret files - growing a set from one member to three and
shrinking it back, over the wire against the fake replica set (tests/fake_mongod).

What the fake can and cannot stand in for: the first member is a real fake server (auth on, root user created
first, awaiting replSetInitiate). Each other member is a second fake server awaiting replSetInitiate: it answers
the `hello` rs_init.py sends before adding a host, and the driver's monitor finds it where the primary's `hello`
lists it. Once in the configuration, a member's state is the one the first member simulates (replset.py):
SECONDARY unless the test sets another with `set_member_state` - nothing is replicated, and the other servers
never learn the configuration. So these tests cover every command rs_init.py sends and the configuration the
primary holds after each run; an initial sync actually completing is the simulated state changing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from tests.fake_mongod.fixtures import AuthenticatedFake
from tests.fake_mongod.server import FakeMongod

RS_INIT = Path(__file__).resolve().parents[2] / "compose" / "mongo-init" / "rs_init.py"
APP_PASSWORD = "app-password-1"
# A run that does not end by itself within this is a bug of the run, not a slow machine.
RUN_GUARD_SECONDS = 120


@dataclass
class InitJob:
    """The init Job's files (init-config.json, the mounted Secret) and the members it is pointed at."""

    first: AuthenticatedFake
    others: list[FakeMongod]
    directory: Path

    def run(self, members: int, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """rs_init.py as the Job's container runs it, wanting the first `members` members."""
        config = self.directory / "init-config.json"
        hosts = [self.first.host_port, *(other.host_port for other in self.others)][:members]
        config.write_text(
            json.dumps(
                {
                    "replicaSetName": "rs0",
                    "dataMembers": hosts,
                    "arbiter": None,
                    "database": "harel",
                    "rootUsername": AuthenticatedFake.ROOT,
                    "appUsername": "harel",
                    "tlsCAFile": None,
                }
            )
        )
        auth = self.directory / "auth"
        auth.mkdir(exist_ok=True)
        (auth / "root-password").write_text(self.first.root_password)
        (auth / "app-password").write_text(APP_PASSWORD)
        # The optional `previous` volume is mounted without its file outside a root password rotation.
        (self.directory / "previous").mkdir(exist_ok=True)
        return subprocess.run(
            [sys.executable, str(RS_INIT), "--config", str(config), "--timeout", str(timeout)],
            env={
                "PATH": "/usr/bin:/bin",
                "HAREL_MONGO_ROOT_PASSWORD_FILE": str(auth / "root-password"),
                "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD_FILE": str(
                    self.directory / "previous" / "previous-root-password"
                ),
                "HAREL_APP_PASSWORD_FILE": str(auth / "app-password"),
            },
            capture_output=True,
            text=True,
            timeout=RUN_GUARD_SECONDS,
            check=False,
        )

    def config(self) -> dict[str, Any]:
        """The configuration the first member holds, read as root over the wire."""
        with MongoClient(
            self.first.host_port,
            directConnection=True,
            username=AuthenticatedFake.ROOT,
            password=self.first.root_password,
            authSource="admin",
            serverSelectionTimeoutMS=10_000,
        ) as client:
            return dict(client.admin.command("replSetGetConfig")["config"])

    def members(self) -> list[tuple[str, int, float]]:
        """(host, votes, priority) of each configured member."""
        return [(m["host"], m["votes"], m["priority"]) for m in self.config()["members"]]

    def host(self, index: int) -> str:
        return self.first.host_port if index == 0 else self.others[index - 1].host_port


@pytest.fixture
def init_job(fake_rs_auth: AuthenticatedFake, tmp_path: Path) -> Iterator[InitJob]:
    # Member 0 as on its first start in the StatefulSet: the root user exists, the set is not initiated yet.
    fake_rs_auth.server.set_initialized(False)
    others = [FakeMongod().start() for _ in range(2)]
    for other in others:
        other.set_initialized(False)
    yield InitJob(fake_rs_auth, others, tmp_path)
    for other in others:
        other.stop()


def _changes(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The membership changes a run applied, as it logged them."""
    return [line for line in result.stdout.splitlines() if "(config version" in line]


def test_the_set_grows_from_one_member_to_three_one_vote_at_a_time(init_job: InitJob) -> None:
    first, second, third = (init_job.host(index) for index in range(3))

    one = init_job.run(members=1)
    assert one.returncode == 0, one.stderr
    assert "mongo-init: rs0 not yet initiated: initiating" in one.stdout
    assert init_job.members() == [(first, 1, 1.0)]
    assert init_job.config()["version"] == 1

    grown = init_job.run(members=3)
    assert grown.returncode == 0, grown.stderr
    assert _changes(grown) == [
        f"mongo-init: add {second} without a vote until it has caught up (config version 2)",
        f"mongo-init: give {second} its vote (caught up) (config version 3)",
        f"mongo-init: add {third} without a vote until it has caught up (config version 4)",
        f"mongo-init: give {third} its vote (caught up) (config version 5)",
    ]
    assert init_job.members() == [(first, 1, 1.0), (second, 1, 1.0), (third, 1, 1.0)]
    assert init_job.config()["version"] == 5

    again = init_job.run(members=3)
    assert again.returncode == 0, again.stderr
    assert "mongo-init: rs0 already initiated: nothing to initiate" in again.stdout
    assert _changes(again) == []
    assert init_job.config()["version"] == 5


def test_a_member_still_syncing_keeps_no_vote_until_it_is_secondary(init_job: InitJob) -> None:
    first, second, third = (init_job.host(index) for index in range(3))
    assert init_job.run(members=1).returncode == 0
    # The new member's initial sync outlasts the run's deadline: the run fails, the member stays without a vote.
    init_job.first.server.set_member_state(second, "STARTUP2")

    syncing = init_job.run(members=3, timeout=1)
    assert syncing.returncode == 1
    assert _changes(syncing) == [
        f"mongo-init: add {second} without a vote until it has caught up (config version 2)"
    ]
    assert syncing.stderr.strip() == (
        f"mongo-init: reconcile the members: not done after 1s; last: {second} is STARTUP2: "
        "it gets its vote once it is SECONDARY"
    )
    assert init_job.members() == [(first, 1, 1.0), (second, 0, 0.0)]

    # Caught up: the next run (a rerun of the Job) gives it its vote, then adds the third member.
    init_job.first.server.set_member_state(second, "SECONDARY")
    rerun = init_job.run(members=3)
    assert rerun.returncode == 0, rerun.stderr
    assert _changes(rerun)[0] == f"mongo-init: give {second} its vote (caught up) (config version 3)"
    assert init_job.members() == [(first, 1, 1.0), (second, 1, 1.0), (third, 1, 1.0)]


def test_the_set_shrinks_back_and_a_removal_losing_the_majority_is_refused(init_job: InitJob) -> None:
    first, second, third = (init_job.host(index) for index in range(3))
    assert init_job.run(members=3).returncode == 0
    assert init_job.config()["version"] == 5

    # Wanting two members while the second is down: removing the third would leave 1 healthy voter of 2.
    init_job.first.server.set_member_state(second, "DOWN")
    refused = init_job.run(members=2)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"mongo-init: membership change refused: removing {third} would leave 1 of 2 voting member(s) "
        "healthy, fewer than the 2 a majority needs: bring the unreachable members back (or remove them "
        "first), then retry"
    )
    assert _changes(refused) == []
    assert init_job.config()["version"] == 5

    init_job.first.server.set_member_state(second, "SECONDARY")
    shrunk = init_job.run(members=1)
    assert shrunk.returncode == 0, shrunk.stderr
    assert _changes(shrunk) == [
        f"mongo-init: remove {third} (config version 6)",
        f"mongo-init: remove {second} (config version 7)",
    ]
    assert init_job.members() == [(first, 1, 1.0)]

    again = init_job.run(members=1)
    assert again.returncode == 0, again.stderr
    assert _changes(again) == []
    assert init_job.config()["version"] == 7
