"""The compose stack's topology sharded (compose/sharded.yml after compose/docker-compose.yml, profile `sharded`), as
Docker Compose's own binary renders it, validated against the compose specification, held to the stack's rules
(hardening, secrets as files, healthchecks, start order), and its healthchecks run under the real mongosh against
the fake servers. Its init (compose/mongo-init/sharded_init.py with sharded-compose.json) runs against the fake
sharded cluster in tests/infra/test_sharded_init.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harel_stack.cli import Dependencies
from harel_stack.compose import DockerCompose
from harel_stack.project import Project
from harel_stack.settings import CLIENT_TLS_MODES, SECRET_VARIABLES, load_settings
from tests.fake_mongod.fixtures import FakeDeployment
from tests.fake_mongod.server import FakeMongod
from tests.infra.compose_render import (
    COMPOSE_DIR,
    COMPOSE_FILE,
    REPOSITORY_ROOT,
    env_file,
    render,
    secret_value,
)
from tests.infra.test_compose_hardening import hardening_faults
from tests.infra.test_helm import requires_node
from tests.infra.test_helm_operations import initiated_cluster, run_ops_users
from tests.infra.test_observability import OPS_USERS
from tests.infra.tools import docker_compose, mongosh
from tests.unit.mongo_init import load

pytestmark = pytest.mark.infra

SHARDED_FILE = COMPOSE_DIR / "sharded.yml"
SHARDED_PROFILE = "sharded"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
SETTINGS = json.loads((COMPOSE_DIR / "mongo-init" / "sharded-compose.json").read_text(encoding="utf-8"))
# What the sharded profile runs: the keyfile and TLS steps, the config server, the two shards, the router, its init
# and the workers.
CLUSTER_SERVICES = {"keyfile", "tls", "cfg1", "sh1", "sh2", "mongos", "sharded-init", "worker"}


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("sharded")
    return render(env_file(directory), SHARDED_PROFILE, files=(COMPOSE_FILE, SHARDED_FILE))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"])


def argument(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_the_profile_runs_one_config_server_two_shards_a_router_and_the_workers(
    services: dict[str, Any],
) -> None:
    assert set(services) == CLUSTER_SERVICES


def test_the_rendered_stack_validates_against_the_compose_specification(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Validated as rendered: sharded.yml alone is an overlay (its `!override` tag is compose's, not YAML's)."""
    path = tmp_path / "rendered.json"
    path.write_text(json.dumps(compose), encoding="utf-8")
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok -- validation done" in result.stdout


def test_every_service_runs_hardened_and_only_those_given_a_secret_write_their_root(
    services: dict[str, Any],
) -> None:
    assert {name: found for name, s in services.items() if (found := hardening_faults(s))} == {}
    writable = {name for name, s in services.items() if not s.get("read_only")}
    assert writable == {"cfg1", "sh1", "sh2", "sharded-init"}


def test_each_member_runs_its_cluster_role_with_the_keyfile_and_tls_settings(
    services: dict[str, Any],
) -> None:
    roles = {"cfg1": ("--configsvr", "cfg", "27019"), "sh1": ("--shardsvr", "sh1", "27018")}
    roles["sh2"] = ("--shardsvr", "sh2", "27018")
    for name, (role, set_name, port) in roles.items():
        command = services[name]["command"]
        assert command[0] == "mongod"
        assert role in command, name
        assert argument(command, "--replSet") == set_name
        assert argument(command, "--port") == port
        assert argument(command, "--keyFile") == "/keyfile/mongo.key"
        assert argument(command, "--config") == "/tls/mongod.conf"
        assert {v["target"] for v in services[name]["volumes"]} >= {"/keyfile", "/tls", "/data/db"}
    # --configsvr alone would write to /data/configdb, outside the data volume.
    assert argument(services["cfg1"]["command"], "--dbpath") == "/data/db"
    mongos = services["mongos"]["command"]
    assert mongos[0] == "mongos"
    assert argument(mongos, "--configdb") == "cfg/cfg1:27019"
    assert argument(mongos, "--keyFile") == "/keyfile/mongo.key"


