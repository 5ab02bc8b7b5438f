"""The parts of `harel-stack`: compose/.env handling, the compose command line, the engine's view of containers,
the readiness display, the probe's parsing and its failure on a closed port."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from docker.context.config import get_context_id

from harel_stack.cli import Dependencies
from harel_stack.compose import DockerCompose, run_attached
from harel_stack.engine import Engine, current_endpoint
from harel_stack.errors import ComposeUnavailable, EnvFileError, ProbeFailure, ProjectNotFound
from harel_stack.probe import MongoProbe, ReplicaSetState, ShardState, WorkerBeat, count_statuses
from harel_stack.project import Project, find_project
from harel_stack.readiness import Condition, fresh_beats, wait_until_ready
from harel_stack.settings import (
    SECRET_VARIABLES,
    StackSettings,
    ensure_env_file,
    fill_secrets,
    load_settings,
    parse_env,
)
from tests.fake_mongod.fixtures import FakeDeployment
from tests.unit.test_stack_cli import FakeClock, FakeDockerClient, container

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPOSITORY_ROOT / "compose" / ".env.example"

# --- compose/.env ---------------------------------------------------------------------------------------------


def test_secrets_are_filled_fresh_and_url_safe_everything_else_is_copied() -> None:
    example = EXAMPLE.read_text(encoding="utf-8")
    first, second = parse_env(fill_secrets(example)), parse_env(fill_secrets(example))
    for secret in SECRET_VARIABLES:
        assert re.fullmatch(r"[A-Za-z0-9_-]{32}", first[secret])
        assert first[secret] != second[secret]
    assert first["HAREL_APP_PASSWORD"] != first["HAREL_MONGO_ROOT_PASSWORD"]
    others = {k: v for k, v in parse_env(example).items() if k not in SECRET_VARIABLES}
    assert {k: v for k, v in first.items() if k not in SECRET_VARIABLES} == others
    # The comments travel with the values: compose/.env documents itself.
    assert [line for line in fill_secrets(example).splitlines() if line.startswith("#")] == [
        line for line in example.splitlines() if line.startswith("#")
    ]


def test_env_file_is_written_once_with_mode_0600(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    assert ensure_env_file(env_file, EXAMPLE) is True
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    written = env_file.read_text(encoding="utf-8")
    assert ensure_env_file(env_file, EXAMPLE) is False
    assert env_file.read_text(encoding="utf-8") == written
    settings = load_settings(env_file)
    assert (settings.members, settings.workers, settings.mongo_port, settings.root_user) == (
        3,
        2,
        27017,
        "root",
    )


def test_bad_settings_name_the_variable_and_never_echo_a_value(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "HAREL_MEMBERS=2\nHAREL_WORKERS=0\nHAREL_MONGO_ROOT_PASSWORD=has space\nHAREL_APP_PASSWORD=\n",
        encoding="utf-8",
    )
    with pytest.raises(EnvFileError) as failure:
        load_settings(env_file)
    message = str(failure.value)
    assert "HAREL_MEMBERS: Value error, must be 1 or 3" in message
    assert "HAREL_WORKERS: Input should be greater than or equal to 1" in message
    assert "HAREL_MONGO_ROOT_PASSWORD: Value error, only URL-safe characters" in message
    assert "HAREL_APP_PASSWORD: Field required" in message
    assert "has space" not in message
    assert failure.value.exit_code == 2


def test_host_url_is_a_direct_connection_to_the_published_port() -> None:
    settings = StackSettings.model_validate(
        {"HAREL_MONGO_PORT": "27117", "HAREL_MONGO_ROOT_PASSWORD": "r", "HAREL_APP_PASSWORD": "app-secret"}
    )
    assert settings.app_url == (
        "mongodb://harel:app-secret@127.0.0.1:27117/harel?directConnection=true&authSource=admin"
    )
    assert "app-secret" not in settings.app_url_shown
    assert "app-secret" not in repr(settings)


def test_the_sharded_clusters_host_url_is_the_router_without_direct_connection(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("HAREL_MONGO_ROOT_PASSWORD=r\nHAREL_APP_PASSWORD=app-secret\nHAREL_SHARDED=1\n")
    settings = load_settings(env_file)
    assert settings.sharded is True
    assert settings.app_url == "mongodb://harel:app-secret@127.0.0.1:27017/harel?authSource=admin"
    assert (
        settings.app_url_shown
        == "mongodb://harel:<HAREL_APP_PASSWORD>@127.0.0.1:27017/harel?authSource=admin"
    )
    # compose/.env.example's default: the replica set.
    assert ensure_env_file(tmp_path / "from-example.env", EXAMPLE)
    assert load_settings(tmp_path / "from-example.env").sharded is False


@pytest.mark.parametrize(("mode", "tls"), [("allowTLS", False), ("preferTLS", True), ("requireTLS", True)])
def test_host_url_uses_tls_with_the_ca_from_the_env_files_folder_once_clients_do(
    tmp_path: Path, mode: str, tls: bool
) -> None:
    env_file = tmp_path / "compose" / ".env"
    env_file.parent.mkdir()
    env_file.write_text(
        f"HAREL_MONGO_ROOT_PASSWORD=r\nHAREL_APP_PASSWORD=a\nHAREL_TLS_MODE={mode}\nHAREL_TLS_DIR=../certs\n"
    )

    settings = load_settings(env_file)

    ca = tmp_path / "certs" / "ca.crt"
    assert settings.tls_ca_file == (ca if tls else None)
    assert settings.app_url.endswith(
        f"&tls=true&tlsCAFile={ca}&tlsAllowInvalidHostnames=true" if tls else "authSource=admin"
    )


def test_an_unknown_tls_mode_is_refused(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("HAREL_MONGO_ROOT_PASSWORD=r\nHAREL_APP_PASSWORD=a\nHAREL_TLS_MODE=on\n")

    with pytest.raises(EnvFileError) as failure:
        load_settings(env_file)

    assert "HAREL_TLS_MODE: Input should be 'disabled', 'allowTLS', 'preferTLS' or 'requireTLS'" in str(
        failure.value
    )


# --- project and compose ------------------------------------------------------------------------------------


def test_project_is_found_from_a_subdirectory(tmp_path: Path) -> None:
    assert find_project(REPOSITORY_ROOT / "stack" / "src").root == REPOSITORY_ROOT
    with pytest.raises(ProjectNotFound):
        find_project(tmp_path)


def test_compose_command_line_selects_the_profile_from_the_member_count() -> None:
    project = Project(REPOSITORY_ROOT)
    base = [
        "docker",
        "compose",
        "-f",
        str(project.compose_file),
        "--env-file",
        str(project.env_file),
        "-p",
        "harel",
    ]
    assert DockerCompose(project, 1).command("up", "--detach") == [*base, "up", "--detach"]
    assert DockerCompose(project, 3).command("ps") == [*base, "--profile", "three-members", "ps"]
    # `down` reaches every container an earlier run may have left, whatever HAREL_MEMBERS and HAREL_SHARDED say now:
    # the sharded cluster's (compose/sharded.yml's profile) and the replica set's it moves aside.
    assert DockerCompose(project, 1).command("down", all_profiles=True) == [
        *base[:4], "-f", str(project.sharded_compose_file), *base[4:],
        "--profile", "three-members", "--profile", "observability", "--profile", "smoke", "--profile", "backup",
        "--profile", "sharded", "--profile", "replica-set-only", "down",
    ]  # fmt: skip
    # HAREL_OBSERVABILITY=1 adds its profile to every command; a one-shot's profile is added to its run only.
    assert DockerCompose(project, 1, observability=True).command("up") == [
        *base,
        "--profile",
        "observability",
        "up",
    ]
    assert DockerCompose(project, 1).command("run", "backup", profiles=["backup"]) == [
        *base, "--profile", "backup", "run", "backup",
    ]  # fmt: skip


def test_the_sharded_cluster_reads_its_file_and_profile_on_every_command_and_nothing_of_the_replica_sets() -> (
    None
):
    project = Project(REPOSITORY_ROOT)
    files = ["-f", str(project.compose_file), "-f", str(project.sharded_compose_file)]
    project_options = ["--env-file", str(project.env_file), "-p", "harel"]
    # The members and the backup services are the replica set's: not the cluster's profiles. The observability
    # profile is both topologies' (sharded.yml puts the cluster's exporter in the replica set's place).
    sharded = DockerCompose(project, 3, sharded=True)
    assert sharded.command("up", "--detach", "--build") == [
        "docker", "compose", *files, *project_options, "--profile", "sharded", "up", "--detach", "--build",
    ]  # fmt: skip
    assert DockerCompose(project, 3, observability=True, sharded=True).command("up") == [
        "docker", "compose", *files, *project_options, "--profile", "sharded", "--profile", "observability", "up",
    ]  # fmt: skip
    assert sharded.command("run", "--rm", "smoke") == [
        "docker", "compose", *files, *project_options, "--profile", "sharded", "run", "--rm", "smoke",
    ]  # fmt: skip
    assert sharded.command("logs", "--follow", "--tail", "100", "sharded-init") == [
        "docker", "compose", *files, *project_options, "--profile", "sharded",
        "logs", "--follow", "--tail", "100", "sharded-init",
    ]  # fmt: skip
    assert sharded.command("down", all_profiles=True) == DockerCompose(project, 1).command(
        "down", all_profiles=True
    )
    # The user's app follows the topology's files, and the cluster's own file for the app last (its image builds on
    # sharded-init's: app.yml's names mongo-init, which the cluster does not run).
    with_app = DockerCompose(project, 1, app=True, sharded=True)
    assert with_app.command("up")[2:10] == [
        *files, "-f", str(project.app_compose_file), "-f", str(project.sharded_app_compose_file),
    ]  # fmt: skip
    assert project.sharded_app_compose_file == REPOSITORY_ROOT / "compose" / "sharded-app.yml"
    assert project.sharded_app_compose_file.is_file()
    # HAREL_SHARDED=1 is what harel-stack's own compose reads.
    secrets = {"HAREL_MONGO_ROOT_PASSWORD": "r", "HAREL_APP_PASSWORD": "a"}
    chosen = Dependencies().compose(project, StackSettings.model_validate({**secrets, "HAREL_SHARDED": "1"}))
    assert isinstance(chosen, DockerCompose)
    assert chosen.command("up") == sharded.command("up")
    assert project.sharded_compose_file == REPOSITORY_ROOT / "compose" / "sharded.yml"
    # The shards `up` waits for are those sharded-init adds (compose/mongo-init/sharded-compose.json).
    assert project.shard_names() == ("sh1", "sh2")


def test_harel_app_adds_the_app_file_after_the_compose_file_to_every_command() -> None:
    project = Project(REPOSITORY_ROOT)
    secrets = {"HAREL_MONGO_ROOT_PASSWORD": "r", "HAREL_APP_PASSWORD": "a"}
    # harel-stack's own compose, the one every command runs, as compose/.env sets HAREL_APP or not.
    with_app = Dependencies().compose(
        project, StackSettings.model_validate({**secrets, "HAREL_APP": "orders.app:app"})
    )
    without = Dependencies().compose(project, StackSettings.model_validate(secrets))
    assert isinstance(with_app, DockerCompose)
    assert isinstance(without, DockerCompose)
    compose_file = ["-f", str(project.compose_file)]
    app_file = ["-f", str(project.app_compose_file)]

    assert with_app.command("up")[2:6] == [*compose_file, *app_file]
    # `down` reads compose/sharded.yml too, to reach the sharded cluster's services; the app file still follows.
    sharded_file = ["-f", str(project.sharded_compose_file)]
    assert with_app.command("down", all_profiles=True)[2:8] == [*compose_file, *sharded_file, *app_file]
    assert without.command("up")[2:6] == [*compose_file, "--env-file", str(project.env_file)]
    assert project.app_compose_file == REPOSITORY_ROOT / "compose" / "app.yml"
    assert project.app_compose_file.is_file()


def test_compose_runs_attached_once_the_plugin_answers() -> None:
    ran: list[tuple[list[str], dict[str, str]]] = []
    probed: list[list[str]] = []

    def run(command: Sequence[str], variables: Mapping[str, str]) -> int:
        ran.append((list(command), dict(variables)))
        return 7

    def probe(command: Sequence[str]) -> int:
        probed.append(list(command))
        return 0

    compose = DockerCompose(Project(REPOSITORY_ROOT), 1, run=run, probe=probe)
    assert compose("run", "--rm", "smoke") == 7
    assert compose("logs") == 7
    assert probed == [["docker", "compose", "version"]]
    # Every command tells compose who runs it: the backup container runs as that uid:gid
    # (compose/observability.yml's HAREL_BACKUPS_UID and HAREL_BACKUPS_GID).
    caller = {"HAREL_BACKUPS_UID": str(os.getuid()), "HAREL_BACKUPS_GID": str(os.getgid())}
    assert ran == [(compose.command("run", "--rm", "smoke"), caller), (compose.command("logs"), caller)]


def test_the_runner_adds_its_variables_to_the_inherited_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAREL_INHERITED", "kept")
    check = (
        "import os, sys; "
        "sys.exit(0 if (os.environ['HAREL_INHERITED'], os.environ['HAREL_BACKUPS_UID']) == ('kept', '4242') else 9)"
    )
    assert run_attached([sys.executable, "-c", check], {"HAREL_BACKUPS_UID": "4242"}) == 0
    assert run_attached([sys.executable, "-c", check], {"HAREL_BACKUPS_UID": "1"}) == 9


def test_a_missing_compose_plugin_is_named() -> None:
    compose = DockerCompose(
        Project(REPOSITORY_ROOT), 3, run=lambda command, variables: 0, probe=lambda command: 1
    )
    with pytest.raises(ComposeUnavailable, match="install the Docker Compose v2 plugin") as failure:
        compose("up")
    assert failure.value.exit_code == 3


# --- engine ---------------------------------------------------------------------------------------------------


def test_engine_lists_the_projects_containers_by_service() -> None:
    client = FakeDockerClient()
    one_off = container("smoke", 1, "running", None)
    one_off.labels = {**one_off.labels, "com.docker.compose.oneoff": "True"}
    other_project = container("mongo1", 1, "running", "healthy")
    other_project.labels = {**other_project.labels, "com.docker.compose.project": "elsewhere"}
    client.containers.items = [
        container("worker", 2, "running", "starting"),
        container("mongo-init", 1, "exited", None, exit_code=1),
        container("mongo1", 1, "running", "unhealthy"),
        container("keyfile", 1, "exited", None),
        one_off,
        other_project,
    ]
    services = Engine(client).services("harel")
    assert [(s.service, s.container, s.state, s.health, s.exit_code) for s in services] == [
        ("keyfile", "harel-keyfile-1", "exited", None, 0),
        ("mongo-init", "harel-mongo-init-1", "exited", None, 1),
        ("mongo1", "harel-mongo1-1", "running", "unhealthy", 0),
        ("worker", "harel-worker-2", "running", "starting", 0),
    ]
    assert [s.settled for s in services] == [True, False, False, False]


def test_endpoint_follows_docker_host_then_the_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert current_endpoint() == "tcp://127.0.0.1:2375"
    monkeypatch.delenv("DOCKER_HOST")
    # A docker context of its own, as Docker Desktop sets one up.
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "desktop"}), encoding="utf-8")
    meta = tmp_path / "contexts" / "meta"
    (meta / get_context_id("desktop")).mkdir(parents=True)
    (meta / get_context_id("desktop") / "meta.json").write_text(
        json.dumps(
            {
                "Name": "desktop",
                "Metadata": {},
                "Endpoints": {"docker": {"Host": f"unix://{tmp_path}/desktop.sock", "SkipTLSVerify": False}},
            }
        ),
        encoding="utf-8",
    )
    assert current_endpoint() == f"unix://{tmp_path}/desktop.sock"


# --- readiness display ----------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_block_is_redrawn_in_place() -> None:
    clock = FakeClock()

    def after(seconds: float, detail: str) -> Condition:
        def check() -> str:
            if clock() < seconds:
                raise ProbeFailure(f"not before {seconds:.0f}s")
            return detail

        return Condition(f"ready at {seconds:.0f}", check)

    screen = Terminal()
    took = wait_until_ready(
        [after(2, "first"), after(4, "second")],
        timeout=10,
        clock=clock,
        sleep=clock.sleep,
        out=screen,
        init_service="mongo-init",
    )
    assert took == 4
    frames = screen.getvalue().split("\x1b[2F")
    assert len(frames) == 3  # drawn at 0 s, then redrawn at 2 s and 4 s
    assert frames[0] == (
        "\x1b[2K  waiting  ready at 2     0.0s  not before 2s\n\x1b[2K  waiting  ready at 4     0.0s\n"
    )
    assert (
        frames[2]
        == "\x1b[2K  ok       ready at 2     2.0s  first\n\x1b[2K  ok       ready at 4     4.0s  second\n"
    )


def test_stale_heartbeats_do_not_count() -> None:
    now = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
    beats = [
        WorkerBeat("fresh", "a", now - timedelta(seconds=5), 0),
        WorkerBeat("stale", "b", now - timedelta(seconds=16), 0),
    ]
    assert [b.worker_id for b in fresh_beats(beats, now)] == ["fresh"]


# --- probe ------------------------------------------------------------------------------------------------------


def test_replica_set_state_from_a_recorded_status_reply() -> None:
    reply = {
        "set": "rs0",
        "myState": 2,
        "members": [
            {"_id": 0, "name": "mongo1:27017", "health": 1.0, "state": 2, "stateStr": "SECONDARY"},
            {
                "_id": 1,
                "name": "mongo2:27017",
                "health": 0.0,
                "state": 8,
                "stateStr": "(not reachable/healthy)",
            },
            {"_id": 2, "name": "mongo3:27017", "health": 1.0, "state": 1, "stateStr": "PRIMARY"},
        ],
        "ok": 1.0,
    }
    state = ReplicaSetState.from_status(reply)
    assert state.primary == "mongo3:27017"
    assert [m.healthy for m in state.members] == [True, False, True]
    assert (
        state.describe()
        == "mongo1:27017 SECONDARY, mongo2:27017 (not reachable/healthy), mongo3:27017 PRIMARY"
    )


def test_executions_are_counted_by_the_status_inside_data() -> None:
    documents = [
        {
            "_id": "a",
            "data": json.dumps({"id": "a", "status": "completed", "context": {"status": "shipped"}}),
        },
        {"_id": "b", "data": json.dumps({"id": "b", "status": "running"})},
        {"_id": "c", "data": json.dumps({"id": "c", "status": "completed"})},
        {"_id": "d", "data": json.dumps({"id": "d"})},
    ]
    assert count_statuses(documents) == {"completed": 2, "running": 2}


def test_probe_on_a_port_where_nothing_listens_says_so() -> None:
    settings = StackSettings.model_validate(
        {"HAREL_MONGO_PORT": "9", "HAREL_MONGO_ROOT_PASSWORD": "root-pw", "HAREL_APP_PASSWORD": "app-pw"}
    )
    probe = MongoProbe(settings)
    try:
        with pytest.raises(ProbeFailure) as failure:
            probe.replica_set()
    finally:
        probe.close()
    assert failure.value.reason == "replSetGetStatus: mongo1 does not answer on 127.0.0.1:9"


def test_the_sharded_probe_asks_the_router_and_knows_a_member_is_none(
    fake_mongos: FakeDeployment, fake_rs: FakeDeployment
) -> None:
    secrets = {"HAREL_MONGO_ROOT_PASSWORD": "root-pw", "HAREL_APP_PASSWORD": "app-pw", "HAREL_SHARDED": "1"}
    answers = {}
    for port in (9, fake_mongos.port, fake_rs.port):
        probe = MongoProbe(StackSettings.model_validate({**secrets, "HAREL_MONGO_PORT": str(port)}))
        try:
            answers[port] = probe.router()
        except ProbeFailure as failure:
            answers[port] = failure.reason
        finally:
            probe.close()
    assert answers == {
        9: "hello: mongos does not answer on 127.0.0.1:9",
        fake_mongos.port: f"127.0.0.1:{fake_mongos.port}",
        fake_rs.port: f"what answers on 127.0.0.1:{fake_rs.port} is not a mongos (a replica set's member left running?)",
    }


def test_shards_are_read_from_a_recorded_list_shards_reply() -> None:
    reply = {
        "shards": [
            {"_id": "sh1", "host": "sh1/sh1:27018", "state": 1, "topologyTime": 0},
            {"_id": "sh2", "host": "sh2/sh2:27018", "state": 1, "topologyTime": 0},
        ],
        "ok": 1.0,
    }
    assert ShardState.from_list_shards(reply) == [
        ShardState("sh1", "sh1/sh1:27018"),
        ShardState("sh2", "sh2/sh2:27018"),
    ]
    assert ShardState.from_list_shards({"shards": [], "ok": 1.0}) == []


def test_a_missing_docker_binary_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ComposeUnavailable, match="docker not found on PATH"):
        DockerCompose(Project(REPOSITORY_ROOT), 3)("up")
