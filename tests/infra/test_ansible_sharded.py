"""The Ansible path's sharded cluster (docs/sharded-clusters.md, "Ansible"): the sharded example inventory, the mongodb role's
cluster roles (configsvr, shardsvr: sharding.clusterRole in mongod.conf, which a plain member's lacks, as
tests/infra/test_ansible.py's configuration run shows; mongos: mongos.conf and its unit, rendered under a temporary
directory with systemctl stood in), and the sharded_init role run twice against the fake sharded cluster (the second
run changes nothing). ansible-lint's production profile covers these files with the rest
(tests/infra/test_ansible.py)."""

from __future__ import annotations

import getpass
import json
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pymongo import MongoClient

from tests.fake_mongod.fixtures import FakeProcess
from tests.infra import test_ansible as base
from tests.infra import test_ansible_operations as ops
from tests.infra.test_ansible import (
    ANSIBLE,
    ANSIBLE_PLAYBOOK,
    BIN,
    PLAYBOOKS,
    ROLES,
    Ansible,
    local_inventory,
    mongodb_variables,
    role_playbook,
    run_mongodb_config,
    system_standins,
)
from tests.wheelhouse import fill_wheelhouse, runtime_dependencies

pytestmark = pytest.mark.infra

# The session's Ansible environment (tests/infra/test_ansible.py's fixture).
ansible = base.ansible

SHARDED_INVENTORY = PLAYBOOKS / "inventories" / "sharded-example" / "hosts.yml"


def test_site_playbook_passes_the_syntax_check_with_the_sharded_inventory(ansible: Ansible) -> None:
    run = ansible.run(ANSIBLE_PLAYBOOK, "-i", SHARDED_INVENTORY, "--syntax-check", "site.yml")
    assert run.returncode == 0, run.output


def debug(ansible: Ansible, host: str, variable: str, **extra: str) -> Any:
    run = ansible.run(
        ANSIBLE,
        "-i",
        SHARDED_INVENTORY,
        host,
        "-c",
        "local",
        "-m",
        "ansible.builtin.debug",
        "-a",
        f"var={variable}",
        "-e",
        json.dumps(extra),
    )
    assert run.returncode == 0, run.output
    # The YAML callback of ansible.cfg: "<host> | SUCCESS => " then the variable as YAML.
    return yaml.safe_load(run.output.split("=>", 1)[1])[variable]


def test_the_sharded_inventory_points_the_workers_and_the_init_at_the_routers(ansible: Ansible) -> None:
    password = secrets.token_hex(16)
    url = debug(ansible, "worker1.harel.example", "worker_mongo_url", vault_harel_app_password=password)
    assert url == (
        f"mongodb://harel:{password}@mongos1.harel.example:27017,mongos2.harel.example:27017/harel?authSource=admin"
    )
    assert debug(ansible, "worker1.harel.example", "sharded_init_shards") == [
        {
            "replicaSetName": f"shard{n}",
            "dataMembers": [f"shard{n}-{m}.harel.example:27017" for m in "abc"],
        }
        for n in (0, 1)
    ]
    assert debug(ansible, "worker1.harel.example", "sharded_init_config_server") == {
        "replicaSetName": "cfg",
        "dataMembers": [f"cfg{n}.harel.example:27017" for n in (1, 2, 3)],
    }
    assert debug(ansible, "worker1.harel.example", "sharded_init_partitions") == 256
    for host, (set_name, role) in {
        "cfg2.harel.example": ("cfg", "configsvr"),
        "shard1-b.harel.example": ("shard1", "shardsvr"),
    }.items():
        assert debug(ansible, host, "mongodb_replset_name") == set_name
        assert debug(ansible, host, "mongodb_cluster_role") == role
        assert debug(ansible, host, "mongodb_hosts_group") == {"cfg": "mongodb_configsvr"}.get(
            set_name, f"mongodb_{set_name}"
        )


@pytest.mark.parametrize("role", ["configsvr", "shardsvr"])
def test_a_members_mongod_conf_names_its_part_in_the_cluster(
    ansible: Ansible, tmp_path: Path, role: str
) -> None:
    (tmp_path / "etc").mkdir()
    variables = mongodb_variables(tmp_path) | {"mongodb_cluster_role": role, "mongodb_replset_name": "shard0"}
    run = run_mongodb_config(ansible, variables)
    assert run.returncode == 0, run.output
    config = yaml.safe_load((tmp_path / "etc" / "mongod.conf").read_text())
    assert config["sharding"] == {"clusterRole": role}
    assert config["replication"] == {"replSetName": "shard0"}


