"""Strict `helm lint` of the harel-stack chart, through the Helm library itself (helm-python-sdk
bundles libhelm: no helm binary, no cluster, no network).

The chart is linted once per supported configuration, not only with its defaults: a template
that breaks only with TLS on or in external mode would otherwise pass. Strict mode turns Helm's
warnings into findings; informational notes (such as "icon is recommended") are printed but are
not findings.

    python -m tests.infra.helm_lint      # exit 0: no finding; exit 1: findings, printed one a line
"""

from __future__ import annotations

import hashlib
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "harel-stack"

# Helm's lint severities: 1 info, 2 warning, 3 error.
_INFO = 1
# The peers a release that is scraped lets reach /metrics: a monitoring namespace.
MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def digest(image: str) -> str:
    """A made-up but well-formed image digest, the same on every call for the same image."""
    return f"sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _hardened(uid: int | None) -> dict[str, Any]:
    """The security context a platform team's container needs beside the chart's (uid None: the pod's)."""
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return context if uid is None else {"runAsUser": uid, "runAsGroup": uid, **context}


def _container(name: str, uid: int | None, *, probed: bool) -> dict[str, Any]:
    image = f"registry.example/platform/{name}"
    container: dict[str, Any] = {
        "name": name,
        "image": f"{image}@{digest(image)}",
        "securityContext": _hardened(uid),
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    }
    if probed:
        container |= {
            "ports": [{"name": "proxy", "containerPort": 15001}],
            "readinessProbe": {"tcpSocket": {"port": 15001}, "periodSeconds": 10},
            "livenessProbe": {"tcpSocket": {"port": 15001}, "periodSeconds": 20},
        }
    return container


def extension_points(workload: str, uid: int | None, *, probed: bool = True) -> dict[str, Any]:
    """Every extension point of one workload (worker, mongodb, jobs) set, as a platform team would set them."""
    return {
        "podAnnotations": {"platform.example/team": "workflows", "sidecar.example/inject": "false"},
        "podLabels": {"platform.example/cost-centre": "cc-42"},
        "priorityClassName": f"{workload}-critical",
        "extraEnv": [
            {"name": "HTTPS_PROXY", "value": "proxy.example.invalid:3128"},
            {
                "name": "PLATFORM_REGION",
                "valueFrom": {"configMapKeyRef": {"name": "platform", "key": "region"}},
            },
        ],
        "extraEnvFrom": [{"configMapRef": {"name": "platform-settings"}}],
        "extraVolumes": [{"name": "platform-ca", "configMap": {"name": "platform-ca-bundle"}}],
        "extraVolumeMounts": [{"name": "platform-ca", "mountPath": "/etc/platform/ca", "readOnly": True}],
        "initContainers": [_container(f"{workload}-prepare", uid, probed=False)],
        "sidecars": [_container(f"{workload}-proxy", uid, probed=probed)],
        "nodeSelector": {"platform.example/pool": workload},
        "tolerations": [
            {
                "key": "platform.example/dedicated",
                "operator": "Equal",
                "value": workload,
                "effect": "NoSchedule",
            }
        ],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "preference": {
                            "matchExpressions": [
                                {"key": "platform.example/generation", "operator": "In", "values": ["3"]}
                            ]
                        },
                    }
                ]
            }
        },
    }


def kube_version() -> str:
    """The newest Kubernetes version kubernetes-validate has schemas for: lint and validation target it."""
    return f"v{kubernetes_validate.latest_version()}"


