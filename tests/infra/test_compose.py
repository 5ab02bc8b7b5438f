"""compose/: the compose file against the compose specification and the stack's own rules, .env.example
against the file, the keyfile step run for real (with chown recorded), and the worker Dockerfile."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harel_stack.compose import SMOKE_PROFILE, THREE_MEMBERS_PROFILE
from harel_stack.settings import SECRET_VARIABLES, parse_env

pytestmark = pytest.mark.infra

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPOSITORY_ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
# docker-compose.yml includes it: the observability and backup profiles.
OPERATIONS_FILE = COMPOSE_DIR / "observability.yml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
DOCKERFILE = COMPOSE_DIR / "Dockerfile.worker"
VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|KEY$")
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


def test_one_shot_services_are_the_keyfile_the_init_and_the_smoke_run(services: dict[str, Any]) -> None:
    assert _one_shots(services) == {"keyfile", "mongo-init", "smoke"}
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


def test_a_member_is_healthy_only_as_primary_or_secondary_of_rs0(services: dict[str, Any]) -> None:
    for name in ("mongo1", "mongo2", "mongo3"):
        test = services[name]["healthcheck"]["test"]
        assert test[1] == "mongosh"
        script = test[test.index("--eval") + 1]
        assert "db.hello()" in script
        assert "h.setName === 'rs0'" in script
        assert "h.isWritablePrimary || h.secondary" in script
        # Never initiates from a healthcheck (that would hide a failed init), never carries credentials.
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
    assert set(_environment(services["mongo1"])) == {
        "MONGO_INITDB_ROOT_USERNAME",
        "MONGO_INITDB_ROOT_PASSWORD",
    }
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


def test_workers_run_as_the_app_user_with_configurable_replicas(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["build"] == {"context": "..", "dockerfile": "compose/Dockerfile.worker", "target": "worker"}
    assert worker["deploy"]["replicas"] == "${HAREL_WORKERS:-2}"
    assert "command" not in worker  # the image's default: `harel worker`
    url = _environment(worker)["HAREL_MONGO_URL"]
    assert re.fullmatch(
        r"mongodb://harel:\$\{HAREL_APP_PASSWORD:\?[^}]+\}@mongo1:27017,mongo2:27017,mongo3:27017/harel"
        r"\?replicaSet=rs0&authSource=admin",
        url,
    )
    assert services["smoke"]["command"] == ["smoke"]
    assert services["smoke"]["profiles"] == [SMOKE_PROFILE]
    assert _environment(services["smoke"])["HAREL_MONGO_URL"] == url


def test_no_secret_literal_in_the_compose_file(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key):
                assert REFERENCE.match(value), f"{name}.{key} must come from compose/.env"
    url_passwords = [
        password
        for text in _strings(services)
        for password in re.findall(r"://[^:/@\s]+:(\$\{[^}]*\}|[^@\s/]+)@", text)
    ]
    assert url_passwords, "the app URL's password was not found: this check would pass vacuously"
    for password in url_passwords:
        assert REFERENCE.match(password), f"a URL carries a literal password: {password}"
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


def test_image_tags_are_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        image = service.get("image")
        if image is None:
            assert "build" in service, name
            continue
        repository, _, tag = image.rpartition(":")
        assert repository and tag and "/" not in tag, f"{name}: untagged image {image}"
        assert tag != "latest", f"{name}: {image}"
        assert "$" not in image, f"{name}: image chosen by a variable"
    for name in ("keyfile", "mongo1", "mongo2", "mongo3"):
        assert services[name]["image"] == "mongo:8.0"
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("ARG PYTHON_IMAGE="):
            assert line == "ARG PYTHON_IMAGE=python:3.11-slim"


def test_data_and_keyfile_live_in_named_volumes(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert set(compose["volumes"]) == {"keyfile", "mongo1-data", "mongo2-data", "mongo3-data"}
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source in compose["volumes"], f"{volume}: bind mounts and anonymous volumes are not used"


# --- compose/.env.example ------------------------------------------------------------------------------------


def _compose_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in (COMPOSE_FILE, OPERATIONS_FILE))


def test_env_example_documents_exactly_the_variables_the_compose_file_uses() -> None:
    # HAREL_OBSERVABILITY is harel-stack's own: it chooses the profiles.
    used = set(VARIABLE.findall(_compose_text())) | {"HAREL_OBSERVABILITY"}
    example = ENV_EXAMPLE.read_text(encoding="utf-8")
    documented = set(parse_env(example))
    assert used == documented
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
    text = _compose_text()
    example = parse_env(ENV_EXAMPLE.read_text(encoding="utf-8"))
    defaults = dict(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}", text))
    for variable, default in defaults.items():
        assert example[variable] == default, variable
    required = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", text))
    assert required == set(SECRET_VARIABLES)
    for secret in SECRET_VARIABLES:
        assert example[secret] == "", f"{secret} must be generated, not shipped"


def test_env_file_is_git_ignored() -> None:
    ignored = (REPOSITORY_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "compose/.env" in ignored


# --- the keyfile step, run ------------------------------------------------------------------------------------


def _keyfile_script(services: dict[str, Any]) -> str:
    service = services["keyfile"]
    assert service["entrypoint"] == ["/bin/sh", "-euc"]
    assert service["user"] == "0:0"
    # Compose turns `$$` into `$` before the shell sees it.
    return service["command"][0].replace("$$", "$")


def _run_keyfile(script: str, keyfile: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "KEYFILE": str(keyfile),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    return subprocess.run(
        ["/bin/sh", "-euc", script], env=environment, capture_output=True, text=True, check=False, timeout=30
    )


def test_keyfile_is_generated_once_random_and_owned_by_mongodb(
    services: dict[str, Any], tmp_path: Path
) -> None:
    script = _keyfile_script(services)
    assert _environment(services["keyfile"])["KEYFILE"] == "/keyfile/mongo.key"
    # chown to uid 999 needs root; a stand-in records the call instead, so this runs as any user.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "chown-calls"
    (bin_dir / "chown").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n', encoding="utf-8")
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
    assert calls.read_text(encoding="utf-8").split() == ["999:999", str(first_install)]

    again = _run_keyfile(script, first_install, bin_dir)
    assert again.returncode == 0, again.stderr
    assert "exists, kept" in again.stdout
    assert first_install.read_text(encoding="ascii") == key

    assert _run_keyfile(script, second_install, bin_dir).returncode == 0
    assert second_install.read_text(encoding="ascii") != key


# --- the worker image ----------------------------------------------------------------------------------------


def test_worker_image_installs_the_sdk_wheel_and_runs_harel_worker_as_10001() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", text, flags=re.MULTILINE)
    assert stages == [
        ("${PYTHON_IMAGE}", "wheel"),
        ("${PYTHON_IMAGE}", "runtime"),
        ("runtime", "mongo-init"),
        ("runtime", "worker"),
    ]
    assert "COPY sdk/ sdk/" in text
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./sdk" in text
    assert "/wheels/*.whl" in text
    assert "useradd --uid 10001" in text
    assert "USER 10001:10001" in text
    worker = text[text.index("AS worker") :]
    assert 'ENTRYPOINT ["harel"]' in worker
    assert 'CMD ["worker"]' in worker
    assert "EXPOSE 8080" in worker
    init = text[text.index("AS mongo-init") : text.index("AS worker")]
    assert "compose/mongo-init/rs_init.py" in init
    # The build context is the repository root: only what the COPY lines need may be sent.
    ignore = (COMPOSE_DIR / "Dockerfile.worker.dockerignore").read_text(encoding="utf-8").splitlines()
    assert ignore[ignore.index("*") + 1 :][:2] == ["!sdk/", "!compose/mongo-init/rs_init.py"]
    assert (REPOSITORY_ROOT / "compose" / "mongo-init" / "rs_init.py").is_file()
