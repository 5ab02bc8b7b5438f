"""Every service of the local stack, as `docker compose config` renders it with every profile and with a user's app,
runs hardened: no Linux capability, no privilege gained through setuid, a user other than root, memory and CPU
limits, and a read-only root filesystem unless compose has to copy a secret into it (compose refuses to for a
read-only service: `file` is then the only secret source it takes, docker/compose's pkg/compose/secrets.go)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from harel_stack.compose import SMOKE_PROFILE, THREE_MEMBERS_PROFILE
from tests.infra.compose_render import APP_FILE, COMPOSE_FILE, env_file, render
from tests.infra.order_app import lay_out

pytestmark = pytest.mark.infra

EVERY_PROFILE = (THREE_MEMBERS_PROFILE, SMOKE_PROFILE, "observability", "backup")
# The services compose copies a secret into: their root filesystem stays writable, and no other's does.
RECEIVE_A_SECRET = {"mongo1", "mongo-init", "mongo-ops-users", "grafana", "backup", "restore"}


def hardening_faults(service: dict[str, Any]) -> list[str]:
    """What `service` (rendered) lacks of the hardening, one line each; empty when it has it all."""
    faults = []
    if service.get("cap_drop") != ["ALL"]:
        faults.append("cap_drop is not [ALL]")
    if service.get("cap_add"):
        faults.append(f"cap_add {service['cap_add']}")
    if service.get("privileged"):
        faults.append("privileged")
    if "no-new-privileges:true" not in service.get("security_opt", []):
        faults.append("no no-new-privileges:true")
    user = str(service.get("user", ""))
    if not user or user.split(":", maxsplit=1)[0] in ("0", "root"):
        faults.append(f"runs as root (user {user!r})")
    limits = service.get("deploy", {}).get("resources", {}).get("limits", {})
    if not (limits.get("memory") and limits.get("cpus")):
        faults.append(f"limits {limits}")
    if bool(service.get("read_only")) == bool(service.get("secrets")):
        faults.append("read_only must be set exactly when compose copies no secret in")
    return faults


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every service of the stack with every profile, and the worker of a user's app (compose/app.yml)."""
    directory = tmp_path_factory.mktemp("hardening")
    services = render(env_file(directory), *EVERY_PROFILE)["services"]
    folder = lay_out(directory / "shop")
    app_env = env_file(directory / "shop", HAREL_APP="orders.app:app", HAREL_APP_DIR=str(folder))
    app = render(app_env, *EVERY_PROFILE, files=(COMPOSE_FILE, APP_FILE))["services"]
    return {**services, "app worker": app["worker"]}


def test_every_service_with_every_profile_and_a_users_app_runs_hardened(
    rendered: dict[str, dict[str, Any]],
) -> None:
    assert len(rendered) == 15
    faults = {name: found for name, service in rendered.items() if (found := hardening_faults(service))}
    assert faults == {}
    writable = {name for name, service in rendered.items() if not service.get("read_only")}
    assert writable == RECEIVE_A_SECRET


def test_read_only_services_that_write_scratch_files_get_a_tmpfs(rendered: dict[str, dict[str, Any]]) -> None:
    # mongod's socket and the entrypoint's temporary files; the workers' working directory.
    for name in ("mongo2", "mongo3", "worker", "smoke", "app worker"):
        assert rendered[name]["tmpfs"] == ["/tmp"], name
    # The one-shots write to their volumes only, each mounted where the image has a directory of uid 999's.
    for name in ("keyfile", "tls"):
        assert "tmpfs" not in rendered[name], name
        assert [v["target"] for v in rendered[name]["volumes"] if v["type"] == "volume"] == ["/data/configdb"]


def test_members_run_as_mongod_and_the_one_shots_as_non_root(rendered: dict[str, dict[str, Any]]) -> None:
    for name in ("mongo1", "mongo2", "mongo3", "keyfile", "tls", "mongo-ops-users"):
        assert rendered[name]["user"] == "999:999", name
    for name in ("mongo-init", "worker", "smoke"):
        assert rendered[name]["user"] == "10001:10001", name
    # The caller's ids (.env.example's defaults here): their archives and their certificate folder.
    assert rendered["backup"]["user"] == rendered["restore"]["user"] == "1000:1000"
    assert rendered["tls"]["group_add"] == ["1000"]


def test_the_limits_come_from_compose_env(tmp_path: Path) -> None:
    env = env_file(
        tmp_path,
        HAREL_MONGO_MEMORY_LIMIT="2g",
        HAREL_MONGO_CPU_LIMIT="2.5",
        HAREL_WORKER_MEMORY_LIMIT="768m",
        HAREL_WORKER_CPU_LIMIT="0.5",
    )
    services = render(env, THREE_MEMBERS_PROFILE)["services"]
    for name in ("mongo1", "mongo2", "mongo3"):
        assert services[name]["deploy"]["resources"]["limits"] == {"memory": str(2 << 30), "cpus": 2.5}, name
    assert services["worker"]["deploy"]["resources"]["limits"] == {"memory": str(768 << 20), "cpus": 0.5}


def test_the_check_reports_each_part_of_the_hardening_a_service_lacks(
    rendered: dict[str, dict[str, Any]],
) -> None:
    # The assertion above means something: each part taken away is reported.
    worker = copy.deepcopy(rendered["worker"])
    assert hardening_faults(worker) == []
    for key in ("cap_drop", "security_opt", "read_only", "user"):
        worker.pop(key)
    worker["deploy"]["resources"] = {}
    worker["cap_add"] = ["NET_ADMIN"]
    assert hardening_faults(worker) == [
        "cap_drop is not [ALL]",
        "cap_add ['NET_ADMIN']",
        "no no-new-privileges:true",
        "runs as root (user '')",
        "limits {}",
        "read_only must be set exactly when compose copies no secret in",
    ]
    mongo1 = copy.deepcopy(rendered["mongo1"])
    mongo1["read_only"] = True
    assert hardening_faults(mongo1) == ["read_only must be set exactly when compose copies no secret in"]
