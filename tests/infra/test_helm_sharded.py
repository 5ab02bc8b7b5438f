"""The chart's topology sharded (mongodb.topology=sharded): a config-server replica set, shard replica sets and mongos
routers, rendered by the real Helm library. Strict Kubernetes validation, lint and checkov run on the sharded
configurations of tests/infra/helm_lint.py with every other configuration (test_helm.py, test_checkov.py); this file
holds what only a sharded cluster has."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest

from tests.infra.fake_kube_api import fake_kube_api
from tests.infra.helm_lint import CHART_DIR
from tests.infra.test_helm import (
    FULLNAME,
    NAMESPACE,
    Manifest,
    container,
    env_of,
    only,
    render,
    requires_node,
    schema_error,
    secret_data,
    upgrade,
    validated,
)
from tests.infra.test_helm_operations import ops_users_scenario, run_ops_users

pytestmark = pytest.mark.infra

HEADLESS = f"{FULLNAME}-mongodb-headless.{NAMESPACE}.svc.cluster.local:27017"
ROUTERS = f"{FULLNAME}-mongodb-mongos.{NAMESPACE}.svc.cluster.local:27017"
TLS = {"mode": "requireTLS", "existingSecret": "harel-mongodb-tls"}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def sharded(shards: int = 2, **more: Any) -> dict[str, Any]:
    return {"mongodb": {"topology": "sharded", "sharded": {"shards": shards}}, **more}


def members(statefulset: str, count: int) -> list[str]:
    return [f"{statefulset}-{i}.{HEADLESS}" for i in range(count)]


def init_config(manifests: list[Manifest]) -> dict[str, Any]:
    scripts = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-scripts")
    return dict(json.loads(scripts.doc["data"]["init-config.json"]))


@pytest.mark.parametrize("shards", [2, 3])
@pytest.mark.parametrize("tls", [False, True])
def test_sharded_renders_a_config_server_set_shard_sets_and_routers(
    chart: helm_python.Chart, shards: int, tls: bool
) -> None:
    manifests = render(chart, sharded(shards, **({"tls": TLS} if tls else {})))
    validated(chart, manifests)
    statefulsets = {m.name: m for m in manifests if m.kind == "StatefulSet"}
    wanted = {f"{FULLNAME}-mongodb-cfg": ("cfg", "--configsvr")} | {
        f"{FULLNAME}-mongodb-shard{i}": (f"shard{i}", "--shardsvr") for i in range(shards)
    }
    assert set(statefulsets) == set(wanted)
    for name, (set_name, role) in wanted.items():
        statefulset = statefulsets[name].doc
        assert statefulset["spec"]["replicas"] == 3
        assert statefulset["spec"]["serviceName"] == f"{FULLNAME}-mongodb-headless"
        args = container(statefulsets[name], "mongod")["args"]
        assert args[args.index("--replSet") + 1] == set_name
        assert role in args
        assert ("--tlsMode" in args) is tls
    mongos = only(manifests, "Deployment", f"{FULLNAME}-mongodb-mongos")
    args = container(mongos, "mongos")["args"]
    assert args[args.index("--configdb") + 1] == "cfg/" + ",".join(members(f"{FULLNAME}-mongodb-cfg", 3))
    assert "--keyFile" in args
    assert ("--tlsMode" in args) is tls
    assert mongos.doc["spec"]["replicas"] == 2
    # No replica set of one topology is left over in the other: no rs0 StatefulSet, no arbiter, no rs0 client Service.
    assert not [
        m for m in manifests if m.name == f"{FULLNAME}-mongodb" and m.kind in ("StatefulSet", "Service")
    ]


def test_the_routers_service_keeps_a_client_on_one_mongos(chart: helm_python.Chart) -> None:
    service = only(render(chart, sharded()), "Service", f"{FULLNAME}-mongodb-mongos")
    # A cursor's getMore must reach the mongos that opened it: the driver sees one server behind this address.
    assert service.doc["spec"]["sessionAffinity"] == "ClientIP"
    assert service.doc["spec"]["selector"]["app.kubernetes.io/component"] == "mongos"


@pytest.mark.parametrize("tls", [False, True])
def test_the_workers_url_names_the_routers_without_a_replica_set(chart: helm_python.Chart, tls: bool) -> None:
    manifests = render(chart, sharded(**({"tls": TLS} if tls else {})))
    url = secret_data(only(manifests, "Secret", f"{FULLNAME}-mongodb-auth"))["mongodb-url"]
    assert f"@{ROUTERS}/harel?" in url
    assert "replicaSet=" not in url
    assert ("tls=true&tlsCAFile=/etc/harel/tls/ca.crt" in url) is tls


def test_the_init_job_runs_the_sharded_init_with_every_set_the_routers_and_p(
    chart: helm_python.Chart,
) -> None:
    manifests = render(
        chart, {"mongodb": {"topology": "sharded", "sharded": {"shards": 3, "partitions": 64}}}
    )
    [job] = [m for m in manifests if m.kind == "Job"]
    command = container(job, "init-replica-set")["command"]
    assert command[:2] == ["python", "/opt/harel/sharded_init.py"]
    config = init_config(manifests)
    assert config["configServer"] == {
        "replicaSetName": "cfg",
        "dataMembers": members(f"{FULLNAME}-mongodb-cfg", 3),
    }
    assert config["shards"] == [
        {"replicaSetName": f"shard{i}", "dataMembers": members(f"{FULLNAME}-mongodb-shard{i}", 3)}
        for i in range(3)
    ]
    assert config["routers"] == [ROUTERS]
    assert config["partitions"] == 64


def test_a_shard_more_starts_a_new_init_job(chart: helm_python.Chart) -> None:
    """The Job's name carries its configuration: an upgrade to a shard more runs the init again (addShard, zones)."""

    def job_name(shards: int) -> str:
        values = {
            "mongodb": {
                "topology": "sharded",
                "sharded": {"shards": shards},
                # Offline, generated credentials differ on every render: the Job's name would too.
                "auth": {"existingSecret": "harel-mongodb-credentials"},
            }
        }
        [job] = [m for m in render(chart, values) if m.kind == "Job"]
        return job.name

    assert job_name(2) == job_name(2)
    assert job_name(2) != job_name(3)


