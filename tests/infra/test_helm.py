"""The harel-stack Helm chart, rendered and linted by the real Helm library (helm-python-sdk, offline)
and every rendered manifest validated against the Kubernetes schemas (kubernetes-validate, strict).

No cluster is involved: `lookup` returns nothing when rendering offline, exactly as in
`helm template`, so the generated-secret path is the one rendered here.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python.config import Config
from pymongo import MongoClient

from harel.metrics import Metrics
from tests.fake_mongod.fixtures import FakeDeployment
from tests.infra.fake_kube_api import FakeKubeApi, fake_kube_api
from tests.infra.helm_lint import CHART_DIR, MONITORING, configurations, digest, kube_version, lint
from tests.infra.order_app import page_files
from tests.infra.tools import MongoshRun, mongosh

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
RELEASE = "demo"
NAMESPACE = "harel"
FULLNAME = f"{RELEASE}-harel-stack"
MONGO_UID = 999
WORKER_UID = 10001
EXPORTER_UID = 65535
CONFIGURATIONS = configurations()

# Kinds from CRDs that kubernetes-validate has no schema for, each checked against the fields the
# chart uses instead (taken from the Prometheus Operator's CRD).
DURATION = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "monitoring.coreos.com/v1/ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": {"type": "object", "required": ["name", "namespace"]},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": {
                        "type": "object",
                        "required": ["matchLabels"],
                        "properties": {"matchLabels": {"type": "object", "minProperties": 1}},
                    },
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["port"],
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": {"type": "string", "pattern": DURATION},
                                "params": {
                                    "type": "object",
                                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                                },
                                "relabelings": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {
                                            "action": {"type": "string", "enum": ["replace", "keep", "drop"]},
                                            "targetLabel": {"type": "string"},
                                            "replacement": {"type": "string"},
                                            "sourceLabels": {"type": "array", "items": {"type": "string"}},
                                            "regex": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    "monitoring.coreos.com/v1/PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": {"type": "object", "required": ["name", "namespace"]},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["alert", "expr"],
                                        "properties": {
                                            "alert": {"type": "string", "minLength": 1},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": {"type": "string", "pattern": DURATION},
                                            "labels": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                            "annotations": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}

# KEDA's published CRD of ScaledObject, vendored with its source (tests/infra/crds/). Its schema is structural: the API
# server drops (or, with strict field validation, refuses) any field it does not declare, so it is closed here the same
# way (additionalProperties false wherever properties are declared), and a misspelt key fails.
KEDA_CRD = Path(__file__).with_name("crds") / "keda.sh_scaledobjects.yaml"


def closed(schema: Any) -> Any:
    """A structural CRD schema with its unknown-field pruning turned into refusal."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return dict(closed(served["schema"]["openAPIV3Schema"]))


CRD_SCHEMAS["keda.sh/v1alpha1/ScaledObject"] = crd_schema(KEDA_CRD, "v1alpha1")

POD_OWNERS = {"Deployment", "StatefulSet", "Job"}
# Native sidecars (init containers with restartPolicy Always, what jobs.sidecars render) exist from Kubernetes 1.29.
NATIVE_SIDECARS = "1.29"


@dataclass(frozen=True)
class Manifest:
    template: str
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.doc["metadata"].get("annotations") or {})


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> list[Manifest]:
    rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [
        Manifest(template, doc)
        for template, text in sorted(rendered.items())
        if not template.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def only(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m.kind == kind and m.name == name]
    assert len(found) == 1, (
        f"expected one {kind} {name}, found {[m.name for m in manifests if m.kind == kind]}"
    )
    return found[0]


def kinds(manifests: list[Manifest]) -> set[str]:
    return {m.kind for m in manifests}


def pod_spec(manifest: Manifest) -> dict[str, Any]:
    if manifest.kind == "Pod":
        return manifest.doc["spec"]
    return manifest.doc["spec"]["template"]["spec"]


def pod_labels(manifest: Manifest) -> dict[str, str]:
    if manifest.kind == "Pod":
        return manifest.doc["metadata"]["labels"]
    return manifest.doc["spec"]["template"]["metadata"]["labels"]


def pods(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m.kind in POD_OWNERS or m.kind == "Pod"]


def pod_template(manifest: Manifest) -> dict[str, Any]:
    """The pod a workload makes, metadata and spec, whatever the kind (the CronJob's through its Job template)."""
    if manifest.kind == "Pod":
        return manifest.doc
    if manifest.kind == "CronJob":
        return dict(manifest.doc["spec"]["jobTemplate"]["spec"]["template"])
    return dict(manifest.doc["spec"]["template"])


def workloads(manifests: list[Manifest]) -> list[Manifest]:
    """Every manifest that makes pods, CronJobs included."""
    return [m for m in manifests if m.kind in POD_OWNERS | {"Pod", "CronJob"}]


def has_native_sidecars(manifest: Manifest) -> bool:
    if manifest.kind not in POD_OWNERS | {"Pod", "CronJob"}:
        return False
    init = pod_template(manifest)["spec"].get("initContainers", [])
    return any(c.get("restartPolicy") == "Always" for c in init)


def image_name(image: str) -> str:
    """repository of repository:tag or repository@digest."""
    return image.split("@", maxsplit=1)[0].split(":", maxsplit=1)[0]


def container(manifest: Manifest, name: str) -> dict[str, Any]:
    spec = pod_spec(manifest)
    found = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"{manifest.kind} {manifest.name} has no container {name}"
    return found[0]


def env_of(container_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container_spec.get("env", [])}


def secret_data(manifest: Manifest) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in manifest.doc["data"].items()}


def schema_error(chart: helm_python.Chart, values: dict[str, Any]) -> str:
    with pytest.raises(helm_python.HelmValuesError) as refused:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return str(refused.value)


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


# --- lint and schema validation of every configuration -------------------------------------------


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_strict_lint_is_clean(configuration: str) -> None:
    result = lint(configuration, CONFIGURATIONS[configuration])
    assert result.charts_linted == 1
    assert result.findings == [], "\n".join(str(finding) for finding in result.findings)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"mongodb": {"members": 2}}, "/mongodb/arbiter/enabled"),
        ({"mongodb": {"members": 2, "arbiter": {"enabled": True}}}, "/mongodb/allowPSA"),
        ({"mongodb": {"enabled": False}}, "/externalMongodb/existingSecret"),
    ],
)
def test_strict_lint_reports_a_broken_configuration(values: dict[str, Any], field: str) -> None:
    result = lint("broken", values)
    assert any(f"'{field}'" in finding.message for finding in result.findings), result.findings


def validated(chart: helm_python.Chart, manifests: list[Manifest]) -> set[str]:
    """Validate every manifest, strictly: against the newest Kubernetes the schemas know and the oldest the
    chart declares (Chart.yaml kubeVersion), or against its CRD's schema. The kinds validated."""
    floor = re.fullmatch(r">=(\d+\.\d+)\.0-0", chart.metadata["kubeVersion"])
    assert floor, chart.metadata["kubeVersion"]
    kinds = set()
    for manifest in manifests:
        api_kind = f"{manifest.doc['apiVersion']}/{manifest.kind}"
        if api_kind in CRD_SCHEMAS:
            jsonschema.validate(manifest.doc, CRD_SCHEMAS[api_kind])
        else:
            # A pod with native sidecars is only valid, and only rendered (jobs.sidecars), from 1.29 on.
            oldest = NATIVE_SIDECARS if has_native_sidecars(manifest) else floor.group(1)
            for version in (kube_version(), oldest):
                kubernetes_validate.validate(manifest.doc, version, strict=True)
        kinds.add(api_kind)
    return kinds


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_every_manifest_validates_against_kubernetes(chart: helm_python.Chart, configuration: str) -> None:
    validated_kinds = validated(chart, render(chart, CONFIGURATIONS[configuration]))
    assert {"apps/v1/Deployment", "v1/Service", "v1/Pod", "v1/ServiceAccount"} <= validated_kinds


def planted(tmp_path: Path, template: str, anchor: str, replacement: str) -> Path:
    """A copy of the chart with one template edit: a bug the validation must catch."""
    copy = tmp_path / CHART_DIR.name
    shutil.copytree(CHART_DIR, copy)
    path = copy / "templates" / template
    text = path.read_text(encoding="utf-8")
    assert text.count(anchor) == 1, (
        f"the planted edit no longer applies: {anchor!r} is not once in {template}"
    )
    path.write_text(text.replace(anchor, replacement), encoding="utf-8")
    return copy


def test_a_service_monitor_template_with_a_key_its_crd_lacks_fails_the_validation(tmp_path: Path) -> None:
    """The CRD check above catches a chart bug: the worker's ServiceMonitor with `interval` misnamed."""
    broken = planted(tmp_path, "worker/servicemonitor.yaml", "      interval: {{", "      scrapeInterval: {{")
    with helm_python.Chart.load(broken) as chart:
        manifests = render(chart, CONFIGURATIONS["autoscaling + ServiceMonitor"])
        with pytest.raises(jsonschema.ValidationError, match="scrapeInterval"):
            validated(chart, manifests)


def test_a_worker_template_with_a_misspelt_probe_fails_the_validation(tmp_path: Path) -> None:
    """The strict Kubernetes validation above catches a chart bug: the worker's readiness probe misspelt
    (Kubernetes would drop the unknown field and run the worker unprobed)."""
    broken = planted(
        tmp_path, "worker/deployment.yaml", "          readinessProbe:", "          readinesProbe:"
    )
    with helm_python.Chart.load(broken) as chart:
        manifests = render(chart)
        with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
            validated(chart, manifests)


