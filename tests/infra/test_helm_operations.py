"""The chart's day-2 operations, rendered with the real Helm library: the MongoDB exporter and its
ServiceMonitor, the operator users' Job (its script run under Node.js against the fake mongosh), the Grafana
dashboard and the PrometheusRule, and the backup CronJob with its PVC or S3 target.

Every configuration here is also in tests.infra.helm_lint.configurations(), so test_helm.py lints it strictly
and validates each manifest against the Kubernetes schemas and the Prometheus Operator fields.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.infra.helm_lint import CHART_DIR, configurations
from tests.infra.test_helm import (
    FAKE_MONGOSH,
    FULLNAME,
    NAMESPACE,
    NODE,
    RELEASE,
    Manifest,
    ScriptRun,
    container,
    env_of,
    kinds,
    only,
    pod_labels,
    pod_spec,
    render,
    requires_node,
    schema_error,
    secret_data,
)

pytestmark = pytest.mark.infra

CONFIGURATIONS = configurations()
EVERYTHING = CONFIGURATIONS["metrics, dashboard, alerts, backups to a volume"]
S3_TLS = CONFIGURATIONS["metrics + backups to S3, TLS, plain Jobs"]
MEMBERS = [
    f"{FULLNAME}-mongodb-{i}.{FULLNAME}-mongodb-headless.{NAMESPACE}.svc.cluster.local:27017"
    for i in range(3)
]


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def cronjob_pod(manifest: Manifest) -> dict[str, Any]:
    return manifest.doc["spec"]["jobTemplate"]["spec"]["template"]


def step(pod: dict[str, Any], name: str) -> dict[str, Any]:
    spec = pod["spec"]
    [found] = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    return found


def settings_file(text: str) -> dict[str, str]:
    """backup.env as bash reads it: KEY="value" lines."""
    return {
        key: json.loads(value) if value.startswith('"') else value
        for key, value in re.findall(r"^(\w+)=(.*)$", text, re.M)
    }


# --- off by default ------------------------------------------------------------------------------------------


def test_nothing_of_it_renders_by_default(chart: helm_python.Chart) -> None:
    manifests = render(chart)
    assert not {"CronJob", "PersistentVolumeClaim", "PrometheusRule"} & kinds(manifests)
    names = {m.name for m in manifests}
    assert not {n for n in names if "exporter" in n or "-ops" in n or "backup" in n or "dashboard" in n}


# --- the exporter --------------------------------------------------------------------------------------------


def test_exporter_has_one_direct_target_per_member_and_reads_its_password_from_a_secret(
    chart: helm_python.Chart,
) -> None:
    manifests = render(chart, EVERYTHING)
    exporter = only(manifests, "Deployment", f"{FULLNAME}-mongodb-exporter")
    main = container(exporter, "exporter")
    assert main["image"] == "percona/mongodb_exporter:0.53.0"
    args = main["args"]
    [uris] = [arg.removeprefix("--mongodb.uri=") for arg in args if arg.startswith("--mongodb.uri=")]
    assert uris.split(",") == [f"mongodb://{member}/admin" for member in MEMBERS]
    assert {"--compatible-mode", "--collector.diagnosticdata", "--collector.replicasetstatus"} <= set(args)
    env = env_of(main)
    assert env["MONGODB_USER"]["value"] == "harel-monitor"
    assert env["MONGODB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{FULLNAME}-mongodb-ops-auth",
        "key": "monitor-password",
    }
    assert pod_labels(exporter)["harel-stack/mongodb-client"] == "true"
    assert pod_spec(exporter)["securityContext"]["runAsUser"] == 65535


def test_service_monitor_asks_the_exporter_for_each_member_and_labels_it(chart: helm_python.Chart) -> None:
    manifests = render(chart, EVERYTHING)
    service = only(manifests, "Service", f"{FULLNAME}-mongodb-exporter").doc
    monitor = only(manifests, "ServiceMonitor", f"{FULLNAME}-mongodb-exporter").doc
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    endpoints = monitor["spec"]["endpoints"]
    assert [e["params"]["target"] for e in endpoints] == [[member] for member in MEMBERS]
    assert [e["relabelings"] for e in endpoints] == [
        [{"action": "replace", "targetLabel": "instance", "replacement": member}] for member in MEMBERS
    ]
    assert {e["path"] for e in endpoints} == {"/scrape"}
    assert {e["port"] for e in endpoints} == {service["spec"]["ports"][0]["name"]}


def test_exporter_reaches_tls_members_with_the_ca(chart: helm_python.Chart) -> None:
    exporter = only(render(chart, S3_TLS), "Deployment", f"{FULLNAME}-mongodb-exporter")
    main = container(exporter, "exporter")
    [uris] = [arg for arg in main["args"] if arg.startswith("--mongodb.uri=")]
    assert uris.count("?tls=true&tlsCAFile=/etc/harel/tls/ca.crt") == 3
    assert {m["mountPath"] for m in main["volumeMounts"]} == {"/etc/harel/tls"}
    assert env_of(main)["MONGODB_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "harel-ops-credentials"


# --- operator users ------------------------------------------------------------------------------------------


def ops_users_job(manifests: list[Manifest]) -> Manifest:
    """The ops-users Job, named by a hash of its configuration."""
    [job] = [m for m in manifests if m.kind == "Job" and m.name.startswith(f"{FULLNAME}-mongodb-ops-users-")]
    return job


def test_ops_users_job_is_a_plain_job_reading_its_passwords_from_files(chart: helm_python.Chart) -> None:
    users = ops_users_job(render(chart, EVERYTHING))
    # Like the init Job, no hook: `helm install --wait` cannot wait on it.
    assert not any(key.startswith("helm.sh/hook") for key in users.annotations)
    main = container(users, "ops-users")
    env = env_of(main)
    # Passwords reach the script as files from the Secrets, never as environment values.
    assert not [name for name in env if name.endswith("PASSWORD")]
    files = {name: item["value"] for name, item in env.items() if name.endswith("_FILE")}
    assert files == {
        "HAREL_MONGO_ROOT_PASSWORD_FILE": "/var/run/harel/auth/root-password",
        "HAREL_MONITOR_PASSWORD_FILE": "/var/run/harel/ops-auth/monitor-password",
        "HAREL_BACKUP_PASSWORD_FILE": "/var/run/harel/ops-auth/backup-password",
    }
    volumes = {v["name"]: v for v in pod_spec(users)["volumes"]}
    assert volumes["root-auth"]["secret"] == {
        "secretName": f"{FULLNAME}-mongodb-auth",
        "items": [{"key": "root-password", "path": "root-password"}],
        "defaultMode": 0o440,
    }
    assert volumes["ops-auth"]["secret"]["secretName"] == f"{FULLNAME}-mongodb-ops-auth"
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["root-auth"]["mountPath"] == "/var/run/harel/auth" and mounts["root-auth"]["readOnly"]
    assert mounts["ops-auth"]["mountPath"] == "/var/run/harel/ops-auth"
    assert pod_labels(users)["harel-stack/mongodb-client"] == "true"


def test_ops_users_plain_job_is_named_by_its_configuration(chart: helm_python.Chart) -> None:
    jobs = [m for m in render(chart, S3_TLS) if m.kind == "Job" and "-ops-users" in m.name]
    assert len(jobs) == 1
    assert re.fullmatch(rf"{FULLNAME}-mongodb-ops-users-[0-9a-f]{{10}}", jobs[0].name)
    assert not any(key.startswith("helm.sh/hook") for key in jobs[0].annotations)
    fewer = {**S3_TLS, "mongodbExporter": {"enabled": False}}
    [other] = [m for m in render(chart, fewer) if m.kind == "Job" and "-ops-users" in m.name]
    assert other.name != jobs[0].name, "a changed set of users runs a new Job"


def test_ops_passwords_are_generated_once_and_kept(chart: helm_python.Chart) -> None:
    first = only(render(chart, EVERYTHING), "Secret", f"{FULLNAME}-mongodb-ops-auth")
    second = only(render(chart, EVERYTHING), "Secret", f"{FULLNAME}-mongodb-ops-auth")
    assert first.annotations["helm.sh/resource-policy"] == "keep"
    one, two = secret_data(first), secret_data(second)
    assert set(one) == {"monitor-password", "backup-password"}
    for key in one:
        assert one[key] != two[key]
        assert re.fullmatch(r"[A-Za-z0-9]{32}", one[key])
    template = (CHART_DIR / "templates" / "mongodb-ops" / "secret.yaml").read_text()
    assert template.index("lookup") < template.index("randAlphaNum")
    assert "Secret" not in {m.kind for m in render(chart, S3_TLS) if "ops" in m.name}


def ops_users_scenario(
    chart: helm_python.Chart, values: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any]]:
    """The script the Job runs, and its settings (the Job's HAREL_OPS_USERS)."""
    manifests = render(chart, values)
    files = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-ops").doc["data"]
    job = ops_users_job(manifests)
    return files, json.loads(env_of(container(job, "ops-users"))["HAREL_OPS_USERS"]["value"])


def run_ops_users(
    tmp_path: Path,
    files: dict[str, str],
    config: dict[str, Any],
    env: dict[str, str],
    cluster: dict[str, Any],
) -> ScriptRun:
    assert NODE is not None
    scenario = {"files": {}, "env": {"HAREL_OPS_USERS": json.dumps(config), **env}, "cluster": cluster}
    scenario_file = tmp_path / f"scenario-{secrets.token_hex(4)}.json"
    scenario_file.write_text(json.dumps(scenario))
    script = tmp_path / "ops-users.js"
    script.write_text(files["ops-users.js"])
    completed = subprocess.run(
        [NODE, str(FAKE_MONGOSH), str(script), str(scenario_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.stdout, completed.stderr
    return ScriptRun(**json.loads(completed.stdout))


def initiated_cluster(config: dict[str, Any], root_password: str) -> dict[str, Any]:
    return {
        "members": {
            host: {"setName": "rs0", "arbiter": False, "unreachableFor": 0} for host in config["hosts"]
        },
        "root": {"user": config["rootUsername"], "password": root_password},
        "users": {},
        "statusError": None,
        "electionPolls": 2,
        "localReplsetDocs": 1,
        "defaultWriteConcern": {"w": "majority"},
        "config": None,
    }


@requires_node
def test_ops_users_script_creates_least_privilege_users_once(
    chart: helm_python.Chart, tmp_path: Path
) -> None:
    files, config = ops_users_scenario(chart, EVERYTHING)
    assert config["hosts"] == MEMBERS
    assert config["monitor"] == {"username": "harel-monitor"}
    assert config["backup"] == {"username": "harel-backup"}
    root, monitor, backup = (secrets.token_hex(16) for _ in range(3))
    env = {
        "HAREL_MONGO_ROOT_PASSWORD": root,
        "HAREL_MONITOR_PASSWORD": monitor,
        "HAREL_BACKUP_PASSWORD": backup,
    }

    first = run_ops_users(tmp_path, files, config, env, initiated_cluster(config, root))

    assert first.ok, first.error
    # It waited for the election (two polls without a primary) instead of failing.
    assert sum("waiting for a primary" in line for line in first.printed) == 2
    assert first.cluster["users"] == {
        "harel-monitor": {
            "roles": [{"role": "clusterMonitor", "db": "admin"}, {"role": "read", "db": "local"}],
            "mechanisms": ["SCRAM-SHA-256"],
            "pwd": monitor,
        },
        "harel-backup": {
            "roles": [{"role": "backup", "db": "admin"}, {"role": "harelBackupStatus", "db": "admin"}],
            "mechanisms": ["SCRAM-SHA-256"],
            "pwd": backup,
        },
    }
    assert first.cluster["roles"] == {
        "harelBackupStatus": {
            "privileges": [
                {
                    "resource": {"db": "harel", "collection": "backups"},
                    "actions": ["find", "insert", "update"],
                }
            ],
            "roles": [],
        }
    }
    writes = [call for call in first.calls if call["command"] in {"createUser", "createRole", "updateUser"}]
    assert all(call["body"]["writeConcern"] == {"w": "majority"} for call in writes)

    # A second run (every upgrade) changes nothing but resets the passwords to the Secret's.
    second = run_ops_users(tmp_path, files, config, env, first.cluster)
    assert second.ok, second.error
    assert not {"createUser", "createRole"} & set(second.commands())
    assert second.cluster["users"] == first.cluster["users"]
    assert second.cluster["roles"] == first.cluster["roles"]


@requires_node
def test_ops_users_script_makes_only_the_users_the_release_runs(
    chart: helm_python.Chart, tmp_path: Path
) -> None:
    values = {"mongodbExporter": {"enabled": True}}
    files, config = ops_users_scenario(chart, values)
    assert config["backup"] is None
    root = secrets.token_hex(16)
    run = run_ops_users(
        tmp_path,
        files,
        config,
        {"HAREL_MONGO_ROOT_PASSWORD": root, "HAREL_MONITOR_PASSWORD": secrets.token_hex(16)},
        initiated_cluster(config, root),
    )
    assert run.ok, run.error
    assert set(run.cluster["users"]) == {"harel-monitor"}
    assert "roles" not in run.cluster
    assert "backup.env" not in files


@requires_node
def test_ops_users_script_gives_up_at_its_deadline_without_a_primary(
    chart: helm_python.Chart, tmp_path: Path
) -> None:
    files, config = ops_users_scenario(chart, EVERYTHING)
    root = secrets.token_hex(16)
    cluster = initiated_cluster(config, root)
    cluster["root"]["password"] = secrets.token_hex(16)
    env = {
        "HAREL_MONGO_ROOT_PASSWORD": root,
        "HAREL_MONITOR_PASSWORD": "m" * 8,
        "HAREL_BACKUP_PASSWORD": "b" * 8,
    }
    run = run_ops_users(tmp_path, files, config, env, cluster)
    assert not run.ok
    assert run.error is not None and f"gave up after {config['deadlineSeconds']}s" in run.error
    assert run.cluster["users"] == {}


# --- dashboard and alerts ------------------------------------------------------------------------------------


def test_dashboard_configmap_carries_the_sidecar_label_and_the_json(chart: helm_python.Chart) -> None:
    dashboard = only(render(chart, EVERYTHING), "ConfigMap", f"{FULLNAME}-dashboard").doc
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(dashboard["data"]["harel-dashboard.json"])
    assert shipped == json.loads((CHART_DIR / "files" / "observability" / "harel-dashboard.json").read_text())


def test_prometheus_rule_holds_the_rules_file(chart: helm_python.Chart) -> None:
    rule = only(render(chart, EVERYTHING), "PrometheusRule", f"{FULLNAME}-alerts").doc
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    rules_file = yaml.safe_load(
        (CHART_DIR / "files" / "observability" / "harel-alerts.rules.yml").read_text()
    )
    assert rule["spec"]["groups"] == rules_file["groups"]


def test_dashboard_and_alerts_render_with_an_external_mongodb(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["dashboard + alerts, external MongoDB"])
    assert "PrometheusRule" in kinds(manifests)
    only(manifests, "ConfigMap", f"{FULLNAME}-dashboard")
    assert not {"CronJob"} & kinds(manifests)


# --- backups -------------------------------------------------------------------------------------------------


def test_backup_cronjob_dumps_then_records_on_a_kept_volume(chart: helm_python.Chart) -> None:
    manifests = render(chart, EVERYTHING)
    cronjob = only(manifests, "CronJob", f"{FULLNAME}-backup")
    spec = cronjob.doc["spec"]
    assert spec["schedule"] == "0 3 * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = cronjob_pod(cronjob)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["dump"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["record"]
    for name in ("dump", "record"):
        command = step(pod, name)["command"]
        assert command == ["/bin/bash", "/var/run/harel/backup/harel-backup.sh", name]
        assert step(pod, name)["image"] == "mongo:8.0.26"
        assert (
            env_of(step(pod, name))["HAREL_BACKUP_PASSWORD_FILE"]["value"]
            == "/var/run/harel/ops-auth/backup-password"
        )
        mounts = {m["name"]: m["mountPath"] for m in step(pod, name)["volumeMounts"]}
        assert mounts["ops-auth"] == "/var/run/harel/ops-auth"
    assert pod["metadata"]["labels"]["harel-stack/mongodb-client"] == "true"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["backups"]["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-backup"
    assert volumes["ops-auth"]["secret"] == {
        "secretName": f"{FULLNAME}-mongodb-ops-auth",
        "items": [{"key": "backup-password", "path": "backup-password"}],
        "defaultMode": 0o440,
    }
    claim = only(manifests, "PersistentVolumeClaim", f"{FULLNAME}-backup")
    assert claim.annotations["helm.sh/resource-policy"] == "keep"
    assert claim.doc["spec"]["resources"]["requests"]["storage"] == "20Gi"

    files = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-ops").doc["data"]
    assert files["harel-backup.sh"] == (CHART_DIR / "files" / "backup" / "harel-backup.sh").read_text()
    settings = settings_file(files["backup.env"])
    assert settings == {
        "HAREL_BACKUP_HOSTS": ",".join(MEMBERS),
        "HAREL_BACKUP_REPLICA_SET": "rs0",
        "HAREL_BACKUP_USER": "harel-backup",
        "HAREL_BACKUP_DATABASE": "harel",
        "HAREL_BACKUP_DIR": "/backups",
        "HAREL_BACKUP_KEEP": "7",
        "HAREL_BACKUP_JOB": f"helm/{NAMESPACE}/{RELEASE}",
        "HAREL_BACKUP_TARGET": f"pvc:{FULLNAME}-backup",
        "HAREL_BACKUP_TLS_CA": "",
    }


def test_backup_to_s3_uploads_between_dump_and_record(chart: helm_python.Chart) -> None:
    manifests = render(chart, S3_TLS)
    assert "PersistentVolumeClaim" not in kinds(manifests)
    pod = cronjob_pod(only(manifests, "CronJob", f"{FULLNAME}-backup"))
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["dump", "upload-s3"]
    upload = step(pod, "upload-s3")
    assert upload["image"] == "amazon/aws-cli:2.31.9"
    env = env_of(upload)
    assert env["AWS_ACCESS_KEY_ID_FILE"]["value"] == "/var/run/harel/s3/access-key-id"
    assert env["AWS_SECRET_ACCESS_KEY_FILE"]["value"] == "/var/run/harel/s3/secret-access-key"
    credentials = {v["name"]: v for v in pod["spec"]["volumes"]}["s3-credentials"]["secret"]
    assert credentials["secretName"] == "s3-credentials"
    assert {item["key"] for item in credentials["items"]} == {"access-key-id", "secret-access-key"}
    assert "emptyDir" in {v["name"]: v for v in pod["spec"]["volumes"]}["backups"]
    files = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-ops").doc["data"]
    settings = settings_file(files["backup.env"])
    assert settings["HAREL_BACKUP_S3_BUCKET"] == "harel-backups"
    assert settings["HAREL_BACKUP_S3_ENDPOINT"] == "https://minio.example.invalid:9000"
    assert settings["HAREL_BACKUP_TARGET"] == "s3://harel-backups/harel"
    assert settings["HAREL_BACKUP_TLS_CA"] == "/var/run/harel/tls-secret/ca.crt"
    mounts = {m["mountPath"] for m in step(pod, "dump")["volumeMounts"]}
    assert "/var/run/harel/tls-secret" in mounts


def test_backup_settings_file_parses_in_bash(chart: helm_python.Chart, tmp_path: Path) -> None:
    files = only(render(chart, S3_TLS), "ConfigMap", f"{FULLNAME}-mongodb-ops").doc["data"]
    settings = tmp_path / "backup.env"
    settings.write_text(files["backup.env"])
    printed = subprocess.run(
        [
            "bash",
            "-c",
            f'set -eu; . "{settings}"; printf "%s|%s" "$HAREL_BACKUP_HOSTS" "$HAREL_BACKUP_S3_ENDPOINT"',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == ",".join(MEMBERS) + "|https://minio.example.invalid:9000"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"backup": {"enabled": True, "target": "s3"}}, "/backup/s3/bucket"),
        (
            {"backup": {"enabled": True, "target": "s3", "s3": {"bucket": "b-ok"}}},
            "/backup/s3/existingSecret",
        ),
        ({"backup": {"enabled": True, "target": "tape"}}, "/backup/target"),
        ({"backup": {"keep": 0}}, "/backup/keep"),
        ({"backup": {"schedule": "daily"}}, "/backup/schedule"),
        ({"backup": {"s3": {"endpoint": "minio:9000"}}}, "/backup/s3/endpoint"),
        (
            {
                "mongodb": {"enabled": False},
                "externalMongodb": {"existingSecret": "x"},
                "backup": {"enabled": True},
            },
            "/mongodb/enabled",
        ),
        (
            {
                "mongodb": {"enabled": False},
                "externalMongodb": {"existingSecret": "x"},
                "mongodbExporter": {"enabled": True},
            },
            "/mongodb/enabled",
        ),
        (
            {"mongodbExporter": {"serviceMonitor": {"interval": "often"}}},
            "/mongodbExporter/serviceMonitor/interval",
        ),
    ],
)
def test_schema_refuses_bad_operations_values(
    chart: helm_python.Chart, values: dict[str, Any], field: str
) -> None:
    assert f"'{field}'" in schema_error(chart, values)


def test_every_new_pod_may_reach_mongodb_through_the_network_policy(chart: helm_python.Chart) -> None:
    manifests = render(chart, EVERYTHING)
    policy = only(manifests, "NetworkPolicy", f"{FULLNAME}-mongodb").doc["spec"]
    selectors = [peer["podSelector"]["matchLabels"] for peer in policy["ingress"][0]["from"]]
    pods = [
        pod_labels(only(manifests, "Deployment", f"{FULLNAME}-mongodb-exporter")),
        pod_labels(ops_users_job(manifests)),
        cronjob_pod(only(manifests, "CronJob", f"{FULLNAME}-backup"))["metadata"]["labels"],
    ]
    for labels in pods:
        assert any(selector.items() <= labels.items() for selector in selectors), labels
