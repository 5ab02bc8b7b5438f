"""`harel-stack` end to end against a fake Docker client, a fake compose runner and a fake replica-set probe:
up -> wait -> status -> down, no Docker engine, a replica set that never elects a primary, smoke and logs; the same
for the sharded cluster (`up --sharded`) with a fake router probe."""

from __future__ import annotations

import io
import re
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harel_stack.cli import Dependencies, main
from harel_stack.engine import client_from_environment
from harel_stack.errors import ProbeFailure
from harel_stack.probe import MemberState, ReplicaSetState, ShardState, WorkerBeat
from harel_stack.project import Project
from harel_stack.settings import StackSettings, parse_env

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
START = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
NO_ENGINE_LINE = (
    "Docker is not running (or not reachable at {endpoint}): start it, or use `make demo` to run everything "
    "in-process\n"
)

# --- fakes ---------------------------------------------------------------------------------------------------


@dataclass
class FakeContainer:
    name: str
    labels: Mapping[str, str]
    attrs: Mapping[str, Any]


def container(service: str, index: int, status: str, health: str | None, exit_code: int = 0) -> FakeContainer:
    state: dict[str, Any] = {"Status": status, "ExitCode": exit_code}
    if health:
        state["Health"] = {"Status": health, "FailingStreak": 0, "Log": []}
    return FakeContainer(
        name=f"harel-{service}-{index}",
        labels={
            "com.docker.compose.project": "harel",
            "com.docker.compose.service": service,
            "com.docker.compose.oneoff": "False",
        },
        attrs={"State": state},
    )


class FakeContainers:
    def __init__(self) -> None:
        self.items: list[FakeContainer] = []

    def list(self, *, all: bool, filters: Mapping[str, Any]) -> list[FakeContainer]:
        assert all is True
        key, _, value = filters["label"].partition("=")
        return [c for c in self.items if c.labels.get(key) == value]


class FakeDockerClient:
    def __init__(self) -> None:
        self.containers = FakeContainers()

    def ping(self) -> bool:
        return True


@dataclass
class FakeCompose:
    """Plays `docker compose` on the fake engine: `up` creates the project's containers, `down` removes them."""

    client: FakeDockerClient
    members: int
    sharded: bool = False
    calls: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)
    codes: dict[str, int] = field(default_factory=dict)
    # The profiles added to each call, in call order (the backup one-shots run with one).
    profiles: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, *args: str, all_profiles: bool = False, profiles: Sequence[str] = ()) -> int:
        self.calls.append((args, all_profiles))
        self.profiles.append(tuple(profiles))
        # A code for the service a `run` names wins over one for the subcommand.
        code = self.codes.get(args[-1], self.codes.get(args[0], 0))
        if args[0] == "up" and code == 0:
            if self.sharded:
                members = [
                    container(name, 1, "running", "healthy") for name in ("cfg1", "sh1", "sh2", "mongos")
                ]
                init = "sharded-init"
            else:
                members = [
                    container(f"mongo{i}", 1, "running", "healthy") for i in range(1, self.members + 1)
                ]
                init = "mongo-init"
            self.client.containers.items = [
                container("keyfile", 1, "exited", None),
                *members,
                container(init, 1, "exited", None),
                container("worker", 1, "running", "healthy"),
                container("worker", 2, "running", "healthy"),
            ]
        if args[0] == "down":
            self.client.containers.items = []
        return code


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeProbe:
    """A replica set that elects a primary after `primary_after` seconds (never, when None); workers beat after
    `workers_after` seconds. Every answer is derived from the fake clock."""

    clock: FakeClock
    members: int = 3
    primary_after: float | None = 4.0
    workers_after: float = 10.0
    workers_beating: int = 2
    executions: dict[str, int] = field(default_factory=lambda: {"completed": 3, "running": 1})
    closed: bool = False

    def replica_set(self) -> ReplicaSetState:
        elected = self.primary_after is not None and self.clock() >= self.primary_after
        states = ["PRIMARY" if elected else "SECONDARY"] + ["SECONDARY"] * (self.members - 1)
        return ReplicaSetState(
            "rs0", tuple(MemberState(f"mongo{i + 1}:27017", s, True) for i, s in enumerate(states))
        )

    def authenticate_app_user(self) -> None:
        if self.replica_set().primary is None:
            raise ProbeFailure("authenticating as 'harel': NotPrimaryOrSecondary")

    def harel_check(self) -> None:
        self.authenticate_app_user()

    def workers(self) -> list[WorkerBeat]:
        if self.clock() < self.workers_after:
            return []
        now = START + timedelta(seconds=self.clock())
        return [
            WorkerBeat(f"worker-{i}", f"c0ffee{i}", now - timedelta(seconds=2), 7 * i)
            for i in range(1, self.workers_beating + 1)
        ]

    def executions_by_status(self) -> dict[str, int]:
        return dict(self.executions)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeClusterProbe(FakeProbe):
    """A sharded cluster as sharded-init brings it about, on the fake clock: the router answers from `router_after`,
    each shard is listed from its time in `shards_added`, the app user exists from `app_user_after`, `harel check`
    passes once `harel partitions init` ran (`partitioned_after`); the workers beat from `workers_after`."""

    router_after: float = 2.0
    shards_added: dict[str, float] = field(default_factory=lambda: {"sh1": 4.0, "sh2": 6.0})
    app_user_after: float = 8.0
    partitioned_after: float = 10.0
    workers_after: float = 12.0

    def replica_set(self) -> ReplicaSetState:
        raise AssertionError("the sharded cluster has no rs0 to ask")

    def router(self) -> str:
        if self.clock() < self.router_after:
            raise ProbeFailure("hello: mongos does not answer on 127.0.0.1:27017")
        return "127.0.0.1:27017"

    def shards(self) -> list[ShardState]:
        self.router()
        return [
            ShardState(name, f"{name}/{name}:27018")
            for name, at in self.shards_added.items()
            if self.clock() >= at
        ]

    def authenticate_app_user(self) -> None:
        if self.clock() < self.app_user_after:
            raise ProbeFailure("authenticating as 'harel': AuthenticationFailed")

    def harel_check(self) -> None:
        self.authenticate_app_user()
        if self.clock() < self.partitioned_after:
            raise ProbeFailure("sharding: harel.executions is not sharded")


