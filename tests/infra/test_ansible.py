"""The Ansible provisioning in playbooks/: syntax, lint, and what can really run on one machine without root.

- site.yml passes `ansible-playbook --syntax-check` with the example inventory, and ansible-lint's production
  profile (offline);
- the example inventory composes the workers' URL from its hosts and the vault variable;
- the worker role runs for real against localhost (connection local, every path under a temporary prefix, no
  systemd, no account): it builds the SDK wheel, installs it into a virtualenv (harel alone: neither harel-dev nor
  mongomock) and renders the environment file and the unit; a second run changes nothing. From that virtualenv, `harel check` passes against the fake
  replica set, and the smoke role fails with the report while no worker runs and passes once one does;
- the worker role ships the README's order app as docs/deploying-your-app.md does: in check mode (its folder, and
  its wheel alone) it would copy and install it and run `--app` from the folder, writing nothing; for real, the App
  loads from the virtualenv in that folder, and a second run changes nothing;
- the mongodb role's configuration (mongod.conf, keyfile, and the host's unit drop-in, huge pages unit and sysctl
  file, with systemctl and sysctl stood in) renders under a temporary directory, in check mode first (nothing
  written), then for real, then in check mode again (nothing to change); its secrets are required;
- a run that fails after mongod.conf changed leaves the restart pending on the member (a flag file), and the next
  run restarts it through restart_member (against the mongosh double) and removes the flag; the signing key of the
  package repository is trusted with its pinned fingerprint only;
- the mongodb role's mongosh scripts run under the real mongosh against the fake replica set (with authentication
  where they authenticate), and under Node.js against a double of mongosh and a replica set
  (ansible_mongosh_double.js), fed with the stdin their tasks render; the role's replica-set tasks run end to end
  against that double over several hosts on this machine;
- the firewall role's rules are rendered for an inventory.

Installing packages, systemd and the replica-set tasks of the mongodb role need root and a real MongoDB: they
are not run here (see the role's README for what check mode can and cannot show).
Nothing is downloaded: pip installs the SDK's dependencies from wheels packed from this test environment.
"""

from __future__ import annotations

import base64
import datetime
import getpass
import grp
import importlib.metadata
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pymongo import MongoClient

from tests.fake_mongod.fixtures import (
    AuthenticatedFake,
    FakeDeployment,
    FakeProcess,
    start_fake_mongod_process,
)
from tests.infra.order_app import lay_out, page_files
from tests.infra.tools import mongosh
from tests.wheelhouse import fill_wheelhouse, runtime_dependencies

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPOSITORY / "playbooks"
ROLES = PLAYBOOKS / "roles"
EXAMPLE_INVENTORY = PLAYBOOKS / "inventories" / "example" / "hosts.yml"
BIN = Path(sys.executable).parent
ANSIBLE_PLAYBOOK = BIN / "ansible-playbook"
ANSIBLE_LINT = BIN / "ansible-lint"
ANSIBLE = BIN / "ansible"
RECAP_LINE = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)",
    re.MULTILINE,
)
# The worker's drain after SIGTERM, kept short so stopping the test's worker is quick.
DRAIN_SECONDS = 2


# --- running Ansible -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str

    def recap(self, host: str = "localhost") -> dict[str, int]:
        for match in RECAP_LINE.finditer(self.output):
            if match.group("host") == host:
                return {key: int(value) for key, value in match.groupdict().items() if key != "host"}
        raise AssertionError(f"no PLAY RECAP line for {host} in:\n{self.output}")


class MitogenMissingError(RuntimeError):
    """ansible_mitogen (the `mitogen` package of tests/requirements.txt) is not importable."""


def mitogen_strategy() -> dict[str, str]:
    """The environment that runs ansible-playbook under Mitogen for Ansible's linear strategy.

    Stock Ansible packs each task's module into a zip, starts a new Python on the host and compiles the module
    there: about a quarter of a CPU-second per task on this machine, whatever the task does. Mitogen keeps one
    Python per host for the whole run and caches the imported modules, so the same roles run in less than half
    the time (tests/README.md has the measurements). The plays and their results are the same, with one
    difference: Mitogen runs `sudo` for `become: true` even when Ansible already runs as the become user, where
    stock Ansible runs the task as it is. What users run is stock ansible-core, so site.yml's own plays on their
    first run and rerun (test_ansible_sharded.py's test_a_first_run_...) stay on stock Ansible (`Ansible.stock`).
    """
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        raise MitogenMissingError(
            "ansible_mitogen is not installed: `make venv` installs tests/requirements.txt"
        )
    return {
        "ANSIBLE_STRATEGY_PLUGINS": str(Path(spec.origin).parent / "plugins" / "strategy"),
        "ANSIBLE_STRATEGY": "mitogen_linear",
    }


MITOGEN_SETTINGS = ("ANSIBLE_STRATEGY_PLUGINS", "ANSIBLE_STRATEGY")


