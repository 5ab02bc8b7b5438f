"""The Ansible day-2 roles: mongodb_ops_users, mongodb_exporter, mongodb_backup and monitoring.

What runs here, for real, with ansible-playbook against localhost (connection local, no root):
- mongodb_ops_users, its command run by a stand-in for mongosh that executes ops-users.js under Node.js against
  the fake mongosh of the chart tests (tests/infra/fake_mongosh.js): the users and the role made, the second run
  reporting no change, no secret in the output;
- monitoring into temporary directories, the rules checked by the real promtool through the copy's `validate`, the
  file_sd targets built from the inventory;
- the exporter's and the backup's unit, timer and environment templates rendered from the roles' defaults, each
  unit passing `systemd-analyze verify`, the environment file holding every setting harel-backup.sh reads.
Syntax and lint of site.yml with these plays are in test_ansible.py. Not run here: the exporter's download and
service, the backup's account and timer (they need root, systemd and the network); the first run on real hosts
is yours.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.helm_lint import CHART_DIR
from tests.infra.test_ansible import ANSIBLE_PLAYBOOK, PLAYBOOKS, ROLES, Ansible, ansible  # noqa: F401

pytestmark = pytest.mark.infra

NODE = shutil.which("node")
FAKE_MONGOSH = Path(__file__).with_name("fake_mongosh.js")
SCRIPT_VARIABLES = {
    "HAREL_BACKUP_HOSTS",
    "HAREL_BACKUP_REPLICA_SET",
    "HAREL_BACKUP_USER",
    "HAREL_BACKUP_PASSWORD",
    "HAREL_BACKUP_DATABASE",
    "HAREL_BACKUP_DIR",
    "HAREL_BACKUP_KEEP",
    "HAREL_BACKUP_JOB",
    "HAREL_BACKUP_TARGET",
}
RECAP = re.compile(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

# Runs ops-users.js (from --eval) under Node.js against the fake mongosh; the cluster persists between runs in
# $FAKE_CLUSTER, as a real replica set would.
MONGOSH_STAND_IN = """\
import json, os, pathlib, subprocess, sys, tempfile
arguments = sys.argv[1:]
script = arguments[arguments.index("--eval") + 1]
state = pathlib.Path(os.environ["FAKE_CLUSTER"])
cluster = json.loads(state.read_text())
env = {name: value for name, value in os.environ.items() if name.startswith("HAREL_")}
with tempfile.TemporaryDirectory() as scratch:
    script_file = pathlib.Path(scratch, "ops-users.js")
    script_file.write_text(script)
    scenario = pathlib.Path(scratch, "scenario.json")
    scenario.write_text(json.dumps({"files": {}, "env": env, "cluster": cluster}))
    completed = subprocess.run([NODE, FAKE_MONGOSH, str(script_file), str(scenario)], capture_output=True, text=True)
run = json.loads(completed.stdout)
state.write_text(json.dumps(run["cluster"]))
pathlib.Path(os.environ["FAKE_CALLS"]).open("a").write(json.dumps({"env": env}) + "\\n")
print("\\n".join(run["printed"]))
if not run["ok"]:
    print(run["error"], file=sys.stderr)
    sys.exit(1)