@dataclass
class Harness:
    root: Path
    client: FakeDockerClient
    clock: FakeClock
    probe: FakeProbe
    out: io.StringIO = field(default_factory=io.StringIO)
    err: io.StringIO = field(default_factory=io.StringIO)
    composes: list[FakeCompose] = field(default_factory=list)
    compose_codes: dict[str, int] = field(default_factory=dict)
    engine_calls: int = 0
    # The settings each probe was made with: where it connects.
    probed: list[StackSettings] = field(default_factory=list)

    def deps(self) -> Dependencies:
        def docker_client() -> FakeDockerClient:
            self.engine_calls += 1
            return self.client

        def compose(project: Project, settings: StackSettings) -> FakeCompose:
            assert project.root == self.root
            runner = FakeCompose(self.client, settings.members, settings.sharded, codes=self.compose_codes)
            self.composes.append(runner)
            return runner

        return Dependencies(
            docker_client=docker_client,
            compose=compose,
            probe=self.make_probe,
            project=lambda: Project(self.root),
            clock=self.clock,
            sleep=self.clock.sleep,
            now=lambda: START + timedelta(seconds=self.clock()),
            out=self.out,
            err=self.err,
        )

    def make_probe(self, settings: StackSettings) -> FakeProbe:
        self.probed.append(settings)
        return self.probe

    def run(self, *argv: str) -> int:
        self.out.seek(0)
        self.out.truncate()
        self.err.seek(0)
        self.err.truncate()
        return main(list(argv), self.deps())

    @property
    def compose_calls(self) -> list[tuple[tuple[str, ...], bool]]:
        return [call for runner in self.composes for call in runner.calls]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "compose").mkdir()
    for name in ("docker-compose.yml", ".env.example", "mongo-init/sharded-compose.json"):
        (tmp_path / "compose" / name).parent.mkdir(exist_ok=True)
        shutil.copy(REPOSITORY_ROOT / "compose" / name, tmp_path / "compose" / name)
    clock = FakeClock()
    return Harness(root=tmp_path, client=FakeDockerClient(), clock=clock, probe=FakeProbe(clock))


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


# --- up -> wait -> status -> down --------------------------------------------------------------------------------