def router_variables(directory: Path) -> dict[str, object]:
    # Without mongodb_member_host: an extra variable would name every config server the same.
    return {k: v for k, v in mongodb_variables(directory).items() if k != "mongodb_member_host"} | {
        "mongodb_cluster_role": "mongos",
        "mongodb_mongos_config_path": str(directory / "etc" / "mongos.conf"),
        "mongodb_mongos_unit_path": str(directory / "etc" / "harel-mongos.service"),
    }


def router_run(ansible: Ansible, directory: Path, variables: dict[str, object], *flags: str) -> base.Run:
    """The mongodb role's configuration on localhost as a router, with two config servers in the inventory."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = directory / "inventory-router.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "mongodb_mongos": {"hosts": {"localhost": local}},
                "mongodb_configsvr": {
                    "hosts": {"cfg1.harel.example": {}, "cfg2.harel.example": {"mongodb_port": 27019}}
                },
            }
        )
    )
    playbook = directory / "play-router.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The mongodb role as a router",
                    "hosts": "mongodb_mongos",
                    "gather_facts": True,
                    "gather_subset": ["!all"],
                    "roles": [{"role": "mongodb"}],
                }
            ]
        )
    )
    standins = system_standins(directory / "etc")
    with_standins = Ansible(standins.environment(ansible.environment), ansible.scratch)
    return with_standins.playbook(playbook, inventory, variables, "--tags", "mongodb_config", *flags)


def test_a_router_gets_mongos_conf_naming_the_config_servers_and_nothing_of_a_member(
    ansible: Ansible, tmp_path: Path
) -> None:
    (tmp_path / "etc").mkdir()
    variables = router_variables(tmp_path)
    first = router_run(ansible, tmp_path, variables)
    assert first.returncode == 0, first.output
    config = yaml.safe_load((tmp_path / "etc" / "mongos.conf").read_text())
    assert config["sharding"] == {"configDB": "cfg/cfg1.harel.example:27017,cfg2.harel.example:27019"}
    assert config["security"] == {"keyFile": str(tmp_path / "etc" / "mongod.keyfile")}
    assert "storage" not in config
    assert "replication" not in config
    unit = (tmp_path / "etc" / "harel-mongos.service").read_text()
    assert re.search(
        rf"^ExecStart=/usr/bin/mongos --config {re.escape(str(tmp_path))}/etc/mongos.conf$", unit, re.M
    )
    # A router has no mongod.conf, no data directory and no host tuning of mongod's.
    assert not (tmp_path / "etc" / "mongod.conf").exists()
    assert not (tmp_path / "data").exists()
    second = router_run(ansible, tmp_path, variables, "--check")
    assert second.returncode == 0, second.output
    assert second.recap()["changed"] == 0, second.output


# --- the router steps against the fake sharded cluster (needs tests/fake_mongod --shards and harel partitions init) --


def test_the_sharded_init_role_runs_against_the_fake_cluster_and_a_rerun_changes_nothing(
    ansible: Ansible, fake_cluster_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    router = f"127.0.0.1:{fake_cluster_process('--shards', '3').port}"
    url = f"mongodb://{router}/"
    with MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        listed = client.admin.command("listShards")["shards"]
    shards = []
    for shard in listed:
        name, _, hosts = str(shard["host"]).partition("/")
        shards.append({"replicaSetName": shard["_id"], "dataMembers": (hosts or name).split(",")})
    variables = {
        # The test environment's Python has pymongo, and harel beside it in the same bin directory.
        "sharded_init_python": str(BIN / "python"),
        "sharded_init_router_url": url,
        "sharded_init_app_password": secrets.token_hex(16),
        "sharded_init_config_server": {"replicaSetName": "cfg", "dataMembers": ["cfg1:27019"]},
        "sharded_init_shards": shards,
        "sharded_init_routers": [router],
        "sharded_init_partitions": 256,
        # the playbook is written into tmp_path, so the scripts beside site.yml's default are named directly
        "sharded_init_scripts_dir": str(PLAYBOOKS.parent / "compose" / "mongo-init"),
    }
    playbook = role_playbook(tmp_path, "sharded_init", gather_os_facts=True)
    inventory = local_inventory(tmp_path, "workers")
    first = ansible.playbook(playbook, inventory, variables)
    assert first.returncode == 0, first.output
    assert first.recap()["changed"] == 1
    second = ansible.playbook(playbook, inventory, variables)
    assert second.returncode == 0, second.output
    assert second.recap()["changed"] == 0, second.output
    assert "unchanged" in second.output
    with MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        meta = client["harel"]["harel_meta"].find_one({"_id": "partitions"})
    assert meta is not None
    assert meta["count"] == 256


# --- site.yml's order on a sharded cluster: the router steps before any worker starts ------------------------------

PREPARE_PLAY = (
    "Sharded cluster - the first worker host's virtualenv for the router steps, its worker not started"
)
INIT_PLAY = "Sharded cluster - the shards, the app user and the partitions, through the routers"
WORKERS_PLAY = "Workers - install harel and run it as a systemd service, a batch of hosts at a time"


def listed_plays(ansible: Ansible, inventory: Path) -> list[tuple[str, list[str]]]:
    """site.yml's plays as ansible-playbook --list-hosts lists them for `inventory`: (name, hosts), in run order."""
    run = ansible.run(ANSIBLE_PLAYBOOK, "-i", inventory, "--list-hosts", "site.yml")
    assert run.returncode == 0, run.output
    plays: list[tuple[str, list[str]]] = []
    lines = run.output.splitlines()
    for index, line in enumerate(lines):
        if found := re.match(r"\s*play #\d+ \([^)]*\): (.*?)\tTAGS", line):
            hosts = []
            for following in lines[index + 1 :]:
                if "play #" in following:
                    break
                if following.startswith(" " * 6) and following.strip():
                    hosts.append(following.strip())
            plays.append((found.group(1), hosts))
    return plays