def test_the_init_settings_name_the_hosts_compose_runs(services: dict[str, Any]) -> None:
    def host(name: str) -> str:
        return f"{services[name]['hostname']}:{argument(services[name]['command'], '--port')}"

    assert SETTINGS["configServer"] == {"replicaSetName": "cfg", "dataMembers": [host("cfg1")]}
    assert SETTINGS["shards"] == [
        {"replicaSetName": "sh1", "dataMembers": [host("sh1")]},
        {"replicaSetName": "sh2", "dataMembers": [host("sh2")]},
    ]
    assert SETTINGS["routers"] == [host("mongos")]
    # P as the SDK's default for a sharded deployment.
    assert SETTINGS["partitions"] == 256


def test_secrets_reach_processes_as_files_only(services: dict[str, Any]) -> None:
    secrets_values = {secret_value(variable) for variable in SECRET_VARIABLES}
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            assert str(value) not in secrets_values, f"{name}: {key}"
            if key.endswith("_FILE"):
                assert str(value).startswith(("/run/secrets/", "/run/harel/")), f"{name}: {key}"
        assert not any(value in " ".join(service.get("command") or []) for value in secrets_values), name
    init = services["sharded-init"]
    assert init["entrypoint"] == ["python", "/opt/harel/sharded_init.py"]
    assert argument(init["command"], "--url-file") == "/run/harel/mongodb-url"
    assert {s["source"] for s in init["secrets"]} == {
        "mongo_root_password",
        "mongo_previous_root_password",
        "app_password",
    }
    for member in ("cfg1", "sh1", "sh2"):
        # The chart's bootstrap, not the image's entrypoint: it creates the root user before the set exists.
        assert services[member]["entrypoint"][:3] == [
            "/bin/bash",
            "-ec",
            '/bin/bash /var/run/harel/scripts/bootstrap-root.sh\nexec "$$@"',
        ]
        assert services[member]["environment"]["HAREL_BOOTSTRAP_MEMBER"] == member
        assert (
            services[member]["environment"]["HAREL_MONGO_ROOT_PASSWORD_FILE"]
            == "/run/secrets/mongo_root_password"
        )


def test_start_order_waits_for_each_step(services: dict[str, Any]) -> None:
    assert services["worker"]["depends_on"] == {
        "sharded-init": {"condition": "service_completed_successfully", "required": True}
    }
    assert set(services["sharded-init"]["depends_on"]) == {"cfg1", "sh1", "sh2", "mongos"}
    for member in ("cfg1", "sh1", "sh2"):
        assert {k: v["condition"] for k, v in services[member]["depends_on"].items()} == {
            "keyfile": "service_completed_successfully",
            "tls": "service_completed_successfully",
        }