def test_up_wait_status_down(harness: Harness) -> None:
    assert harness.run("up") == 0
    out = harness.out.getvalue()
    env_file = harness.root / "compose" / ".env"
    assert f"wrote {env_file} with new random secrets (mode 0600)" in out
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert "starting the stack: replica set rs0 (3 members), 2 worker(s)" in out
    assert harness.compose_calls == [(("up", "--detach", "--build"), False)]
    lines = out.splitlines()
    progress = [columns(line) for line in lines if line.startswith("  ok ")]
    assert [row[1] for row in progress] == [
        "replica set has a primary",
        "app user authenticates",
        "harel check passes",
        "workers heartbeat",
    ]
    assert progress[0] == ["ok", "replica set has a primary", "4.0s", "mongo1:27017"]
    assert progress[3] == ["ok", "workers heartbeat", "10.0s", "2 of 2"]
    assert "ready in 10s." in lines
    assert (
        "host tools: mongodb://harel:<HAREL_APP_PASSWORD>@127.0.0.1:27017/harel?directConnection=true&authSource=admin"
        in lines
    )
    secrets = parse_env(env_file.read_text(encoding="utf-8"))
    assert secrets["HAREL_APP_PASSWORD"] not in out
    assert harness.probe.closed

    assert harness.run("status") == 0
    table = harness.out.getvalue().splitlines()
    assert table[0].split() == ["KIND", "NAME", "STATE", "DETAIL"]
    rows = [columns(line) for line in table[1:]]
    assert ["service", "harel-keyfile-1", "exited (0)", "one-shot"] in rows
    assert ["service", "harel-mongo2-1", "running", "healthy"] in rows
    assert ["service", "harel-worker-2", "running", "healthy"] in rows
    assert ["member", "mongo1:27017", "PRIMARY", "up"] in rows
    assert ["member", "mongo3:27017", "SECONDARY", "up"] in rows
    assert ["worker", "worker-2", "beating", "last beat 2s ago on c0ffee2, 14 processed"] in rows
    assert ["executions", "completed", "3"] in rows
    assert ["executions", "running", "1"] in rows

    assert harness.run("down", "--volumes") == 0
    assert harness.compose_calls[-1] == (("down", "--volumes"), True)
    assert harness.run("status") == 1
    assert (
        "the stack is not running (no containers in compose project 'harel'): make up"
        in harness.out.getvalue()
    )


def test_up_keeps_an_existing_env_file(harness: Harness) -> None:
    env_file = harness.root / "compose" / ".env"
    mine = (
        "HAREL_MEMBERS=1\nHAREL_WORKERS=1\nHAREL_MONGO_ROOT_PASSWORD=mine-root\nHAREL_APP_PASSWORD=mine-app\n"
    )
    env_file.write_text(mine, encoding="utf-8")
    harness.probe.members = 1
    harness.probe.workers_beating = 1
    assert harness.run("up") == 0
    # Kept line for line; the secrets it lacks (added by a later release) are appended.
    text = env_file.read_text(encoding="utf-8")
    assert text.startswith(mine)
    added = parse_env(text[len(mine) :])
    assert set(added) == {"HAREL_MONITOR_PASSWORD", "HAREL_BACKUP_PASSWORD", "HAREL_GRAFANA_ADMIN_PASSWORD"}
    assert "wrote" not in harness.out.getvalue()
    assert f"added new random secrets to {env_file}: HAREL_MONITOR_PASSWORD" in harness.out.getvalue()
    assert harness.run("up") == 0
    assert env_file.read_text(encoding="utf-8") == text, "a complete file is left alone"
    assert "replica set rs0 (1 member), 1 worker(s)" in harness.out.getvalue()
    assert harness.composes[0].members == 1


def test_no_docker_engine_is_one_clear_line_and_exit_3(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real client factory, pointed at a socket nobody listens on: what a laptop with Docker stopped sees.
    endpoint = f"unix://{tmp_path}/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", endpoint)
    deps = harness.deps()
    deps.docker_client = client_from_environment
    for command in (["up"], ["status"], ["logs"], ["smoke"], ["down"]):
        harness.err.seek(0)
        harness.err.truncate()
        assert main(command, deps) == 3
        assert harness.err.getvalue() == NO_ENGINE_LINE.format(endpoint=endpoint)
    assert harness.compose_calls == []
    assert not (harness.root / "compose" / ".env").exists()


def test_a_replica_set_that_never_elects_a_primary_times_out_naming_it(harness: Harness) -> None:
    harness.probe.primary_after = None
    assert harness.run("up", "--timeout", "60") == 3
    err = harness.err.getvalue()
    assert err.startswith(
        "the stack is not ready after 60s; still missing: replica set has a primary (no primary: "
    )
    assert "mongo1:27017 SECONDARY, mongo2:27017 SECONDARY, mongo3:27017 SECONDARY" in err
    assert "app user authenticates; harel check passes; workers heartbeat" in err
    assert "make logs SERVICE=mongo-init" in err
    out = harness.out.getvalue()
    assert "  waiting  replica set has a primary" in out
    assert "  ok " not in out
    assert 60 <= harness.clock.now <= 62
    assert harness.probe.closed