def test_every_set_and_the_routers_have_a_budget_of_one_and_spread_on_their_own(
    chart: helm_python.Chart,
) -> None:
    manifests = render(chart, sharded(2))
    budgets = {m.name: m.doc["spec"] for m in manifests if m.kind == "PodDisruptionBudget"}
    components = {
        "cfg": "mongodb-cfg",
        "shard0": "mongodb-shard0",
        "shard1": "mongodb-shard1",
        "mongos": "mongos",
    }
    for suffix, component in components.items():
        spec = budgets[f"{FULLNAME}-mongodb-{suffix}"]
        assert spec["maxUnavailable"] == 1
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == component
    for suffix in ("cfg", "shard0", "shard1"):
        statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb-{suffix}")
        spread = statefulset.doc["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {c["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] for c in spread} == {
            components[suffix]
        }


def test_one_member_sets_and_one_router_have_no_budget(chart: helm_python.Chart) -> None:
    values = {
        "mongodb": {
            "topology": "sharded",
            "sharded": {
                "configsvr": {"replicaCount": 1},
                "shardsvr": {"replicaCount": 1},
                "mongos": {"replicaCount": 1},
            },
        }
    }
    budgets = [m.name for m in render(chart, values) if m.kind == "PodDisruptionBudget"]
    assert budgets == [f"{FULLNAME}-worker"]


def test_the_root_user_is_bootstrapped_on_member_zero_of_every_set(chart: helm_python.Chart) -> None:
    manifests = render(chart, sharded(2))
    for suffix in ("cfg", "shard0", "shard1"):
        statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb-{suffix}")
        bootstrap = container(statefulset, "bootstrap-root")
        env = {item["name"]: item.get("value") for item in bootstrap["env"]}
        assert env["HAREL_BOOTSTRAP_MEMBER"] == f"{FULLNAME}-mongodb-{suffix}-0"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        (
            {"mongodb": {"topology": "sharded", "members": 4, "arbiter": {"enabled": True}}},
            "/mongodb/arbiter/enabled",
        ),
        ({"mongodb": {"topology": "sharded", "sharded": {"shards": 0}}}, "/mongodb/sharded/shards"),
        (
            {"mongodb": {"topology": "sharded", "sharded": {"shardsvr": {"replicaCount": 2}}}},
            "/mongodb/sharded/shardsvr/replicaCount",
        ),
        ({"mongodb": {"topology": "ring"}}, "/mongodb/topology"),
    ],
)
def test_schema_refuses_what_a_sharded_cluster_cannot_take(
    chart: helm_python.Chart, values: dict[str, Any], field: str
) -> None:
    assert f"'{field}'" in schema_error(chart, values)