# --- the schema refuses bad values, naming the field ------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field", "why"),
    [
        ({"mongodb": {"members": 2}}, "/mongodb/arbiter/enabled", "value must be true"),
        ({"mongodb": {"members": 4}}, "/mongodb/arbiter/enabled", "value must be true"),
        (
            {"mongodb": {"members": 2, "arbiter": {"enabled": True}}},
            "/mongodb/allowPSA",
            "value must be true",
        ),
        ({"mongodb": {"members": 3, "arbiter": {"enabled": True}}}, "/mongodb/members", "multiple"),
        ({"mongodb": {"members": 0}}, "/mongodb/members", "minimum"),
        ({"mongodb": {"members": 9}}, "/mongodb/members", "maximum"),
        ({"mongodb": {"members": "three"}}, "/mongodb/members", "want integer"),
        ({"mongodb": {"enabled": False}}, "/externalMongodb/url", "minLength"),
        (
            {"mongodb": {"enabled": False}, "externalMongodb": {"url": "http://mongo:27017"}},
            "/externalMongodb/url",
            "",
        ),
        ({"tls": {"mode": "allowTLS"}}, "/tls/existingSecret", "minLength"),
        ({"tls": {"mode": "on", "existingSecret": "certs"}}, "/tls/mode", "value must be one of"),
        ({"mongodb": {"member": 3}}, "/mongodb", "additional properties 'member' not allowed"),
        ({"worker": {"drainSeconds": 0}}, "/worker/drainSeconds", "minimum"),
        ({"worker": {"terminationMarginSeconds": 1}}, "/worker/terminationMarginSeconds", "minimum"),
        ({"worker": {"replicas": 0}}, "/worker/replicas", "minimum"),
        ({"worker": {"logFormat": "xml"}}, "/worker/logFormat", ""),
        ({"mongodb": {"persistence": {"size": "lots"}}}, "/mongodb/persistence/size", ""),
        ({"mongodb": {"init": {"deadlineSeconds": 5}}}, "/mongodb/init/deadlineSeconds", "minimum"),
    ],
)
def test_schema_refuses_bad_values(
    chart: helm_python.Chart, values: dict[str, Any], field: str, why: str
) -> None:
    message = schema_error(chart, values)
    assert f"'{field}'" in message
    assert why in message


def test_external_mode_needs_a_url_or_a_secret_and_names_both(chart: helm_python.Chart) -> None:
    message = schema_error(chart, {"mongodb": {"enabled": False}})
    assert "/externalMongodb/url" in message
    assert "/externalMongodb/existingSecret" in message


def test_schema_descriptions_explain_the_replica_set_rules(chart: helm_python.Chart) -> None:
    schema = chart.schema
    assert schema is not None
    rules = " ".join(rule["description"] for rule in schema["properties"]["mongodb"]["allOf"])
    assert "arbiter" in rules
    assert "allowPSA" in rules
    external_rule = schema["allOf"][0]["description"]
    assert "externalMongodb.url" in external_rule
    assert "externalMongodb.existingSecret" in external_rule


def test_autoscaling_bounds_are_checked_together(chart: helm_python.Chart) -> None:
    with pytest.raises(
        helm_python.HelmRenderError, match=r"worker\.autoscaling\.maxReplicas \(2\).*minReplicas \(5\)"
    ):
        render(chart, {"worker": {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}})


def test_allowed_replica_set_shapes_render(chart: helm_python.Chart) -> None:
    for members, arbiter, allow_psa in [
        (1, False, False),
        (3, False, False),
        (5, False, False),
        (4, True, False),
    ]:
        values = {"mongodb": {"members": members, "arbiter": {"enabled": arbiter}, "allowPSA": allow_psa}}
        statefulset = only(render(chart, values), "StatefulSet", f"{FULLNAME}-mongodb")
        assert statefulset.doc["spec"]["replicas"] == members


# --- MongoDB --------------------------------------------------------------------------------------