def test_workers_that_do_not_beat_are_what_the_timeout_names(harness: Harness) -> None:
    harness.probe.workers_beating = 1
    assert harness.run("up", "--timeout", "30") == 3
    err = harness.err.getvalue()
    assert "still missing: workers heartbeat (1 of 2 workers beating)." in err
    assert "replica set has a primary" not in err


def test_failed_compose_up_stops_before_waiting(harness: Harness) -> None:
    harness.compose_codes["up"] = 1
    assert harness.run("up") == 1
    assert "docker compose up failed (exit 1)" in harness.err.getvalue()
    assert harness.clock.now == 0


def test_smoke_runs_the_smoke_service_and_passes_its_exit_code(harness: Harness) -> None:
    assert harness.run("up") == 0
    assert harness.run("smoke") == 0
    assert harness.compose_calls[-1] == (("run", "--rm", "smoke"), False)
    harness.compose_codes["run"] = 1
    assert harness.run("smoke") == 1


def test_logs_follows_one_service_or_all(harness: Harness) -> None:
    assert harness.run("up") == 0
    assert harness.run("logs", "mongo-init") == 0
    assert harness.compose_calls[-1] == (("logs", "--follow", "--tail", "100", "mongo-init"), False)
    assert harness.run("logs") == 0
    assert harness.compose_calls[-1] == (("logs", "--follow", "--tail", "100"), False)


def test_status_of_a_stack_whose_mongo_does_not_answer(harness: Harness) -> None:
    assert harness.run("up") == 0

    class Unreachable(FakeProbe):
        def replica_set(self) -> ReplicaSetState:
            raise ProbeFailure("replSetGetStatus: mongo1 does not answer on 127.0.0.1:27017")

    harness.probe = Unreachable(harness.clock)
    harness.client.containers.items[1] = container("mongo1", 1, "restarting", None, exit_code=100)
    assert harness.run("status") == 1
    out = harness.out.getvalue()
    assert "replica set  rs0" in out
    assert "unreachable  replSetGetStatus: mongo1 does not answer on 127.0.0.1:27017" in out
    assert "harel-mongo1-1" in out and "restarting" in out


def test_commands_other_than_up_need_the_env_file(harness: Harness) -> None:
    assert harness.run("smoke") == 2
    assert harness.err.getvalue().endswith(".env: missing: `make up` writes it (with new random secrets)\n")
    assert harness.compose_calls == []


# --- the sharded cluster -----------------------------------------------------------------------------------------


SHARDED_CONDITIONS = [
    "router answers",
    "shards listed",
    "app user authenticates",
    "harel check passes",
    "workers heartbeat",
]


def test_up_sharded_wait_status_smoke_down(harness: Harness) -> None:
    harness.probe = FakeClusterProbe(harness.clock)
    assert harness.run("up", "--sharded") == 0
    out = harness.out.getvalue()
    assert (
        "starting the stack: sharded cluster (config server cfg1, shards sh1, sh2, router mongos), 2 worker(s)"
        in out
    )
    assert harness.compose_calls == [(("up", "--detach", "--build"), False)]
    assert harness.composes[0].sharded is True
    # The probe asks the router, as the host tools do.
    assert harness.probed[0].sharded is True
    progress = [columns(line) for line in out.splitlines() if line.startswith("  ok ")]
    assert progress == [
        ["ok", "router answers", "2.0s", "mongos on 127.0.0.1:27017"],
        ["ok", "shards listed", "6.0s", "sh1, sh2"],
        ["ok", "app user authenticates", "8.0s", "harel@admin"],
        ["ok", "harel check passes", "10.0s", "no errors"],
        ["ok", "workers heartbeat", "12.0s", "2 of 2"],
    ]
    lines = out.splitlines()
    assert "ready in 12s." in lines
    assert "host tools: mongodb://harel:<HAREL_APP_PASSWORD>@127.0.0.1:27017/harel?authSource=admin" in lines
    assert harness.probe.closed

    # Without the flag: the containers say it is the sharded cluster.
    assert harness.run("status") == 0
    assert harness.probed[-1].sharded is True
    rows = [columns(line) for line in harness.out.getvalue().splitlines()[1:]]
    assert ["service", "harel-mongos-1", "running", "healthy"] in rows
    assert ["service", "harel-sharded-init-1", "exited (0)", "one-shot"] in rows
    assert [row for row in rows if row[0] in ("router", "shard", "member", "replica set")] == [
        ["router", "mongos", "answering", "127.0.0.1:27017"],
        ["shard", "sh1", "listed", "sh1/sh1:27018"],
        ["shard", "sh2", "listed", "sh2/sh2:27018"],
    ]
    assert ["worker", "worker-1", "beating", "last beat 2s ago on c0ffee1, 7 processed"] in rows

    assert harness.run("smoke") == 0
    assert harness.compose_calls[-1] == (("run", "--rm", "smoke"), False)
    assert harness.composes[-1].sharded is True
    assert harness.run("logs", "sharded-init") == 0
    assert harness.composes[-1].sharded is True

    assert harness.run("down") == 0
    assert harness.compose_calls[-1] == (("down",), True)
    assert harness.run("status") == 1