def test_fewer_partitions_than_shards_is_refused(chart: helm_python.Chart) -> None:
    with pytest.raises(
        helm_python.HelmRenderError, match=r"partitions \(2\) must be at least mongodb\.sharded\.shards \(3\)"
    ):
        render(chart, {"mongodb": {"topology": "sharded", "sharded": {"shards": 3, "partitions": 2}}})


def test_external_mode_takes_a_url_of_several_routers(chart: helm_python.Chart) -> None:
    url = f"mongodb://harel:{secrets.token_urlsafe(18)}@mongos-a.example.invalid:27017,mongos-b.example.invalid:27017/harel?authSource=admin"
    manifests = render(chart, {"mongodb": {"enabled": False}, "externalMongodb": {"url": url}})
    assert secret_data(only(manifests, "Secret", f"{FULLNAME}-external-mongodb"))["mongodb-url"] == url


def test_an_upgrade_adds_a_shard_but_refuses_to_drop_one_or_a_sets_majority(chart: helm_python.Chart) -> None:
    with fake_kube_api() as api:
        upgrade(api, chart, sharded(2))
        manifests = upgrade(api, chart, sharded(3))
        assert only(manifests, "StatefulSet", f"{FULLNAME}-mongodb-shard2").doc["spec"]["replicas"] == 3
        with pytest.raises(
            helm_python.HelmRenderError, match="shard2 runs and holds chunks of the cluster's data"
        ):
            upgrade(api, chart, sharded(2))
        with pytest.raises(helm_python.HelmRenderError, match="cfg: going from 3 to 1 members at once"):
            upgrade(
                api,
                chart,
                {
                    "mongodb": {
                        "topology": "sharded",
                        "sharded": {"shards": 3, "configsvr": {"replicaCount": 1}},
                    }
                },
            )
        grown = {
            "mongodb": {"topology": "sharded", "sharded": {"shards": 3, "shardsvr": {"replicaCount": 5}}}
        }
        assert (
            only(upgrade(api, chart, grown), "StatefulSet", f"{FULLNAME}-mongodb-shard0").doc["spec"][
                "replicas"
            ]
            == 5
        )


def test_helm_test_runs_the_smoke_check_through_the_routers(chart: helm_python.Chart) -> None:
    manifests = render(chart, sharded())
    pod = only(manifests, "Pod", f"{FULLNAME}-smoke-test")
    volumes = {v["name"]: v for v in pod.doc["spec"]["volumes"]}
    assert volumes["mongodb-url"]["secret"]["secretName"] == f"{FULLNAME}-mongodb-auth"
    url = secret_data(only(manifests, "Secret", f"{FULLNAME}-mongodb-auth"))["mongodb-url"]
    assert f"@{ROUTERS}/" in url


# --- the exporter beside each router (mongodbExporter.enabled with topology sharded) ------------------------------

METRICS_FROM = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]


def with_exporter(shards: int, tls: bool) -> dict[str, Any]:
    return sharded(
        shards,
        mongodbExporter={"enabled": True, "serviceMonitor": {"enabled": True}},
        worker={"metrics": {"from": METRICS_FROM}},
        **({"tls": TLS} if tls else {}),
    )


