"""The sharded-cluster init (compose/mongo-init/sharded_init.py), which the Helm chart's init Job (topology sharded)
and the compose stack's `sharded-init` one-shot run: its shard plan on recorded `listShards` replies, and whole runs,
twice, against the fake sharded cluster (`python -m tests.fake_mongod --shards 3`, the fixture
fake_cluster_process) with the settings each path gives it.

What the fake stands in for: a mongos in front of three shards that exist from the start (addShard is not modelled),
so a run's addShard step finds every shard already listed and adds none - the same path as every rerun of a real
deployment. The sets themselves are not formed here (the fake has no config-server or shard members to initiate):
the runs use --router-url-file, and forming one set is rs_init.py's tested code (tests/wire/test_rs_init_membership.py).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from pymongo import MongoClient

from tests.fake_mongod.fixtures import FakeProcess
from tests.infra.helm_lint import CHART_DIR
from tests.unit.mongo_init import MONGO_INIT, load

pytestmark = pytest.mark.infra

sharded_init = load("sharded_init")
SCRIPT = MONGO_INIT / "sharded_init.py"
REPOSITORY = Path(__file__).resolve().parents[2]
VENV_BIN = REPOSITORY / ".venv" / "bin"
RUN_GUARD_SECONDS = 120

# listShards through a mongos of 8.0 (topologyTime and the like trimmed).
LIST_SHARDS = {
    "shards": [
        {"_id": "shard0", "host": "shard0/shard0-0:27017,shard0-1:27017", "state": 1},
        {"_id": "shard1", "host": "shard1/shard1-0:27017", "state": 1},
    ],
    "ok": 1.0,
}


def wanted(*names: str) -> list[Any]:
    return [sharded_init.ReplicaSet(name, (f"{name}-0:27017",)) for name in names]


def test_only_shards_listShards_lacks_are_added_and_none_is_removed() -> None:
    plan = sharded_init.shard_plan(LIST_SHARDS, wanted("shard0", "shard2"))
    assert [shard.name for shard in plan.add] == ["shard2"]
    assert plan.present == ("shard0",)
    assert plan.unwanted == ("shard1",)


def test_a_fresh_cluster_adds_every_shard_in_order() -> None:
    plan = sharded_init.shard_plan({"shards": [], "ok": 1.0}, wanted("shard0", "shard1", "shard2"))
    assert [shard.connection_string for shard in plan.add] == [f"shard{i}/shard{i}-0:27017" for i in range(3)]
    assert plan.present == plan.unwanted == ()


def test_the_routers_url_names_every_router_and_no_replica_set() -> None:
    cluster = sharded_init.cluster_settings(
        {
            "configServer": {"replicaSetName": "cfg", "dataMembers": ["cfg1:27019"]},
            "shards": [],
            "routers": ["mongos-a:27017", "mongos-b:27017"],
            "partitions": 8,
        },
        tls_ca_file="/tls/ca.crt",
    )
    password = secrets.token_urlsafe(12)
    url = cluster.router_url("harel", password, "harel")
    assert (
        url
        == f"mongodb://harel:{password}@mongos-a:27017,mongos-b:27017/harel?authSource=admin&tls=true&tlsCAFile=/tls/ca.crt"
    )


def test_each_paths_settings_load_with_its_sets_routers_and_p() -> None:
    helm = sharded_init.cluster_settings(helm_config())
    assert helm.config_server.name == "cfg"
    assert [shard.name for shard in helm.shards] == ["shard0", "shard1", "shard2"]
    assert all(len(shard.members) == 3 for shard in (helm.config_server, *helm.shards))
    assert helm.routers == ("demo-harel-stack-mongodb-mongos.harel.svc.cluster.local:27017",)
    assert helm.partitions == 256
    compose = sharded_init.cluster_settings(compose_config(), root_user="admin")
    assert compose.config_server == sharded_init.ReplicaSet("cfg", ("cfg1:27019",))
    assert compose.shards == (
        sharded_init.ReplicaSet("sh1", ("sh1:27018",)),
        sharded_init.ReplicaSet("sh2", ("sh2:27018",)),
    )
    assert compose.routers == ("mongos:27017",)
    assert compose.root_user == "admin"


def test_without_the_harel_command_the_init_says_where_to_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    cluster = sharded_init.cluster_settings(compose_config())
    with pytest.raises(
        sharded_init.InitError, match="harel command is not on PATH: run this from the worker image"
    ):
        sharded_init.partitions_step(tmp_path / "router-url", cluster, print)


# --- whole runs against the fake sharded cluster (needs tests/fake_mongod --shards and harel partitions init) ---


def helm_config() -> dict[str, Any]:
    """init-config.json as the chart renders it for three shards."""
    values = {"mongodb": {"topology": "sharded", "sharded": {"shards": 3}}}
    with helm_python.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values, name="demo", namespace="harel", is_install=True)
    [scripts] = [text for name, text in rendered.items() if name.endswith("mongodb/scripts-configmap.yaml")]
    return dict(json.loads(yaml.safe_load(scripts)["data"]["init-config.json"]))


def compose_config() -> dict[str, Any]:
    return dict(json.loads((MONGO_INIT / "sharded-compose.json").read_text(encoding="utf-8")))


CONFIGS = {"helm": helm_config, "compose": compose_config}


def pointed_at(config: dict[str, Any], router: str, list_shards: dict[str, Any]) -> dict[str, Any]:
    """The path's settings with its routers and shards replaced by the fake's (whose shards are fixed)."""
    shards = []
    for shard in list_shards["shards"]:
        name, _, hosts = str(shard["host"]).partition("/")
        shards.append({"replicaSetName": shard["_id"], "dataMembers": (hosts or name).split(",")})
    return {**config, "routers": [router], "shards": shards}


def run(directory: Path, config: dict[str, Any], router_url: str) -> subprocess.CompletedProcess[str]:
    (directory / "init-config.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "router-url").write_text(router_url, encoding="utf-8")
    (directory / "app-password").write_text(secrets.token_urlsafe(18), encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(directory / "init-config.json"),
            "--router-url-file",
            str(directory / "router-url"),
            "--timeout",
            "60",
        ],
        env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HAREL_APP_PASSWORD_FILE": str(directory / "app-password")},
        capture_output=True,
        text=True,
        timeout=RUN_GUARD_SECONDS,
        check=False,
    )


@pytest.mark.parametrize("path", CONFIGS)
def test_the_init_runs_against_the_fake_sharded_cluster_and_a_rerun_changes_nothing(
    fake_cluster_process: Callable[..., FakeProcess], tmp_path: Path, path: str
) -> None:
    router = f"127.0.0.1:{fake_cluster_process('--shards', '3').port}"
    url = f"mongodb://{router}/"
    with MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        shards_before = client.admin.command("listShards")
        config = pointed_at(CONFIGS[path](), router, shards_before)
        first = run(tmp_path, config, url)
        assert first.returncode == 0, first.stderr
        for shard in config["shards"]:
            assert f"shard {shard['replicaSetName']} already added" in first.stdout
        meta = client[config["database"]]["harel_meta"].find_one({"_id": "partitions"})
        assert meta is not None
        assert meta["count"] == config["partitions"]
        assert len(meta["zones"]) == len(config["shards"])
        shards_after = client.admin.command("listShards")["shards"]
        assert [s["_id"] for s in shards_after] == [s["_id"] for s in shards_before["shards"]], (
            "no shard added"
        )
        assert [s["tags"] for s in shards_after] == [[zone["name"]] for zone in meta["zones"]], "a zone each"

        second = run(tmp_path, config, url)
        assert second.returncode == 0, second.stderr
        assert "unchanged" in second.stdout
        assert client[config["database"]]["harel_meta"].find_one({"_id": "partitions"}) == meta
        assert client.admin.command("listShards")["shards"] == shards_after


def test_a_different_p_on_a_rerun_is_refused(
    fake_cluster_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    router = f"127.0.0.1:{fake_cluster_process('--shards', '3').port}"
    url = f"mongodb://{router}/"
    with MongoClient(url, serverSelectionTimeoutMS=10_000) as client:
        config = pointed_at(compose_config(), router, client.admin.command("listShards"))
    assert run(tmp_path, config, url).returncode == 0
    refused = run(tmp_path, {**config, "partitions": config["partitions"] * 2}, url)
    assert refused.returncode == 1
    assert "harel partitions init exited" in refused.stderr