def test_on_a_sharded_inventory_site_yml_runs_the_router_steps_before_the_workers_play(
    ansible: Ansible,
) -> None:
    plays = listed_plays(ansible, SHARDED_INVENTORY)
    names = [name for name, _ in plays]
    assert names.index(PREPARE_PLAY) < names.index(INIT_PLAY) < names.index(WORKERS_PLAY)
    by_name = dict(plays)
    # The first worker host alone is installed ahead of the init, and runs it; every worker in the Workers play.
    assert by_name[PREPARE_PLAY] == by_name[INIT_PLAY] == ["worker1.harel.example"]
    assert sorted(by_name[WORKERS_PLAY]) == ["worker1.harel.example", "worker2.harel.example"]
    # The routers are up before either.
    assert names.index(
        "MongoDB routers - install, configure and start mongos, one router at a time"
    ) < names.index(PREPARE_PLAY)


def site_plays(directory: Path, *names: str) -> Path:
    """site.yml's plays named `names`, unchanged, as a playbook of their own in `directory`."""
    plays = yaml.safe_load((PLAYBOOKS / "site.yml").read_text(encoding="utf-8"))
    chosen = [play for name in names for play in plays if play["name"] == name]
    assert [play["name"] for play in chosen] == list(names)
    path = directory / f"site-excerpt-{len(list(directory.glob('site-excerpt-*')))}.yml"
    path.write_text(yaml.safe_dump(chosen, sort_keys=False), encoding="utf-8")
    return path