@pytest.mark.parametrize("shards", [2, 3])
@pytest.mark.parametrize("tls", [False, True])
def test_the_exporter_runs_beside_each_router_reading_its_own_mongos(
    chart: helm_python.Chart, shards: int, tls: bool
) -> None:
    manifests = render(chart, with_exporter(shards, tls))
    validated(chart, manifests)
    mongos = only(manifests, "Deployment", f"{FULLNAME}-mongodb-mongos")
    # No Deployment of its own: one exporter per router pod, so each router is an instance of its own.
    assert not [m for m in manifests if m.kind == "Deployment" and m.name == f"{FULLNAME}-mongodb-exporter"]
    exporter = container(mongos, "exporter")
    tls_options = "?tls=true&tlsCAFile=/etc/harel/tls/ca.crt&tlsAllowInvalidHostnames=true" if tls else ""
    assert exporter["args"] == [
        f"--mongodb.uri=mongodb://127.0.0.1:27017/admin{tls_options}",
        "--compatible-mode",
        "--collector.diagnosticdata",
        "--web.listen-address=:9216",
    ]
    env = env_of(exporter)
    assert env["MONGODB_USER"]["value"] == "harel-monitor"
    assert env["MONGODB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{FULLNAME}-mongodb-ops-auth",
        "key": "monitor-password",
    }
    assert exporter["ports"] == [{"name": "http-metrics", "containerPort": 9216}]
    # The exporter's password is the one secret in the pod's environment (test_checkov.py accepts it for this pod):
    # none in the router's own.
    assert not [e for e in container(mongos, "mongos").get("env", []) if "valueFrom" in e]
    volumes = {v["name"]: v for v in mongos.doc["spec"]["template"]["spec"]["volumes"]}
    if tls:
        # The CA alone: the router's key stays in the mongos container's volume.
        assert exporter["volumeMounts"] == [
            {"name": "tls-ca", "mountPath": "/etc/harel/tls", "readOnly": True}
        ]
        assert volumes["tls-ca"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    else:
        assert "volumeMounts" not in exporter and "tls-ca" not in volumes

    # Prometheus reaches each router's exporter: the Service selects the routers' pods on the exporter's port, the
    # ServiceMonitor scrapes each pod's /metrics as instance=<pod>, and a NetworkPolicy opens that port alone.
    service = only(manifests, "Service", f"{FULLNAME}-mongodb-exporter")
    assert service.doc["spec"]["selector"] == mongos.doc["spec"]["selector"]["matchLabels"]
    assert service.doc["spec"]["ports"] == [
        {"name": "http-metrics", "port": 9216, "targetPort": "http-metrics"}
    ]
    monitor = only(manifests, "ServiceMonitor", f"{FULLNAME}-mongodb-exporter")
    [endpoint] = monitor.doc["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http-metrics", "/metrics")
    assert endpoint["relabelings"] == [
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "instance"}
    ]
    assert monitor.doc["spec"]["selector"]["matchLabels"].items() <= service.doc["metadata"]["labels"].items()
    policy = only(manifests, "NetworkPolicy", f"{FULLNAME}-mongodb-exporter")
    assert policy.doc["spec"]["podSelector"]["matchLabels"] == mongos.doc["spec"]["selector"]["matchLabels"]
    assert policy.doc["spec"]["ingress"] == [
        {"from": METRICS_FROM, "ports": [{"protocol": "TCP", "port": 9216}]}
    ]


def test_without_the_exporter_the_routers_run_mongos_alone(chart: helm_python.Chart) -> None:
    manifests = render(chart, sharded(3, tls=TLS))
    mongos = only(manifests, "Deployment", f"{FULLNAME}-mongodb-mongos")
    assert [c["name"] for c in mongos.doc["spec"]["template"]["spec"]["containers"]] == ["mongos"]
    assert "tls-ca" not in {v["name"] for v in mongos.doc["spec"]["template"]["spec"]["volumes"]}
    assert not [m for m in manifests if m.name == f"{FULLNAME}-mongodb-exporter"]


def router_cluster(root_user: str, root_password: str) -> dict[str, Any]:
    """The fake mongosh's deployment behind the chart's ops-users Job on a sharded release: the routers alone,
    with the root user and no other yet."""
    return {
        "members": {ROUTERS: {"setName": None, "arbiter": False, "unreachableFor": 1, "router": True}},
        "root": {"user": root_user, "password": root_password},
        "users": {},
        "statusError": None,
        "electionPolls": 0,
        "localReplsetDocs": 0,
        "defaultWriteConcern": {"w": "majority"},
        "config": None,
    }