"""


def recap(output: str) -> dict[str, int]:
    match = RECAP.search(output)
    assert match, output
    ok, changed, unreachable, failed = map(int, match.groups())
    return {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed}


def inventory(directory: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    path = directory / "inventory.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "mongodb": {"hosts": {"localhost": host}},
                        "workers": {"hosts": {"localhost": host}},
                        "monitoring": {"hosts": {"localhost": host}},
                    }
                }
            }
        )
    )
    return path


def playbook(directory: Path, name: str, plays: list[dict[str, Any]]) -> Path:
    path = directory / f"{name}.yml"
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return path


def run_playbook(
    ansible: Ansible,  # noqa: F811
    path: Path,
    inventory_file: Path,
    variables: dict[str, Any],
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    variables_file = path.with_suffix(".vars.json")
    variables_file.write_text(json.dumps(variables))
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory_file), str(path), "-e", f"@{variables_file}"],
        cwd=PLAYBOOKS,
        env={**ansible.environment, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


# --- mongodb_ops_users, run -------------------------------------------------------------------------------------


@pytest.mark.skipif(NODE is None, reason="node (Node.js) runs ops-users.js against the fake mongosh")
def test_ops_users_role_makes_both_users_once_through_mongosh(
    ansible: Ansible,  # noqa: F811
    tmp_path: Path,
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    stand_in = tools / "mongosh"
    stand_in.write_text(
        f"#!{sys.executable}\nNODE = {NODE!r}\nFAKE_MONGOSH = {str(FAKE_MONGOSH)!r}\n{MONGOSH_STAND_IN}"
    )
    stand_in.chmod(0o755)
    root, monitor, backup = (secrets.token_hex(16) for _ in range(3))
    cluster = tmp_path / "cluster.json"
    cluster.write_text(
        json.dumps(
            {
                "members": {"localhost:27017": {"setName": "rs0", "arbiter": False, "unreachableFor": 0}},
                "root": {"user": "root", "password": root},
                "users": {},
                "statusError": None,
                "electionPolls": 0,
                "localReplsetDocs": 1,
                "defaultWriteConcern": None,
                "config": None,
            }
        )
    )
    calls = tmp_path / "calls.jsonl"
    env = {
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "FAKE_CLUSTER": str(cluster),
        "FAKE_CALLS": str(calls),
    }
    plays = [
        {"name": "operator users", "hosts": "mongodb", "gather_facts": False, "roles": ["mongodb_ops_users"]}
    ]
    variables = {
        "mongodb_ops_users_root_password": root,
        "mongodb_ops_users_monitor_user": "harel-monitor",
        "mongodb_ops_users_monitor_password": monitor,
        "mongodb_ops_users_backup_user": "harel-backup",
        "mongodb_ops_users_backup_password": backup,
        "mongodb_ops_users_wait_seconds": 30,
    }
    book = playbook(tmp_path, "ops-users", plays)
    hosts = inventory(tmp_path)

    first = run_playbook(ansible, book, hosts, variables, env)

    assert first.returncode == 0, first.stdout + first.stderr
    assert recap(first.stdout)["changed"] == 1
    for secret in (root, monitor, backup):
        assert secret not in first.stdout + first.stderr
    users = json.loads(cluster.read_text())["users"]
    assert users["harel-monitor"]["roles"] == [
        {"role": "clusterMonitor", "db": "admin"},
        {"role": "read", "db": "local"},
    ]
    assert users["harel-monitor"]["pwd"] == monitor
    assert users["harel-backup"]["roles"] == [
        {"role": "backup", "db": "admin"},
        {"role": "harelBackupStatus", "db": "admin"},
    ]
    [call] = [json.loads(line) for line in calls.read_text().splitlines()]
    config = json.loads(call["env"]["HAREL_OPS_USERS"])
    assert config == {
        "hosts": ["localhost:27017"],
        "replicaSetName": "rs0",
        "rootUsername": "root",
        "database": "harel",
        "tlsCAFile": None,
        "deadlineSeconds": 30,
        "monitor": {"username": "harel-monitor"},
        "backup": {"username": "harel-backup"},
    }

    second = run_playbook(ansible, book, hosts, variables, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert recap(second.stdout)["changed"] == 0
    assert json.loads(cluster.read_text())["users"] == users


def test_ops_users_role_refuses_a_short_password(ansible: Ansible, tmp_path: Path) -> None:  # noqa: F811
    plays = [
        {"name": "operator users", "hosts": "mongodb", "gather_facts": False, "roles": ["mongodb_ops_users"]}
    ]
    run = run_playbook(
        ansible,
        playbook(tmp_path, "short", plays),
        inventory(tmp_path),
        {
            "mongodb_ops_users_root_password": "r" * 20,
            "mongodb_ops_users_backup_user": "harel-backup",
            "mongodb_ops_users_backup_password": "short",
        },
    )
    assert run.returncode != 0
    assert "16 characters or more" in run.stdout


# --- monitoring, run --------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_monitoring_role_installs_checked_rules_targets_and_the_dashboard(
    ansible: Ansible,  # noqa: F811
    tmp_path: Path,
) -> None:
    plays = [{"name": "monitoring", "hosts": "monitoring", "gather_facts": False, "roles": ["monitoring"]}]
    target = tmp_path / "prometheus"
    variables = {
        "monitoring_rules_dir": str(target / "rules"),
        "monitoring_targets_dir": str(target / "file_sd"),
        "monitoring_dashboards_dir": str(tmp_path / "grafana"),
        "monitoring_file_owner": __import__("getpass").getuser(),
    }
    book = playbook(tmp_path, "monitoring", plays)
    hosts = inventory(tmp_path)
    first = run_playbook(ansible, book, hosts, variables)
    assert first.returncode == 0, first.stdout + first.stderr
    rules = CHART_DIR / "files" / "observability" / "harel-alerts.rules.yml"  # the one copy, the chart's
    assert (target / "rules" / "harel-alerts.rules.yml").read_text() == rules.read_text()
    assert json.loads((target / "file_sd" / "harel-mongodb.json").read_text()) == [
        {"targets": ["localhost:9216"], "labels": {"inventory_host": "localhost"}}
    ]
    assert json.loads((target / "file_sd" / "harel-workers.json").read_text())[0]["targets"] == [
        "localhost:8080"
    ]
    assert (tmp_path / "grafana" / "harel-dashboard.json").is_file()
    again = run_playbook(ansible, book, hosts, variables)
    assert recap(again.stdout)["changed"] == 0

    # promtool refuses a broken rules file: the copy's validate keeps the installed one. The role, copied into a
    # repository of the same layout, reads the rules from that repository's chart.
    repository = tmp_path / "repository"
    shutil.copytree(ROLES / "monitoring", repository / "playbooks" / "roles" / "monitoring")
    shutil.copytree(
        CHART_DIR / "files" / "observability", repository / "helm" / "harel-stack" / "files" / "observability"
    )
    (repository / "helm" / "harel-stack" / "files" / "observability" / "harel-alerts.rules.yml").write_text(
        "groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: 'sum('\n"
    )
    refused = run_playbook(
        ansible, book, hosts, variables, {"ANSIBLE_ROLES_PATH": str(repository / "playbooks" / "roles")}
    )
    assert refused.returncode != 0
    assert "failed to validate" in refused.stdout
    assert (target / "rules" / "harel-alerts.rules.yml").read_text() == rules.read_text()


# --- the exporter's and the backup's systemd files, rendered ------------------------------------------------------


# The settings of each copy off the member, as an inventory gives them.
OFFSITE: dict[str, dict[str, str]] = {
    "s3": {
        "mongodb_backup_offsite": "s3",
        "mongodb_backup_s3_bucket": "harel-backups",
        "mongodb_backup_s3_endpoint": "https://minio.harel.example",
        "mongodb_backup_s3_access_key_id": "AKIA" + "k" * 16,
        "mongodb_backup_s3_secret_access_key": "s" * 40,
    },
    "rsync": {
        "mongodb_backup_offsite": "rsync",
        "mongodb_backup_rsync_destination": "backup@vault.harel.example:/srv/harel-backups/",
    },
}

SHARDED_BACKUP: dict[str, object] = {
    "mongodb_backup_routers": ["mongos-1.harel.example:27017", "mongos-2.harel.example:27017"],
    "mongodb_backup_pause_timeout": 300,
}


# Module-scoped: one render for every test that reads the files.
@pytest.fixture(scope="module")
def rendered_units(ansible: Ansible, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: F811
    tmp_path = tmp_path_factory.mktemp("units")
    out = tmp_path / "rendered"
    out.mkdir()
    install = tmp_path / "opt"
    release = install / "0.53.0"
    release.mkdir(parents=True)
    (release / "mongodb_exporter").write_text("#!/bin/sh\n")
    (release / "mongodb_exporter").chmod(0o755)
    templates = {
        "mongodb_exporter": ["harel-mongodb-exporter.service", "mongodb-exporter.env"],
        "mongodb_backup": ["harel-backup.service", "harel-backup.timer", "harel-backup.env"],
    }
    plays = [
        {
            "name": "render",
            "hosts": "mongodb",
            "gather_facts": False,
            "vars_files": [str(ROLES / role / "defaults" / "main.yml") for role in templates]
            + [str(ROLES / role / "vars" / "main.yml") for role in templates],
            "tasks": [
                {
                    "name": f"render {name}",
                    "ansible.builtin.template": {
                        "src": str(ROLES / role / "templates" / f"{name}.j2"),
                        "dest": str(out / name),
                        "mode": "0600",
                    },
                }
                for role, names in templates.items()
                for name in names
            ]
            + [
                # The backup with each copy off the member.
                {
                    "name": f"render {name} with {offsite}",
                    "ansible.builtin.template": {
                        "src": str(ROLES / "mongodb_backup" / "templates" / f"{name}.j2"),
                        "dest": str(out / name.replace("harel-backup", f"harel-backup-{offsite}")),
                        "mode": "0600",
                    },
                    "vars": OFFSITE[offsite],
                }
                for offsite in OFFSITE
                for name in ("harel-backup.service", "harel-backup.env")
            ]
            + [
                # The backup of a sharded cluster, through its routers.
                {
                    "name": "render harel-backup.env of a sharded cluster",
                    "ansible.builtin.template": {
                        "src": str(ROLES / "mongodb_backup" / "templates" / "harel-backup.env.j2"),
                        "dest": str(out / "harel-backup-sharded.env"),
                        "mode": "0600",
                    },
                    "vars": SHARDED_BACKUP,
                }
            ],
        }
    ]
    variables = {
        "mongodb_backup_password": "b" * 32,
        "mongodb_exporter_password": "m" * 32,
        "mongodb_exporter_install_dir": str(install),
        "ansible_facts": {"architecture": "x86_64"},
    }
    run = run_playbook(ansible, playbook(tmp_path, "render", plays), inventory(tmp_path), variables)
    assert run.returncode == 0, run.stdout + run.stderr
    return {path.name: path for path in out.iterdir()}


def test_backup_environment_holds_every_setting_the_script_reads(rendered_units: dict[str, Path]) -> None:
    settings = dict(
        line.split("=", 1)
        for line in rendered_units["harel-backup.env"].read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(settings) == SCRIPT_VARIABLES
    assert settings["HAREL_BACKUP_HOSTS"] == "localhost:27017"
    assert settings["HAREL_BACKUP_JOB"] == "ansible/localhost"
    assert settings["HAREL_BACKUP_KEEP"] == "7"
    assert settings["HAREL_BACKUP_DIR"] == "/var/backups/harel"
    # Every HAREL_BACKUP_* the script reads without a default comes from this file.
    script = (CHART_DIR / "files" / "backup" / "harel-backup.sh").read_text()
    required = set(re.findall(r"\$\{(HAREL_BACKUP_[A-Z_]+)(?:\}|:\?)", script)) - {
        "HAREL_BACKUP_SETTINGS",
        "HAREL_BACKUP_TLS_CA",
        "HAREL_BACKUP_S3_BUCKET",
        "HAREL_BACKUP_S3_PREFIX",
        "HAREL_BACKUP_S3_ENDPOINT",
    }
    assert required <= set(settings)


def test_backup_timer_runs_the_script_daily_and_catches_up(rendered_units: dict[str, Path]) -> None:
    timer = rendered_units["harel-backup.timer"].read_text()
    assert "OnCalendar=*-*-* 03:00:00" in timer
    assert "Persistent=true" in timer
    service = rendered_units["harel-backup.service"].read_text()
    assert "ExecStart=/bin/bash /usr/local/lib/harel-backup/harel-backup.sh run" in service
    assert "EnvironmentFile=/etc/default/harel-backup" in service
    assert "ReadWritePaths=/var/backups/harel" in service
    assert "Type=oneshot" in service


def test_backup_copies_off_the_member_to_s3_or_another_host(rendered_units: dict[str, Path]) -> None:
    def exec_starts(name: str) -> list[str]:
        lines = rendered_units[name].read_text().splitlines()
        return [line.removeprefix("ExecStart=") for line in lines if line.startswith("ExecStart=")]

    def settings(name: str) -> dict[str, str]:
        lines = rendered_units[name].read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))

    script = "/bin/bash /usr/local/lib/harel-backup/harel-backup.sh"
    # Off by default: the archives stay on the member.
    assert exec_starts("harel-backup.service") == [f"{script} run"]
    assert settings("harel-backup.env")["HAREL_BACKUP_TARGET"] == "dir:localhost:/var/backups/harel"
    # s3: the Helm CronJob's three steps, the upload between the dump and the record.
    assert exec_starts("harel-backup-s3.service") == [
        f"{script} {step}" for step in ("dump", "upload-s3", "record")
    ]
    s3 = settings("harel-backup-s3.env")
    assert {key: s3[key] for key in s3 if key.startswith(("HAREL_BACKUP_S3", "AWS_"))} == {
        "HAREL_BACKUP_S3_BUCKET": "harel-backups",
        "HAREL_BACKUP_S3_PREFIX": "harel",
        "HAREL_BACKUP_S3_ENDPOINT": "https://minio.harel.example",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIA" + "k" * 16,
        "AWS_SECRET_ACCESS_KEY": "s" * 40,
    }
    assert s3["HAREL_BACKUP_TARGET"] == "s3://harel-backups/harel"
    # The credentials are in the root-only environment file, never in the unit.
    assert "s" * 40 not in rendered_units["harel-backup-s3.service"].read_text()
    # rsync: after a successful run, the directory mirrored over SSH with the member's key and the known host key.
    run, copy = exec_starts("harel-backup-rsync.service")
    assert run == f"{script} run"
    assert copy.startswith("/usr/bin/rsync --archive --delete --exclude=.harel-backup-run -e ")
    assert (
        "-o StrictHostKeyChecking=yes" in copy
        and "-o UserKnownHostsFile=/etc/harel-backup/ssh/known_hosts" in copy
    )
    assert copy.endswith(" /var/backups/harel/ backup@vault.harel.example:/srv/harel-backups/")
    assert settings("harel-backup-rsync.env")["HAREL_BACKUP_TARGET"] == (
        "rsync:backup@vault.harel.example:/srv/harel-backups/"
    )


def test_exporter_unit_reads_its_own_member_in_compatible_mode(rendered_units: dict[str, Path]) -> None:
    unit = rendered_units["harel-mongodb-exporter.service"].read_text()
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert "--mongodb.uri=mongodb://127.0.0.1:27017/admin" in exec_start
    assert {"--compatible-mode", "--collector.diagnosticdata", "--collector.replicasetstatus"} <= set(
        exec_start.split()
    )
    assert "m" * 32 not in unit
    assert rendered_units["mongodb-exporter.env"].read_text().splitlines()[-2:] == [
        "MONGODB_USER=harel-monitor",
        "MONGODB_PASSWORD=" + "m" * 32,
    ]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize(
    "unit",
    [
        "harel-mongodb-exporter.service",
        "harel-backup.service",
        "harel-backup.timer",
        "harel-backup-s3.service",
        "harel-backup-rsync.service",
    ],
)
def test_units_pass_systemd_analyze_verify(
    rendered_units: dict[str, Path], unit: str, tmp_path: Path
) -> None:
    # verify wants the timer's service beside it, and reports problems as output even with exit code 0.
    directory = tmp_path / "units"
    directory.mkdir()
    for name in (
        "harel-mongodb-exporter.service",
        "harel-backup.service",
        "harel-backup.timer",
        "harel-backup-s3.service",
        "harel-backup-rsync.service",
    ):
        shutil.copy(rendered_units[name], directory / name)
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(directory / unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = [
        line
        for line in (verified.stdout + verified.stderr).splitlines()
        # The accounts and the environment files exist only on a provisioned host.
        if not re.search(r"EnvironmentFile|Failed to resolve user|getpwnam|user", line, re.I)
    ]
    assert verified.returncode == 0 or not problems, verified.stdout + verified.stderr
    assert problems == []


def test_a_sharded_backup_environment_names_the_routers_instead_of_the_set(
    rendered_units: dict[str, Path],
) -> None:
    settings = dict(
        line.split("=", 1)
        for line in rendered_units["harel-backup-sharded.env"].read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert settings["HAREL_BACKUP_ROUTERS"] == "mongos-1.harel.example:27017,mongos-2.harel.example:27017"
    assert settings["HAREL_BACKUP_PAUSE_TIMEOUT"] == "300"
    assert set(settings) == SCRIPT_VARIABLES - {"HAREL_BACKUP_HOSTS", "HAREL_BACKUP_REPLICA_SET"} | {
        "HAREL_BACKUP_ROUTERS",
        "HAREL_BACKUP_PAUSE_TIMEOUT",
    }