def test_a_first_run_installs_the_first_worker_host_then_initialises_the_cluster_then_runs_the_workers_play(
    ansible: Ansible, fake_cluster_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    """site.yml's three plays as they run on a first run, on a fresh host (no virtualenv): the worker role installs
    it without starting the worker, the router steps run from its new virtualenv (`harel partitions init` against the
    fake cluster), and the Workers play then finds that host as the first play left it. The rerun installs nothing
    ahead and changes nothing. (worker_manage_system false: no systemd here; the start itself is the role's.)"""
    router = f"127.0.0.1:{fake_cluster_process('--shards', '2').port}"
    url = f"mongodb://{router}/"
    with MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        listed = client.admin.command("listShards")["shards"]
    shards = []
    for shard in listed:
        name, _, hosts = str(shard["host"]).partition("/")
        shards.append({"replicaSetName": shard["_id"], "dataMembers": (hosts or name).split(",")})
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    fill_wheelhouse(wheelhouse, runtime_dependencies("harel"))
    sdk = shutil.copytree(
        PLAYBOOKS.parent / "sdk",
        tmp_path / "sdk",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    prefix = tmp_path / "worker-prefix"
    venv_python = prefix / "opt" / "harel" / "venv" / "bin" / "python"
    variables = {
        "worker_prefix": str(prefix),
        "worker_manage_system": False,
        "worker_user": getpass.getuser(),
        "worker_group": base.current_group(),
        "worker_python": str(
            Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        ),
        "worker_controller_python": sys.executable,
        "worker_wheel_build_isolation": False,
        "worker_pip_extra_args": f"--no-index --find-links {wheelhouse}",
        "worker_sdk_dir": str(sdk),
        "worker_mongo_url": url + "harel",
        # The router steps from the worker host's own virtualenv, as site.yml runs them.
        "sharded_init_python": str(venv_python),
        "sharded_init_router_url": url,
        "sharded_init_app_password": secrets.token_hex(16),
        "sharded_init_config_server": {"replicaSetName": "cfg", "dataMembers": ["cfg1:27019"]},
        "sharded_init_shards": shards,
        "sharded_init_routers": [router],
        "sharded_init_partitions": 256,
        "sharded_init_scripts_dir": str(PLAYBOOKS.parent / "compose" / "mongo-init"),
    }
    inventory = tmp_path / "inventory.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    # A router in mongodb_mongos makes it a sharded inventory; no play of the excerpt reaches it.
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "workers": {"hosts": {"localhost": local}},
                        "mongodb_mongos": {"hosts": {"mongos1": {}}},
                    }
                }
            }
        )
    )
    playbook = site_plays(tmp_path, PREPARE_PLAY, INIT_PLAY, WORKERS_PLAY)
    # Stock Ansible, not Mitogen (test_ansible.py's mitogen_strategy): site.yml's plays, become and all, on a first
    # run and a rerun as users run them.
    stock = ansible.stock()

    first = stock.playbook(playbook, inventory, variables)
    assert first.returncode == 0, first.output
    output = first.output
    installed = output.index("TASK [worker : Install harel and its dependencies into the virtualenv]")
    initialised = output.index("TASK [sharded_init : Run the router steps]")
    workers_play = output.index(f"PLAY [{WORKERS_PLAY}]")
    assert installed < initialised < workers_play
    assert "partitions: " in output[initialised:workers_play]
    # The Workers play found the first host installed and configured: nothing of its changed.
    workers_recap = stock.playbook(site_plays(tmp_path, WORKERS_PLAY), inventory, variables)
    assert workers_recap.returncode == 0 and workers_recap.recap()["changed"] == 0, workers_recap.output
    with MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        meta = client["harel"]["harel_meta"].find_one({"_id": "partitions"})
    assert meta is not None and meta["count"] == 256

    second = stock.playbook(playbook, inventory, variables)
    assert second.returncode == 0, second.output
    assert second.recap()["changed"] == 0, second.output
    # The virtualenv exists: nothing is installed ahead of the init.
    assert "TASK [worker : Install harel and its dependencies into the virtualenv]" in second.output
    ahead = second.output[: second.output.index("TASK [sharded_init : Run the router steps]")]
    assert "TASK [worker :" not in ahead


# --- the exporter on a sharded cluster: every member and router, its user made on each set ------------------------

METRICS_PLAY = "MongoDB metrics - the Percona mongodb_exporter on every member and router, reading its own mongod or mongos"


def test_on_a_sharded_inventory_the_exporter_runs_on_every_member_and_router_and_its_user_on_each_set(
    ansible: Ansible,
) -> None:
    by_name = dict(listed_plays(ansible, SHARDED_INVENTORY))
    assert sorted(by_name[METRICS_PLAY]) == sorted(
        [f"cfg{n}.harel.example" for n in (1, 2, 3)]
        + [f"shard{n}-{m}.harel.example" for n in (0, 1) for m in "abc"]
        + ["mongos1.harel.example", "mongos2.harel.example"]
    )
    # Through the routers (a cluster user, kept on the config servers), then on each shard's own set.
    assert debug(ansible, "shard1-c.harel.example", "mongodb_exporter_user_sets") == [
        {"hosts_group": "mongodb_mongos", "replset_name": ""},
        {"hosts_group": "mongodb_shard0", "replset_name": "shard0"},
        {"hosts_group": "mongodb_shard1", "replset_name": "shard1"},
    ]