@requires_node
@pytest.mark.parametrize("tls", [False, True])
def test_the_ops_users_job_makes_the_monitor_user_through_the_routers(
    chart: helm_python.Chart, tmp_path: Path, tls: bool
) -> None:
    """ops-users.js, as the Job runs it, under the fake mongosh with a router at the mongos Service's address: it
    connects without a replicaSet option (a router is in no set) and makes the monitor user there, the cluster's."""
    files, config = ops_users_scenario(chart, with_exporter(2, tls))
    assert config["hosts"] == [ROUTERS]
    assert config["replicaSetName"] is None
    assert config["monitor"] == {"username": "harel-monitor"} and config["backup"] is None
    root, monitor = secrets.token_hex(16), secrets.token_hex(16)
    cluster = router_cluster(config["rootUsername"], root)
    env = {"HAREL_MONGO_ROOT_PASSWORD": root, "HAREL_MONITOR_PASSWORD": monitor}

    run = run_ops_users(tmp_path, files, config, env, cluster)

    assert run.ok, run.error
    assert {connection["options"].get("replicaSet") for connection in run.connections} == {None}
    assert {tuple(connection["hosts"]) for connection in run.connections} == {(ROUTERS,)}
    assert ("tls" in run.connections[-1]["options"]) is tls
    assert run.cluster["users"]["harel-monitor"]["roles"] == [
        {"role": "clusterMonitor", "db": "admin"},
        {"role": "read", "db": "local"},
    ]
    assert {call["host"] for call in run.calls} == {ROUTERS}


@pytest.mark.parametrize("tls", [False, True])
def test_backups_of_a_sharded_cluster_dump_through_the_routers_quiesced(
    chart: helm_python.Chart, tls: bool
) -> None:
    values = sharded(2, backup={"enabled": True, "pauseTimeoutSeconds": 300})
    if tls:
        values["tls"] = TLS
    manifests = render(chart, values)
    files = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-ops").doc["data"]
    settings = dict(line.split("=", 1) for line in files["backup.env"].splitlines())
    assert settings["HAREL_BACKUP_ROUTERS"] == f'"{ROUTERS}"'
    assert settings["HAREL_BACKUP_PAUSE_TIMEOUT"] == "300"
    assert "HAREL_BACKUP_HOSTS" not in settings and "HAREL_BACKUP_REPLICA_SET" not in settings
    assert (settings["HAREL_BACKUP_TLS_CA"] != '""') is tls
    assert files["pause-workers.js"] == (CHART_DIR / "files" / "backup" / "pause-workers.js").read_text()
    cronjob = only(manifests, "CronJob", f"{FULLNAME}-backup")
    [scripts] = [
        volume
        for volume in cronjob.doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
        if volume["name"] == "backup-scripts"
    ]
    assert {"harel-backup.sh", "record-backup.js", "pause-workers.js", "backup.env"} == {
        item["path"] for item in scripts["configMap"]["items"]
    }
    replica_set = render(chart, {"backup": {"enabled": True}})
    kept = only(replica_set, "ConfigMap", f"{FULLNAME}-mongodb-ops").doc["data"]
    assert "pause-workers.js" not in kept and "HAREL_BACKUP_ROUTERS" not in kept["backup.env"]


@requires_node
def test_the_ops_users_job_gives_a_sharded_backup_user_the_pause_and_the_balancer(
    chart: helm_python.Chart, tmp_path: Path
) -> None:
    files, config = ops_users_scenario(chart, sharded(2, backup={"enabled": True}))
    assert config["replicaSetName"] is None and config["backup"] == {"username": "harel-backup"}
    root, backup = secrets.token_hex(16), secrets.token_hex(16)
    cluster = router_cluster(config["rootUsername"], root)
    env = {"HAREL_MONGO_ROOT_PASSWORD": root, "HAREL_BACKUP_PASSWORD": backup}

    run = run_ops_users(tmp_path, files, config, env, cluster)

    assert run.ok, run.error
    assert run.cluster["users"]["harel-backup"]["roles"] == [
        {"role": "backup", "db": "admin"},
        {"role": "harelBackupStatus", "db": "admin"},
        {"role": "harelBackupPause", "db": "admin"},
        {"role": "clusterManager", "db": "admin"},
    ]
    [pause_role] = [
        call["body"]
        for call in run.calls
        if call["command"] == "createRole" and call["body"]["createRole"] == "harelBackupPause"
    ]
    assert pause_role["privileges"] == [
        {
            "resource": {"db": "harel", "collection": "harel_meta"},
            "actions": ["find", "insert", "update", "remove"],
        },
        {"resource": {"db": "harel", "collection": "workers"}, "actions": ["find", "update"]},
    ]