def test_default_replica_set(chart: helm_python.Chart) -> None:
    manifests = render(chart)
    statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb")
    spec = statefulset.doc["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert spec["serviceName"] == f"{FULLNAME}-mongodb-headless"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "8Gi"
    mongod = container(statefulset, "mongod")
    assert mongod["image"] == "mongo:8.0.26"
    args = mongod["args"]
    assert args[args.index("--replSet") + 1] == "rs0"
    assert args[args.index("--keyFile") + 1] == "/var/run/harel/auth/keyfile"
    assert {"--bind_ip_all", "--auth"} <= set(args)
    assert "--tlsMode" not in args
    assert mongod["resources"]["limits"]["memory"] == "2Gi"
    pod = pod_spec(statefulset)
    anti_affinity = pod["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in anti_affinity
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti_affinity
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    assert all(c["whenUnsatisfiable"] == "ScheduleAnyway" for c in pod["topologySpreadConstraints"])
    assert "StatefulSet" in kinds(manifests)
    assert not [m for m in manifests if m.name.endswith("-arbiter")]


def test_services_give_members_stable_names_before_they_are_ready(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["PSA allowed"])
    headless = only(manifests, "Service", f"{FULLNAME}-mongodb-headless").doc["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is True
    client = only(manifests, "Service", f"{FULLNAME}-mongodb").doc["spec"]
    assert "clusterIP" not in client
    data = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb")
    arbiter = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb-arbiter")
    for member in (data, arbiter):
        assert headless["selector"].items() <= pod_labels(member).items()
        assert member.doc["spec"]["serviceName"] == f"{FULLNAME}-mongodb-headless"
    assert client["selector"].items() <= pod_labels(data).items()
    assert not client["selector"].items() <= pod_labels(arbiter).items()


def test_members_run_as_the_mongodb_user_with_an_owner_only_keyfile(chart: helm_python.Chart) -> None:
    statefulset = only(render(chart), "StatefulSet", f"{FULLNAME}-mongodb")
    pod = pod_spec(statefulset)
    assert pod["securityContext"]["runAsUser"] == MONGO_UID
    assert pod["securityContext"]["fsGroup"] == MONGO_UID
    prepare = container(statefulset, "prepare-credentials")
    script = prepare["command"][-1]
    assert "install -m 0400 /var/run/harel/auth-secret/keyfile /var/run/harel/auth/keyfile" in script
    assert prepare["securityContext"]["runAsUser"] == MONGO_UID
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["auth"]["emptyDir"]["medium"] == "Memory"
    assert volumes["auth-secret"]["secret"]["items"] == [{"key": "keyfile", "path": "keyfile"}]
    mounts = {m["name"]: m for m in container(statefulset, "mongod")["volumeMounts"]}
    assert mounts["auth"]["readOnly"] is True
    assert "auth-secret" not in mounts


def test_root_user_is_bootstrapped_on_member_zero_only(chart: helm_python.Chart) -> None:
    manifests = render(chart)
    statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb")
    bootstrap = container(statefulset, "bootstrap-root")
    env = env_of(bootstrap)
    assert env["HAREL_BOOTSTRAP_MEMBER"]["value"] == f"{FULLNAME}-mongodb-0"
    assert env["HAREL_MONGO_ROOT_PASSWORD_FILE"]["value"] == "/var/run/harel/root/root-password"
    mounts = {m["name"]: m["mountPath"] for m in bootstrap["volumeMounts"]}
    assert mounts["root-password"] == "/var/run/harel/root"
    volumes = {v["name"]: v for v in pod_spec(statefulset)["volumes"]}
    assert volumes["root-password"]["secret"]["items"] == [{"key": "root-password", "path": "root-password"}]
    scripts = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-scripts").doc["data"]
    shell = scripts["bootstrap-root.sh"]
    assert shell.index('"${HOSTNAME}" != "${HAREL_BOOTSTRAP_MEMBER}"') < shell.index("mongod --dbpath")
    assert "--bind_ip 127.0.0.1" in shell
    assert "--replSet" not in shell.split("set -euo pipefail", 1)[1]
    assert "system.replset" in scripts["bootstrap-root.js"]
    # Members start mongod directly: the image's first-start handling never runs.
    assert container(statefulset, "mongod")["command"] == ["mongod"]


def test_probes_start_no_shell_and_readiness_is_a_script_every_30_seconds(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["PSA allowed"])
    for name in (f"{FULLNAME}-mongodb", f"{FULLNAME}-mongodb-arbiter"):
        mongod = container(only(manifests, "StatefulSet", name), "mongod")
        # Is mongod listening: a TCP connect, no process started.
        assert mongod["startupProbe"]["tcpSocket"] == {"port": "mongodb"}
        assert mongod["livenessProbe"]["tcpSocket"] == {"port": "mongodb"}
        readiness = mongod["readinessProbe"]
        assert readiness["exec"]["command"] == [
            "mongosh",
            "--quiet",
            "--norc",
            "--port",
            "27017",
            "/var/run/harel/scripts/member-ready.js",
        ]
        # A slow member does not flap: 30 s apart, 20 s to answer, three misses in a row.
        assert (readiness["periodSeconds"], readiness["timeoutSeconds"], readiness["failureThreshold"]) == (
            30,
            20,
            3,
        )
        mounts = {m["name"]: m["mountPath"] for m in mongod["volumeMounts"]}
        assert mounts["scripts"] == "/var/run/harel/scripts"


def test_generated_secret_is_random_and_kept(chart: helm_python.Chart) -> None:
    first_render = render(chart)
    first = only(first_render, "Secret", f"{FULLNAME}-mongodb-auth")
    second = only(render(chart), "Secret", f"{FULLNAME}-mongodb-auth")
    assert first.annotations["helm.sh/resource-policy"] == "keep"
    one, two = secret_data(first), secret_data(second)
    assert set(one) == {"keyfile", "root-password", "app-password", "mongodb-url"}
    for key in ("keyfile", "root-password", "app-password"):
        assert one[key] != two[key], f"{key} must be generated, not fixed"
        assert re.fullmatch(r"[A-Za-z0-9]+", one[key])
    assert len(one["keyfile"]) == 756
    assert len(one["root-password"]) == len(one["app-password"]) == 32
    hosts = ",".join(
        f"{FULLNAME}-mongodb-{i}.{FULLNAME}-mongodb-headless.{NAMESPACE}.svc.cluster.local:27017"
        for i in range(3)
    )
    assert one["mongodb-url"] == (
        f"mongodb://harel:{one['app-password']}@{hosts}/harel?replicaSet=rs0&authSource=admin"
    )
    # The checksums other templates carry are of this very Secret (generated once per render, not once per use).
    raw = first.doc["data"]
    worker = only(first_render, "Deployment", f"{FULLNAME}-worker")
    members = only(first_render, "StatefulSet", f"{FULLNAME}-mongodb")
    sha = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
    assert worker.doc["spec"]["template"]["metadata"]["annotations"]["checksum/credentials"] == sha(
        f"revision=\nmongodb-url={raw['mongodb-url']}"
    )
    assert members.doc["spec"]["template"]["metadata"]["annotations"]["checksum/keyfile"] == sha(
        f"revision=\nkeyfile={raw['keyfile']}"
    )
    # Kept across upgrades: the template reuses what `lookup` finds before generating anything.
    helpers = (CHART_DIR / "templates" / "_helpers.tpl").read_text()
    assert helpers.index('lookup "v1" "Secret"') < helpers.index("randAlphaNum")
    assert re.search(r'get \$existing "app-password" \| default \(randAlphaNum', helpers)


def test_existing_mongodb_secret_is_used_everywhere(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["existing MongoDB secret"])
    assert "Secret" not in kinds(manifests)
    secret_volumes = {
        v["secret"]["secretName"]
        for manifest in pods(manifests)
        for v in pod_spec(manifest).get("volumes", [])
        if "secret" in v
    }
    assert secret_volumes == {"harel-mongodb-credentials"}


def test_init_config_names_every_member(chart: helm_python.Chart) -> None:
    scripts = only(render(chart, CONFIGURATIONS["PSA allowed"]), "ConfigMap", f"{FULLNAME}-mongodb-scripts")
    config = json.loads(scripts.doc["data"]["init-config.json"])
    headless = f"{FULLNAME}-mongodb-headless.{NAMESPACE}.svc.cluster.local:27017"
    assert config["dataMembers"] == [f"{FULLNAME}-mongodb-{i}.{headless}" for i in range(2)]
    assert config["arbiter"] == f"{FULLNAME}-mongodb-arbiter-0.{headless}"
    assert config["replicaSetName"] == "rs0"
    assert config["appUsername"] == "harel"
    assert config["database"] == "harel"
    assert config["tlsCAFile"] is None


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_helm_install_wait_cannot_deadlock_on_a_hook(chart: helm_python.Chart, configuration: str) -> None:
    """`helm install --wait` waits for readiness before post-install hooks, and members are ready only once the
    init Job has run: so nothing but the helm test pod may be a hook (Argo CD maps hooks the same way)."""
    hooked = {
        m.name: m.annotations["helm.sh/hook"]
        for m in render(chart, CONFIGURATIONS[configuration])
        if "helm.sh/hook" in m.annotations
    }
    assert hooked == {f"{FULLNAME}-smoke-test": "test"}


def test_init_job_runs_the_shared_init_from_the_worker_image_with_secrets_as_files(
    chart: helm_python.Chart,
) -> None:
    [job] = [m for m in render(chart) if m.kind == "Job"]
    init = container(job, "init-replica-set")
    assert init["image"] == "harel-stack/worker:0.1.0"
    assert init["command"] == [
        "python",
        "/opt/harel/rs_init.py",
        "--config",
        "/var/run/harel/scripts/init-config.json",
        "--timeout",
        "600",
    ]
    assert {item["name"]: item["value"] for item in init["env"]} == {
        "HAREL_MONGO_ROOT_PASSWORD_FILE": "/var/run/harel/auth/root-password",
        "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD_FILE": "/var/run/harel/previous/previous-root-password",
        "HAREL_APP_PASSWORD_FILE": "/var/run/harel/auth/app-password",
    }
    volumes = {v["name"]: v for v in pod_spec(job)["volumes"]}
    assert volumes["previous"]["secret"]["optional"] is True
    assert pod_labels(job)["harel-stack/mongodb-client"] == "true"
    assert "ttlSecondsAfterFinished" not in job.doc["spec"]


def test_init_job_name_follows_its_configuration(chart: helm_python.Chart) -> None:
    values = CONFIGURATIONS["existing MongoDB secret"]
    jobs = [m for m in render(chart, values) if m.kind == "Job"]
    assert len(jobs) == 1
    job = jobs[0]
    assert re.fullmatch(rf"{FULLNAME}-mongodb-init-[0-9a-f]{{10}}", job.name)
    again = next(m for m in render(chart, values) if m.kind == "Job")
    assert again.name == job.name, "an unchanged configuration keeps its Job"
    for change in ({"mongodb": {"members": 5}}, {"worker": {"image": {"tag": "0.1.1"}}}):
        changed = next(m for m in render(chart, merged(values, change)) if m.kind == "Job")
        assert changed.name != job.name, f"{change} runs a new Job"
    kept = next(m for m in render(chart, CONFIGURATIONS["init Job kept an hour"]) if m.kind == "Job")
    assert kept.doc["spec"]["ttlSecondsAfterFinished"] == 3600


def member_pods(manifests: list[Manifest]) -> dict[str, dict[str, str]]:
    """The replica-set member pods the StatefulSets make, by pod name: their labels."""
    return {
        f"{m.name}-{ordinal}": pod_labels(m)
        for m in manifests
        if m.kind == "StatefulSet" and pod_labels(m).get("harel-stack/replica-set-member") == "true"
        for ordinal in range(m.doc["spec"]["replicas"])
    }


def budgets_allow(manifests: list[Manifest], pods: dict[str, dict[str, str]], down: set[str]) -> bool:
    """Whether the rendered PodDisruptionBudgets let these pods be evicted together (a drain of their nodes)."""
    for budget in (m.doc["spec"] for m in manifests if m.kind == "PodDisruptionBudget"):
        selector = budget["selector"]["matchLabels"].items()
        selected = {name for name, labels in pods.items() if selector <= labels.items()}
        if len(selected & down) > budget["maxUnavailable"]:
            return False
    return True


@pytest.mark.parametrize(
    ("members", "arbiter"),
    [(3, False), (2, True), (4, True), (5, False)],
    ids=["3", "2+arbiter", "4+arbiter", "5"],
)
def test_the_member_budget_never_lets_a_drain_take_the_majority_of_voters(
    chart: helm_python.Chart, members: int, arbiter: bool
) -> None:
    """Every set of voters the budgets let be evicted together leaves a majority running: in the 2 + arbiter shape
    the arbiter and a data member never go together. Any one voter may go, so drains proceed."""
    manifests = render(
        chart, {"mongodb": {"members": members, "arbiter": {"enabled": arbiter}, "allowPSA": True}}
    )
    validated(chart, manifests)
    voters = member_pods(manifests)
    assert len(voters) == members + arbiter
    assert (f"{FULLNAME}-mongodb-arbiter-0" in voters) == arbiter
    for name in voters:
        assert budgets_allow(manifests, voters, {name}), f"{name} could never be drained"
    for size in range(2, len(voters) + 1):
        for down in itertools.combinations(voters, size):
            if budgets_allow(manifests, voters, set(down)):
                assert 2 * (len(voters) - size) > len(voters), f"{down} may go together: no majority left"
    if arbiter:
        assert not budgets_allow(
            manifests, voters, {f"{FULLNAME}-mongodb-arbiter-0", f"{FULLNAME}-mongodb-0"}
        )


def test_a_single_member_has_no_budget(chart: helm_python.Chart) -> None:
    single = render(chart, CONFIGURATIONS["single member"])
    assert not [m for m in single if m.kind == "PodDisruptionBudget" and m.name == f"{FULLNAME}-mongodb"]
    assert only(single, "StatefulSet", f"{FULLNAME}-mongodb").doc["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    "configuration",
    ["PSA allowed", "external URL", "external + TLS CA", "metrics + backups to S3, TLS, plain Jobs"],
)
def test_every_pod_has_a_network_policy_for_ingress_and_egress(
    chart: helm_python.Chart, configuration: str
) -> None:
    manifests = render(chart, CONFIGURATIONS[configuration])
    policies = [m.doc["spec"] for m in manifests if m.kind == "NetworkPolicy"]
    for manifest in pods(manifests):
        labels = pod_labels(manifest)
        selecting = [p for p in policies if p["podSelector"]["matchLabels"].items() <= labels.items()]
        assert len(selecting) == 1, f"{manifest.kind} {manifest.name}: {len(selecting)} policies"
        assert selecting[0]["policyTypes"] == ["Ingress", "Egress"]
        egress_ports = {port["port"] for rule in selecting[0]["egress"] for port in rule["ports"]}
        # Backups to S3 also reach the endpoint's port (https://minio.example.invalid:9000 in that configuration).
        s3 = {9000} if manifest.name.endswith("-backup") else set()
        assert egress_ports == {27017, 53} | s3, manifest.name
    if not configuration.startswith("external"):
        return
    worker = only(manifests, "NetworkPolicy", f"{FULLNAME}-worker").doc["spec"]
    assert worker["ingress"] == [], "/metrics is open to no one by default"
    [mongodb] = [rule for rule in worker["egress"] if rule["ports"][0]["port"] == 27017]
    expected = CONFIGURATIONS[configuration].get("networkPolicy", {}).get("externalMongodbTo")
    assert mongodb.get("to") == expected


def test_members_admit_only_the_release_clients_and_members(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["PSA allowed"])
    policy = only(manifests, "NetworkPolicy", f"{FULLNAME}-mongodb").doc["spec"]
    [rule] = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 27017}]
    selectors = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]

    def admitted(labels: dict[str, str]) -> bool:
        return any(selector.items() <= labels.items() for selector in selectors)

    for manifest in pods(manifests):
        assert admitted(pod_labels(manifest)), f"{manifest.name} must reach MongoDB"
    assert not admitted({"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "other"})
    assert not admitted({"app.kubernetes.io/instance": "another", "harel-stack/mongodb-client": "true"})


def test_workers_reach_more_only_through_their_extra_egress_rules(chart: helm_python.Chart) -> None:
    """Actions that call other services need the workers to reach them: worker.networkPolicy.extraEgress adds
    rules to the workers' policy, after MongoDB and DNS, and to no other pod's; a rule is {to, ports} only."""
    payments = {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "payments"}}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    default = render(chart)
    widened = render(chart, {"worker": {"networkPolicy": {"extraEgress": [payments]}}})
    validated(chart, widened)
    before, after = (
        {m.name: m.doc["spec"]["egress"] for m in manifests if m.kind == "NetworkPolicy"}
        for manifests in (default, widened)
    )
    worker = f"{FULLNAME}-worker"
    assert after.pop(worker) == [*before.pop(worker), payments]
    assert after == before
    with pytest.raises(helm_python.HelmValuesError, match="additional properties 'from' not allowed"):
        render(chart, {"worker": {"networkPolicy": {"extraEgress": [{"from": payments["to"]}]}}})


def test_worker_metrics_are_reachable_only_from_the_named_peers(chart: helm_python.Chart) -> None:
    values = {
        "worker": {"metrics": {"from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}}
    }
    policy = only(render(chart, values), "NetworkPolicy", f"{FULLNAME}-worker").doc["spec"]
    assert policy["ingress"] == [
        {"from": values["worker"]["metrics"]["from"], "ports": [{"protocol": "TCP", "port": 8080}]}
    ]
    assert not [
        m
        for m in render(chart, CONFIGURATIONS["metrics scraped, no NetworkPolicies"])
        if m.kind == "NetworkPolicy"
    ]


@pytest.mark.parametrize(
    ("mode", "clients_use_tls"), [("allowTLS", False), ("preferTLS", True), ("requireTLS", True)]
)
def test_tls_turns_on_one_mode_at_a_time(chart: helm_python.Chart, mode: str, clients_use_tls: bool) -> None:
    manifests = render(chart, {"tls": {"mode": mode, "existingSecret": "harel-mongodb-tls"}})
    statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb")
    mongod = container(statefulset, "mongod")
    args = mongod["args"]
    assert args[args.index("--tlsMode") + 1] == mode
    assert args[args.index("--tlsCertificateKeyFile") + 1] == "/var/run/harel/auth/mongod.pem"
    assert args[args.index("--tlsCAFile") + 1] == "/var/run/harel/tls-secret/ca.crt"
    assert (
        "cat /var/run/harel/tls-secret/tls.crt /var/run/harel/tls-secret/tls.key"
        in (container(statefulset, "prepare-credentials")["command"][-1])
    )
    # Only requireTLS refuses the plain loopback connection of the readiness check.
    assert ("--tls" in mongod["readinessProbe"]["exec"]["command"]) == (mode == "requireTLS")
    url = secret_data(only(manifests, "Secret", f"{FULLNAME}-mongodb-auth"))["mongodb-url"]
    assert url.endswith("&tls=true&tlsCAFile=/etc/harel/tls/ca.crt") == clients_use_tls
    config = json.loads(
        only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-scripts").doc["data"]["init-config.json"]
    )
    assert config["tlsCAFile"] == ("/etc/harel/tls/ca.crt" if clients_use_tls else None)
    worker = only(manifests, "Deployment", f"{FULLNAME}-worker")
    mounts = {m["name"]: m["mountPath"] for m in container(worker, "worker")["volumeMounts"]}
    assert mounts["tls-ca"] == "/etc/harel/tls"
    # A renewed certificate rolls the members: a checksum of the Secret (lookup), or Reloader when asked for.
    assert "checksum/tls" in statefulset.doc["spec"]["template"]["metadata"]["annotations"]
    assert "secret.reloader.stakater.com/reload" not in statefulset.annotations
    reloaded = only(render(chart, CONFIGURATIONS["TLS allowed"]), "StatefulSet", f"{FULLNAME}-mongodb")
    assert reloaded.annotations["secret.reloader.stakater.com/reload"] == "harel-mongodb-tls"


# --- external MongoDB -----------------------------------------------------------------------------


def test_external_url_goes_through_a_secret(chart: helm_python.Chart) -> None:
    values = CONFIGURATIONS["external URL"]
    manifests = render(chart, values)
    assert not {"StatefulSet", "Job", "ConfigMap"} & kinds(manifests)
    secret = only(manifests, "Secret", f"{FULLNAME}-external-mongodb")
    assert secret_data(secret) == {"mongodb-url": values["externalMongodb"]["url"]}
    worker = only(manifests, "Deployment", f"{FULLNAME}-worker")
    volumes = {v["name"]: v for v in pod_spec(worker)["volumes"]}
    assert volumes["mongodb-url"]["secret"]["secretName"] == f"{FULLNAME}-external-mongodb"
    assert volumes["mongodb-url"]["secret"]["items"] == [{"key": "mongodb-url", "path": "url"}]


def test_external_existing_secret_is_referenced_not_copied(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["external secret"])
    assert "Secret" not in kinds(manifests)
    for manifest in (
        only(manifests, "Deployment", f"{FULLNAME}-worker"),
        only(manifests, "Pod", f"{FULLNAME}-smoke-test"),
    ):
        volumes = {v["name"]: v for v in pod_spec(manifest)["volumes"]}
        assert volumes["mongodb-url"]["secret"]["secretName"] == "atlas-connection"
        assert volumes["mongodb-url"]["secret"]["items"] == [{"key": "url", "path": "url"}]


# --- workers and the helm test ------------------------------------------------------------------


def test_worker_deployment(chart: helm_python.Chart) -> None:
    manifests = render(chart)
    worker = only(manifests, "Deployment", f"{FULLNAME}-worker")
    assert worker.doc["spec"]["replicas"] == 2
    spec = pod_spec(worker)
    assert spec["automountServiceAccountToken"] is False
    main = container(worker, "worker")
    assert main["image"] == "harel-stack/worker:0.1.0"
    assert main["command"] == ["harel"]
    assert main["args"][0] == "worker"
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["ports"] == [{"name": "http", "containerPort": 8080}]
    assert {m["mountPath"] for m in main["volumeMounts"]} == {"/tmp", "/etc/harel/mongodb"}
    env = env_of(main)
    assert env["HAREL_MONGO_URL_FILE"]["value"] == "/etc/harel/mongodb/url"
    assert env["HAREL_CONNECT_DEADLINE"]["value"] == "0", "workers wait for the database instead of exiting"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["mongodb-url"]["secret"] == {
        "secretName": f"{FULLNAME}-mongodb-auth",
        "defaultMode": 0o440,
        "items": [{"key": "mongodb-url", "path": "url"}],
    }
    assert env["HAREL_DRAIN_SECONDS"]["value"] == "20"
    assert spec["terminationGracePeriodSeconds"] == 30
    account = only(manifests, "ServiceAccount", FULLNAME).doc
    assert account["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == FULLNAME
    metrics = only(manifests, "Service", f"{FULLNAME}-worker-metrics").doc["spec"]
    assert metrics["ports"] == [{"name": "http-metrics", "port": 8080, "targetPort": "http"}]
    assert metrics["selector"].items() <= pod_labels(worker).items()
    pdb = only(manifests, "PodDisruptionBudget", f"{FULLNAME}-worker").doc["spec"]
    assert pdb["maxUnavailable"] == 1
    # A worker waiting out a database outage is not ready; a drain may still evict it.
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert not {"HorizontalPodAutoscaler", "ServiceMonitor"} & kinds(manifests)


def test_the_readme_order_app_image_runs_its_app_as_documented(chart: helm_python.Chart) -> None:
    # docs/deploying-your-app.md's values file, as the page gives it (helm_lint lints the same configuration).
    values = yaml.safe_load(page_files()["order-values.yaml"])
    assert values == CONFIGURATIONS["your app's image"]
    manifests = render(chart, values)

    validated(chart, manifests)
    worker = container(only(manifests, "Deployment", f"{FULLNAME}-worker"), "worker")
    assert worker["image"] == "registry.example/shop/order-worker:1.0.0"
    assert worker["command"] == ["harel"]
    assert worker["args"] == ["worker", "--concurrency", "2", "--app", "orders.app:app"]
    # The image's working directory (the template's /app, where the app's charts/ are): none set here.
    assert "workingDir" not in worker
    # The init Job runs the replica-set init from the same image: it is built on the worker image.
    [job] = [m for m in manifests if m.kind == "Job"]
    assert container(job, "init-replica-set")["image"] == "registry.example/shop/order-worker:1.0.0"


def test_termination_grace_follows_the_drain_deadline(chart: helm_python.Chart) -> None:
    worker = only(
        render(chart, {"worker": {"drainSeconds": 45, "terminationMarginSeconds": 15}}),
        "Deployment",
        f"{FULLNAME}-worker",
    )
    assert pod_spec(worker)["terminationGracePeriodSeconds"] == 60
    assert env_of(container(worker, "worker"))["HAREL_DRAIN_SECONDS"]["value"] == "45"


def test_autoscaling_and_service_monitor(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["autoscaling + ServiceMonitor"])
    worker = only(manifests, "Deployment", f"{FULLNAME}-worker")
    assert "replicas" not in worker.doc["spec"]
    assert container(worker, "worker")["args"] == [
        "worker",
        "--concurrency",
        "2",
        "--app",
        "orders.workflows:app",
    ]
    assert pod_spec(worker)["imagePullSecrets"] == [{"name": "registry-credentials"}]
    hpa = only(manifests, "HorizontalPodAutoscaler", f"{FULLNAME}-worker").doc
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": worker.name,
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    monitor = only(manifests, "ServiceMonitor", f"{FULLNAME}-worker").doc
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    metrics_service = only(manifests, "Service", f"{FULLNAME}-worker-metrics").doc
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics_service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == metrics_service["spec"]["ports"][0]["name"]


def test_helm_test_runs_the_smoke_workflow(chart: helm_python.Chart) -> None:
    test_pod = only(
        render(chart, {"tests": {"smoke": {"timeoutSeconds": 300}}}), "Pod", f"{FULLNAME}-smoke-test"
    )
    assert test_pod.annotations["helm.sh/hook"] == "test"
    assert test_pod.doc["spec"]["restartPolicy"] == "Never"
    smoke = pod_spec(test_pod)["containers"][0]
    assert [*smoke["command"], *smoke["args"]] == ["harel", "smoke", "--timeout", "300"]
    assert env_of(smoke)["HAREL_MONGO_URL_FILE"]["value"] == "/etc/harel/mongodb/url"
    assert pod_labels(test_pod)["harel-stack/mongodb-client"] == "true"


# --- extension points -----------------------------------------------------------------------------

EXTENDED = CONFIGURATIONS["every extension point, images by digest"]


def workload_of(manifest: Manifest) -> str | None:
    """The values block whose extension points a workload's pods take: worker, mongodb or jobs (the exporter none)."""
    if manifest.kind == "StatefulSet":
        return "mongodb"
    if manifest.kind == "Deployment":
        return "worker" if manifest.name == f"{FULLNAME}-worker" else None
    return "jobs"


def test_every_extension_point_lands_in_every_pod_of_its_workload(chart: helm_python.Chart) -> None:
    manifests = render(chart, EXTENDED)
    validated(chart, manifests)
    extended: set[str] = set()
    for manifest in workloads(manifests):
        workload = workload_of(manifest)
        if workload is None:
            continue
        values = EXTENDED[workload]
        where = f"{manifest.kind} {manifest.name}"
        pod = pod_template(manifest)
        spec = pod["spec"]
        assert values["podLabels"].items() <= pod["metadata"]["labels"].items(), where
        assert values["podAnnotations"].items() <= pod["metadata"]["annotations"].items(), where
        assert spec["priorityClassName"] == values["priorityClassName"], where
        assert spec["nodeSelector"] == values["nodeSelector"], where
        assert spec["tolerations"] == values["tolerations"], where
        assert spec["affinity"] == values["affinity"], where
        assert spec["volumes"][-1] == values["extraVolumes"][0], where
        [init] = values["initContainers"]
        [sidecar] = values["sidecars"]
        assert spec["initContainers"][0] == init, f"{where}: the platform's init container runs first"
        if workload == "jobs":
            # A Job's sidecar is a native one, right after the init containers, so it runs beside every step.
            assert spec["initContainers"][1] == {**sidecar, "restartPolicy": "Always"}, where
            assert sidecar["name"] not in {c["name"] for c in spec["containers"]}, where
        else:
            assert spec["containers"][-1] == sidecar, where
        added = {init["name"], sidecar["name"]}
        # The chart's own containers that take the environment and the mounts: the main one of a worker or member,
        # every step of a Job.
        takers = [
            c
            for c in spec.get("initContainers", []) + spec["containers"]
            if c["name"] not in added and (workload == "jobs" or c["name"] in ("worker", "mongod"))
        ]
        assert takers, where
        for c in takers:
            assert c["env"][-len(values["extraEnv"]) :] == values["extraEnv"], f"{where}/{c['name']}"
            assert c["envFrom"] == values["extraEnvFrom"], f"{where}/{c['name']}"
            assert c["volumeMounts"][-1] == values["extraVolumeMounts"][0], f"{where}/{c['name']}"
        extended.add(f"{manifest.kind} {workload}")
    assert extended == {
        "Deployment worker",
        "StatefulSet mongodb",
        "Job jobs",
        "CronJob jobs",
        "Pod jobs",
    }
    jobs = [m.name for m in manifests if m.kind == "Job"]
    assert len(jobs) == 2, jobs  # the init Job and the operator-users Job


def test_the_arbiter_takes_the_members_extension_points_but_keeps_its_anti_affinity(
    chart: helm_python.Chart,
) -> None:
    values = merged(
        CONFIGURATIONS["PSA allowed"],
        {"mongodb": {key: value for key, value in EXTENDED["mongodb"].items() if key != "spread"}},
    )
    manifests = render(chart, values)
    validated(chart, manifests)
    mongodb = values["mongodb"]
    arbiter = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb-arbiter")
    spec = pod_spec(arbiter)
    assert mongodb["podLabels"].items() <= pod_labels(arbiter).items()
    assert spec["priorityClassName"] == mongodb["priorityClassName"]
    assert spec["tolerations"] == mongodb["tolerations"]
    assert spec["containers"][-1] == mongodb["sidecars"][0]
    mongod = container(arbiter, "mongod")
    assert mongod["args"][-3:] == mongodb["extraFlags"]
    assert mongod["env"][-2:] == mongodb["extraEnv"]
    # mongodb.affinity is the data members'; the arbiter keeps its soft anti-affinity from the other voters.
    assert "podAntiAffinity" in spec["affinity"]
    assert (
        "podAntiAffinity" not in pod_spec(only(manifests, "StatefulSet", f"{FULLNAME}-mongodb"))["affinity"]
    )


def test_without_extension_points_nothing_of_them_renders(chart: helm_python.Chart) -> None:
    for manifest in workloads(render(chart)):
        spec = pod_template(manifest)["spec"]
        assert "priorityClassName" not in spec, manifest.name
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert "envFrom" not in c, manifest.name
            assert "restartPolicy" not in c, manifest.name


def chart_env_names() -> dict[str, set[str]]:
    """The environment names the chart sets, over every configuration, in the containers each workload's extraEnv
    reaches: the worker container, mongod, every container of a Job pod."""
    names: dict[str, set[str]] = {"worker": set(), "mongodb": set(), "jobs": set()}
    with helm_python.Chart.load(CHART_DIR) as loaded:
        for values in CONFIGURATIONS.values():
            for manifest in workloads(render(loaded, values)):
                workload = workload_of(manifest)
                if workload is None:
                    continue
                spec = pod_template(manifest)["spec"]
                for c in spec.get("initContainers", []) + spec["containers"]:
                    if c["name"] in {"worker", "mongod"} or (
                        workload == "jobs" and c["image"].startswith(("mongo", "harel-stack", "amazon"))
                    ):
                        names[workload] |= {item["name"] for item in c.get("env", [])}
    for workload, values in EXTENDED.items():
        if workload in names:
            names[workload] -= {item["name"] for item in values.get("extraEnv", [])}
    return names


def test_an_extra_env_entry_may_not_replace_one_the_chart_sets(chart: helm_python.Chart) -> None:
    """The last of two entries of one name wins, so an extraEnv entry named like the chart's would silently replace
    it: each name the chart renders is refused, naming the value; a name it does not set is added."""
    names = chart_env_names()
    assert "HAREL_MONGO_URL_FILE" in names["worker"] and "HAREL_OPS_USERS" in names["jobs"], names
    listed = (CHART_DIR / "templates" / "_extensions.tpl").read_text(encoding="utf-8")
    for workload, taken in names.items():
        listing = re.search(rf'"{workload}" \(list ([^)]*)\)', listed)
        assert listing, workload
        assert set(re.findall(r'"([A-Z_]+)"', listing.group(1))) == taken, f"the refused {workload} names"
        for name in taken:
            with pytest.raises(
                helm_python.HelmRenderError, match=rf"{workload}\.extraEnv: {name} is set by the chart"
            ):
                render(chart, {workload: {"extraEnv": [{"name": name, "value": "x"}]}})
    worker = only(
        render(chart, {"worker": {"extraEnv": [{"name": "HAREL_LOG_LEVEL", "value": "debug"}]}}),
        "Deployment",
        f"{FULLNAME}-worker",
    )
    assert env_of(container(worker, "worker"))["HAREL_LOG_LEVEL"]["value"] == "debug"


@pytest.mark.parametrize(
    ("flags", "flag", "why"),
    [
        (["--replSet=rs1"], "--replSet", "mongodb.replicaSetName sets it"),
        (["--port", "27018"], "--port", "mongodb.service.port sets it"),
        (["--bind_ip=0.0.0.0"], "--bind_ip", "the chart sets --bind_ip_all"),
        (["--keyFile=/etc/key"], "--keyFile", "keyfile of mongodb.auth"),
        (["--quiet", "--tlsMode=requireTLS"], "--tlsMode", "tls.mode sets it"),
        (["--noauth"], "--noauth", "authentication is always on"),
        (["--config", "/etc/mongod.conf"], "--config", "a configuration file would override"),
    ],
)
def test_extra_mongod_flags_that_contradict_the_chart_are_refused_naming_the_value(
    chart: helm_python.Chart, flags: list[str], flag: str, why: str
) -> None:
    with pytest.raises(helm_python.HelmRenderError) as refused:
        render(chart, {"mongodb": {"extraFlags": flags}})
    message = str(refused.value)
    assert f"mongodb.extraFlags: {flag} is not yours to set (" in message
    assert why in message


def test_extra_mongod_flags_come_after_the_chart_s_and_a_value_is_not_a_flag(
    chart: helm_python.Chart,
) -> None:
    # "--setParameter" then "replSet..." is a flag and its value, not a --replSet.
    flags = ["--setParameter", "replWriterThreadCount=32", "--slowms=200"]
    mongod = container(
        only(render(chart, {"mongodb": {"extraFlags": flags}}), "StatefulSet", f"{FULLNAME}-mongodb"),
        "mongod",
    )
    assert mongod["args"][-3:] == flags
    assert mongod["args"].index("--dbpath") < mongod["args"].index("--setParameter")


@pytest.mark.parametrize(
    ("values", "field", "why"),
    [
        (
            {"worker": {"podLabels": {"app.kubernetes.io/component": "x"}}},
            "/worker/podLabels/app.kubernetes.io~1component",
            "'not' failed",
        ),
        (
            {"mongodb": {"podLabels": {"harel-stack/mongodb-client": "true"}}},
            "/mongodb/podLabels/harel-stack~1mongodb-client",
            "'not' failed",
        ),
        (
            {"jobs": {"podAnnotations": {"checksum/credentials": "x"}}},
            "/jobs/podAnnotations/checksum~1credentials",
            "'not' failed",
        ),
        (
            {"worker": {"extraVolumeMounts": [{"name": "ca"}]}},
            "/worker/extraVolumeMounts/0",
            "missing property 'mountPath'",
        ),
        ({"jobs": {"sidecars": [{"name": "proxy"}]}}, "/jobs/sidecars/0", "missing property 'image'"),
        ({"mongodb": {"extraEnv": [{"value": "x"}]}}, "/mongodb/extraEnv/0", "missing property 'name'"),
        ({"mongodb": {"spread": {"zone": "strict"}}}, "/mongodb/spread/zone", "value must be one of"),
        (
            {"worker": {"priorityClassName": "Critical"}},
            "/worker/priorityClassName",
            "does not match pattern",
        ),
        ({"worker": {"image": {"digest": "sha256:abc"}}}, "/worker/image/digest", "does not match pattern"),
        ({"mongodb": {"image": {"digest": "latest"}}}, "/mongodb/image/digest", "does not match pattern"),
        ({"worker": {"keda": {"enabled": True}}}, "/worker/keda/prometheus/serverAddress", "minLength"),
        ({"worker": {"keda": {"minReplicas": 0}}}, "/worker/keda/minReplicas", "minimum"),
        (
            {"worker": {"keda": {"prometheus": {"labelMatchers": "{job='x'}"}}}},
            "/worker/keda/prometheus/labelMatchers",
            "does not match pattern",
        ),
        ({"jobs": {"sidecar": []}}, "/jobs", "additional properties 'sidecar' not allowed"),
    ],
)
def test_schema_refuses_bad_extension_values(
    chart: helm_python.Chart, values: dict[str, Any], field: str, why: str
) -> None:
    message = schema_error(chart, values)
    assert f"'{field}'" in message
    assert why in message


def test_job_sidecars_need_native_sidecars_so_older_clusters_are_refused(
    chart: helm_python.Chart, tmp_path: Path
) -> None:
    """A plain sidecar would keep a Job running forever: jobs.sidecars render only where Kubernetes runs them as
    native sidecars (1.29 on). The library renders offline as its own Kubernetes (1.36), so the cluster's version
    the templates read (.Capabilities.KubeVersion.Version) is planted: 1.28 is refused, 1.29 renders."""
    values = {"jobs": {"sidecars": EXTENDED["jobs"]["sidecars"]}}
    render(chart, values)
    for version, renders in (("v1.28.9", False), ("v1.29.0", True)):
        planted_version = planted(
            tmp_path / version,
            "_helpers.tpl",
            "{{- $kube := .Capabilities.KubeVersion.Version }}",
            f'{{{{- $kube := "{version}" }}}}',
        )
        with helm_python.Chart.load(planted_version) as old:
            if renders:
                render(old, values)
                continue
            with pytest.raises(
                helm_python.HelmRenderError,
                match=rf"jobs\.sidecars needs Kubernetes 1\.29 or newer .*this is {version}",
            ):
                render(old, values)
            render(old, {})


# --- image digests --------------------------------------------------------------------------------


def test_every_image_runs_by_digest_when_one_is_given(chart: helm_python.Chart) -> None:
    by_tag = {
        image_name(c["image"]): c["image"]
        for manifest in workloads(render(chart, merged(EXTENDED, {"mongodb": {"image": {"digest": ""}}})))
        for c in pod_template(manifest)["spec"].get("initContainers", [])
        + pod_template(manifest)["spec"]["containers"]
    }
    assert by_tag["mongo"] == "mongo:8.0.26", "an empty digest runs the tag"
    manifests = render(chart, EXTENDED)
    images = {
        c["image"]
        for manifest in workloads(manifests)
        for c in pod_template(manifest)["spec"].get("initContainers", [])
        + pod_template(manifest)["spec"]["containers"]
    }
    chart_images = {image for image in images if not image.startswith("registry.example/platform/")}
    assert chart_images == {
        f"{repository}@{digest(repository)}"
        for repository in ("mongo", "harel-stack/worker", "percona/mongodb_exporter", "amazon/aws-cli")
    }
    # The init Job's name carries its image: a new digest runs it again.
    jobs = {
        m.name
        for values in (EXTENDED, merged(EXTENDED, {"worker": {"image": {"digest": digest("another build")}}}))
        for m in render(chart, values)
        if m.kind == "Job" and "-mongodb-init-" in m.name
    }
    assert len(jobs) == 2


# --- availability: spread, the wait timeout, scraping through the NetworkPolicies ----------------


def spread_of(manifest: Manifest) -> dict[str, dict[str, Any]]:
    return {c["topologyKey"]: c for c in pod_spec(manifest)["topologySpreadConstraints"]}


def test_voters_spread_together_and_workers_spread_softly_by_default(chart: helm_python.Chart) -> None:
    manifests = render(chart, CONFIGURATIONS["PSA allowed"])
    voters = member_pods(manifests)
    for name in (f"{FULLNAME}-mongodb", f"{FULLNAME}-mongodb-arbiter"):
        spread = spread_of(only(manifests, "StatefulSet", name))
        assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, name
        for constraint in spread.values():
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", name
            selector = constraint["labelSelector"]["matchLabels"].items()
            # Counting every voter, the arbiter too: the two data members and the arbiter land apart.
            assert {pod for pod, labels in voters.items() if selector <= labels.items()} == set(voters), name
    worker = only(manifests, "Deployment", f"{FULLNAME}-worker")
    spread = spread_of(worker)
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spread.values():
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert constraint["labelSelector"]["matchLabels"].items() <= pod_labels(worker).items()
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]
    for constraint in [
        *spread.values(),
        *spread_of(only(manifests, "StatefulSet", f"{FULLNAME}-mongodb")).values(),
    ]:
        # A tainted node the pods cannot use (a control plane's) does not count as an empty domain.
        assert constraint["nodeTaintsPolicy"] == "Honor"


def test_spread_turns_hard_per_key_or_is_replaced(chart: helm_python.Chart) -> None:
    manifests = render(
        chart,
        merged(
            CONFIGURATIONS["PSA allowed"],
            {
                "mongodb": {"spread": {"zone": "hard", "node": "hard"}},
                "worker": {"spread": {"zone": "soft", "node": "hard"}},
            },
        ),
    )
    validated(chart, manifests)
    for name in (f"{FULLNAME}-mongodb", f"{FULLNAME}-mongodb-arbiter"):
        assert {
            k: c["whenUnsatisfiable"] for k, c in spread_of(only(manifests, "StatefulSet", name)).items()
        } == {
            "topology.kubernetes.io/zone": "DoNotSchedule",
            "kubernetes.io/hostname": "DoNotSchedule",
        }
    assert {
        k: c["whenUnsatisfiable"]
        for k, c in spread_of(only(manifests, "Deployment", f"{FULLNAME}-worker")).items()
    } == {
        "topology.kubernetes.io/zone": "ScheduleAnyway",
        "kubernetes.io/hostname": "DoNotSchedule",
    }
    own = [
        {
            "maxSkew": 2,
            "topologyKey": "example.com/rack",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    replaced = render(
        chart, {"worker": {"topologySpreadConstraints": own}, "mongodb": {"topologySpreadConstraints": own}}
    )
    assert pod_spec(only(replaced, "Deployment", f"{FULLNAME}-worker"))["topologySpreadConstraints"] == own
    assert pod_spec(only(replaced, "StatefulSet", f"{FULLNAME}-mongodb"))["topologySpreadConstraints"] == own


# What a member needs before it can be ready, beyond what its probes take to notice: a volume, the mongo image pulled
# on its node, the init containers, mongod's start, and the init Job adding it to the set (docs/kubernetes.md).
MEMBER_START_SECONDS = 120


def notes(chart: helm_python.Chart, values: dict[str, Any]) -> str:
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    [text] = [text for template, text in rendered.items() if template.endswith("NOTES.txt")]
    return text


@pytest.mark.parametrize(
    ("members", "arbiter", "minutes"), [(3, False, 10), (2, True, 10), (5, False, 16), (1, False, 4)]
)
def test_the_stated_wait_timeout_covers_members_that_start_one_at_a_time(
    chart: helm_python.Chart, members: int, arbiter: bool, minutes: int
) -> None:
    """OrderedReady: each voter starts only once the one before is ready. Beyond its own start, a member's probes take
    up to the startup probe's period to pass, then up to a readiness period plus a probe's timeout to see it ready.
    The timeout NOTES.txt states covers every voter one after the other, and docs/kubernetes.md states the
    default install's."""
    values = {"mongodb": {"members": members, "arbiter": {"enabled": arbiter}, "allowPSA": True}}
    manifests = render(chart, values)
    statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb")
    assert statefulset.doc["spec"]["podManagementPolicy"] == "OrderedReady"
    mongod = container(statefulset, "mongod")
    readiness = mongod["readinessProbe"]
    noticed = (
        mongod["startupProbe"]["periodSeconds"] + readiness["periodSeconds"] + readiness["timeoutSeconds"]
    )
    assert noticed == 60
    needed = (members + arbiter) * (MEMBER_START_SECONDS + noticed)
    assert needed <= minutes * 60 <= needed + 60
    assert f"--timeout {minutes}m" in notes(chart, values)
    if (members, arbiter) == (3, False):
        page = (REPOSITORY / "docs" / "kubernetes.md").read_text(encoding="utf-8")
        assert f"--timeout {minutes}m" in page
        assert f"3 × ({MEMBER_START_SECONDS} + {noticed}) s = {needed} s" in page


@pytest.mark.parametrize(
    "values",
    [
        {"worker": {"metrics": {"serviceMonitor": {"enabled": True}}}},
        {"mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}}},
    ],
    ids=["workers", "exporter"],
)
def test_a_service_monitor_the_network_policies_would_block_is_refused_naming_the_fix(
    chart: helm_python.Chart, values: dict[str, Any]
) -> None:
    with pytest.raises(helm_python.HelmRenderError) as refused:
        render(chart, values)
    message = str(refused.value)
    assert "worker.metrics.from is empty" in message
    assert "Set worker.metrics.from to your Prometheus" in message
    # Either fix renders: the peers named, or no NetworkPolicies at all.
    render(chart, merged(values, {"worker": {"metrics": {"from": MONITORING}}}))
    render(chart, merged(values, {"networkPolicy": {"enabled": False}}))


# --- KEDA -----------------------------------------------------------------------------------------


def test_the_vendored_keda_crd_is_the_published_file() -> None:
    text = KEDA_CRD.read_text(encoding="utf-8")
    header, body = text.split("\n---\n", 1)
    recorded = re.search(r"^# sha256: ([0-9a-f]{64})$", header, re.M)
    assert recorded, "the header records the sha256 of the published file"
    assert hashlib.sha256(f"---\n{body}".encode()).hexdigest() == recorded.group(1)
    assert "github.com/kedacore/keda/blob/v2." in header
    assert yaml.safe_load(body)["metadata"]["name"] == "scaledobjects.keda.sh"


def test_keda_scales_the_workers_on_the_mailbox_backlog(chart: helm_python.Chart) -> None:
    values = CONFIGURATIONS["KEDA on the backlog"]
    manifests = render(chart, values)
    assert "keda.sh/v1alpha1/ScaledObject" in validated(chart, manifests)
    worker = only(manifests, "Deployment", f"{FULLNAME}-worker")
    assert "replicas" not in worker.doc["spec"], "KEDA's HPA owns the replica count"
    assert "HorizontalPodAutoscaler" not in kinds(manifests)
    scaled = only(manifests, "ScaledObject", f"{FULLNAME}-worker").doc["spec"]
    assert scaled["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": worker.name}
    # The CRD's CEL rule (which jsonschema does not run): minReplicaCount <= maxReplicaCount.
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (2, 8)
    triggers = {trigger["name"]: trigger for trigger in scaled["triggers"]}
    assert set(triggers) == {"mailbox-events", "mailbox-oldest-due-age"}
    exported = {metric.name for metric in Metrics().registry.collect()}
    service = only(manifests, "Service", f"{FULLNAME}-worker-metrics")
    for name, metric, metric_type, threshold in (
        ("mailbox-events", "harel_mailbox_events", "AverageValue", "100"),
        ("mailbox-oldest-due-age", "harel_mailbox_oldest_due_age_seconds", "Value", "30"),
    ):
        trigger = triggers[name]
        assert trigger["type"] == "prometheus"
        assert trigger["metricType"] == metric_type
        metadata = trigger["metadata"]
        assert metadata["serverAddress"] == values["worker"]["keda"]["prometheus"]["serverAddress"]
        assert metadata["threshold"] == threshold
        # Every worker reports the database's one backlog: the max of theirs, for this release's workers only.
        assert metadata["query"] == f'max({metric}{{namespace="{NAMESPACE}",service="{service.name}"}})'
        assert metric in exported
    custom = merged(values, {"worker": {"keda": {"prometheus": {"labelMatchers": 'job="orders"'}}}})
    scaled = only(render(chart, custom), "ScaledObject", f"{FULLNAME}-worker").doc["spec"]
    assert scaled["triggers"][0]["metadata"]["query"] == 'max(harel_mailbox_events{job="orders"})'


def test_keda_and_the_cpu_autoscaler_are_one_or_the_other(chart: helm_python.Chart) -> None:
    keda = CONFIGURATIONS["KEDA on the backlog"]
    with pytest.raises(
        helm_python.HelmRenderError,
        match=r"worker\.autoscaling\.enabled and worker\.keda\.enabled are both true",
    ):
        render(chart, merged(keda, {"worker": {"autoscaling": {"enabled": True}}}))
    with pytest.raises(
        helm_python.HelmRenderError,
        match=r"worker\.keda\.maxReplicas \(2\) must be at least worker\.keda\.minReplicas \(3\)",
    ):
        render(chart, merged(keda, {"worker": {"keda": {"minReplicas": 3, "maxReplicas": 2}}}))
    assert "ScaledObject" not in kinds(render(chart))


def test_a_scaled_object_template_with_a_key_its_crd_lacks_fails_the_validation(tmp_path: Path) -> None:
    """The vendored CRD catches a chart bug: the ScaledObject's pollingInterval misnamed."""
    broken = planted(tmp_path, "worker/scaledobject.yaml", "  pollingInterval: {{", "  pollInterval: {{")
    with helm_python.Chart.load(broken) as chart:
        manifests = render(chart, CONFIGURATIONS["KEDA on the backlog"])
        with pytest.raises(jsonschema.ValidationError, match="pollInterval"):
            validated(chart, manifests)


# --- properties every configuration keeps ---------------------------------------------------------


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_every_container_is_non_root_and_long_running_ones_are_probed(
    chart: helm_python.Chart, configuration: str
) -> None:
    manifests = pods(render(chart, CONFIGURATIONS[configuration]))
    assert manifests
    for manifest in manifests:
        spec = pod_spec(manifest)
        where = f"{manifest.kind} {manifest.name}"
        pod_context = spec["securityContext"]
        assert pod_context["runAsNonRoot"] is True, where
        assert pod_context["runAsUser"] > 0, where
        assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec["automountServiceAccountToken"] is False, where
        images = {image_name(c["image"]) for c in spec["containers"]}
        expected_uid = (
            MONGO_UID
            if "mongo" in images
            else EXPORTER_UID
            if images == {"percona/mongodb_exporter"}
            else WORKER_UID
        )
        assert pod_context["runAsUser"] == pod_context["fsGroup"] == expected_uid, where
        long_running = manifest.kind in {"Deployment", "StatefulSet"}
        for c in spec.get("initContainers", []) + spec["containers"]:
            context = c["securityContext"]
            assert context["runAsNonRoot"] is True, f"{where}/{c['name']}"
            # The uid it runs as: its own, else the pod's (a platform team's Job sidecar runs in pods of two users).
            assert context.get("runAsUser", pod_context["runAsUser"]) == pod_context["runAsUser"], (
                f"{where}/{c['name']}"
            )
            assert context["allowPrivilegeEscalation"] is False, f"{where}/{c['name']}"
            assert context["readOnlyRootFilesystem"] is True, f"{where}/{c['name']}"
            assert context["capabilities"] == {"drop": ["ALL"]}, f"{where}/{c['name']}"
            assert c["resources"]["requests"], f"{where}/{c['name']}"
        if long_running:
            for c in spec["containers"]:
                assert "readinessProbe" in c, f"{where}/{c['name']} has no readiness probe"
                assert "livenessProbe" in c, f"{where}/{c['name']} has no liveness probe"


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_credentials_only_reach_containers_as_files(chart: helm_python.Chart, configuration: str) -> None:
    for manifest in pods(render(chart, CONFIGURATIONS[configuration])):
        spec = pod_spec(manifest)
        for c in spec.get("initContainers", []) + spec["containers"]:
            for name, item in env_of(c).items():
                if name.endswith("_FILE"):
                    # The path of a file in a mounted volume, not the secret.
                    mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
                    assert any(item["value"].startswith(f"{m}/") for m in mounts), f"{manifest.name}: {name}"
                elif re.search(r"PASSWORD|URL|SECRET|TOKEN", name):
                    # Only a program with no way to read a file (the exporter) gets a Secret's value.
                    assert "value" not in item, f"{manifest.name}/{c['name']}: {name} is a plain value"
                    assert "secretKeyRef" in item["valueFrom"], name
                    assert c["name"] == "exporter", f"{manifest.name}/{c['name']}: {name} is not a file"
                else:
                    assert "://" not in str(item.get("value", "")), f"{name} carries a URL as plain text"


def test_no_secret_defaults_in_values() -> None:
    def walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(node, dict):
            for key, value in node.items():
                yield from walk(value, f"{path}.{key}" if path else key)
        else:
            yield path, node

    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    sensitive = [
        (path, value)
        for path, value in walk(values, "")
        if re.search(r"(password|secret|token|url|keyfile)$", path, re.I)
    ]
    assert {path for path, _ in sensitive} >= {
        "mongodb.auth.existingSecret",
        "externalMongodb.url",
        "externalMongodb.existingSecret",
        "tls.existingSecret",
    }
    assert all(value == "" for _, value in sensitive), sensitive


def test_no_password_literal_in_templates_or_scripts() -> None:
    sources = [
        p for p in CHART_DIR.rglob("*") if p.is_file() and p.suffix in {".yaml", ".tpl", ".txt", ".js", ".sh"}
    ]
    assert len(sources) > 10
    literal = re.compile(r"""(password|passwd|pwd|secret|token)["']?\s*[:=]\s*["'][^"'{}$]+["']""", re.I)
    for source in sources:
        for number, line in enumerate(source.read_text().splitlines(), 1):
            assert not literal.search(line), f"{source.relative_to(CHART_DIR)}:{number}: {line.strip()}"
    # Secret data is only ever computed: generated, looked up, or the user's own value.
    for source in (CHART_DIR / "templates").rglob("*secret*.yaml"):
        text = source.read_text()
        data = text.split("\ndata:\n", 1)[1]
        for line in data.splitlines():
            if line.strip() and not line.lstrip().startswith("{{-"):
                key, value = line.strip().split(":", 1)
                assert value.strip().startswith("{{"), f"{source.name}: {key} is not computed"


def test_chart_metadata(chart: helm_python.Chart) -> None:
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["appVersion"] == "0.1.0"
    assert metadata["kubeVersion"].startswith(">=")
    assert chart.values["mongodb"]["members"] == 3
    assert chart.values["mongodb"]["image"] == {
        "repository": "mongo",
        "tag": "8.0.26",
        "pullPolicy": "IfNotPresent",
        "digest": "",
    }


def test_every_value_is_documented() -> None:
    text = (CHART_DIR / "values.yaml").read_text()
    documented = set(re.findall(r"^\s*## @param (\S+) ", text, re.M))
    leaves: set[str] = set()

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict) and node and path not in documented:
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else key)
        else:
            leaves.add(path)

    walk(yaml.safe_load(text), "")
    assert leaves - documented == set()
    assert documented - leaves == set(), "documented values that do not exist"


def test_schema_accepts_the_defaults_and_refuses_unknown_keys(chart: helm_python.Chart) -> None:
    chart.validate_schema(chart.values)
    with pytest.raises(helm_python.HelmValuesError, match="additional properties 'replicas' not allowed"):
        chart.validate_schema({"replicas": 3})


# --- the MongoDB scripts, run under a fake mongosh on Node.js -------------------------------------

FAKE_MONGOSH = Path(__file__).with_name("fake_mongosh.js")
SCRIPTS_DIR = "/var/run/harel/scripts"
ROOT_PASSWORD_FILE = "/var/run/harel/root/root-password"
NODE = shutil.which("node")
requires_node = pytest.mark.skipif(
    NODE is None,
    reason="Node.js is not installed: the chart's mongosh scripts run under a fake mongosh on it",
)


@dataclass(frozen=True)
class ScriptRun:
    ok: bool
    error: str | None
    printed: list[str]
    calls: list[dict[str, Any]]
    # The hosts and URL options of each connection the script opened.
    connections: list[dict[str, Any]]
    cluster: dict[str, Any]

    def commands(self, host: str | None = None) -> list[str]:
        return [call["command"] for call in self.calls if host is None or call["host"] == host]


@dataclass(frozen=True)
class MongoScripts:
    files: dict[str, str]
    config: dict[str, Any]
    root_password: str
    app_password: str


def mongo_scripts(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> MongoScripts:
    files = only(render(chart, values), "ConfigMap", f"{FULLNAME}-mongodb-scripts").doc["data"]
    return MongoScripts(
        files=files,
        config=json.loads(files["init-config.json"]),
        root_password=secrets.token_hex(16),
        app_password=secrets.token_hex(16),
    )


def test_bootstrap_leaves_a_member_of_a_replica_set_alone_under_mongosh(
    chart: helm_python.Chart, fake_standalone: FakeDeployment, tmp_path: Path
) -> None:
    """bootstrap-root.js under the real mongosh against the fake, as bootstrap-root.sh runs it, on a data directory
    that already holds a replica-set config: it must not touch users (test_bootstrap_creates_the_root_user_once_under_mongosh
    covers an empty one)."""
    scripts = mongo_scripts(chart)
    with MongoClient(fake_standalone.url) as client:
        client.local["system.replset"].insert_one({"_id": "rs0", "version": 1, "members": []})
    script = tmp_path / "bootstrap-root.js"
    script.write_text(scripts.files["bootstrap-root.js"])
    password_file = tmp_path / "root-password"
    password_file.write_text(scripts.root_password + "\n")
    # bootstrap-root.sh: mongosh --quiet --norc --port "${HAREL_MONGO_PORT}" .../bootstrap-root.js
    assert (
        f'mongosh --quiet --norc --port "${{HAREL_MONGO_PORT}}" {SCRIPTS_DIR}/bootstrap-root.js'
        in (scripts.files["bootstrap-root.sh"])
    )

    run = mongosh(
        ["--quiet", "--norc", "--port", str(fake_standalone.port), str(script)],
        home=tmp_path / "home",
        env={
            "HAREL_MONGO_ROOT_USERNAME": scripts.config["rootUsername"],
            "HAREL_MONGO_ROOT_PASSWORD_FILE": str(password_file),
        },
    )

    assert run.returncode == 0, run.stderr
    assert run.lines == [
        "bootstrap-root: this member already belongs to a replica set; its users come from the set"
    ]


def test_bootstrap_creates_the_root_user_once_under_mongosh(
    chart: helm_python.Chart, fake_standalone: FakeDeployment, tmp_path: Path
) -> None:
    """bootstrap-root.js under the real mongosh, against the fake as member 0's temporary standalone instance (no
    replica-set config, no auth): it creates the root user, and a second run resets the same password."""
    scripts = mongo_scripts(chart)
    script = tmp_path / "bootstrap-root.js"
    script.write_text(scripts.files["bootstrap-root.js"])
    password_file = tmp_path / "root-password"
    password_file.write_text(scripts.root_password + "\n")
    arguments = ["--quiet", "--norc", "--port", str(fake_standalone.port), str(script)]
    env = {
        "HAREL_MONGO_ROOT_USERNAME": scripts.config["rootUsername"],
        "HAREL_MONGO_ROOT_PASSWORD_FILE": str(password_file),
    }

    first = mongosh(arguments, home=tmp_path / "home", env=env)
    again = mongosh(arguments, home=tmp_path / "home", env=env)

    assert (first.returncode, first.lines) == (
        0,
        [f"bootstrap-root: created user {scripts.config['rootUsername']}"],
    )
    assert (again.returncode, again.lines) == (
        0,
        [f"bootstrap-root: reset user {scripts.config['rootUsername']}"],
    )
    with MongoClient(fake_standalone.url) as client:
        [user] = client.admin.command("usersInfo", scripts.config["rootUsername"])["users"]
    assert user["roles"] == [{"role": "root", "db": "admin"}]


def readiness_command(manifests: list[Manifest], statefulset: str, port: int, script: Path) -> list[str]:
    """The member's readiness probe as rendered, pointed at `port` and at a local copy of its script."""
    command = container(only(manifests, "StatefulSet", statefulset), "mongod")["readinessProbe"]["exec"][
        "command"
    ]
    assert command[-1] == f"{SCRIPTS_DIR}/member-ready.js"
    assert command[command.index("--port") + 1] == "27017"
    command = [*command[:-1], str(script)]
    command[command.index("--port") + 1] = str(port)
    return command


def test_readiness_probe_runs_under_mongosh_and_judges_the_member_state(
    chart: helm_python.Chart,
    fake_rs: FakeDeployment,
    fake_secondary: FakeDeployment,
    tmp_path: Path,
) -> None:
    """The rendered probe, as the kubelet runs it, under the real mongosh against the fake replica set."""
    manifests = render(chart)
    script = tmp_path / "member-ready.js"
    script.write_text(
        only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-scripts").doc["data"]["member-ready.js"]
    )

    def probe(port: int) -> MongoshRun:
        return mongosh(
            readiness_command(manifests, f"{FULLNAME}-mongodb", port, script), home=tmp_path / "home"
        )

    primary, secondary = probe(fake_rs.port), probe(fake_secondary.port)
    fake_rs.server.set_initialized(False)
    unconfigured = probe(fake_rs.port)

    assert (primary.returncode, secondary.returncode) == (0, 0), (primary.stderr, secondary.stderr)
    assert unconfigured.returncode == 1
    assert unconfigured.lines == [
        "not ready: no replica-set config yet, neither primary, secondary nor arbiter"
    ]


@requires_node
def test_readiness_script_takes_an_arbiter_and_refuses_a_syncing_member(chart: helm_python.Chart) -> None:
    """The two states the fake replica set cannot take (it has no arbiter and no initial sync), under Node.js."""
    manifests = render(chart, CONFIGURATIONS["PSA allowed"])
    script = only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-scripts").doc["data"]["member-ready.js"]
    assert readiness_command(manifests, f"{FULLNAME}-mongodb-arbiter", 27017, Path("member-ready.js"))[
        -1
    ] == ("member-ready.js")

    def exit_code(hello: dict[str, Any]) -> int:
        assert NODE is not None
        program = (
            f"const db = {{ adminCommand: () => ({json.dumps(hello)}) }};"
            "const print = () => {}; const quit = (status) => process.exit(status);"
            f"{script};"
            "process.exit(0);"
        )
        return subprocess.run([NODE, "-e", program], check=False, timeout=60).returncode

    arbitrating = {"isWritablePrimary": False, "secondary": False, "arbiterOnly": True, "setName": "rs0"}
    syncing = {"isWritablePrimary": False, "secondary": False, "setName": "rs0"}
    assert [exit_code(arbitrating), exit_code(syncing)] == [0, 1]


def test_shell_scripts_parse(chart: helm_python.Chart, tmp_path: Path) -> None:
    statefulset = only(render(chart, CONFIGURATIONS["TLS"]), "StatefulSet", f"{FULLNAME}-mongodb")
    scripts = mongo_scripts(chart)
    for name, text in {
        "bootstrap-root.sh": scripts.files["bootstrap-root.sh"],
        "prepare-credentials.sh": container(statefulset, "prepare-credentials")["command"][-1],
    }.items():
        path = tmp_path / name
        path.write_text(text)
        checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"


# --- upgrades of a release in a cluster (the templates' lookups answered by tests/infra/fake_kube_api.py) -------


def upgrade(api: FakeKubeApi, chart: helm_python.Chart, values: dict[str, Any]) -> list[Manifest]:
    """Render as `helm upgrade` against the fake cluster, then apply the Secret and StatefulSets it rendered."""
    with Config(kubeconfig_content=api.kubeconfig, namespace=NAMESPACE) as config:
        rendered = config.render(chart, values, name=RELEASE, namespace=NAMESPACE, is_upgrade=True)
    manifests = [
        Manifest(template, doc)
        for template, text in sorted(rendered.items())
        if not template.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    for manifest in manifests:
        if manifest.kind in ("Secret", "StatefulSet"):
            api.apply(manifest.doc)
    return manifests


def test_members_one_three_five_three_render_and_three_to_one_is_refused(chart: helm_python.Chart) -> None:
    with fake_kube_api() as api:
        jobs: list[str] = []
        for members in (1, 3, 5, 3):
            manifests = upgrade(api, chart, {"mongodb": {"members": members}})
            statefulset = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb").doc
            assert statefulset["spec"]["replicas"] == members
            assert statefulset["spec"]["podManagementPolicy"] == "OrderedReady"
            [job] = [m for m in manifests if m.kind == "Job"]
            config = json.loads(
                only(manifests, "ConfigMap", f"{FULLNAME}-mongodb-scripts").doc["data"]["init-config.json"]
            )
            assert len(config["dataMembers"]) == members
            jobs.append(job.name)
        # Each change replaces the Job (Helm deletes the one no longer rendered), so the reconcile runs again.
        assert all(before != after for before, after in itertools.pairwise(jobs)), jobs
        # The credentials were generated once and kept: every render found the Secret the first one applied.
        with pytest.raises(
            helm_python.HelmRenderError, match="going from 3 to 1 voting members at once would leave 1 of 3"
        ):
            upgrade(api, chart, {"mongodb": {"members": 1}})
        # 5 -> 3 kept a majority; so does 3 -> 2 with an arbiter (3 voters before and after).
        upgrade(api, chart, {"mongodb": {"members": 2, "arbiter": {"enabled": True}, "allowPSA": True}})


def test_offline_a_new_revision_of_the_existing_secret_reruns_the_init_job_and_rolls_the_pods(
    chart: helm_python.Chart,
) -> None:
    """Rendered offline (helm template, GitOps), the chart cannot read mongodb.auth.existingSecret: its
    checksums and the init Job's name would never change with the credentials. mongodb.auth.revision changes
    them; the same revision renders the same names (no drift)."""

    def identity(revision: str) -> tuple[str, str, str]:
        manifests = render(
            chart, {"mongodb": {"auth": {"existingSecret": "harel-creds", "revision": revision}}}
        )
        [job] = [m for m in manifests if m.kind == "Job"]
        worker = only(manifests, "Deployment", f"{FULLNAME}-worker").doc["spec"]["template"]
        members = only(manifests, "StatefulSet", f"{FULLNAME}-mongodb").doc["spec"]["template"]
        return (
            job.name,
            worker["metadata"]["annotations"]["checksum/credentials"],
            members["metadata"]["annotations"]["checksum/keyfile"],
        )

    first, again, rotated = identity("1"), identity("1"), identity("2")
    assert first == again, "an unchanged revision changes nothing"
    assert all(before != after for before, after in zip(first, rotated, strict=True)), (first, rotated)


def test_a_rotated_password_reaches_the_init_job_and_the_workers(chart: helm_python.Chart) -> None:
    with fake_kube_api() as api:
        first = upgrade(api, chart, {})
        again = upgrade(api, chart, {})
        secret = only(again, "Secret", f"{FULLNAME}-mongodb-auth")
        assert secret.doc["data"] == only(first, "Secret", f"{FULLNAME}-mongodb-auth").doc["data"], "kept"

        def job_and_checksum(manifests: list[Manifest]) -> tuple[str, str]:
            [job] = [m for m in manifests if m.kind == "Job"]
            worker = only(manifests, "Deployment", f"{FULLNAME}-worker").doc
            return job.name, worker["spec"]["template"]["metadata"]["annotations"]["checksum/credentials"]

        assert job_and_checksum(first) == job_and_checksum(again), "nothing changed, nothing reruns"
        # The operator's rotation (docs/kubernetes.md): the old root password moves to previous-root-password, a new one
        # and a new app password go in.
        data = dict(secret.doc["data"])
        data["previous-root-password"] = data["root-password"]
        data["root-password"] = base64.b64encode(secrets.token_hex(16).encode()).decode()
        data["app-password"] = base64.b64encode(secrets.token_hex(16).encode()).decode()
        api.apply({**secret.doc, "data": data})
        rotated = upgrade(api, chart, {})
        kept = secret_data(only(rotated, "Secret", f"{FULLNAME}-mongodb-auth"))
        assert kept["previous-root-password"] == base64.b64decode(data["previous-root-password"]).decode()
        assert f":{base64.b64decode(data['app-password']).decode()}@" in kept["mongodb-url"]
        job, checksum = job_and_checksum(rotated)
        assert job != job_and_checksum(again)[0], "a new init Job sets the new passwords"
        assert checksum != job_and_checksum(again)[1], "the workers roll to the new URL"