@dataclass(frozen=True)
class Ansible:
    """Runs Ansible's commands with everything Ansible and pip write kept under one temporary directory."""

    environment: Mapping[str, str]
    scratch: Path

    def stock(self) -> Ansible:
        """The same, on stock Ansible's strategy instead of Mitogen's: what users run."""
        environment = {key: value for key, value in self.environment.items() if key not in MITOGEN_SETTINGS}
        return Ansible(environment, self.scratch)

    def run(self, command: Path, *arguments: str | Path, cwd: Path = PLAYBOOKS, timeout: float = 240) -> Run:
        completed = subprocess.run(
            [str(command), *map(str, arguments)],
            cwd=cwd,
            env=dict(self.environment),
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        return Run(completed.returncode, completed.stdout)

    def playbook(
        self, playbook: Path, inventory: Path | str, variables: Mapping[str, object], *flags: str
    ) -> Run:
        variables_file = self.scratch / f"variables-{secrets.token_hex(4)}.json"
        variables_file.write_text(json.dumps(variables))
        variables_file.chmod(0o600)
        return self.run(ANSIBLE_PLAYBOOK, "-i", inventory, playbook, "-e", f"@{variables_file}", *flags)


# Session-scoped: a scratch folder and an environment, cheap to make in each parallel worker, so the tests that
# need nothing more are spread over the workers (tests/conftest.py).
@pytest.fixture(scope="session")
def ansible(tmp_path_factory: pytest.TempPathFactory) -> Ansible:
    scratch = tmp_path_factory.mktemp("ansible")
    home = scratch / "home"
    home.mkdir()
    environment = {
        **os.environ,
        # Nothing under the real home directory: Ansible's, ansible-lint's and pip's caches and temp files.
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
        "ANSIBLE_HOME": str(home / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(scratch / "local-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(scratch / "remote-tmp"),
        "ANSIBLE_COLLECTIONS_PATH": str(scratch / "collections"),
        "ANSIBLE_ROLES_PATH": str(ROLES),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        # Nothing downloaded: pip gets no index and no machine-wide configuration.
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # Mitogen's strategy: the roles' runs take less than half the time (see mitogen_strategy).
        **mitogen_strategy(),
    }
    return Ansible(environment, scratch)


def local_inventory(directory: Path, group: str) -> Path:
    """An inventory with localhost alone in `group`, reached without SSH and run by this test's Python."""
    inventory = directory / f"inventory-{group}.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({group: {"hosts": {"localhost": host}}}))
    return inventory


def role_playbook(directory: Path, role: str, *, gather_os_facts: bool = False) -> Path:
    playbook = directory / f"play-{role}.yml"
    play: dict[str, object] = {
        "name": f"The {role} role on localhost",
        "hosts": "all",
        "gather_facts": gather_os_facts,
        "roles": [{"role": role}],
    }
    if gather_os_facts:
        play["gather_subset"] = ["!all"]
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    return playbook


def current_group() -> str:
    return grp.getgrgid(os.getgid()).gr_name


# Stand-ins for systemctl and sysctl, first on the PATH of the mongodb role's runs: this machine's systemd is not
# running. They append each call to $STANDIN_CALLS, and systemctl keeps what it enabled and started in
# $STANDIN_STATE, so a second run finds it as the first left it. Ansible's systemd_service reads `show` alone.
SYSTEMCTL_STANDIN = """#!/bin/sh
echo "systemctl $*" >> "$STANDIN_CALLS"
unit="$2"
case "$1" in
  show)
    if [ -e "$STANDIN_STATE/$unit.active" ]; then active=active; sub=running; else active=inactive; sub=dead; fi
    if [ -e "$STANDIN_STATE/$unit.enabled" ]; then enabled=enabled; else enabled=disabled; fi
    printf 'Id=%s\\nLoadState=loaded\\nActiveState=%s\\nSubState=%s\\nUnitFileState=%s\\n' \\
      "$unit" "$active" "$sub" "$enabled"
    ;;
  is-enabled) if [ -e "$STANDIN_STATE/$unit.enabled" ]; then echo enabled; else echo disabled; exit 1; fi ;;
  enable) touch "$STANDIN_STATE/$unit.enabled" ;;
  start|restart) touch "$STANDIN_STATE/$unit.active" ;;
esac
"""
SYSCTL_STANDIN = """#!/bin/sh
echo "sysctl $*" >> "$STANDIN_CALLS"
"""


@dataclass(frozen=True)
class SystemStandins:
    """What the stand-ins of one deployment recorded, and the environment that puts them first."""

    directory: Path

    @property
    def calls_file(self) -> Path:
        return self.directory / "calls"

    def calls(self) -> list[str]:
        return self.calls_file.read_text().splitlines() if self.calls_file.exists() else []

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        return {
            **base,
            "PATH": f"{self.directory / 'bin'}{os.pathsep}{base['PATH']}",
            "STANDIN_CALLS": str(self.calls_file),
            "STANDIN_STATE": str(self.directory / "state"),
        }


def system_standins(directory: Path) -> SystemStandins:
    """The stand-ins of the deployment under `directory`, kept beside it: what a run writes there is the role's."""
    standins = SystemStandins(directory.with_name(f"{directory.name}.standins"))
    (standins.directory / "bin").mkdir(parents=True, exist_ok=True)
    (standins.directory / "state").mkdir(exist_ok=True)
    for name, script in (("systemctl", SYSTEMCTL_STANDIN), ("sysctl", SYSCTL_STANDIN)):
        (standins.directory / "bin" / name).write_text(script)
        (standins.directory / "bin" / name).chmod(0o755)
    return standins


# --- site.yml and the example inventory ------------------------------------------------------------------------


def test_site_playbook_passes_the_syntax_check(ansible: Ansible) -> None:
    run = ansible.run(ANSIBLE_PLAYBOOK, "-i", EXAMPLE_INVENTORY, "--syntax-check", "site.yml")

    assert run.returncode == 0, run.output
    assert "playbook: site.yml" in run.output


def test_ansible_lint_production_profile_is_clean(ansible: Ansible) -> None:
    run = ansible.run(ANSIBLE_LINT, "--offline", "--profile", "production", "--nocolor")

    assert run.returncode == 0, run.output
    assert "Profile 'production' was required, and it passed" in run.output


def test_example_inventory_has_three_members_and_two_workers(ansible: Ansible) -> None:
    run = ansible.run(BIN / "ansible-inventory", "-i", EXAMPLE_INVENTORY, "--list")
    assert run.returncode == 0, run.output
    inventory = json.loads(run.output[run.output.index("{") :])

    assert len(inventory["mongodb"]["hosts"]) == 3
    assert len(inventory["workers"]["hosts"]) == 2
    # The vault example documents the layout only: Ansible must not load it as variables.
    hostvars = inventory["_meta"]["hostvars"]
    assert [name for variables in hostvars.values() for name in variables if name.startswith("vault_")] == []


def test_example_inventory_builds_the_workers_url_from_the_members_and_the_vault(ansible: Ansible) -> None:
    password = "p/ss@word:" + secrets.token_hex(8)

    run = ansible.run(
        ANSIBLE,
        "-i",
        EXAMPLE_INVENTORY,
        "worker1.harel.example",
        "-c",
        "local",
        "-m",
        "ansible.builtin.debug",
        "-a",
        "var=worker_mongo_url",
        "-e",
        json.dumps({"vault_harel_app_password": password}),
    )

    assert run.returncode == 0, run.output
    url = re.search(r"worker_mongo_url: (\S+)", run.output)
    assert url is not None, run.output
    encoded = password.replace("/", "%2F").replace("@", "%40").replace(":", "%3A")
    assert url.group(1) == (
        f"mongodb://harel:{encoded}@mongo1.harel.example:27017,mongo2.harel.example:27017,"
        "mongo3.harel.example:27017/harel?replicaSet=rs0&authSource=admin"
    )


# --- the worker role, for real, under a temporary prefix --------------------------------------------------------


@dataclass(frozen=True)
class WorkerInstall:
    prefix: Path
    url: str
    # What the runs were given: every path under prefix, pip from a wheelhouse of this environment.
    variables: Mapping[str, object]
    first: Run
    second: Run

    @property
    def venv(self) -> Path:
        return self.prefix / "opt" / "harel" / "venv"

    @property
    def harel(self) -> Path:
        return self.venv / "bin" / "harel"

    @property
    def env_file(self) -> Path:
        return self.prefix / "etc" / "harel" / "worker.env"

    @property
    def unit_file(self) -> Path:
        return self.prefix / "etc" / "systemd" / "system" / "harel-worker.service"

    @property
    def home(self) -> Path:
        return self.prefix / "var" / "lib" / "harel"


@pytest.fixture(scope="module")
def fake_replica_set() -> Iterator[FakeProcess]:
    """One fake replica set (tests.fake_mongod in its own process) for the whole module: the worker role writes
    its URL into the environment file once."""
    fake = start_fake_mongod_process()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def worker_install(ansible: Ansible, fake_replica_set: FakeProcess) -> WorkerInstall:
    prefix = ansible.scratch / "worker-prefix"
    wheelhouse = ansible.scratch / "wheelhouse"
    wheelhouse.mkdir()
    fill_wheelhouse(wheelhouse, runtime_dependencies("harel"))
    # The role builds the SDK where it is given: a copy, so the build writes nothing into the working tree
    # beside the other tests (pip builds of ./sdk) that run at the same time.
    sdk = shutil.copytree(
        REPOSITORY / "sdk",
        ansible.scratch / "sdk",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    variables = {
        "worker_prefix": str(prefix),
        "worker_manage_system": False,
        "worker_user": getpass.getuser(),
        "worker_group": current_group(),
        # The virtualenv is made from the interpreter this environment is based on, so the packed wheels fit.
        "worker_python": str(
            Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        ),
        "worker_controller_python": sys.executable,
        "worker_wheel_build_isolation": False,
        "worker_pip_extra_args": f"--no-index --find-links {wheelhouse}",
        "worker_sdk_dir": str(sdk),
        "worker_mongo_url": fake_replica_set.url,
        "worker_drain_seconds": DRAIN_SECONDS,
    }
    inventory = local_inventory(ansible.scratch, "workers")
    playbook = role_playbook(ansible.scratch, "worker")
    first = ansible.playbook(playbook, inventory, variables)
    assert first.returncode == 0, first.output
    second = ansible.playbook(playbook, inventory, variables)
    assert second.returncode == 0, second.output
    return WorkerInstall(prefix, fake_replica_set.url, variables, first, second)


def test_worker_role_installs_the_sdk_wheel_into_the_virtualenv(worker_install: WorkerInstall) -> None:
    assert worker_install.first.recap()["changed"] > 0
    assert worker_install.first.recap()["failed"] == 0
    where = subprocess.run(
        [
            worker_install.venv / "bin" / "python",
            "-c",
            "import harel, sys; print(harel.__file__, harel.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()

    # Installed from the wheel into the virtualenv, not the editable checkout this test runs from.
    assert Path(where[0]).is_relative_to(worker_install.venv / "lib")
    assert where[1] == importlib.metadata.version("harel")
    wheels = list((worker_install.prefix / "opt" / "harel" / "wheels").glob("harel-*.whl"))
    assert [wheel.name for wheel in wheels] == [f"harel-{where[1]}-py3-none-any.whl"]
    # The production SDK alone: the development distribution (and its mongomock) stays off worker hosts.
    for development in ("harel_dev", "mongomock"):
        absent = subprocess.run(
            [worker_install.venv / "bin" / "python", "-c", f"import {development}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert f"No module named '{development}'" in absent.stderr


def test_worker_role_second_run_changes_nothing(worker_install: WorkerInstall) -> None:
    recap = worker_install.second.recap()

    assert recap["changed"] == 0, worker_install.second.output
    assert recap["failed"] == 0


def test_worker_environment_file_is_private_and_names_the_url_file(worker_install: WorkerInstall) -> None:
    mode = stat.S_IMODE(worker_install.env_file.stat().st_mode)
    config_dir_mode = stat.S_IMODE(worker_install.env_file.parent.stat().st_mode)
    # What a POSIX shell (the smoke role) reads from it; systemd's EnvironmentFile takes the same quoting.
    read_back = subprocess.run(
        [
            "sh",
            "-c",
            'set -a && . "$1" && printf "%s|%s|%s|%s" "$HAREL_MONGO_URL_FILE" "$HAREL_HTTP_PORT" '
            '"$HAREL_DRAIN_SECONDS" "${HAREL_MONGO_URL-unset}"',
            "sh",
            worker_install.env_file,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert mode == 0o600
    assert config_dir_mode == 0o750
    # The URL is not in the environment: the worker reads it from its file.
    assert read_back == f"{worker_install.env_file.parent / 'mongodb-url'}|8080|{DRAIN_SECONDS}|unset"
    assert worker_install.url not in worker_install.env_file.read_text()


def test_worker_url_file_holds_the_url_readable_by_its_owner_only(worker_install: WorkerInstall) -> None:
    url_file = worker_install.env_file.parent / "mongodb-url"

    assert url_file.read_text() == worker_install.url
    assert stat.S_IMODE(url_file.stat().st_mode) == 0o400
    assert url_file.stat().st_uid == os.getuid()


def test_worker_url_names_the_ca_once_tls_is_on(ansible: Ansible, tmp_path: Path) -> None:
    ca = write_tls_files(tmp_path / "tls", "mongo1.harel.example")["mongodb_tls_ca_file"]
    prefix = tmp_path / "prefix"
    playbook = tmp_path / "url.yml"
    play = {
        "name": "The URL the worker role writes",
        "hosts": "all",
        "gather_facts": False,
        "vars": yaml.safe_load((ROLES / "worker" / "defaults" / "main.yml").read_text())
        | yaml.safe_load((ROLES / "worker" / "vars" / "main.yml").read_text()),
        "tasks": [{"name": "Show it", "ansible.builtin.debug": {"msg": "{{ __worker_mongo_url }}"}}],
    }
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    base = "mongodb://harel:pw@mongo1.harel.example:27017/harel?replicaSet=rs0&authSource=admin"

    run = ansible.playbook(
        playbook,
        local_inventory(tmp_path, "workers"),
        {"worker_prefix": str(prefix), "worker_mongo_url": base, "worker_tls_ca_file": str(ca)},
    )

    assert run.returncode == 0, run.output
    assert f"msg: {base}&tls=true&tlsCAFile={prefix}/etc/harel/ca.crt" in run.output


def unit_directives(text: str) -> dict[str, list[str]]:
    """`Section.Key` -> every value, in order, of a systemd unit file."""
    directives: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        directives.setdefault(f"{section}.{key}", []).append(value)
    return directives


def test_worker_unit_runs_check_before_the_worker_and_is_hardened(worker_install: WorkerInstall) -> None:
    unit = unit_directives(worker_install.unit_file.read_text())

    assert unit["Service.User"] == [getpass.getuser()]
    assert unit["Service.EnvironmentFile"] == [str(worker_install.env_file)]
    assert unit["Service.ExecStartPre"] == [f"{worker_install.harel} check"]
    assert unit["Service.ExecStart"] == [f"{worker_install.harel} worker"]
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Service.TimeoutStopSec"] == [str(DRAIN_SECONDS + 10)]
    for directive, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ReadWritePaths": str(worker_install.home),
        "CapabilityBoundingSet": "",
    }.items():
        assert unit[f"Service.{directive}"] == [value], directive
    assert worker_install.home.is_dir()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_worker_unit_passes_systemd_analyze_verify(worker_install: WorkerInstall) -> None:
    # verify reports unknown directives and unparsable values as warnings with exit code 0: any output fails.
    verified = subprocess.run(
        ["systemd-analyze", "verify", worker_install.unit_file],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert verified.returncode == 0
    assert verified.stdout + verified.stderr == ""


def test_harel_check_passes_from_the_installed_virtualenv(worker_install: WorkerInstall) -> None:
    checked = subprocess.run(
        [
            "sh",
            "-c",
            'set -a && . "$1" && exec "$2" check',
            "sh",
            worker_install.env_file,
            worker_install.harel,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- the README's order app, shipped by the worker role (docs/deploying-your-app.md) -------------------------------

TASK_RESULT = re.compile(
    r"^TASK \[worker : (?P<task>.+?)\] \**\n(?:.*\n)*?(?P<result>ok|changed|skipping|fatal): \[localhost\]",
    re.MULTILINE,
)


def task_results(run: Run) -> dict[str, str]:
    """The worker role's tasks in a run's output, by name: ok, changed, skipping or fatal on localhost (the first
    item's, for a loop)."""
    return {match.group("task"): match.group("result") for match in TASK_RESULT.finditer(run.output)}


def app_variables(folder: Path) -> dict[str, str]:
    """The page's group_vars for the workers, with the order app's folder this test laid out."""
    documented = yaml.safe_load(page_files()["inventories/prod/group_vars/workers.yml"])
    assert documented == {
        "worker_app_package": "{{ playbook_dir }}/../../shop",
        "worker_app": "orders.app:app",
    }
    return {**documented, "worker_app_package": str(folder)}


@pytest.fixture(scope="module")
def order_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lay_out(tmp_path_factory.mktemp("shop"))


def check_with_app(ansible: Ansible, install: WorkerInstall, package: Path) -> Run:
    """The worker role in check mode, with the order app as `package`, over the installed worker."""
    return ansible.playbook(
        role_playbook(ansible.scratch, "worker"),
        local_inventory(ansible.scratch, "workers"),
        {**install.variables, **app_variables(package)},
        "--check",
        "--diff",
    )


def test_worker_role_in_check_mode_would_ship_the_order_app_and_run_it(
    ansible: Ansible, worker_install: WorkerInstall, order_folder: Path
) -> None:
    install = worker_install
    run = check_with_app(ansible, install, order_folder)
    assert run.returncode == 0, run.output
    results = task_results(run)

    # Shipped and installed: its wheel, built on the controller from its folder, copied and installed; its folder
    # copied as the working directory; the unit rewritten.
    for task in (
        "Copy the app's wheel to the host",
        "Install the app and its dependencies into the virtualenv",
        "Copy the app's folder to the host, the worker's working directory",
        "Write the systemd unit",
    ):
        assert results[task] == "changed", task
    # The SDK's wheel, rebuilt on the controller, has the same bytes as the installed one.
    assert results["Copy the wheel to the host"] == "ok"
    app_dir = install.prefix / "opt" / "harel" / "app"
    assert f'+ExecStart={install.harel} worker "--app" "orders.app:app"\n' in run.output
    assert f"-WorkingDirectory={install.home}\n+WorkingDirectory={app_dir}\n" in run.output
    # Check mode: nothing written on the host.
    assert not app_dir.exists()
    assert [wheel.name for wheel in (install.prefix / "opt" / "harel" / "wheels").iterdir()] == [
        f"harel-{importlib.metadata.version('harel')}-py3-none-any.whl"
    ]
    assert unit_directives(install.unit_file.read_text())["Service.ExecStart"] == [f"{install.harel} worker"]


def test_worker_role_in_check_mode_would_ship_the_order_apps_wheel_alone(
    ansible: Ansible, worker_install: WorkerInstall, order_folder: Path, tmp_path: Path
) -> None:
    # Built from a copy: a wheel build leaves build/ in the folder it builds.
    source = shutil.copytree(order_folder, tmp_path / "shop")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "dist", source],
        capture_output=True,
        check=True,
        timeout=120,
    )
    [wheel] = (tmp_path / "dist").glob("orders-1.0.0-*.whl")

    run = check_with_app(ansible, worker_install, wheel)

    assert run.returncode == 0, run.output
    results = task_results(run)
    assert results["Build the app's wheel on the controller"] == "skipping"
    assert results["Copy the app's wheel to the host"] == "changed"
    assert results["Install the app and its dependencies into the virtualenv"] == "changed"
    assert results["Copy the app's folder to the host, the worker's working directory"] == "skipping"
    assert f'+ExecStart={worker_install.harel} worker "--app" "orders.app:app"\n' in run.output
    # No folder: the working directory stays the worker's home.
    assert "+WorkingDirectory=" not in run.output
    assert "-WorkingDirectory=" not in run.output


@dataclass(frozen=True)
class AppInstall:
    prefix: Path
    first: Run
    second: Run

    @property
    def venv(self) -> Path:
        return self.prefix / "opt" / "harel" / "venv"

    @property
    def app_dir(self) -> Path:
        return self.prefix / "opt" / "harel" / "app"


@pytest.fixture(scope="module")
def app_install(ansible: Ansible, worker_install: WorkerInstall, order_folder: Path) -> AppInstall:
    """The worker role with the order app, for real, twice, on a prefix of its own."""
    prefix = ansible.scratch / "app-prefix"
    variables = {**worker_install.variables, **app_variables(order_folder), "worker_prefix": str(prefix)}
    playbook = role_playbook(ansible.scratch, "worker")
    inventory = local_inventory(ansible.scratch, "workers")
    first = ansible.playbook(playbook, inventory, variables)
    assert first.returncode == 0, first.output
    second = ansible.playbook(playbook, inventory, variables)
    assert second.returncode == 0, second.output
    return AppInstall(prefix, first, second)


def test_worker_role_installs_the_order_app_which_loads_in_its_folder(app_install: AppInstall) -> None:
    unit = unit_directives(
        (app_install.prefix / "etc" / "systemd" / "system" / "harel-worker.service").read_text()
    )
    harel = app_install.venv / "bin" / "harel"
    home = app_install.prefix / "var" / "lib" / "harel"
    clean = {"PATH": os.environ["PATH"], "HOME": str(home)}

    assert unit["Service.ExecStart"] == [f'{harel} worker "--app" "orders.app:app"']
    assert unit["Service.WorkingDirectory"] == [str(app_install.app_dir)]
    # Installed by pip into the virtualenv, from the wheel the controller built.
    installed = subprocess.run(
        [
            app_install.venv / "bin" / "python",
            "-c",
            "import importlib.metadata as m; print(m.version('orders'))",
        ],
        cwd=home,
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == "1.0.0"
    assert (app_install.prefix / "opt" / "harel" / "wheels" / "orders-1.0.0-py3-none-any.whl").is_file()
    # In the unit's working directory the App loads, with the chart it names by a relative path.
    shown = subprocess.run(
        [harel, "chart", "show", "order", "--app", "orders.app:app"],
        cwd=app_install.app_dir,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "s0 : placed" in shown.stdout
    assert "s0 --> s1 : approve [order_is_valid]" in shown.stdout


def test_worker_role_with_the_order_app_second_run_changes_nothing(app_install: AppInstall) -> None:
    assert app_install.second.recap()["changed"] == 0, app_install.second.output


@pytest.mark.parametrize(
    ("variables", "why"),
    [
        ({"worker_app_package": "/nonexistent/shop", "worker_app": "orders.app:app"}, "missing package"),
        ({"worker_app_package": str(REPOSITORY / "sdk")}, "a package without its App"),
        ({"worker_app": "orders.app"}, "no attribute"),
    ],
    ids=["missing-package", "package-without-app", "no-attribute"],
)
def test_worker_role_refuses_an_app_it_cannot_ship_or_load(
    ansible: Ansible, variables: dict[str, str], why: str
) -> None:
    prefix = ansible.scratch / f"refused-app-{secrets.token_hex(4)}"
    run = ansible.playbook(
        role_playbook(ansible.scratch, "worker"),
        local_inventory(ansible.scratch, "workers"),
        {"worker_prefix": str(prefix), "worker_manage_system": False, "worker_mongo_url": "mongodb://h/harel"}
        | variables,
    )

    assert run.returncode != 0, why
    assert "worker_app must be module:attribute" in run.output
    assert not prefix.exists()


# --- the smoke role against the installed worker ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_ready(port: int, process: subprocess.Popen[str], deadline_seconds: float = 60) -> None:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"harel worker exited with {process.returncode}: {process.communicate()[0]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"harel worker was not ready on port {port} within {deadline_seconds} s")


@pytest.fixture
def running_worker(worker_install: WorkerInstall) -> Iterator[subprocess.Popen[str]]:
    """`harel worker` from the installed virtualenv, with the environment file the role wrote."""
    port = free_port()
    process = subprocess.Popen(
        [
            "sh",
            "-c",
            'set -a && . "$1" && exec "$2" worker --http-port "$3"',
            "sh",
            worker_install.env_file,
            worker_install.harel,
            str(port),
        ],
        cwd=worker_install.home,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_ready(port, process)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=DRAIN_SECONDS + 20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def run_smoke_role(ansible: Ansible, install: WorkerInstall, timeout_seconds: int) -> Run:
    return ansible.playbook(
        role_playbook(ansible.scratch, "smoke"),
        local_inventory(ansible.scratch, "workers"),
        {
            "smoke_harel_command": str(install.harel),
            "smoke_env_file": str(install.env_file),
            "smoke_timeout": timeout_seconds,
        },
    )


def test_smoke_role_fails_with_the_report_when_no_worker_runs(
    ansible: Ansible, worker_install: WorkerInstall
) -> None:
    run = run_smoke_role(ansible, worker_install, timeout_seconds=3)

    assert run.returncode != 0
    assert run.recap()["failed"] == 1
    assert "harel smoke failed on localhost (exit 1):" in run.output, run.output
    # The failure message carries the command's own report, not just its exit code.
    report = run.output.split("harel smoke failed on localhost (exit 1):", 1)[1].split("PLAY RECAP", 1)[0]
    assert [line for line in report.splitlines() if line.strip()] != [], run.output


def test_smoke_role_passes_against_a_running_worker(
    ansible: Ansible, worker_install: WorkerInstall, running_worker: subprocess.Popen[str]
) -> None:
    run = run_smoke_role(ansible, worker_install, timeout_seconds=60)

    assert run.returncode == 0, run.output
    assert run.recap()["failed"] == 0
    assert running_worker.poll() is None


# --- the mongodb role's configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class MongodbConfig:
    directory: Path
    variables: Mapping[str, object]
    first_check: Run
    written_after_first_check: Sequence[Path]
    apply: Run
    second_check: Run

    @property
    def config_file(self) -> Path:
        return Path(str(self.variables["mongodb_config_path"]))

    @property
    def keyfile(self) -> Path:
        return Path(str(self.variables["mongodb_keyfile_path"]))


def mongodb_variables(directory: Path) -> dict[str, object]:
    return {
        "mongodb_config_path": str(directory / "etc" / "mongod.conf"),
        "mongodb_keyfile_path": str(directory / "etc" / "mongod.keyfile"),
        "mongodb_db_path": str(directory / "data"),
        "mongodb_systemd_dir": str(directory / "etc" / "systemd"),
        "mongodb_sysctl_file": str(directory / "etc" / "60-harel-mongodb.conf"),
        # The packages' account does not exist here; the files go to whoever runs the test.
        "mongodb_user": getpass.getuser(),
        "mongodb_group": current_group(),
        "mongodb_member_host": "mongo1.harel.example",
        "mongodb_bind_ip": ["127.0.0.1", "192.0.2.10"],
        "mongodb_keyfile_content": base64.b64encode(secrets.token_bytes(756)).decode(),
        "mongodb_root_password": secrets.token_hex(32),
        "mongodb_app_password": secrets.token_hex(32),
    }


def run_mongodb_config(ansible: Ansible, variables: Mapping[str, object], *flags: str) -> Run:
    """The role's configuration (`--tags mongodb_config`), with systemctl and sysctl stood in beside its files."""
    standins = system_standins(Path(str(variables["mongodb_config_path"])).parent.parent)
    with_standins = Ansible(standins.environment(ansible.environment), ansible.scratch)
    return with_standins.playbook(
        role_playbook(ansible.scratch, "mongodb", gather_os_facts=True),
        local_inventory(ansible.scratch, "mongodb"),
        variables,
        "--tags",
        "mongodb_config",
        *flags,
    )


@pytest.fixture(scope="module")
def mongodb_config(ansible: Ansible) -> MongodbConfig:
    directory = ansible.scratch / "mongodb"
    (directory / "etc").mkdir(parents=True)
    variables = mongodb_variables(directory)
    # --diff: a task that showed file contents would put the keyfile in the output.
    first_check = run_mongodb_config(ansible, variables, "--check", "--diff")
    written = sorted(path for path in directory.rglob("*") if path.is_file())
    apply = run_mongodb_config(ansible, variables, "--diff")
    second_check = run_mongodb_config(ansible, variables, "--check", "--diff")
    return MongodbConfig(directory, variables, first_check, written, apply, second_check)


def test_mongodb_config_in_check_mode_reports_changes_and_writes_nothing(
    mongodb_config: MongodbConfig,
) -> None:
    assert mongodb_config.first_check.returncode == 0, mongodb_config.first_check.output
    # data directory, keyfile, mongod.conf; the drop-in's directory, the drop-in, the huge pages' unit, systemd's
    # reload and that unit's start (the sysctl file's task is the ninth change, applied for real only)
    assert mongodb_config.first_check.recap()["changed"] == 8
    assert mongodb_config.written_after_first_check == []


def test_mongodb_config_renders_replication_keyfile_and_authorization(mongodb_config: MongodbConfig) -> None:
    assert mongodb_config.apply.returncode == 0, mongodb_config.apply.output
    config = yaml.safe_load(mongodb_config.config_file.read_text())

    assert config["replication"] == {"replSetName": "rs0"}
    assert config["security"] == {"authorization": "enabled", "keyFile": str(mongodb_config.keyfile)}
    assert config["net"] == {"port": 27017, "bindIp": "127.0.0.1,192.0.2.10"}
    assert config["storage"] == {"dbPath": mongodb_config.variables["mongodb_db_path"]}
    # A plain member (no mongodb_cluster_role) has no part in a sharded cluster; the cluster roles' is
    # tests/infra/test_ansible_sharded.py's.
    assert "sharding" not in config


def test_mongodb_keyfile_holds_the_vault_value_readable_by_its_owner_only(
    mongodb_config: MongodbConfig,
) -> None:
    assert mongodb_config.keyfile.read_text() == mongodb_config.variables["mongodb_keyfile_content"]
    assert stat.S_IMODE(mongodb_config.keyfile.stat().st_mode) == 0o400


def test_mongodb_config_second_check_run_has_nothing_to_change(mongodb_config: MongodbConfig) -> None:
    assert mongodb_config.second_check.returncode == 0, mongodb_config.second_check.output
    assert mongodb_config.second_check.recap()["changed"] == 0
    # mongod was not running: the files are read when it starts, and no restart was left pending.
    assert not Path(f"{mongodb_config.config_file}.restart-pending").exists()


def test_mongodb_host_gets_the_production_notes_limits_sandbox_huge_pages_and_swappiness(
    mongodb_config: MongodbConfig,
) -> None:
    systemd = Path(str(mongodb_config.variables["mongodb_systemd_dir"]))
    drop_in = unit_directives((systemd / "mongod.service.d" / "harel-hardening.conf").read_text())
    for directive, value in {
        "LimitNOFILE": "64000",
        "LimitNPROC": "64000",
        "LimitFSIZE": "infinity",
        "LimitMEMLOCK": "infinity",
        "TasksMax": "infinity",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ReadWritePaths": f"{mongodb_config.variables['mongodb_db_path']} /var/log/mongodb",
        "CapabilityBoundingSet": "",
    }.items():
        assert drop_in[f"Service.{directive}"] == [value], directive
    # MongoDB 8.0 (mongodb_version's default): huge pages on, defragmented on request, khugepaged not inflating.
    thp = unit_directives((systemd / "harel-mongod-thp.service").read_text())
    assert thp["Service.ExecStart"] == [
        f"/bin/sh -c 'echo {value} > /sys/kernel/mm/transparent_hugepage/{setting}'"
        for setting, value in (
            ("enabled", "always"),
            ("defrag", "defer+madvise"),
            ("khugepaged/max_ptes_none", "0"),
        )
    ]
    assert thp["Unit.Before"] == ["mongod.service"]
    sysctl = Path(str(mongodb_config.variables["mongodb_sysctl_file"]))
    assert [line for line in sysctl.read_text().splitlines() if not line.startswith("#")] == [
        "vm.swappiness = 1"
    ]
    # What the role asked of systemd and sysctl, once (the runs before and after it changed nothing).
    calls = system_standins(mongodb_config.directory).calls()
    assert calls.count("systemctl daemon-reload") == 1
    assert calls.count("systemctl enable harel-mongod-thp.service") == 1
    assert calls.count("systemctl start harel-mongod-thp.service") == 1
    assert calls.count(f"sysctl -p {sysctl}") == 1


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_mongodb_drop_in_and_huge_pages_unit_pass_systemd_analyze_verify(
    mongodb_config: MongodbConfig, tmp_path: Path
) -> None:
    # The drop-in on a stand-in for the packages' mongod.service; verify reads drop-ins from the unit path.
    systemd = Path(str(mongodb_config.variables["mongodb_systemd_dir"]))
    units = tmp_path / "units"
    shutil.copytree(systemd, units)
    (units / "mongod.service").write_text(
        "[Unit]\nDescription=MongoDB Database Server\n[Service]\nExecStart=/bin/true --config /etc/mongod.conf\n"
        "RuntimeDirectory=mongodb\n[Install]\nWantedBy=multi-user.target\n"
    )
    verified = subprocess.run(
        ["systemd-analyze", "verify", units / "mongod.service", units / "harel-mongod-thp.service"],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert verified.returncode == 0
    assert verified.stdout + verified.stderr == ""


def test_mongodb_secrets_never_reach_the_output(mongodb_config: MongodbConfig) -> None:
    runs = (mongodb_config.first_check, mongodb_config.apply, mongodb_config.second_check)
    for secret in ("mongodb_keyfile_content", "mongodb_root_password", "mongodb_app_password"):
        value = str(mongodb_config.variables[secret])
        assert all(value not in run.output for run in runs), secret


def write_tls_files(directory: Path, member: str) -> dict[str, Path]:
    """A throwaway CA and a certificate for `member` signed by it, as PEM files: what an operator puts in the
    inventory."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harel test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, member)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(member)]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = {
        "mongodb_tls_ca_file": directory / "ca.crt",
        "mongodb_tls_certificate_file": directory / f"{member}.crt",
        "mongodb_tls_key_file": directory / f"{member}.key",
    }
    files["mongodb_tls_ca_file"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["mongodb_tls_certificate_file"].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files["mongodb_tls_key_file"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files


def test_mongodb_config_with_tls_in_check_mode_then_each_mode_for_real_then_unchanged(
    ansible: Ansible, tmp_path: Path
) -> None:
    """The three TLS stages an operator goes through, one run each after a check of the first: every mode renders,
    the certificate files are written once, and the last run leaves nothing to change."""
    files = write_tls_files(tmp_path / "inventory-tls", "mongo1.harel.example")
    tls_dir = tmp_path / "etc" / "mongod-tls"
    (tmp_path / "etc").mkdir()
    variables = mongodb_variables(tmp_path) | {
        "mongodb_tls_dir": str(tls_dir),
        **{name: str(path) for name, path in files.items()},
    }

    check = run_mongodb_config(ansible, variables | {"mongodb_tls_mode": "allowTLS"}, "--check", "--diff")
    written_by_check = sorted(path for path in (tmp_path / "etc").rglob("*") if path.is_file())
    assert check.returncode == 0, check.output
    # data directory, keyfile, TLS directory, certificate and key, CA, mongod.conf; and the host's five (see
    # test_mongodb_config_in_check_mode_reports_changes_and_writes_nothing)
    assert check.recap()["changed"] == 11
    assert written_by_check == []
    outputs = [check.output]
    for mode in ("allowTLS", "preferTLS", "requireTLS"):
        apply = run_mongodb_config(ansible, variables | {"mongodb_tls_mode": mode}, "--diff")
        outputs.append(apply.output)
        assert apply.returncode == 0, apply.output
        config = yaml.safe_load(Path(str(variables["mongodb_config_path"])).read_text())
        assert config["net"]["tls"] == {
            "mode": mode,
            "certificateKeyFile": str(tls_dir / "mongod.pem"),
            "CAFile": str(tls_dir / "ca.crt"),
            "allowConnectionsWithoutCertificates": True,
        }, mode
    again = run_mongodb_config(ansible, variables | {"mongodb_tls_mode": "requireTLS"}, "--check")

    pem = tls_dir / "mongod.pem"
    # The certificate, then its key: one PEM file, as mongod reads it.
    assert pem.read_text() == (
        files["mongodb_tls_certificate_file"].read_text() + files["mongodb_tls_key_file"].read_text()
    )
    assert stat.S_IMODE(pem.stat().st_mode) == 0o400
    assert (tls_dir / "ca.crt").read_bytes() == files["mongodb_tls_ca_file"].read_bytes()
    assert all(files["mongodb_tls_key_file"].read_text() not in output for output in outputs)
    assert again.returncode == 0 and again.recap()["changed"] == 0, again.output


def test_mongodb_keyfile_holds_both_keys_during_a_rotation(ansible: Ansible, tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    keys = [base64.b64encode(secrets.token_bytes(48)).decode() for _ in range(2)]
    variables = mongodb_variables(tmp_path) | {"mongodb_keyfile_content": keys}

    run = run_mongodb_config(ansible, variables)

    assert run.returncode == 0, run.output
    keyfile = Path(str(variables["mongodb_keyfile_path"]))
    # MongoDB's format for several keys: a YAML list; members accept any key listed.
    assert yaml.safe_load(keyfile.read_text()) == keys
    assert all(key not in run.output for key in keys)
    refused = run_mongodb_config(
        ansible, variables | {"mongodb_keyfile_content": [*keys, keys[0]]}, "--check"
    )
    assert refused.returncode != 0 and "during a key rotation a list of the two keys" in refused.output


def test_mongodb_role_refuses_tls_without_its_files(ansible: Ansible, tmp_path: Path) -> None:
    run = run_mongodb_config(
        ansible, mongodb_variables(tmp_path) | {"mongodb_tls_mode": "preferTLS"}, "--check"
    )

    assert run.returncode != 0
    assert "every mode but disabled needs mongodb_tls_certificate_file" in run.output


@pytest.mark.parametrize(
    "missing", ["mongodb_keyfile_content", "mongodb_root_password", "mongodb_app_password"]
)
def test_mongodb_role_refuses_to_run_without_a_secret(ansible: Ansible, tmp_path: Path, missing: str) -> None:
    variables = {key: value for key, value in mongodb_variables(tmp_path).items() if key != missing}

    run = run_mongodb_config(ansible, variables, "--check")

    assert run.returncode != 0
    assert missing in run.output


def test_mongodb_role_refuses_a_short_password(ansible: Ansible, tmp_path: Path) -> None:
    variables = mongodb_variables(tmp_path) | {"mongodb_app_password": "short"}

    run = run_mongodb_config(ansible, variables, "--check")

    assert run.returncode != 0
    assert "The mongodb role needs three secrets from the vault" in run.output


@pytest.mark.parametrize(
    "url",
    [
        "http://mongo1.harel.example:27017/harel",
        "mongodb://harel:it's@mongo1/harel",
        "mongodb://a\nHAREL_DEV=1",
    ],
    ids=["not-mongodb", "single-quote", "newline"],
)
def test_worker_role_refuses_a_url_the_environment_file_cannot_hold(ansible: Ansible, url: str) -> None:
    prefix = ansible.scratch / f"refused-{secrets.token_hex(4)}"
    run = ansible.playbook(
        role_playbook(ansible.scratch, "worker"),
        local_inventory(ansible.scratch, "workers"),
        {"worker_prefix": str(prefix), "worker_manage_system": False, "worker_mongo_url": url},
    )

    assert run.returncode != 0
    assert "worker_mongo_url must be a mongodb:// or mongodb+srv:// URL" in run.output
    assert not prefix.exists()


def test_worker_role_refuses_to_run_without_the_url(ansible: Ansible) -> None:
    run = ansible.playbook(
        role_playbook(ansible.scratch, "worker"),
        local_inventory(ansible.scratch, "workers"),
        {"worker_prefix": str(ansible.scratch / "unused"), "worker_manage_system": False},
    )

    assert run.returncode != 0
    assert "worker_mongo_url" in run.output
    assert not (ansible.scratch / "unused").exists()


# --- the mongodb role's mongosh scripts -------------------------------------------------------------------------

NODE = shutil.which("node")
MONGOSH_DOUBLE = Path(__file__).with_name("ansible_mongosh_double.js")
MONGODB_SCRIPTS = ROLES / "mongodb" / "files"
requires_node = pytest.mark.skipif(
    NODE is None,
    reason="node (Node.js) is not installed: the mongodb role's mongosh scripts run under Node.js against a double",
)
ROOT = {"user": "root", "password": "root-" + "r" * 24}
APP = {"user": "harel", "password": "app-" + "a" * 24, "database": "harel"}
READ_WRITE_HAREL = [{"role": "readWrite", "db": "harel"}]


@dataclass(frozen=True)
class ScriptRun:
    ok: bool
    error: dict[str, object] | None
    printed: list[str]
    calls: list[dict[str, object]]
    member: dict[str, object]

    def commands(self) -> list[object]:
        return [call["command"] for call in self.calls]


def member_state(**overrides: object) -> dict[str, object]:
    """One member as the double holds it: initiated as the primary of rs0 unless overridden."""
    state: dict[str, object] = {
        "setName": "rs0",
        "primary": True,
        "secondary": False,
        "primaryHost": "mongo1.harel.example:27017",
        "users": {},
        "statuses": [[]],
        "initiateRefusal": None,
    }
    return state | overrides


def user(password: str, roles: list[dict[str, str]]) -> dict[str, object]:
    return {"password": password, "roles": roles, "mechanisms": ["SCRAM-SHA-256"]}


def run_mongosh_script(
    directory: Path, script: str, member: Mapping[str, object], stdin: object = ""
) -> ScriptRun:
    scenario = directory / f"scenario-{secrets.token_hex(4)}.json"
    scenario.write_text(
        json.dumps({"stdin": stdin if isinstance(stdin, str) else json.dumps(stdin), "member": member})
    )
    completed = subprocess.run(
        [str(NODE), MONGOSH_DOUBLE, MONGODB_SCRIPTS / script, scenario],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert completed.stderr == ""
    result = ScriptRun(**json.loads(completed.stdout))
    assert (completed.returncode == 0) == result.ok
    return result


# --- hello.js and initiate.js under the real mongosh, as the role runs them, against the fake replica set ---------


def role_mongosh(port: int, script: str) -> list[str]:
    """The role's own mongosh command line (vars/main.yml, TLS off) for this member's mongod on `port`."""
    role_vars = yaml.safe_load((ROLES / "mongodb" / "vars" / "main.yml").read_text())
    assert "--port', mongodb_port | string]" in role_vars["__mongodb_mongosh"]
    return [
        "mongosh",
        "--quiet",
        "--norc",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--eval",
        (MONGODB_SCRIPTS / script).read_text(),
    ]


def test_hello_script_prints_the_members_view_under_mongosh(
    fake_rs: FakeDeployment, fake_secondary: FakeDeployment, tmp_path: Path
) -> None:
    def view(port: int) -> dict[str, object]:
        run = mongosh(role_mongosh(port, "hello.js"), home=tmp_path)
        assert run.returncode == 0, run.stderr
        return dict(json.loads(run.stdout))

    primary, secondary = view(fake_rs.port), view(fake_secondary.port)
    fake_rs.server.set_initialized(False)
    uninitialized = view(fake_rs.port)

    assert primary == {
        "setName": "rs0",
        "isWritablePrimary": True,
        "secondary": False,
        "primary": f"127.0.0.1:{fake_rs.port}",
    }
    assert secondary["secondary"] is True and secondary["isWritablePrimary"] is False
    assert uninitialized == {"setName": None, "isWritablePrimary": False, "secondary": False, "primary": None}


def test_initiate_script_initiates_once_under_mongosh(fake_rs: FakeDeployment, tmp_path: Path) -> None:
    fake_rs.server.set_initialized(False)
    members = {"name": "rs0", "hosts": [f"127.0.0.1:{fake_rs.port}"]}

    first = mongosh(role_mongosh(fake_rs.port, "initiate.js"), home=tmp_path, stdin=json.dumps(members))
    again = mongosh(role_mongosh(fake_rs.port, "initiate.js"), home=tmp_path, stdin=json.dumps(members))
    with MongoClient(fake_rs.url, serverSelectionTimeoutMS=5000) as client:
        status = client.admin.command("replSetGetStatus")

    assert (first.returncode, first.lines) == (0, ["initiated"]), first.stderr
    assert (again.returncode, again.lines) == (0, ["already initiated"]), again.stderr
    assert status["set"] == "rs0"


def test_initiate_script_fails_with_the_servers_refusal_under_mongosh(
    fake_rs: FakeDeployment, tmp_path: Path
) -> None:
    fake_rs.server.set_initialized(False)
    another_set = {"name": "rs9", "hosts": [f"127.0.0.1:{fake_rs.port}"]}

    run = mongosh(role_mongosh(fake_rs.port, "initiate.js"), home=tmp_path, stdin=json.dumps(another_set))

    assert run.returncode != 0
    assert "replSetInitiate failed:" in run.stderr and "rs9" in run.stderr


# --- the scripts that authenticate, under Node.js against the double ------------------------------------------------
# These drive states the fake replica set cannot take on (a member whose localhost exception is still open, a
# step-down, a feature compatibility change), so they run against ansible_mongosh_double.js; the scripts that
# the fake can serve (users, reconfig, status) also run under the real mongosh above.


@requires_node
def test_root_user_script_creates_the_first_user_through_the_localhost_exception(tmp_path: Path) -> None:
    run = run_mongosh_script(tmp_path, "root_user.js", member_state(), ROOT)

    assert run.ok, run.error
    assert run.printed == ["created"]
    assert run.member["users"] == {"root": user(ROOT["password"], [{"role": "root", "db": "admin"}])}


@requires_node
def test_root_user_script_only_authenticates_when_the_user_exists(tmp_path: Path) -> None:
    existing = {"root": user(ROOT["password"], [{"role": "root", "db": "admin"}])}

    run = run_mongosh_script(tmp_path, "root_user.js", member_state(users=existing), ROOT)

    assert run.ok, run.error
    assert run.printed == ["present"]
    assert "createUser" not in run.commands()


@requires_node
def test_root_user_script_rotates_the_password_with_the_previous_one(tmp_path: Path) -> None:
    previous = "the-password-being-replaced"
    existing = {"root": user(previous, [{"role": "root", "db": "admin"}])}

    run = run_mongosh_script(
        tmp_path, "root_user.js", member_state(users=existing), ROOT | {"previousPassword": previous}
    )
    again = run_mongosh_script(
        tmp_path,
        "root_user.js",
        member_state(users=run.member["users"]),
        ROOT | {"previousPassword": previous},
    )

    assert run.ok, run.error
    assert run.printed == ["rotated"]
    assert run.member["users"]["root"]["password"] == ROOT["password"]
    assert again.printed == ["present"]
    assert "updateUser" not in again.commands()


@requires_node
def test_root_user_script_fails_clearly_when_the_password_does_not_match(tmp_path: Path) -> None:
    existing = {"root": user("another-password-entirely", [{"role": "root", "db": "admin"}])}

    run = run_mongosh_script(tmp_path, "root_user.js", member_state(users=existing), ROOT)

    assert not run.ok
    assert run.error is not None and "mongodb_root_password" in str(run.error["message"])
    assert run.member["users"] == existing
    assert ROOT["password"] not in json.dumps(run.error)


def app_input() -> dict[str, object]:
    return {"port": 27017, "root": ROOT, "app": APP}


def with_root(**app_users: dict[str, object]) -> dict[str, object]:
    return {"root": user(ROOT["password"], [{"role": "root", "db": "admin"}]), **app_users}


@requires_node
def test_app_user_script_creates_the_user_with_read_write_on_harel_only(tmp_path: Path) -> None:
    run = run_mongosh_script(tmp_path, "app_user.js", member_state(users=with_root()), app_input())

    assert run.ok, run.error
    assert json.loads(run.printed[0]) == {"changed": True, "actions": ["created"]}
    assert run.member["users"]["harel"] == user(APP["password"], READ_WRITE_HAREL)
    assert [call["user"] for call in run.calls if call["command"] == "createUser"] == ["root"]


@requires_node
def test_app_user_script_changes_nothing_when_the_user_is_right(tmp_path: Path) -> None:
    users = with_root(harel=user(APP["password"], READ_WRITE_HAREL))

    run = run_mongosh_script(tmp_path, "app_user.js", member_state(users=users), app_input())

    assert run.ok, run.error
    assert json.loads(run.printed[0]) == {"changed": False, "actions": []}
    assert "updateUser" not in run.commands() and "createUser" not in run.commands()


@requires_node
def test_app_user_script_removes_extra_roles_and_resets_a_changed_password(tmp_path: Path) -> None:
    drifted = user("an-old-password-000000", [*READ_WRITE_HAREL, {"role": "dbAdmin", "db": "harel"}])

    run = run_mongosh_script(
        tmp_path, "app_user.js", member_state(users=with_root(harel=drifted)), app_input()
    )

    assert run.ok, run.error
    assert json.loads(run.printed[0]) == {"changed": True, "actions": ["roles", "password"]}
    assert run.member["users"]["harel"] == user(APP["password"], READ_WRITE_HAREL)


@requires_node
def test_app_user_script_fails_without_the_user_administrator(tmp_path: Path) -> None:
    run = run_mongosh_script(tmp_path, "app_user.js", member_state(users={}), app_input())

    assert not run.ok
    assert run.error is not None and run.error["code"] == 18
    assert run.member["users"] == {}


HEALTHY = [
    {"name": "mongo1:27017", "state": 1, "stateStr": "PRIMARY", "health": 1},
    {"name": "mongo2:27017", "state": 2, "stateStr": "SECONDARY", "health": 1},
    {"name": "mongo3:27017", "state": 2, "stateStr": "SECONDARY", "health": 1},
]
SYNCING = [*HEALTHY[:2], {"name": "mongo3:27017", "state": 5, "stateStr": "STARTUP2", "health": 1}]
UNREACHABLE = [
    *HEALTHY[:2],
    {"name": "mongo3:27017", "state": 8, "stateStr": "(not reachable/healthy)", "health": 0},
]


@requires_node
def test_members_healthy_script_waits_until_every_member_is_primary_or_secondary(tmp_path: Path) -> None:
    member = member_state(users=with_root(), statuses=[UNREACHABLE, SYNCING, HEALTHY])

    run = run_mongosh_script(tmp_path, "members_healthy.js", member, ROOT | {"waitSeconds": 60})

    assert run.ok, run.error
    assert json.loads(run.printed[0])["healthy"] is True
    assert run.commands().count("replSetGetStatus") == 3
    assert [call["user"] for call in run.calls if call["command"] == "replSetGetStatus"] == ["root"] * 3


@requires_node
def test_members_healthy_script_reports_the_last_view_when_time_runs_out(tmp_path: Path) -> None:
    member = member_state(users=with_root(), statuses=[SYNCING])

    run = run_mongosh_script(tmp_path, "members_healthy.js", member, ROOT | {"waitSeconds": 10})

    assert run.ok, run.error
    report = json.loads(run.printed[0])
    assert report["healthy"] is False
    assert [member["state"] for member in report["members"]] == ["PRIMARY", "SECONDARY", "STARTUP2"]
    # Polled every 2 s until the 10 s were up, not forever.
    assert run.commands().count("replSetGetStatus") == 6


@requires_node
def test_step_down_script_authenticates_and_steps_the_primary_down(tmp_path: Path) -> None:
    run = run_mongosh_script(tmp_path, "step_down.js", member_state(users=with_root()), ROOT)

    assert run.ok, run.error
    assert run.member["primary"] is False
    assert run.member["stepDown"] == {"replSetStepDown": 60, "secondaryCatchUpPeriodSecs": 30}
    assert [call["user"] for call in run.calls if call["command"] == "replSetStepDown"] == ["root"]


def mongosh_tasks(tasks: list[dict[str, Any]]) -> Iterator[dict[str, str]]:
    """The role's `command` tasks that run one of its scripts with a stdin, blocks included."""
    for task in tasks:
        for key in ("block", "rescue", "always"):
            yield from mongosh_tasks(task.get(key) or [])
        command = task.get("ansible.builtin.command")
        if isinstance(command, dict) and "stdin" in command:
            yield command


def script_of(command: Mapping[str, str]) -> str:
    match = re.search(r"'(\w+\.js)'", command["argv"])
    assert match is not None, f"a mongosh task without a script: {command}"
    return match.group(1)


CONFIG_HOSTS = ["mongo1.harel.example:27017", "mongo2.harel.example:27017"]
CONFIG = {"_id": "rs0", "version": 3, "members": [{"_id": 0, "host": CONFIG_HOSTS[0]}]}
# What the membership plan hands the reconfig task: the next version, one member added without a vote.
RECONFIGURED = CONFIG | {
    "version": 4,
    "members": [*CONFIG["members"], {"_id": 1, "host": CONFIG_HOSTS[1], "votes": 0, "priority": 0}],
}


def script_did_its_job(script: str, result: ScriptRun) -> bool:
    users = result.member["users"]
    assert isinstance(users, dict)
    match script:
        case "initiate.js":
            return result.member["config"] == {
                "_id": "rs0",
                "version": 1,
                "members": [{"_id": 0, "host": "mongo1.harel.example:27017"}],
            }
        case "replica_set_state.js":
            state = json.loads(result.printed[0])
            return bool(state["config"] == CONFIG and state["status"]["members"][0]["state"] == 1)
        case "reconfig.js":
            return result.member["config"] == RECONFIGURED
        case "root_user.js":
            return bool(users["root"]["password"] == ROOT["password"])
        case "app_user.js":
            return bool(users["harel"] == user(APP["password"], READ_WRITE_HAREL))
        case "members_healthy.js":
            return json.loads(result.printed[0])["healthy"] is True
        case "step_down.js":
            return result.member["primary"] is False or result.member["primaryHost"] != CONFIG_HOSTS[0]
        case "feature_compatibility.js":
            return result.member["featureCompatibilityVersion"] == "8.2"
    raise AssertionError(f"no expectation for {script}")


def stdin_expression(stdin: str) -> str:
    match = re.fullmatch(r"\{\{(.*)\}\}", stdin.strip(), re.DOTALL)
    assert match is not None, f"a stdin that is not one Jinja expression: {stdin}"
    return match.group(1)


@requires_node
def test_every_mongodb_task_sends_its_script_the_input_it_reads(ansible: Ansible, tmp_path: Path) -> None:
    """Renders the stdin of every mongosh task in the role, as Ansible does, and runs its script on it."""
    commands = [
        command
        for task_file in (
            "replicaset.yml",
            "reconcile.yml",
            "restart_member.yml",
            "feature_compatibility.yml",
        )
        for command in mongosh_tasks(yaml.safe_load((ROLES / "mongodb" / "tasks" / task_file).read_text()))
    ]
    scripts = [script_of(command) for command in commands]
    # Each stdin is one Jinja expression; base64 keeps its rendering intact through the callback's output.
    expressions = [stdin_expression(command["stdin"]) for command in commands]
    role_vars = yaml.safe_load((ROLES / "mongodb" / "vars" / "main.yml").read_text())
    sample = {
        "mongodb_port": 27017,
        "mongodb_replset_name": "rs0",
        "mongodb_member_host": "mongo1.harel.example",
        "mongodb_root_user": ROOT["user"],
        "mongodb_root_password": ROOT["password"],
        "mongodb_previous_root_password": "",
        "mongodb_app_user": APP["user"],
        "mongodb_app_password": APP["password"],
        "mongodb_app_database": APP["database"],
        "mongodb_wait_seconds": 6,
        "mongodb_hosts_group": "mongodb",
        "mongodb_version": "8.2.1",
        "mongodb_tls_mode": "disabled",
        "mongodb_tls_dir": "/etc/mongod-tls",
        "__mongodb_members": ["mongo1.harel.example:27017"],
        "mongodb_membership_step": {"action": "reconfig", "reason": "add", "config": RECONFIGURED},
    }
    playbook = tmp_path / "render.yml"
    play = {
        "name": "Render the stdin of the mongodb role's mongosh tasks",
        "hosts": "all",
        "gather_facts": False,
        "vars": role_vars | sample,
        "tasks": [
            {
                "name": f"Render {index}",
                "ansible.builtin.debug": {"msg": "{{ (" + expression + ") | b64encode }}"},
            }
            for index, expression in enumerate(expressions)
        ],
    }
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))

    run = ansible.playbook(playbook, local_inventory(tmp_path, "mongodb"), {})

    assert run.returncode == 0, run.output
    rendered = [base64.b64decode(text).decode() for text in re.findall(r"msg: (\S+)", run.output)]
    assert sorted(set(scripts)) == [
        "app_user.js",
        "feature_compatibility.js",
        "initiate.js",
        "members_healthy.js",
        "reconfig.js",
        "replica_set_state.js",
        "root_user.js",
        "step_down.js",
    ]
    assert len(rendered) == len(scripts)
    for script, stdin in zip(scripts, rendered, strict=True):
        member = member_state(
            setName=None if script == "initiate.js" else "rs0",
            users={} if script in ("initiate.js", "root_user.js") else with_root(),
            statuses=[HEALTHY],
            config=None if script == "initiate.js" else CONFIG,
            featureCompatibilityVersion="8.0",
        )
        result = run_mongosh_script(tmp_path, script, member, stdin)
        assert result.ok, (script, result.error)
        assert script_did_its_job(script, result), (script, result)


def test_mongodb_listens_on_every_interface_by_default() -> None:
    # Binding to the member's name fails on cloud images whose /etc/hosts maps it to 127.0.1.1 (loopback only).
    defaults = yaml.safe_load((ROLES / "mongodb" / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLES / "mongodb" / "meta" / "argument_specs.yml").read_text())
    assert defaults["mongodb_bind_ip"] == ["0.0.0.0"]
    assert specs["argument_specs"]["main"]["options"]["mongodb_bind_ip"]["default"] == ["0.0.0.0"]


# --- the mongodb role's replica-set tasks, run by Ansible against the double --------------------------------------

MEMBER_NAMES = [f"mongo{index}.harel.example" for index in range(1, 6)]


@dataclass(frozen=True)
class DoubleReplicaSet:
    """A replica set the double keeps in a file between mongosh runs, reached by the role's replica-set tasks."""

    ansible: Ansible
    directory: Path
    port: int

    @property
    def state_file(self) -> Path:
        return self.directory / "replica-set.json"

    def member(self) -> dict[str, Any]:
        return dict(json.loads(self.state_file.read_text()))

    def update(self, **changes: object) -> None:
        self.state_file.write_text(json.dumps(self.member() | changes))

    def host(self, name: str) -> str:
        return f"{name}:{self.port}"

    def run(self, names: Sequence[str], *flags: str, **variables: object) -> Run:
        """The mongodb role's replica-set tasks (`--tags mongodb_replicaset`) with `names` as the group, every host
        on this machine, and mongosh replaced by the double (which the role's mongosh arguments reach unchanged)."""
        inventory = self.directory / "inventory.yml"
        hosts = {
            name: {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "mongodb_member_host": name,
            }
            for name in names
        }
        inventory.write_text(yaml.safe_dump({"mongodb": {"hosts": hosts}}))
        double = [str(NODE), str(MONGOSH_DOUBLE), "--state", str(self.state_file)]
        return self.ansible.playbook(
            role_playbook(self.directory, "mongodb", gather_os_facts=True),
            inventory,
            {
                "mongodb_port": self.port,
                # Unused by the replica-set tasks; its default needs the OS variables they do not load.
                "mongodb_db_path": str(self.directory / "data"),
                "mongodb_keyfile_content": base64.b64encode(secrets.token_bytes(48)).decode(),
                "mongodb_root_password": ROOT["password"],
                "mongodb_app_password": APP["password"],
                "mongodb_wait_seconds": 6,
                "__mongodb_mongosh": [*double, "--quiet", "--eval"],
                "__mongodb_mongosh_set": [*double, "--quiet", "--eval"],
                **variables,
            },
            "--tags",
            "mongodb_replicaset",
            *flags,
        )


@pytest.fixture(scope="module")
def double_port() -> Iterator[int]:
    """The port the members listen on, the same for every test of the module (the double's state names hosts with
    it): the role waits for mongod's port on localhost before it asks anything, so something must listen there."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def uninitiated_replica_set(ansible: Ansible, directory: Path, port: int) -> DoubleReplicaSet:
    replica_set = DoubleReplicaSet(ansible, directory, port)
    replica_set.state_file.write_text(
        json.dumps(member_state(setName=None, primary=False, primaryHost=None, statuses=[]))
    )
    return replica_set


@dataclass(frozen=True)
class InitiatedSet:
    """The role's first run over three members, and the double's state it left."""

    run: Run
    state: str


@pytest.fixture(scope="module")
def initiated_three(
    ansible: Ansible, double_port: int, tmp_path_factory: pytest.TempPathFactory
) -> InitiatedSet:
    """The role initiating a set of three members, run once: each test that grows or shrinks the set starts from a
    copy of the state it left."""
    replica_set = uninitiated_replica_set(ansible, tmp_path_factory.mktemp("initiated"), double_port)
    run = replica_set.run(MEMBER_NAMES[:3])
    return InitiatedSet(run, replica_set.state_file.read_text())


@pytest.fixture
def double_replica_set(ansible: Ansible, tmp_path: Path, double_port: int) -> DoubleReplicaSet:
    return uninitiated_replica_set(ansible, tmp_path, double_port)


def start_from(replica_set: DoubleReplicaSet, initiated: InitiatedSet) -> None:
    assert initiated.run.returncode == 0, initiated.run.output
    replica_set.state_file.write_text(initiated.state)


def voters(config: Mapping[str, Any]) -> dict[str, tuple[int, float]]:
    return {m["host"]: (m.get("votes", 1), m.get("priority", 1)) for m in config["members"]}


@requires_node
def test_replica_set_tasks_initiate_add_and_remove_members_and_change_nothing_when_done(
    double_replica_set: DoubleReplicaSet, initiated_three: InitiatedSet
) -> None:
    rs = double_replica_set
    three, four = MEMBER_NAMES[:3], MEMBER_NAMES[:4]

    first = initiated_three.run
    rs.state_file.write_text(initiated_three.state)
    again = rs.run(three)

    assert first.returncode == 0, first.output
    config = rs.member()["config"]
    assert [m["host"] for m in config["members"]] == [rs.host(name) for name in three]
    assert set(rs.member()["users"]) == {"root", "harel"}
    assert again.returncode == 0, again.output
    assert again.recap(three[0])["changed"] == 0, again.output

    # Check mode reads the set and reports the first change it would make, and makes none.
    checked = rs.run(four, "--check")
    assert checked.returncode == 0, checked.output
    assert f"Round 1: add {rs.host(four[3])} without a vote until it has caught up" in checked.output
    assert rs.member()["config"] == config

    grown = rs.run(four)
    grown_again = rs.run(four)

    assert grown.returncode == 0, grown.output
    # Two changes, one vote at most each: added without a vote, then given it once SECONDARY.
    added, promoted = rs.member()["reconfigs"]
    assert voters(added)[rs.host(four[3])] == (0, 0)
    assert voters(promoted)[rs.host(four[3])] == (1, 1)
    assert grown.recap(four[0])["changed"] == 2, grown.output
    assert grown_again.returncode == 0 and grown_again.recap(four[0])["changed"] == 0, grown_again.output

    # mongo1 leaves: it is the primary, so it steps down before it is removed; mongo2 runs the set from now on.
    shrunk = rs.run(four[1:])

    assert shrunk.returncode == 0, shrunk.output
    assert rs.member()["stepDown"] == {"replSetStepDown": 60, "secondaryCatchUpPeriodSecs": 30}
    assert [m["host"] for m in rs.member()["config"]["members"]] == [rs.host(name) for name in four[1:]]
    assert rs.member()["primaryHost"] != rs.host(four[0])
    assert rs.run(four[1:]).recap(four[1])["changed"] == 0


@requires_node
def test_replica_set_tasks_fail_when_a_new_member_never_catches_up(
    double_replica_set: DoubleReplicaSet, initiated_three: InitiatedSet
) -> None:
    rs = double_replica_set
    start_from(rs, initiated_three)
    rs.update(syncing=[rs.host(MEMBER_NAMES[3])])

    run = rs.run(MEMBER_NAMES[:4])

    assert run.returncode != 0
    assert f"{rs.host(MEMBER_NAMES[3])} is STARTUP2: it gets its vote once it is SECONDARY" in run.output
    assert "(still so after 6 s)" in run.output
    # Added without a vote, so the set's majority never counted on it.
    assert voters(rs.member()["config"])[rs.host(MEMBER_NAMES[3])] == (0, 0)


@requires_node
def test_replica_set_tasks_refuse_a_removal_that_costs_the_majority(
    double_replica_set: DoubleReplicaSet, initiated_three: InitiatedSet
) -> None:
    rs = double_replica_set
    start_from(rs, initiated_three)
    rs.update(down=[rs.host(MEMBER_NAMES[1])])

    run = rs.run([MEMBER_NAMES[0], MEMBER_NAMES[1]])

    assert run.returncode != 0
    assert f"removing {rs.host(MEMBER_NAMES[2])} would leave 1 of 2 voting member(s) healthy" in run.output
    assert len(rs.member()["config"]["members"]) == 3


# --- a restart left pending by a failed run, and the signing key, run by Ansible -------------------------------------


def restart_playbook(directory: Path) -> Path:
    """site.yml's shape for one member: the role's configuration, a play that fails when told to (what a failure
    later in the run does: the restart plays never come), then the restart play with restart_member."""
    playbook = directory / "play-restart.yml"
    plays = [
        {
            "name": "The mongodb role",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["!all"],
            "roles": [{"role": "mongodb"}],
        },
        {
            "name": "A failure after the configuration changed",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Fail when told to",
                    "ansible.builtin.fail": {"msg": "failing after the configuration changed"},
                    "when": "harel_test_fail_after_config | bool",
                    "tags": ["always"],
                }
            ],
        },
        {
            "name": "The restart play",
            "hosts": "all",
            "gather_facts": False,
            "serial": 1,
            "tasks": [
                {
                    "name": "Restart this member if a restart is pending",
                    "ansible.builtin.include_role": {
                        "name": "mongodb",
                        "tasks_from": "restart_member",
                        "apply": {"tags": ["mongodb_restart"]},
                    },
                    "vars": {"mongodb_restart_primary": True},
                    "tags": ["mongodb_restart"],
                }
            ],
        },
    ]
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    return playbook


@dataclass(frozen=True)
class SigningKey:
    armored: Path
    fingerprint: str


def signing_key(directory: Path) -> SigningKey:
    """A throwaway OpenPGP key, armored like MongoDB's server-<series>.asc, and its fingerprint."""
    home = directory / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    subprocess.run(
        [
            *gpg,
            "--passphrase",
            "",
            "--quick-gen-key",
            "harel test <test@harel.example>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    armored = directory / "server-test.asc"
    armored.write_bytes(subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout)
    return SigningKey(armored, fingerprint)


def signing_key_variables(directory: Path, key: SigningKey) -> dict[str, object]:
    keyrings = directory / "keyrings"
    keyrings.mkdir(exist_ok=True)
    return {
        "__mongodb_signing_key_url": key.armored.as_uri(),
        "__mongodb_apt_keyring": str(keyrings / "mongodb-server-test.asc"),
        "mongodb_signing_key_fingerprint": key.fingerprint,
    }


def test_a_restart_left_pending_by_a_failed_run_happens_on_the_next_run(
    double_replica_set: DoubleReplicaSet,
) -> None:
    """mongod.conf changes on a running member, then the run fails before the restart plays: the next run, which
    finds nothing to change, restarts the member all the same, and the flag is gone afterwards. The same run
    fetches the signing key from a key server (a file here) and trusts it, its fingerprint being the one pinned."""
    directory = double_replica_set.directory
    (directory / "etc").mkdir()
    key = signing_key(directory)
    double = [str(NODE), str(MONGOSH_DOUBLE), "--state", str(double_replica_set.state_file)]
    variables = (
        mongodb_variables(directory)
        | signing_key_variables(directory, key)
        | {
            "mongodb_port": double_replica_set.port,
            # mongod runs (as service_facts would find it on a member): a change must restart it.
            "mongodb_was_running": True,
            "__mongodb_mongosh": [*double, "--quiet", "--eval"],
            "mongodb_wait_seconds": 6,
        }
    )
    standins = system_standins(directory)
    # mongod runs, for systemctl too: a restart is a restart, not a start.
    (standins.directory / "state" / "mongod.active").touch()
    with_standins = Ansible(standins.environment(double_replica_set.ansible.environment), directory)
    playbook = restart_playbook(directory)
    inventory = local_inventory(directory, "mongodb")
    flag = Path(f"{variables['mongodb_config_path']}.restart-pending")

    def run(fail: bool, *tags: str) -> Run:
        return with_standins.playbook(
            playbook,
            inventory,
            variables | {"harel_test_fail_after_config": fail},
            "--tags",
            ",".join(("mongodb_config", "mongodb_restart", *tags)),
        )

    failed = run(True)
    assert failed.returncode != 0 and "failing after the configuration changed" in failed.output, (
        failed.output
    )
    assert Path(str(variables["mongodb_config_path"])).is_file() and flag.is_file()
    assert "systemctl restart mongod" not in standins.calls()

    rerun = run(False, "mongodb_signing_key")
    assert rerun.returncode == 0, rerun.output
    assert standins.calls().count("systemctl restart mongod") == 1, rerun.output
    assert not flag.exists()
    keyring = Path(str(variables["__mongodb_apt_keyring"]))
    assert keyring.read_bytes() == key.armored.read_bytes()


def test_a_signing_key_without_the_pinned_fingerprint_is_refused(ansible: Ansible, tmp_path: Path) -> None:
    key = signing_key(tmp_path)
    (tmp_path / "etc").mkdir()
    pinned = "4B0752C1BCA238C0B4EE14DC41DE058A4E7DCA05"
    variables = (
        mongodb_variables(tmp_path)
        | signing_key_variables(tmp_path, key)
        | {"mongodb_signing_key_fingerprint": pinned}
    )

    run = ansible.playbook(
        role_playbook(tmp_path, "mongodb", gather_os_facts=True),
        local_inventory(tmp_path, "mongodb"),
        variables,
        "--tags",
        "mongodb_signing_key",
    )

    assert run.returncode != 0
    assert (
        f"has the fingerprints {key.fingerprint}, not mongodb_signing_key_fingerprint {pinned}" in run.output
    )
    assert not Path(str(variables["__mongodb_apt_keyring"])).exists()


# --- the firewall role ---------------------------------------------------------------------------------------------


def firewall_inventory(directory: Path, *, worker_facts: bool) -> Path:
    """Two members with their addresses given, this machine as a worker (local; allowed by its facts), and a
    Prometheus host by its address."""
    inventory = directory / "inventory-firewall.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        yaml.safe_dump(
            {
                "mongodb": {
                    "hosts": {
                        "mongo1.harel.example": local | {"firewall_address": "192.0.2.11"},
                        "mongo2.harel.example": local | {"firewall_address": ["192.0.2.12", "2001:db8::12"]},
                    }
                },
                "workers": {
                    "hosts": {"localhost": local | ({} if worker_facts else {"gather_facts": False})}
                },
                "monitoring": {
                    "hosts": {"prometheus.harel.example": local | {"firewall_address": "203.0.113.9"}}
                },
            }
        )
    )
    return inventory


@dataclass
class FirewallFiles:
    nft: str
    ipsets: list[str]
    worker_v4: list[str]

    def rules(self) -> list[str]:
        return [line.strip() for line in self.nft.splitlines() if line.strip().startswith("tcp dport")]

    def sets(self) -> dict[str, list[str]]:
        found = re.findall(r"set (\w+) \{.*?(?:elements = \{ (.*?) \}.*?)?\}", self.nft, re.DOTALL)
        return {name: elements.split(", ") if elements else [] for name, elements in found}


def render_firewall(ansible: Ansible, tmp_path: Path, host: str) -> FirewallFiles:
    """The role's nftables ruleset and firewalld ipsets for `host`, rendered as the role renders them."""
    role = ROLES / "firewall"
    role_vars = yaml.safe_load((role / "defaults" / "main.yml").read_text()) | yaml.safe_load(
        (role / "vars" / "main.yml").read_text()
    )
    extra = {
        "firewall_extra_sources": ["198.51.100.0/24"],
        "firewall_metrics_extra_sources": ["2001:db8:9::/64"],
    }
    playbook = tmp_path / "firewall.yml"
    render = "{{ lookup('ansible.builtin.template', '%s') | b64encode }}"
    plays = [
        {
            "name": "Facts of the workers",
            "hosts": "workers",
            "gather_facts": True,
            "gather_subset": ["network"],
        },
        {
            "name": "Render the firewall role's files",
            "hosts": host,
            "gather_facts": False,
            "vars": role_vars | extra,
            "tasks": [
                {
                    "name": "Render the nftables ruleset",
                    "ansible.builtin.debug": {
                        "msg": render % (role / "templates" / "mongodb-firewall.nft.j2")
                    },
                },
                {
                    "name": "Render the ipsets",
                    "ansible.builtin.debug": {"msg": render % (role / "templates" / "ipset.xml.j2")},
                    "loop": "{{ __firewall_ipsets }}",
                },
                {
                    "name": "The worker's addresses",
                    "ansible.builtin.debug": {
                        "var": "hostvars.localhost.ansible_facts.all_ipv4_addresses | to_json | b64encode"
                    },
                },
            ],
        },
    ]
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))

    run = ansible.playbook(playbook, firewall_inventory(tmp_path, worker_facts=True), {})

    assert run.returncode == 0, run.output
    nft, *ipsets = (base64.b64decode(text).decode() for text in re.findall(r"msg: (\S+)", run.output))
    [worker_addresses] = re.findall(r"all_ipv4_addresses \| to_json \| b64encode: (\S+)", run.output)
    return FirewallFiles(nft, ipsets, json.loads(base64.b64decode(worker_addresses)))


def check_ipsets(files: FirewallFiles, expected: dict[str, tuple[str, list[str]]]) -> None:
    """Each ipset by name: its family and entries."""
    found = {}
    for xml in files.ipsets:
        root = ElementTree.fromstring(xml.split("\n", 1)[1])
        assert root.attrib == {"type": "hash:net"}
        option = root.find("option")
        assert option is not None and option.attrib["name"] == "family"
        found[str(root.findtext("short"))] = (
            option.attrib["value"],
            sorted(str(e.text) for e in root.findall("entry")),
        )
    assert found == expected


def test_firewall_allows_mongodb_to_the_members_and_workers_and_the_exporter_to_prometheus(
    ansible: Ansible, tmp_path: Path
) -> None:
    """On a member: mongod's port from the members, the workers and the extra network; the exporter's port from the
    Prometheus host and the metrics sources only; both over loopback, and dropped from anywhere else."""
    files = render_firewall(ansible, tmp_path, "mongo1.harel.example")

    expected_v4 = sorted({"192.0.2.11", "192.0.2.12", "198.51.100.0/24", *files.worker_v4})
    sets = files.sets()
    assert sorted(sets["mongodb_v4"]) == expected_v4
    assert "2001:db8::12" in sets["mongodb_v6"]
    assert not any(address.lower().startswith("fe80:") for address in sets["mongodb_v6"])
    assert (sets["exporter_v4"], sets["exporter_v6"]) == (["203.0.113.9"], ["2001:db8:9::/64"])
    assert files.rules() == [
        "tcp dport 27017 iif lo accept",
        "tcp dport 27017 ip saddr @mongodb_v4 accept",
        "tcp dport 27017 ip6 saddr @mongodb_v6 accept",
        "tcp dport 27017 counter drop",
        "tcp dport 9216 iif lo accept",
        "tcp dport 9216 ip saddr @exporter_v4 accept",
        "tcp dport 9216 ip6 saddr @exporter_v6 accept",
        "tcp dport 9216 counter drop",
    ]
    # Loading the file replaces the table in one transaction.
    statements = [line for line in files.nft.splitlines() if line and not line.startswith("#")]
    assert statements[:2] == ["table inet harel_mongodb", "delete table inet harel_mongodb"]
    check_ipsets(
        files,
        {
            "harel-mongodb-v4": ("inet", expected_v4),
            "harel-mongodb-v6": ("inet6", sorted(sets["mongodb_v6"])),
            "harel-exporter-v4": ("inet", ["203.0.113.9"]),
            "harel-exporter-v6": ("inet6", ["2001:db8:9::/64"]),
        },
    )


def test_firewall_allows_the_workers_http_port_to_prometheus_only(ansible: Ansible, tmp_path: Path) -> None:
    """On a worker (not a member): /healthz, /readyz and /metrics from the Prometheus host and the metrics sources,
    over loopback (the worker role's /readyz check), and from nowhere else; mongod's port is not this host's."""
    files = render_firewall(ansible, tmp_path, "localhost")

    assert files.sets() == {"worker_http_v4": ["203.0.113.9"], "worker_http_v6": ["2001:db8:9::/64"]}
    assert files.rules() == [
        "tcp dport 8080 iif lo accept",
        "tcp dport 8080 ip saddr @worker_http_v4 accept",
        "tcp dport 8080 ip6 saddr @worker_http_v6 accept",
        "tcp dport 8080 counter drop",
    ]
    check_ipsets(
        files,
        {
            "harel-worker-http-v4": ("inet", ["203.0.113.9"]),
            "harel-worker-http-v6": ("inet6", ["2001:db8:9::/64"]),
        },
    )


def test_firewall_role_stops_on_a_host_without_an_address(ansible: Ansible, tmp_path: Path) -> None:
    playbook = tmp_path / "play-firewall.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The firewall role",
                    "hosts": "mongodb",
                    "gather_facts": False,
                    "roles": [{"role": "firewall"}],
                }
            ]
        )
    )

    # Check mode, and the role's first task stops it: nothing on this machine is touched.
    run = ansible.playbook(playbook, firewall_inventory(tmp_path, worker_facts=False), {}, "--check")

    assert run.returncode != 0
    assert (
        "localhost (inventory groups mongodb, mongodb_leaving, mongodb_mongos, workers) may reach port 27017, but the firewall knows no "
        "address" in (run.output)
    )


# --- the scripts that authenticate, under the real mongosh against the fake replica set with authentication --------


def test_root_user_script_checks_and_rotates_the_password_under_mongosh(
    fake_rs_auth: AuthenticatedFake, tmp_path: Path
) -> None:
    port = fake_rs_auth.server.port
    current = {"user": "root", "password": fake_rs_auth.root_password, "previousPassword": ""}
    new_password = secrets.token_hex(16)
    rotation = {"user": "root", "password": new_password, "previousPassword": fake_rs_auth.root_password}

    present = mongosh(role_mongosh(port, "root_user.js"), home=tmp_path, stdin=json.dumps(current))
    rotated = mongosh(role_mongosh(port, "root_user.js"), home=tmp_path, stdin=json.dumps(rotation))
    again = mongosh(role_mongosh(port, "root_user.js"), home=tmp_path, stdin=json.dumps(rotation))

    assert (present.returncode, present.lines) == (0, ["present"]), present.stderr
    assert (rotated.returncode, rotated.lines) == (0, ["rotated"]), rotated.stderr
    assert (again.returncode, again.lines) == (0, ["present"]), again.stderr
    with MongoClient(fake_rs_auth.url("root", new_password), serverSelectionTimeoutMS=5000) as client:
        assert client.admin.command("ping")["ok"] == 1


def test_app_user_script_creates_then_keeps_the_user_under_mongosh(
    fake_rs_auth: AuthenticatedFake, tmp_path: Path
) -> None:
    port = fake_rs_auth.server.port
    stdin = {
        "port": port,
        "root": {"user": "root", "password": fake_rs_auth.root_password},
        "app": APP,
        "tls": False,
        "tlsCAFile": "/etc/mongod-tls/ca.crt",
    }

    created = mongosh(role_mongosh(port, "app_user.js"), home=tmp_path, stdin=json.dumps(stdin))
    kept = mongosh(role_mongosh(port, "app_user.js"), home=tmp_path, stdin=json.dumps(stdin))

    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"changed": True, "actions": ["created"]}
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == {"changed": False, "actions": []}
    with MongoClient(fake_rs_auth.url(APP["user"], APP["password"]), serverSelectionTimeoutMS=5000) as client:
        client.harel.probe.insert_one({"written": True})


def test_members_healthy_script_reports_the_set_under_mongosh(
    fake_rs_auth: AuthenticatedFake, tmp_path: Path
) -> None:
    port = fake_rs_auth.server.port
    stdin = {"user": "root", "password": fake_rs_auth.root_password, "waitSeconds": 10}

    run = mongosh(role_mongosh(port, "members_healthy.js"), home=tmp_path, stdin=json.dumps(stdin))

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "healthy": True,
        "members": [{"name": fake_rs_auth.host_port, "state": "PRIMARY", "health": 1}],
    }


def test_membership_scripts_read_the_set_and_apply_the_plans_change_under_mongosh(
    fake_rs_auth: AuthenticatedFake, tmp_path: Path
) -> None:
    """replica_set_state.js, the plan (the role's filter) and reconfig.js, as reconcile.yml chains them: the config's
    ObjectId survives the round trip through Extended JSON, and the server takes the change."""
    port = fake_rs_auth.server.port
    root = {"user": "root", "password": fake_rs_auth.root_password}
    # A second member the fake simulates: a port on 127.0.0.1 nobody listens on.
    newcomer = f"127.0.0.1:{free_port()}"
    plan_step = load_plan()

    def state() -> dict[str, Any]:
        run = mongosh(role_mongosh(port, "replica_set_state.js"), home=tmp_path, stdin=json.dumps(root))
        assert run.returncode == 0, run.stderr
        return dict(json.loads(run.stdout))

    before = state()
    done = plan_step(before, [fake_rs_auth.host_port], [])
    step = plan_step(before, [fake_rs_auth.host_port, newcomer], [newcomer])
    applied = mongosh(
        role_mongosh(port, "reconfig.js"), home=tmp_path, stdin=json.dumps(root | {"config": step["config"]})
    )
    after = state()

    assert done["action"] == "done"
    assert "$oid" in json.dumps(before["config"]["settings"]["replicaSetId"])
    assert step["action"] == "reconfig", step
    assert applied.returncode == 0, applied.stderr
    assert applied.lines == [f"reconfigured {before['config']['version'] + 1}"]
    assert after["config"]["version"] == before["config"]["version"] + 1
    assert after["config"]["settings"]["replicaSetId"] == before["config"]["settings"]["replicaSetId"]
    added = next(m for m in after["config"]["members"] if m["host"] == newcomer)
    assert (added["votes"], added["priority"]) == (0, 0)


def load_plan() -> Callable[..., dict[str, Any]]:
    """The role's `harel_replica_set_step` filter, loaded from its plugin file as Ansible loads it: the function of
    compose/mongo-init/replica_set_plan.py, the plan's one copy."""
    plugin = ROLES / "mongodb" / "filter_plugins" / "harel_replica_set_step.py"
    spec = importlib.util.spec_from_file_location("harel_replica_set_step_filter", plugin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    step: Callable[..., dict[str, Any]] = module.FilterModule().filters()["harel_replica_set_step"]
    assert Path(step.__code__.co_filename) == REPOSITORY / "compose" / "mongo-init" / "replica_set_plan.py"
    return step
