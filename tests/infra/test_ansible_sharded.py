"""The Ansible path's sharded cluster (docs/sharded-clusters.md, "Ansible"): the sharded example inventory, the mongodb role's
cluster roles (configsvr, shardsvr: sharding.clusterRole in mongod.conf, which a plain member's lacks, as
tests/infra/test_ansible.py's configuration run shows; mongos: mongos.conf and its unit, rendered under a temporary
directory with systemctl stood in), and the sharded_init role run twice against the fake sharded cluster (the second
run changes nothing). ansible-lint's production profile covers these files with the rest
(tests/infra/test_ansible.py)."""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pymongo import MongoClient

from tests.fake_mongod.fixtures import FakeProcess
from tests.infra import test_ansible as base
from tests.infra.test_ansible import (
    ANSIBLE,
    ANSIBLE_PLAYBOOK,
    BIN,
    PLAYBOOKS,
    Ansible,
    local_inventory,
    mongodb_variables,
    role_playbook,
    run_mongodb_config,
    system_standins,
)

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