def configurations() -> dict[str, dict[str, Any]]:
    """Every configuration the chart supports, by name, as values overriding the defaults.

    Built on each call: the external URL carries a fresh random password, so no credential is
    written down anywhere.
    """
    external_url = (
        f"mongodb+srv://harel:{secrets.token_urlsafe(24)}@mongo.example.invalid/harel?authSource=admin"
    )
    return {
        "default": {},
        "single member": {"mongodb": {"members": 1}},
        "four members + arbiter": {"mongodb": {"members": 4, "arbiter": {"enabled": True}}},
        "PSA allowed": {"mongodb": {"members": 2, "arbiter": {"enabled": True}, "allowPSA": True}},
        "TLS allowed": {"tls": {"mode": "allowTLS", "existingSecret": "harel-mongodb-tls", "reloader": True}},
        "TLS": {"tls": {"mode": "requireTLS", "existingSecret": "harel-mongodb-tls"}},
        "existing MongoDB secret": {"mongodb": {"auth": {"existingSecret": "harel-mongodb-credentials"}}},
        "init Job kept an hour": {"mongodb": {"init": {"ttlSecondsAfterFinished": 3600}}},
        "metrics scraped, no NetworkPolicies": {
            "worker": {"metrics": {"from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}},
            "networkPolicy": {"enabled": False},
        },
        "external URL": {"mongodb": {"enabled": False}, "externalMongodb": {"url": external_url}},
        "external secret": {
            "mongodb": {"enabled": False},
            "externalMongodb": {"existingSecret": "atlas-connection", "existingSecretKey": "url"},
        },
        "external + TLS CA": {
            "mongodb": {"enabled": False},
            "externalMongodb": {"existingSecret": "atlas-connection"},
            "tls": {"mode": "requireTLS", "existingSecret": "private-ca"},
            "networkPolicy": {"externalMongodbTo": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]},
        },
        # docs/deploying-your-app.md: the README's order app in its own image.
        "your app's image": {
            "worker": {
                "image": {"repository": "registry.example/shop/order-worker", "tag": "1.0.0"},
                "app": "orders.app:app",
            }
        },
        "autoscaling + ServiceMonitor": {
            "worker": {
                "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
                "metrics": {
                    "from": MONITORING,
                    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                },
                "app": "orders.workflows:app",
            },
            "imagePullSecrets": [{"name": "registry-credentials"}],
        },
        "metrics, dashboard, alerts, backups to a volume": {
            "mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "worker": {"metrics": {"from": MONITORING}},
            "grafanaDashboard": {"enabled": True},
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "backup": {"enabled": True},
        },
        "metrics + backups to S3, TLS, plain Jobs": {
            "mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "worker": {"metrics": {"from": MONITORING}},
            "backup": {
                "enabled": True,
                "target": "s3",
                "s3": {
                    "bucket": "harel-backups",
                    "existingSecret": "s3-credentials",
                    "endpoint": "https://minio.example.invalid:9000",
                },
            },
            "opsUsers": {"existingSecret": "harel-ops-credentials"},
            "tls": {"mode": "requireTLS", "existingSecret": "harel-mongodb-tls"},
        },
        "KEDA on the backlog": {
            "worker": {
                "keda": {
                    "enabled": True,
                    "maxReplicas": 8,
                    "prometheus": {"serverAddress": "http://prometheus-operated.monitoring.svc:9090"},
                },
                "metrics": {"from": MONITORING, "serviceMonitor": {"enabled": True}},
            },
        },
        # Every extension point of every workload, hard spread of the members, and every image by digest.
        "every extension point, images by digest": {
            "worker": extension_points("worker", 10001)
            | {"image": {"digest": digest("harel-stack/worker")}, "spread": {"zone": "soft", "node": "hard"}},
            "mongodb": extension_points("mongodb", 999)
            | {
                "image": {"digest": digest("mongo")},
                "extraFlags": [
                    "--setParameter=diagnosticDataCollectionEnabled=false",
                    "--oplogSize",
                    "4096",
                ],
                "spread": {"zone": "hard", "node": "hard"},
            },
            # Job pods run as different users (the worker's, mongod's): their containers take the pod's.
            "jobs": extension_points("jobs", None, probed=False),
            "mongodbExporter": {"enabled": True, "image": {"digest": digest("percona/mongodb_exporter")}},
            "backup": {
                "enabled": True,
                "target": "s3",
                "s3": {
                    "bucket": "harel-backups",
                    "existingSecret": "s3-credentials",
                    "image": {"digest": digest("amazon/aws-cli")},
                },
            },
        },
        # Topology sharded (docs/sharded-clusters.md): the smallest cluster, three shards with TLS, one-member sets.
        "sharded, 2 shards": {"mongodb": {"topology": "sharded"}},
        "sharded, 3 shards, TLS": {
            "mongodb": {"topology": "sharded", "sharded": {"shards": 3, "partitions": 96}},
            "tls": {"mode": "requireTLS", "existingSecret": "harel-mongodb-tls", "reloader": True},
        },
        # The exporter beside each router, scraped by a ServiceMonitor, with and without TLS.
        "sharded, 2 shards, metrics": {
            "mongodb": {"topology": "sharded"},
            "mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "prometheusRule": {"enabled": True},
            "worker": {"metrics": {"from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}},
        },
        "sharded, 3 shards, TLS, metrics": {
            "mongodb": {"topology": "sharded", "sharded": {"shards": 3}},
            "tls": {"mode": "requireTLS", "existingSecret": "harel-mongodb-tls"},
            "mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "worker": {"metrics": {"from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}},
        },
        "sharded, one-member sets, one router": {
            "mongodb": {
                "topology": "sharded",
                "sharded": {
                    "configsvr": {"replicaCount": 1},
                    "shardsvr": {"replicaCount": 1},
                    "mongos": {"replicaCount": 1},
                },
            },
        },
        "external mongos routers": {
            "mongodb": {"enabled": False},
            "externalMongodb": {
                "url": f"mongodb://harel:{secrets.token_urlsafe(24)}@mongos-a.example.invalid:27017,"
                "mongos-b.example.invalid:27017/harel?authSource=admin"
            },
        },
        "dashboard + alerts, external MongoDB": {
            "mongodb": {"enabled": False},
            "externalMongodb": {"existingSecret": "atlas-connection"},
            "grafanaDashboard": {"enabled": True},
            "prometheusRule": {"enabled": True},
        },
    }


@dataclass(frozen=True)
class Finding:
    configuration: str
    severity: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"[{self.configuration}] {self.path}: {self.message.strip()}"


@dataclass(frozen=True)
class LintResult:
    findings: list[Finding]
    notes: list[Finding]
    charts_linted: int


def lint(configuration: str, values: dict[str, Any]) -> LintResult:
    """Lint the chart strictly with `values`; warnings and errors are findings, infos are notes."""
    report = helm_python.lint(CHART_DIR, values, strict=True, kube_version=kube_version())
    messages = [
        Finding(configuration, int(message["severity"]), str(message["path"]), str(message["error"]))
        for message in report["messages"]
    ]
    findings = [message for message in messages if message.severity > _INFO]
    reported = {finding.message for finding in findings}
    # Errors the library raised outside its message list still count.
    findings += [
        Finding(configuration, 3, "chart", str(error))
        for error in report["errors"]
        if str(error) not in reported
    ]
    notes = [message for message in messages if message.severity <= _INFO]
    return LintResult(findings=findings, notes=notes, charts_linted=int(report["total_charts_linted"]))


def main() -> int:
    failed = False
    notes: set[str] = set()
    for name, values in configurations().items():
        result = lint(name, values)
        notes.update(f"{note.path}: {note.message.strip()}" for note in result.notes)
        for finding in result.findings:
            print(f"FINDING {finding}")
        failed = failed or bool(result.findings) or result.charts_linted != 1
    for note in sorted(notes):
        print(f"note (every configuration) {note}")
    print(
        f"helm lint --strict ({kube_version()}): {'findings above' if failed else 'clean'} in {CHART_DIR.name}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
