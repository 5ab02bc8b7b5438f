"""Strict `helm lint` of the harel-stack chart, through the Helm library itself (helm-python-sdk
bundles libhelm: no helm binary, no cluster, no network).

The chart is linted once per supported configuration, not only with its defaults: a template
that breaks only with TLS on or in external mode would otherwise pass. Strict mode turns Helm's
warnings into findings; informational notes (such as "icon is recommended") are printed but are
not findings.

    python -m tests.infra.helm_lint      # exit 0: no finding; exit 1: findings, printed one a line
"""

from __future__ import annotations

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
                "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
                "app": "orders.workflows:app",
            },
            "imagePullSecrets": [{"name": "registry-credentials"}],
        },
        "metrics, dashboard, alerts, backups to a volume": {
            "mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "grafanaDashboard": {"enabled": True},
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "backup": {"enabled": True},
        },
        "metrics + backups to S3, TLS, plain Jobs": {
            "mongodbExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
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
