"""checkov (from PyPI, in its own virtualenv: tests/tools/checkov.txt) on every rendered Helm configuration, the
worker Dockerfile and the template of an app's (compose/Dockerfile.app), the compose file and the Ansible
playbooks. No check may fail except the ones skipped below, each with the reason it does not apply."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.infra.helm_lint import CHART_DIR, configurations
from tests.infra.tools import CHECKOV, required

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]

# Kubernetes checks that do not fit this chart, and why.
SKIPPED_KUBERNETES = {
    # Images are pinned by tag by default (mongo:8.0.26, the worker's appVersion); every image value takes a digest,
    # which only the registry can give (test_images_by_digest_pass_the_digest_check runs this check on them).
    "CKV_K8S_43": "image digests: opt-in (*.image.digest); the defaults are tags pinned to patch releases",
    # The user's registry and tags decide; IfNotPresent with pinned tags is the chart's default.
    "CKV_K8S_15": "imagePullPolicy Always: pinned tags make IfNotPresent safe",
    # mongod's uid 999 comes from the official image; checkov wants a uid above 10000.
    "CKV_K8S_40": "high uid: the official mongo image runs as 999",
    # CPU limits throttle mongod's and the workers' bursts; requests are set everywhere.
    "CKV_K8S_11": "CPU limits: requests are set; limits would throttle bursts",
    # The init Job and the test pod run to completion; probes apply to long-running containers, which have them.
    "CKV_K8S_8": "liveness probe on Jobs and the test pod: they run to completion",
    "CKV_K8S_9": "readiness probe on Jobs and the test pod: they run to completion",
}
# Single resources allowed to fail one check, by check and resource-name suffix, and why. A check listed here still
# runs on every other resource.
ACCEPTED_FAILURES = {
    ("CKV_K8S_35", "-mongodb-exporter"): (
        "the MongoDB exporter reads its password only from the environment (no file option), from a secretKeyRef"
    ),
    # Topology sharded with mongodbExporter.enabled: the same exporter, a container of the routers' pods; the mongos
    # container itself takes no secret from the environment (test_helm_sharded.py holds it).
    ("CKV_K8S_35", "-mongodb-mongos"): (
        "the exporter beside each router reads its password only from the environment, from a secretKeyRef"
    ),
}
# Dockerfile checks that do not fit, and why.
SKIPPED_DOCKERFILE = {
    # FROM ${PYTHON_IMAGE}: checkov does not resolve the ARG, whose default is pinned by version and digest
    # (test_worker_image.py checks that default).
    "CKV_DOCKER_7": "base image tag: an ARG checkov does not resolve, pinned by its default",
}
# And for the template of a user's app image (compose/Dockerfile.app), built FROM the worker image.
SKIPPED_APP_DOCKERFILE = SKIPPED_DOCKERFILE | {
    # The worker image's HEALTHCHECK (/readyz) is inherited; checkov does not read the base image.
    "CKV_DOCKER_2": "HEALTHCHECK: inherited from the worker image it is built FROM",
}


# Ansible checks that do not fit, and why.
SKIPPED_ANSIBLE = {
    # The worker's /readyz is plain HTTP on 127.0.0.1 of the same host: nothing leaves the machine.
    "CKV2_ANSIBLE_1": "HTTPS for uri: the readiness check talks to 127.0.0.1",
    # The role's blocks must fail the play when a step fails (a rolling restart stops there); a rescue would hide it.
    "CKV2_ANSIBLE_3": "rescue in blocks: a failed step must stop the run",
}


def run_checkov(*arguments: str) -> dict[str, Any]:
    completed = subprocess.run(
        [str(required(CHECKOV)), "--compact", "--output", "json", "--skip-download", *arguments],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    reports = json.loads(completed.stdout)
    # One report per framework with results; a scan that found nothing at all is a bare summary with no failure.
    reports = [reports] if isinstance(reports, dict) else reports
    assert completed.returncode == 0 or any("results" in report for report in reports), completed.stderr[
        -500:
    ]
    scanned = [report for report in reports if "results" in report]
    return {
        "results": {
            kind: [check for report in scanned for check in report["results"].get(kind, [])]
            for kind in ("failed_checks", "passed_checks")
        },
        "summary": {"failed": sum(report.get("summary", {}).get("failed", 0) for report in reports)},
    }


def failures(report: dict[str, Any]) -> list[str]:
    return [
        f"{c['check_id']} {c['check_name']}: {c['file_path']} {c['resource']}"
        for c in report["results"]["failed_checks"]
        if not any(
            c["check_id"] == check and c["resource"].endswith(suffix) for check, suffix in ACCEPTED_FAILURES
        )
    ]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("rendered")
    with helm_python.Chart.load(CHART_DIR) as chart:
        for index, values in enumerate(configurations().values()):
            output = chart.render(values, name="demo", namespace="harel", is_install=True)
            documents = [
                doc
                for name, text in output.items()
                if not name.endswith("NOTES.txt")
                for doc in yaml.safe_load_all(text)
                if doc
            ]
            (directory / f"configuration-{index}.yaml").write_text(yaml.safe_dump_all(documents))
    return directory


def test_no_kubernetes_check_fails_on_any_rendered_configuration(rendered: Path) -> None:
    skipped = list(SKIPPED_KUBERNETES)
    report = run_checkov(
        "--framework", "kubernetes", "--directory", str(rendered), "--skip-check", ",".join(skipped)
    )
    assert failures(report) == []
    passed = {check["check_id"] for check in report["results"]["passed_checks"]}
    # The checks this deployment is judged by ran and passed: no secret in an env value (CKV_K8S_35), and
    # every pod is selected by a NetworkPolicy (CKV2_K8S_6).
    assert {"CKV_K8S_35", "CKV2_K8S_6"} <= passed
    # Every failure checkov counted is one of the accepted ones listed above.
    accepted = [
        c for c in report["results"]["failed_checks"] if not failures({"results": {"failed_checks": [c]}})
    ]
    assert report["summary"]["failed"] == len(accepted)


def test_no_check_fails_on_the_dockerfile_compose_and_playbooks() -> None:
    report = run_checkov(
        "--framework",
        "dockerfile",
        "--file",
        str(REPOSITORY / "compose" / "Dockerfile.worker"),
        "--skip-check",
        ",".join(SKIPPED_DOCKERFILE),
    )
    assert failures(report) == []
    report = run_checkov(
        "--framework",
        "dockerfile",
        "--file",
        str(REPOSITORY / "compose" / "Dockerfile.app"),
        "--skip-check",
        ",".join(SKIPPED_APP_DOCKERFILE),
    )
    assert failures(report) == []
    assert report["results"]["passed_checks"]
    for target in (REPOSITORY / "compose", REPOSITORY / "playbooks"):
        scanned = run_checkov(
            "--framework",
            "secrets",
            "ansible",
            "--directory",
            str(target),
            "--skip-check",
            ",".join(SKIPPED_ANSIBLE),
        )
        assert failures(scanned) == [], target
        assert scanned["results"]["passed_checks"] or target.name == "compose", target


def test_images_by_digest_pass_the_digest_check(tmp_path: Path) -> None:
    """With every image value's digest set, the check skipped above (CKV_K8S_43) passes on every workload."""
    with helm_python.Chart.load(CHART_DIR) as chart:
        output = chart.render(
            configurations()["every extension point, images by digest"],
            name="demo",
            namespace="harel",
            is_install=True,
        )
    documents = [
        doc
        for name, text in output.items()
        if not name.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    (tmp_path / "by-digest.yaml").write_text(yaml.safe_dump_all(documents))
    report = run_checkov("--framework", "kubernetes", "--directory", str(tmp_path), "--check", "CKV_K8S_43")
    assert failures(report) == []
    checked = {check["resource"] for check in report["results"]["passed_checks"]}
    kinds = {resource.split(".")[0] for resource in checked}
    assert {"Deployment", "StatefulSet", "Job", "CronJob", "Pod"} <= kinds, checked