# Runs ops-users.js under Node.js against the fake mongosh, one simulated set (or router group) per file in
# $FAKE_CLUSTERS, named by the first host the script is given.
MONGOSH_PER_SET = ops.MONGOSH_STAND_IN.replace(
    'state = pathlib.Path(os.environ["FAKE_CLUSTER"])',
    'state = pathlib.Path(os.environ["FAKE_CLUSTERS"], '
    'json.loads(os.environ["HAREL_OPS_USERS"])["hosts"][0].replace(":", "_") + ".json")',
)
# A small sharded inventory, every host this machine (connection local): two routers, a config server, two shards.
SETS = {
    "mongodb_mongos": ("", ["mongos1", "mongos2"]),
    "mongodb_configsvr": ("cfg", ["cfg1"]),
    "mongodb_shard0": ("shard0", ["shard0-a", "shard0-b"]),
    "mongodb_shard1": ("shard1", ["shard1-a"]),
}


@dataclass(frozen=True)
class ExporterRuns:
    first: base.Run
    second: base.Run
    clusters: Path
    calls: Path
    units: Path
    targets: Path
    passwords: tuple[str, str]


@pytest.fixture(scope="module")
def exporter_runs(ansible: Ansible, tmp_path_factory: pytest.TempPathFactory) -> ExporterRuns:
    """The exporter role's user step on every member and router of a sharded inventory, its unit rendered for each
    host, and the monitoring role's targets, twice (the second run changes nothing)."""
    directory = tmp_path_factory.mktemp("sharded-exporter")
    tools, clusters, units, targets = (
        directory / name for name in ("bin", "clusters", "units", "prometheus")
    )
    for folder in (tools, clusters, units):
        folder.mkdir()
    stand_in = tools / "mongosh"
    stand_in.write_text(
        f"#!{sys.executable}\nNODE = {ops.NODE!r}\nFAKE_MONGOSH = {str(ops.FAKE_MONGOSH)!r}\n{MONGOSH_PER_SET}"
    )
    stand_in.chmod(0o755)
    root, monitor = secrets.token_hex(16), secrets.token_hex(16)
    for group, (set_name, hosts) in SETS.items():
        if group == "mongodb_configsvr":
            continue  # reached through the routers
        members = {
            f"{host}:27017": {
                "setName": set_name or None,
                "arbiter": False,
                "unreachableFor": 0,
                "router": not set_name,
            }
            for host in hosts
        }
        state = {
            "members": members,
            "root": {"user": "root", "password": root},
            "users": {},
            "statusError": None,
        }
        state |= {"electionPolls": 0, "localReplsetDocs": 1, "defaultWriteConcern": None, "config": None}
        (clusters / f"{hosts[0]}_27017.json").write_text(json.dumps(state))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    router_vars = {"mongodb_cluster_role": "mongos"}
    inventory = directory / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "mongodb": {
                            "children": {
                                group: {"hosts": dict.fromkeys(hosts, local)}
                                for group, (_, hosts) in SETS.items()
                                if group != "mongodb_mongos"
                            }
                        },
                        "mongodb_mongos": {
                            "hosts": dict.fromkeys(SETS["mongodb_mongos"][1], local | router_vars)
                        },
                        "monitoring": {"hosts": {"prometheus": local}},
                    }
                }
            }
        )
    )
    playbook = directory / "play.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The exporter's user on each set, and its unit",
                    "hosts": "mongodb:mongodb_mongos",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "The role's user step",
                            "ansible.builtin.include_role": {
                                "name": "mongodb_exporter",
                                "tasks_from": "users",
                                "public": True,
                            },
                        },
                        {
                            "name": "The role's unit",
                            "ansible.builtin.template": {
                                "src": str(
                                    ROLES
                                    / "mongodb_exporter"
                                    / "templates"
                                    / "harel-mongodb-exporter.service.j2"
                                ),
                                "dest": str(units / "{{ inventory_hostname }}.service"),
                                "mode": "0600",
                            },
                        },
                    ],
                },
                {"name": "Targets", "hosts": "monitoring", "gather_facts": False, "roles": ["monitoring"]},
            ],
            sort_keys=False,
        )
    )
    variables = {
        "mongodb_root_password": root,
        "mongodb_exporter_password": monitor,
        "mongodb_ops_users_wait_seconds": 30,
        # inventories/sharded-example's list for this inventory (the test above reads the example's own).
        "mongodb_exporter_user_sets": [
            {"hosts_group": group, "replset_name": set_name}
            for group, (set_name, _) in SETS.items()
            if group != "mongodb_configsvr"
        ],
        "monitoring_rules_dir": str(targets / "rules"),
        "monitoring_targets_dir": str(targets / "file_sd"),
        "monitoring_dashboards_dir": "",
        "monitoring_file_owner": getpass.getuser(),
    }
    calls = directory / "calls.jsonl"
    environment = {
        **ansible.environment,
        "PATH": f"{tools}:{ansible.environment['PATH']}",
        "FAKE_CLUSTERS": str(clusters),
        "FAKE_CALLS": str(calls),
    }
    runner = Ansible(environment, ansible.scratch)
    first = runner.playbook(playbook, inventory, variables)
    second = runner.playbook(playbook, inventory, variables)
    return ExporterRuns(first, second, clusters, calls, units, targets / "file_sd", (root, monitor))