def test_every_long_running_service_has_a_healthcheck_restarts_and_publishes_on_loopback(
    services: dict[str, Any],
) -> None:
    for name in ("cfg1", "sh1", "sh2", "mongos", "worker"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
        assert services[name]["restart"] == "unless-stopped", name
    published = [(name, port) for name, s in services.items() for port in s.get("ports", [])]
    assert [(name, port["host_ip"], port["target"]) for name, port in published] == [
        ("mongos", "127.0.0.1", 27017)
    ]


def healthcheck(services: dict[str, Any], name: str, port: int, tmp_path: Path) -> int:
    """The service's healthcheck as compose runs it (exec, no shell), under the real mongosh, against `port`."""
    options = tmp_path / "client-options"
    options.write_text("")
    test = services[name]["healthcheck"]["test"]
    assert test[0] == "CMD"
    own_port = {"cfg1": "27019", "sh1": "27018", "sh2": "27018", "mongos": "27017"}[name]
    arguments = [
        a.replace("/tls/client-options", str(options)).replace(f"127.0.0.1:{own_port}", f"127.0.0.1:{port}")
        for a in test[1:]
    ]
    return mongosh(arguments, home=tmp_path / "home").returncode


def test_the_router_healthcheck_passes_a_mongos_only(
    services: dict[str, Any], fake_mongos: FakeDeployment, fake_rs: FakeDeployment, tmp_path: Path
) -> None:
    assert healthcheck(services, "mongos", fake_mongos.port, tmp_path) == 0
    assert healthcheck(services, "mongos", fake_rs.port, tmp_path) == 1


def test_a_member_healthcheck_passes_a_member_of_its_own_set_only(
    services: dict[str, Any], tmp_path: Path
) -> None:
    with FakeMongod(set_name="cfg") as config_server, FakeMongod(set_name="sh1") as shard:
        assert healthcheck(services, "cfg1", config_server.port, tmp_path) == 0
        assert healthcheck(services, "sh1", shard.port, tmp_path) == 0
        assert healthcheck(services, "sh2", shard.port, tmp_path) == 1


def rendered_command(command: list[str], env: Path) -> dict[str, Any]:
    """What Compose's own binary renders from one of harel-stack's command lines, its `--env-file` made `env`."""
    assert command[:2] == ["docker", "compose"]
    options = command[2 : command.index("config")]
    options[options.index("--env-file") + 1] = str(env)
    result = docker_compose([*options, "config", "--format", "json"], cwd=REPOSITORY_ROOT)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def rendered_services(command: list[str], env: Path) -> dict[str, Any]:
    return dict(rendered_command(command, env)["services"])


def test_the_command_lines_harel_stack_runs_render_the_cluster_and_down_reaches_both_topologies(
    tmp_path: Path,
) -> None:
    env = env_file(tmp_path, HAREL_SHARDED="1", HAREL_MEMBERS="3", HAREL_OBSERVABILITY="1")
    compose = Dependencies().compose(Project(REPOSITORY_ROOT), load_settings(env))
    assert isinstance(compose, DockerCompose)

    up = rendered_services(compose.command("config"), env)
    assert set(up) == CLUSTER_SERVICES | set(CLUSTER_OBSERVABILITY)
    # The host reaches the router, on the loopback only, where it reached mongo1.
    published = [(name, port) for name, service in up.items() for port in service.get("ports", [])]
    assert sorted((name, port["host_ip"], port["published"], port["target"]) for name, port in published) == [
        ("grafana", "127.0.0.1", "3000", 3000),
        ("mongos", "127.0.0.1", "27017", 27017),
        ("prometheus", "127.0.0.1", "9090", 9090),
    ]

    # `down`, whatever compose/.env says now, reaches every service of either topology: the replica set's with each of
    # its profiles, and the cluster's.
    replica_set = DockerCompose(Project(REPOSITORY_ROOT), 3, observability=True)
    every_replica_set_service = rendered_services(
        replica_set.command("config", profiles=["smoke", "backup"]), env
    )
    assert {"mongo1", "mongo3", "mongo-init", "smoke", "backup", "grafana"} <= set(every_replica_set_service)
    for runner in (compose, replica_set):
        down = rendered_services(runner.command("config", all_profiles=True), env)
        assert set(down) == set(every_replica_set_service) | set(up)


# --- the cluster with the user's app (compose/app.yml) and with TLS (HAREL_TLS_MODE) -------------------------------

sharded_init = load("sharded_init")
# The TLS modes from which clients use TLS (harel_stack.settings.CLIENT_TLS_MODES), and those from which they do not.
TLS_MODES = ["disabled", "allowTLS", "preferTLS", "requireTLS"]


def harel_stack_renders(tmp_path: Path, **variables: str) -> tuple[list[Path], dict[str, Any]]:
    """compose/.env with HAREL_SHARDED=1 and `variables`, the -f files harel-stack hands compose for it, and what
    Compose's own binary renders from harel-stack's command line."""
    certificates = tmp_path / "certificates"
    certificates.mkdir(exist_ok=True)
    variables = {"HAREL_TLS_DIR": str(certificates), **variables}
    env = env_file(tmp_path, HAREL_SHARDED="1", **variables)
    runner = Dependencies().compose(Project(REPOSITORY_ROOT), load_settings(env))
    assert isinstance(runner, DockerCompose)
    command = runner.command("config")
    files = [Path(command[index + 1]) for index, option in enumerate(command) if option == "-f"]
    return files, rendered_command(command, env)


def the_app(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "shop"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG HAREL_WORKER_IMAGE\nFROM ${HAREL_WORKER_IMAGE} AS worker\n")
    return {"HAREL_APP": "orders.app:app", "HAREL_APP_DIR": str(folder)}


def validates(compose: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "rendered.json"
    path.write_text(json.dumps(compose), encoding="utf-8")
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def workers_url(services: dict[str, Any]) -> str:
    """The URL sharded-init writes for the workers, from its rendered command line (its --config read from the file
    compose mounts there), with the app user's password "pw"."""
    init = services["sharded-init"]
    arguments = list(init["command"])
    config = argument(arguments, "--config")
    [mount] = [volume for volume in init["volumes"] if volume["target"] == config]
    arguments[arguments.index("--config") + 1] = mount["source"]
    cluster = sharded_init.cluster_from_arguments(sharded_init.parse_arguments(arguments))
    return str(cluster.router_url(cluster.app_user, "pw", cluster.database))


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Container path -> (volume, read-only) of a service's named volumes."""
    return {
        v["target"]: (v["source"], bool(v.get("read_only")))
        for v in service.get("volumes", [])
        if v["type"] == "volume"
    }


@pytest.mark.parametrize("mode", TLS_MODES)
def test_with_tls_the_workers_reach_the_router_with_the_ca_the_tls_step_writes(
    tmp_path: Path, mode: str
) -> None:
    files, compose = harel_stack_renders(tmp_path, HAREL_TLS_MODE=mode)
    assert files == [COMPOSE_FILE, SHARDED_FILE]
    validates(compose, tmp_path)
    services = compose["services"]
    assert set(services) == CLUSTER_SERVICES
    assert services["tls"]["environment"]["HAREL_TLS_MODE"] == mode
    for name in ("cfg1", "sh1", "sh2", "mongos"):
        assert argument(services[name]["command"], "--config") == "/tls/mongod.conf", name
        assert mounts(services[name])["/tls"] == ("tls", True), name
    for name in ("cfg1", "sh1", "sh2"):
        assert services[name]["depends_on"]["tls"]["condition"] == "service_completed_successfully", name
    assert argument(services["sharded-init"]["command"], "--tls-mode") == mode

    url = workers_url(services)
    router = f"{services['mongos']['hostname']}:{argument(services['mongos']['command'], '--port')}"
    tls = "&tls=true&tlsCAFile=/tls/ca.crt" if mode in CLIENT_TLS_MODES else ""
    assert url == f"mongodb://harel:pw@{router}/harel?authSource=admin{tls}"
    worker = services["worker"]
    # The URL file sharded-init writes is the one the workers read, from the same volume; the CA the URL names is the
    # one the `tls` one-shot writes into the `tls` volume.
    url_file = argument(services["sharded-init"]["command"], "--url-file")
    assert worker["environment"]["HAREL_MONGO_URL_FILE"] == url_file
    assert mounts(worker)[str(Path(url_file).parent)] == ("app-url", True)
    assert mounts(services["sharded-init"])[str(Path(url_file).parent)] == ("app-url", False)
    assert mounts(worker)["/tls"] == ("tls", True)
    assert mounts(services["tls"])[services["tls"]["environment"]["TLS_VOLUME"]] == ("tls", False)


def test_the_users_app_runs_on_the_cluster_built_on_the_image_sharded_init_builds(tmp_path: Path) -> None:
    files, compose = harel_stack_renders(tmp_path, HAREL_TLS_MODE="requireTLS", **the_app(tmp_path))
    assert files == [COMPOSE_FILE, SHARDED_FILE, COMPOSE_DIR / "app.yml", COMPOSE_DIR / "sharded-app.yml"]
    validates(compose, tmp_path)
    services = compose["services"]
    assert "mongo-init" not in services
    worker, init = services["worker"], services["sharded-init"]
    assert worker["image"] == "harel/app-worker:local"
    assert worker["command"] == ["worker", "--app", "orders.app:app"]
    # app.yml's context names mongo-init, which the cluster does not run; sharded-app.yml names sharded-init, whose
    # image is the stack's worker image, built as the replica set's worker builds it.
    assert worker["build"]["additional_contexts"] == {"harel-worker": "service:sharded-init"}
    assert worker["build"]["args"] == {"HAREL_WORKER_IMAGE": "harel-worker"}
    assert init["image"] == "harel/worker:local"
    assert init["build"] == {
        "context": str(REPOSITORY_ROOT),
        "dockerfile": "compose/Dockerfile.worker",
        "target": "worker",
    }
    # Everything but the image is the cluster's worker: after sharded-init, on the router's URL, with its CA.
    assert worker["depends_on"] == {
        "sharded-init": {"condition": "service_completed_successfully", "required": True}
    }
    (tmp_path / "plain").mkdir()
    _, plain = harel_stack_renders(
        tmp_path / "plain", HAREL_TLS_MODE="requireTLS", HAREL_TLS_DIR=str(tmp_path / "certificates")
    )
    changed = {"image", "build", "command"}
    assert {k: v for k, v in worker.items() if k not in changed} == {
        k: v for k, v in plain["services"]["worker"].items() if k not in changed
    }
    assert workers_url(services) == workers_url(plain["services"])
    assert "tls=true&tlsCAFile=/tls/ca.crt" in workers_url(services)
    assert {name: s for name, s in services.items() if name != "worker"} == {
        name: s for name, s in plain["services"].items() if name != "worker"
    }


def test_the_app_file_alone_does_not_combine_with_the_cluster(tmp_path: Path) -> None:
    """Why sharded-app.yml exists: without it compose refuses app.yml's context on the cluster."""
    env = env_file(tmp_path, **the_app(tmp_path))
    files = (COMPOSE_FILE, SHARDED_FILE, COMPOSE_DIR / "app.yml")
    arguments = [option for path in files for option in ("-f", str(path))]
    result = docker_compose(
        [
            *arguments,
            "--env-file",
            str(env),
            "-p",
            "harel",
            "--profile",
            SHARDED_PROFILE,
            "config",
            "--quiet",
        ],
        cwd=REPOSITORY_ROOT,
    )
    assert result.returncode != 0
    assert 'unknown service "mongo-init"' in result.stderr


def test_the_local_certificate_names_every_host_clients_reach_with_tls(services: dict[str, Any]) -> None:
    """compose/tls/README.md's certificate: the members of either topology and the router (the workers check the
    router's name; mongos and the members check each other's)."""
    readme = (COMPOSE_DIR / "tls" / "README.md").read_text(encoding="utf-8")
    [line] = [line for line in readme.splitlines() if "subjectAltName=" in line]
    names = set(re.findall(r"DNS:([\w-]+)", line))
    assert names >= {services[name]["hostname"] for name in ("cfg1", "sh1", "sh2", "mongos")}
    assert names >= {"mongo1", "mongo2", "mongo3"}


# --- the observability profile on the cluster (compose/sharded-observability.yml) ----------------------------------

# What the cluster runs in the observability profile: its own monitor users and exporter, observability.yml's
# Prometheus and Grafana.
CLUSTER_OBSERVABILITY = (
    "cluster-ops-users",
    "shard-ops-users-sh1",
    "shard-ops-users-sh2",
    "cluster-exporter",
    "prometheus",
    "grafana",
)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The cluster with HAREL_OBSERVABILITY=1, rendered from harel-stack's command line, without TLS and with
    requireTLS."""
    return {
        mode: harel_stack_renders(
            tmp_path_factory.mktemp(mode), HAREL_OBSERVABILITY="1", HAREL_TLS_MODE=mode
        )[1]
        for mode in ("disabled", "requireTLS")
    }


def exporter_uris(service: dict[str, Any]) -> list[str]:
    [uris] = [a.removeprefix("--mongodb.uri=") for a in service["command"] if a.startswith("--mongodb.uri=")]
    return uris.split(",")


@pytest.mark.parametrize("mode", ["disabled", "requireTLS"])
def test_with_observability_the_cluster_runs_its_own_exporter_in_place_of_the_replica_sets(
    observed: dict[str, dict[str, Any]], mode: str, tmp_path: Path
) -> None:
    compose = observed[mode]
    services = compose["services"]
    validates(compose, tmp_path)
    assert set(services) == CLUSTER_SERVICES | set(CLUSTER_OBSERVABILITY)
    assert {name: found for name, s in services.items() if (found := hardening_faults(s))} == {}
    # Those given a secret write their root (compose copies it in); the exporter is read-only.
    writable = {name for name, s in services.items() if not s.get("read_only")}
    assert writable == {"cfg1", "sh1", "sh2", "sharded-init", "grafana"} | {
        name for name in CLUSTER_OBSERVABILITY if "ops-users" in name
    }
    exporter = services["cluster-exporter"]
    query = "?tls=true&tlsCAFile=/tls/ca.crt" if mode in CLIENT_TLS_MODES else ""
    # One target per router, config server member and shard member: the hosts sharded-init's settings name.
    members = [*SETTINGS["routers"], *SETTINGS["configServer"]["dataMembers"]]
    members += [host for shard in SETTINGS["shards"] for host in shard["dataMembers"]]
    assert exporter_uris(exporter) == [f"mongodb://{host}/admin{query}" for host in members]
    assert {"--compatible-mode", "--collector.diagnosticdata", "--collector.replicasetstatus"} <= set(
        exporter["command"]
    )
    assert exporter["environment"] == {
        "MONGODB_USER": "harel-monitor",
        "MONGODB_PASSWORD": secret_value("HAREL_MONITOR_PASSWORD"),
    }
    assert set(exporter["depends_on"]) == {name for name in CLUSTER_OBSERVABILITY if "ops-users" in name}


@pytest.mark.parametrize("mode", ["disabled", "requireTLS"])
def test_the_monitor_user_is_made_through_the_router_and_on_each_shard_from_files_only(
    observed: dict[str, dict[str, Any]], mode: str
) -> None:
    services = observed[mode]["services"]
    ca = "/tls/ca.crt" if mode in CLIENT_TLS_MODES else ""
    targets = {}
    for name in (n for n in CLUSTER_OBSERVABILITY if "ops-users" in n):
        service = services[name]
        environment = dict(service["environment"])
        config = json.loads(environment.pop("HAREL_OPS_USERS"))
        targets[name] = (config["hosts"], config["replicaSetName"])
        assert config["monitor"] == {"username": "harel-monitor"}
        assert config["tlsCAFile"] == ca
        # Passwords as files, owned by the user it runs as, read-only.
        files = {
            "HOME": "/tmp",
            "HAREL_MONGO_ROOT_PASSWORD_FILE": "/run/secrets/mongo_root_password",
            "HAREL_MONITOR_PASSWORD_FILE": "/run/secrets/monitor_password",
        }
        owned = {("mongo_root_password", "999", "999", "0400"), ("monitor_password", "999", "999", "0400")}
        # The router's one-shot makes the backup user too (the backup profile's); a shard's, the monitor user only.
        if name == "cluster-ops-users":
            assert config["backup"] == {"username": "harel-backup"}
            files["HAREL_BACKUP_PASSWORD_FILE"] = "/run/secrets/backup_password"
            owned.add(("backup_password", "999", "999", "0400"))
        else:
            assert config["backup"] is None
        assert environment == files
        assert service["user"] == "999:999"
        assert {(s["source"], s["uid"], s["gid"], s["mode"]) for s in service["secrets"]} == owned
        assert service["depends_on"]["sharded-init"]["condition"] == "service_completed_successfully"
    # The router (a cluster user, kept on the config servers) and each shard's own set (a shard-local user).
    assert targets == {
        "cluster-ops-users": (SETTINGS["routers"], None),
        **{
            f"shard-ops-users-{shard['replicaSetName']}": (shard["dataMembers"], shard["replicaSetName"])
            for shard in SETTINGS["shards"]
        },
    }


@requires_node
def test_each_ops_users_one_shot_as_rendered_makes_the_monitor_user_on_its_target(
    observed: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """ops-users.js under the fake mongosh, with the environment compose renders and its secrets as files: the
    router's one-shot connects without a replica set (hello answers isdbgrid), a shard's with its set's name."""
    rendered = observed["requireTLS"]
    for name in (n for n in CLUSTER_OBSERVABILITY if "ops-users" in n):
        service = rendered["services"][name]
        environment = dict(service["environment"])
        config = json.loads(environment.pop("HAREL_OPS_USERS"))
        mounted = {
            secret["target"]: secret_value(rendered["secrets"][secret["source"]]["environment"])
            for secret in service["secrets"]
        }
        cluster = initiated_cluster(config, secret_value("HAREL_MONGO_ROOT_PASSWORD"))
        router = config["replicaSetName"] is None
        cluster["members"] = {
            host: {
                "setName": config["replicaSetName"],
                "arbiter": False,
                "unreachableFor": 0,
                "router": router,
            }
            for host in config["hosts"]
        }
        run = run_ops_users(
            tmp_path, {"ops-users.js": OPS_USERS.read_text()}, config, environment, cluster, mounted
        )
        assert run.ok, (name, run.error)
        made = {"harel-monitor": secret_value("HAREL_MONITOR_PASSWORD")}
        if router:
            made["harel-backup"] = secret_value("HAREL_BACKUP_PASSWORD")
            # Through the router, the cluster's backup user: the replica set's roles, the pause and the balancer.
            assert run.cluster["users"]["harel-backup"]["roles"] == [
                {"role": "backup", "db": "admin"},
                {"role": "harelBackupStatus", "db": "admin"},
                {"role": "harelBackupPause", "db": "admin"},
                {"role": "clusterManager", "db": "admin"},
            ]
        assert {user: u["pwd"] for user, u in run.cluster["users"].items()} == made, name
        for connection in run.connections:
            assert connection["hosts"] == config["hosts"]
            assert connection["options"].get("replicaSet") == config["replicaSetName"]
            assert connection["options"]["tlsCAFile"] == "/tls/ca.crt"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_prometheus_asks_each_topologys_exporter_for_each_of_its_targets(
    observed: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """compose/observability/prometheus.yml's mongodb job, relabelled by the real promtool (check
    service-discovery) with each DNS name standing for the address it would resolve to: every URI of either exporter
    is a target, sent to that exporter's /scrape?target=<host:port>, with instance=<host:port>."""
    prometheus = yaml.safe_load(
        (COMPOSE_DIR / "observability" / "prometheus.yml").read_text(encoding="utf-8")
    )
    [job] = [job for job in prometheus["scrape_configs"] if job["job_name"] == "mongodb"]
    job["static_configs"] = [
        {"targets": [f"10.0.{index}.{n}:{sd['port']}"], "labels": {"__meta_dns_name": name}}
        for index, sd in enumerate(job.pop("dns_sd_configs"))
        for n, name in enumerate(sd["names"])
    ]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}), encoding="utf-8")
    result = subprocess.run(
        ["promtool", "check", "service-discovery", str(config), "mongodb"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    scraped = {
        target["labels"]["__param_target"]: (target["labels"]["__address__"], target["labels"]["instance"])
        for target in json.loads(result.stdout)
    }
    replica_set = render(env_file(tmp_path), "three-members", "observability")["services"]
    expected = {}
    for exporter, services in (
        ("mongodb-exporter", replica_set),
        ("cluster-exporter", observed["disabled"]["services"]),
    ):
        for uri in exporter_uris(services[exporter]):
            host = uri.removeprefix("mongodb://").split("/")[0]
            expected[host] = (f"{exporter}:9216", host)
    assert scraped == expected


# --- the backup profile on the cluster (observability.yml's backup and restore, given the router by sharded.yml) ---

# What `harel-stack backup` runs on the cluster besides the cluster itself: the one-shot that makes the backup user
# through the router, and the backup and restore one-shots.
CLUSTER_BACKUP = ("cluster-ops-users", "backup", "restore")
BACKUP_SCRIPTS = REPOSITORY_ROOT / "helm" / "harel-stack" / "files" / "backup"


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The cluster as `harel-stack backup` and `restore` run it (HAREL_SHARDED=1, the backup profile added to
    harel-stack's command line), without TLS and with requireTLS."""
    rendered = {}
    for mode in ("disabled", "requireTLS"):
        directory = tmp_path_factory.mktemp(f"backup-{mode}")
        certificates = directory / "certificates"
        certificates.mkdir()
        env = env_file(directory, HAREL_SHARDED="1", HAREL_TLS_MODE=mode, HAREL_TLS_DIR=str(certificates))
        runner = Dependencies().compose(Project(REPOSITORY_ROOT), load_settings(env))
        assert isinstance(runner, DockerCompose)
        rendered[mode] = rendered_command(runner.command("config", profiles=["backup"]), env)
    return rendered


@pytest.mark.parametrize("mode", ["disabled", "requireTLS"])
def test_with_the_backup_profile_the_cluster_runs_the_backup_one_shots_hardened(
    backed_up: dict[str, dict[str, Any]], mode: str, tmp_path: Path
) -> None:
    compose = backed_up[mode]
    services = compose["services"]
    validates(compose, tmp_path)
    # Not the observability profile: the shards' monitor users, the exporter, Prometheus and Grafana stay out, and
    # the replica set's mongo-ops-users too.
    assert set(services) == CLUSTER_SERVICES | set(CLUSTER_BACKUP)
    assert {name: found for name, s in services.items() if (found := hardening_faults(s))} == {}
    writable = {name for name, s in services.items() if not s.get("read_only")}
    assert writable == {"cfg1", "sh1", "sh2", "sharded-init", *CLUSTER_BACKUP}
    # As whoever runs harel-stack (.env.example's defaults here), as on the replica set.
    assert services["backup"]["user"] == services["restore"]["user"] == "1000:1000"
    assert services["backup"]["depends_on"] == {
        "cluster-ops-users": {"condition": "service_completed_successfully", "required": True}
    }
    assert services["cluster-ops-users"]["depends_on"]["sharded-init"]["condition"] == (
        "service_completed_successfully"
    )
    for name in ("backup", "restore"):
        service = services[name]
        assert service["entrypoint"] == ["/bin/bash", "/harel/backup/harel-backup.sh"], name
        [scripts] = [v for v in service["volumes"] if v["target"] == "/harel/backup"]
        assert (scripts["source"], scripts.get("read_only")) == (str(BACKUP_SCRIPTS), True), name
        assert mounts(service)["/tls"] == ("tls", True), name
    # The script's sharded mode needs pause-workers.js beside it.
    assert (BACKUP_SCRIPTS / "pause-workers.js").is_file()
    assert services["backup"]["command"] == ["run"]
    assert services["restore"]["command"] == ["restore", "/restore/archive.gz"]
    [archives] = [v for v in services["backup"]["volumes"] if v["target"] == "/backups"]
    assert archives["type"] == "bind" and not archives.get("read_only")


@pytest.mark.parametrize("mode", ["disabled", "requireTLS"])
def test_the_backup_one_shots_reach_the_router_with_their_passwords_as_files(
    backed_up: dict[str, dict[str, Any]], mode: str
) -> None:
    services = backed_up[mode]["services"]
    ca = "/tls/ca.crt" if mode in CLIENT_TLS_MODES else ""
    # harel-backup.sh's sharded mode: the routers sharded-init's settings name, no replica set's hosts or name.
    where = {
        "HAREL_BACKUP_ROUTERS": ",".join(SETTINGS["routers"]),
        "HAREL_BACKUP_HOSTS": "",
        "HAREL_BACKUP_REPLICA_SET": "",
        "HAREL_BACKUP_DATABASE": "harel",
        "HAREL_BACKUP_DIR": "/backups",
        "HAREL_BACKUP_TLS_CA": ca,
        "HAREL_BACKUP_PAUSE_TIMEOUT": "120",
        "HOME": "/tmp",
    }
    assert services["backup"]["environment"] == {
        **where,
        "HAREL_BACKUP_USER": "harel-backup",
        "HAREL_BACKUP_PASSWORD_FILE": "/run/secrets/backup_password",
        "HAREL_BACKUP_KEEP": "7",
        "HAREL_BACKUP_JOB": "compose/harel",
        "HAREL_BACKUP_TARGET": "dir:./backups",
    }
    assert services["restore"]["environment"] == {
        **where,
        "HAREL_RESTORE_USER": "root",
        "HAREL_RESTORE_PASSWORD_FILE": "/run/secrets/mongo_root_password",
    }
    owners = {
        name: {(s["source"], s["target"], s["uid"], s["gid"], s["mode"]) for s in services[name]["secrets"]}
        for name in CLUSTER_BACKUP
    }
    assert owners == {
        "cluster-ops-users": {
            ("mongo_root_password", "/run/secrets/mongo_root_password", "999", "999", "0400"),
            ("monitor_password", "/run/secrets/monitor_password", "999", "999", "0400"),
            ("backup_password", "/run/secrets/backup_password", "999", "999", "0400"),
        },
        "backup": {("backup_password", "/run/secrets/backup_password", "1000", "1000", "0400")},
        "restore": {("mongo_root_password", "/run/secrets/mongo_root_password", "1000", "1000", "0400")},
    }
    # The user the backup one-shot connects as is the one cluster-ops-users makes through the router, with the
    # password from the same secret.
    config = json.loads(services["cluster-ops-users"]["environment"]["HAREL_OPS_USERS"])
    assert config["hosts"] == SETTINGS["routers"] and config["replicaSetName"] is None
    assert config["backup"] == {"username": services["backup"]["environment"]["HAREL_BACKUP_USER"]}
    assert backed_up[mode]["secrets"]["backup_password"]["environment"] == "HAREL_BACKUP_PASSWORD"
    passwords = {secret_value(variable) for variable in SECRET_VARIABLES}
    for name in CLUSTER_BACKUP:
        environment = services[name]["environment"]
        assert not passwords & {str(v) for v in environment.values()}, name
        assert not any(p in " ".join(services[name].get("command") or []) for p in passwords), name