def test_harel_sharded_in_the_env_file_chooses_the_cluster_with_its_observability_profile(
    harness: Harness,
) -> None:
    env_file = harness.root / "compose" / ".env"
    env_file.write_text(
        "HAREL_SHARDED=1\nHAREL_OBSERVABILITY=1\nHAREL_MONGO_ROOT_PASSWORD=r\nHAREL_APP_PASSWORD=a\n",
        encoding="utf-8",
    )
    harness.probe = FakeClusterProbe(harness.clock)
    assert harness.run("up") == 0
    out = harness.out.getvalue()
    assert harness.composes[0].sharded is True
    assert "starting the stack: sharded cluster" in out
    assert "grafana: http://127.0.0.1:3000" in out


@pytest.mark.parametrize(
    ("timeout", "missing", "reason"),
    [
        (0, "router answers", "hello: mongos does not answer on 127.0.0.1:27017"),
        (4, "shards listed", "1 of 2 shards listed, not yet sh2 (sharded-init adds them)"),
        (6, "app user authenticates", "authenticating as 'harel': AuthenticationFailed"),
        (8, "harel check passes", "sharding: harel.executions is not sharded"),
        (10, "workers heartbeat", "0 of 2 workers beating"),
    ],
)
def test_each_sharded_condition_not_met_in_time_is_named_with_why(
    harness: Harness, timeout: int, missing: str, reason: str
) -> None:
    harness.probe = FakeClusterProbe(harness.clock)
    assert harness.run("up", "--sharded", "--timeout", str(timeout)) == 3
    err = harness.err.getvalue()
    rest = SHARDED_CONDITIONS[SHARDED_CONDITIONS.index(missing) + 1 :]
    assert f"still missing: {'; '.join([f'{missing} ({reason})', *rest])}. " in err
    assert err.endswith("See `make status` and `make logs SERVICE=sharded-init`\n")
    waiting = [columns(line) for line in harness.out.getvalue().splitlines() if line.startswith("  waiting ")]
    assert waiting[0][1] == missing and waiting[0][3] == reason
    assert [row[1] for row in waiting] == [missing, *rest]


def test_status_of_a_sharded_cluster_missing_a_shard_or_its_router(harness: Harness) -> None:
    harness.probe = FakeClusterProbe(harness.clock)
    assert harness.run("up", "--sharded") == 0
    harness.probe = FakeClusterProbe(harness.clock, shards_added={"sh1": 0.0, "sh3": 0.0})
    assert harness.run("status") == 1
    rows = [columns(line) for line in harness.out.getvalue().splitlines()[1:]]
    assert [row for row in rows if row[0] == "shard"] == [
        ["shard", "sh1", "listed", "sh1/sh1:27018"],
        ["shard", "sh2", "missing", "sharded-init adds it"],
        ["shard", "sh3", "listed", "sh3/sh3:27018"],
    ]

    harness.probe = FakeClusterProbe(harness.clock, router_after=1e9)
    assert harness.run("status") == 1
    out = harness.out.getvalue()
    rows = [columns(line) for line in out.splitlines()[1:]]
    assert ["router", "mongos", "unreachable", "hello: mongos does not answer on 127.0.0.1:27017"] in rows
    assert "worker " not in out, "no workers asked for through a router that does not answer"


def test_up_starts_one_topology_at_a_time(harness: Harness) -> None:
    assert harness.run("up") == 0
    assert harness.run("up", "--sharded") == 2
    assert harness.err.getvalue() == (
        "the replica set rs0 is running: stop it with `make down` (its data volumes are kept) before starting the "
        "sharded cluster\n"
    )
    assert harness.run("down") == 0
    harness.probe = FakeClusterProbe(harness.clock)
    assert harness.run("up", "--sharded") == 0
    assert harness.run("up") == 2
    assert harness.err.getvalue() == (
        "the sharded cluster is running: stop it with `make down` (its data volumes are kept) before starting the "
        "replica set rs0\n"
    )
    assert [call for call, _ in harness.compose_calls] == [
        ("up", "--detach", "--build"),
        ("down",),
        ("up", "--detach", "--build"),
    ]
    # Again in the same topology: compose brings it up to date.
    assert harness.run("up", "--sharded") == 0