@pytest.mark.skipif(ops.NODE is None, reason="node (Node.js) runs ops-users.js against the fake mongosh")
def test_the_monitor_user_is_made_once_through_the_routers_and_once_on_each_shard(
    exporter_runs: ExporterRuns,
) -> None:
    first, second = exporter_runs.first, exporter_runs.second
    assert first.returncode == 0, first.output
    for secret in exporter_runs.passwords:
        assert secret not in first.output
    configs = [
        json.loads(json.loads(line)["env"]["HAREL_OPS_USERS"])
        for line in exporter_runs.calls.read_text().splitlines()
    ]
    first_run = configs[: len(configs) // 2]
    # One script run per set, from the first host of its group; the rerun makes the same three.
    assert [(c["hosts"], c["replicaSetName"]) for c in first_run] == [
        (["mongos1:27017", "mongos2:27017"], ""),
        (["shard0-a:27017", "shard0-b:27017"], "shard0"),
        (["shard1-a:27017"], "shard1"),
    ]
    assert configs[len(configs) // 2 :] == first_run
    assert all(c["monitor"] == {"username": "harel-monitor"} and c["backup"] is None for c in first_run)
    for cluster in exporter_runs.clusters.iterdir():
        users = json.loads(cluster.read_text())["users"]
        assert {name: user["pwd"] for name, user in users.items()} == {
            "harel-monitor": exporter_runs.passwords[1]
        }
    assert second.returncode == 0, second.output
    for host in ("mongos1", "cfg1", "shard0-b", "prometheus"):
        assert second.recap(host)["changed"] == 0, second.output


def test_a_routers_exporter_follows_mongos_and_asks_no_replica_set_status(
    exporter_runs: ExporterRuns,
) -> None:
    assert exporter_runs.first.returncode == 0, exporter_runs.first.output

    def exec_start(host: str) -> tuple[str, list[str]]:
        unit = (exporter_runs.units / f"{host}.service").read_text()
        [after] = [line for line in unit.splitlines() if line.startswith("After=")]
        [start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
        assert exporter_runs.passwords[1] not in unit
        return after, start.split()

    after, router = exec_start("mongos1")
    assert after == "After=network-online.target harel-mongos.service"
    assert "--mongodb.uri=mongodb://127.0.0.1:27017/admin" in router
    assert "--compatible-mode" in router and "--collector.diagnosticdata" in router
    assert "--collector.replicasetstatus" not in router
    for member in ("cfg1", "shard0-a"):
        after, command = exec_start(member)
        assert after == "After=network-online.target mongod.service"
        assert "--collector.replicasetstatus" in command


def test_prometheus_targets_name_every_members_and_routers_exporter(exporter_runs: ExporterRuns) -> None:
    assert exporter_runs.first.returncode == 0, exporter_runs.first.output
    targets = json.loads((exporter_runs.targets / "harel-mongodb.json").read_text())
    hosts = [host for _, members in SETS.values() for host in members]
    assert sorted(t["labels"]["inventory_host"] for t in targets) == sorted(hosts)
    assert sorted(address for t in targets for address in t["targets"]) == sorted(f"{h}:9216" for h in hosts)
