"""Every command the deployment guides of the documentation and the roles' READMEs show, checked here.

The parts are the pages docs/compose.md, docs/kubernetes.md and docs/ansible.md, the Kubernetes sections of
docs/observability.md and docs/backups.md, and playbooks/roles/*/README.md (and compose/tls/README.md, whose test
CA is made for real). Each part's commands run in order against a scratch copy of compose/ and playbooks/
(compose/.env made from .env.example with fresh secrets), so an edit a section makes (a `sed`
on compose/.env or the inventory) is what the next command is checked against. The Ansible part's own first
commands (`cd playbooks`, `cp -r inventories/example inventories/prod`) make the inventory the others use:

- `helm install|upgrade|template`: rendered by the real Helm library (helm-python-sdk) with the command's `--set`
  values (parsed by Helm's own parser) on top of the release's values so far (`--reuse-values`); a Secret a
  `kubectl create secret` made and a value names (tls.existingSecret, ...) must hold the keys the chart reads;
- `kubectl apply -f -` (a heredoc) and `kubectl create secret generic`: the manifests, validated strictly against
  the Kubernetes schemas (kubernetes-validate); a Service or NetworkPolicy must select the release's member pods;
- `kubectl scale|wait`, `kubectl create job --from=` and `kubectl delete job`: each object named must be the
  release's as rendered (or one an earlier `kubectl apply` made), a label selector must select some of them, and a
  selector of Jobs must select every Job the chart renders of the components it names (of every component when
  it names none; each one named must have a Job) and none a CronJob creates (their names carry a hash of the
  configuration, so a selector is how a procedure names them);
- `ansible-playbook`: `--syntax-check` with the command's `-i`, `-e` and `--tags`, and the tags must select tasks;
- `docker compose`: `config` with the command's `-f`, `--env-file`, `-p` and `--profile`, by Docker Compose's own
  binary (no engine needed), and the services the command names must exist;
- `make`: the target exists in the Makefile;
- `sed`, `printf`, `openssl`, `cd`, `cp`, `chmod`: run for real in the scratch copy; compose/.env must still load and an
  inventory file must still be YAML afterwards.

What cannot run here (a cluster, a Docker engine, a vault password, a live deployment) is listed in UNCHECKED with
the reason; a command that is neither checked nor listed fails the test, and so does a listed entry no command uses.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from harel_stack.settings import SECRET_VARIABLES, load_settings
from tests.documents import DOCS, section
from tests.infra.helm_lint import CHART_DIR, kube_version
from tests.infra.tools import docker_compose

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
ROLE_READMES = sorted((REPOSITORY / "playbooks" / "roles").glob("*/README.md"))
# More READMEs with commands: the test CA for compose's TLS, run from the repository root.
OTHER_READMES = [REPOSITORY / "compose" / "tls" / "README.md"]
PARTS = {"compose": DOCS / "compose.md", "kubernetes": DOCS / "kubernetes.md", "ansible": DOCS / "ansible.md"}
# Sections of other pages whose commands are checked the same way: name -> (page, section).
SUBSECTIONS = {
    "kubernetes observability": (DOCS / "observability.md", "Kubernetes"),
    "kubernetes backups": (DOCS / "backups.md", "Kubernetes"),
}
# What every deployment shares of each day-2 task, written once.
DAY_2_PAGE = DOCS / "day-2.md"
DAY_2 = (
    "Add or remove a member",
    "Rotate the passwords",
    "Rotate the keyfile",
    "Turn on TLS",
    "Upgrade MongoDB",
    "Reach the set from outside",
)
# Commands that cannot be checked here, by program and subcommand, and why.
UNCHECKED = {
    ("helm", "test"): "runs the smoke pod in a cluster",
    ("helm", "uninstall"): "deletes a release in a cluster",
    ("kubectl", "get"): "reads a running cluster (piped to `kubectl exec`: runs mongosh in a running member)",
    ("kubectl", "logs"): "reads a running cluster",
    ("kubectl", "patch"): "changes a Secret in a running cluster (what the next helm upgrade reads back)",
    ("kubectl", "port-forward"): "needs a running cluster",
    (
        "kubectl",
        "delete",
    ): "deletes objects in a running cluster (a Job selector is checked: `names_chart_objects`)",
    ("kubectl", "exec"): "runs a command in a running pod",
    ("docker", "build"): "needs a Docker engine",
    ("docker", "push"): "needs a Docker engine and a registry",
    ("docker", "volume"): "needs a Docker engine",
    ("docker", "run"): "needs a Docker engine",
    ("ansible-vault", "create"): "opens an editor and asks for the vault password",
    ("ansible-vault", "edit"): "opens an editor and asks for the vault password",
    ("mongosh", ""): "connects to a running deployment",
    ("$EDITOR", ""): "opens an editor",
}
# kubectl commands whose objects are checked against the release as rendered (`check_kubectl_objects`).
KINDS = {"deployment": "Deployment", "cronjob": "CronJob", "job": "Job", "pod": "Pod"}
COMPONENT = "app.kubernetes.io/component"
# Programs run for real in the scratch copy.
LOCAL = ("sed", "printf", "openssl", "cp", "cd", "rm", "chmod")
SECRET_KEYS = {
    "tls.existingSecret": {"tls.crt", "tls.key", "ca.crt"},
    "externalMongodb.existingSecret": {"mongodb-url"},
    "mongodb.auth.existingSecret": {"keyfile", "root-password", "app-password", "mongodb-url"},
}


# --- reading the documentation ----------------------------------------------------------------------------------


def subsection(name: str) -> str:
    page, title = SUBSECTIONS[name]
    return section(page.read_text(encoding="utf-8"), title)


def console_blocks(text: str) -> Iterator[str]:
    for match in re.finditer(r"^( *)```console\n(.*?)^\1```", text, re.DOTALL | re.MULTILINE):
        yield textwrap.dedent(match.group(2))


def commands(block: str) -> Iterator[str]:
    """A block's commands: the `$ ` lines when it shows output too, otherwise every line; continuation lines
    joined, a heredoc kept with its command."""
    lines = block.splitlines()
    if any(line.startswith("$ ") for line in lines):
        prompted: list[str] = []
        terminator = None
        for line in lines:
            if terminator is not None:  # a heredoc's body, kept whole
                prompted.append(line)
                terminator = None if line == terminator else terminator
            elif line.startswith("$ "):
                prompted.append(line[2:])
                heredoc = re.search(r"<<'(\w+)'", line)
                terminator = heredoc.group(1) if heredoc else None
        lines = prompted
    pending = ""
    iterator = iter(lines)
    for line in iterator:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        # A trailing comment (two spaces, then `# `) explains the command; it is not part of it.
        command = re.sub(r"\s{2,}# .*$", "", pending + line)
        pending = ""
        heredoc = re.search(r"<<'(\w+)'", command)
        if heredoc:
            body = []
            for body_line in iterator:
                if body_line == heredoc.group(1):
                    break
                body.append(body_line)
            command += "\n" + "\n".join(body) + "\n" + heredoc.group(1)
        yield command


# --- the scratch copy the commands run against -------------------------------------------------------------------


@dataclass
class Release:
    values: dict[str, Any] = field(default_factory=dict)
    manifests: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Scratch:
    root: Path
    cwd: Path
    secrets: dict[str, set[str]] = field(default_factory=dict)
    release: Release = field(default_factory=Release)
    applied: list[dict[str, Any]] = field(default_factory=list)  # what `kubectl apply|create` made

    @classmethod
    def make(cls, directory: Path) -> Scratch:
        for name in ("compose", "playbooks"):
            shutil.copytree(REPOSITORY / name, directory / name, symlinks=True, ignore=_ignored)
        shutil.copytree(
            directory / "playbooks" / "inventories" / "example",
            directory / "playbooks" / "inventories" / "prod",
        )
        env = []
        for line in (REPOSITORY / "compose" / ".env.example").read_text().splitlines():
            key = line.split("=", 1)[0]
            env.append(f"{key}={os.urandom(12).hex()}" if key in SECRET_VARIABLES else line)
        (directory / "compose" / ".env").write_text("\n".join(env) + "\n")
        (directory / "Makefile").symlink_to(REPOSITORY / "Makefile")
        (directory / "helm").symlink_to(REPOSITORY / "helm")
        return cls(directory, directory)


def _ignored(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name in ("__pycache__", ".env")}


def program_of(command: str) -> tuple[str, str]:
    """The program a command runs and its subcommand (the program inside `NAME="$(...)"` for an assignment)."""
    assignment = re.match(r'^\w+="\$\((.*)\)"$', command)
    words = shlex.split(assignment.group(1) if assignment else command.split("\n", 1)[0])
    program = words[0]
    rest = [word for word in words[1:] if not word.startswith("-")]
    if program == "kubectl":
        rest = [
            w for i, w in enumerate(words[1:], 1) if not w.startswith("-") and words[i - 1] not in ("-n",)
        ]
    if program == "docker" and rest[:1] == ["compose"]:
        return "docker compose", ""
    return program, rest[0] if rest else ""


# --- checkers ------------------------------------------------------------------------------------------------------


def check_local(scratch: Scratch, command: str) -> None:
    if command.startswith("cd "):
        scratch.cwd = (scratch.cwd / shlex.split(command)[1]).resolve()
        assert scratch.cwd.is_dir(), command
        return
    if command.startswith("sed -i "):
        # A substitution that matches no line changes nothing and says nothing: each must match one.
        words = shlex.split(command)
        target = (scratch.cwd / words[-1]).read_text()
        for expression in words[2:-1]:
            if expression != "-e":
                pattern = expression.split("/")[1]
                assert re.search(pattern, target, re.MULTILINE), f"{command}: {pattern!r} matches no line"
    result = subprocess.run(
        ["bash", "-c", f"set -eo pipefail\n{command}"],
        cwd=scratch.cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{command}\n{result.stderr}"
    env_file = scratch.root / "compose" / ".env"
    load_settings(env_file)
    for path in (scratch.root / "playbooks" / "inventories" / "prod").rglob("*.yml"):
        yaml.safe_load(path.read_text())


def check_make(command: str) -> None:
    words = shlex.split(command)
    targets = set(re.findall(r"^([a-z-]+):.*## ", (REPOSITORY / "Makefile").read_text(), re.MULTILINE))
    assert words[1] in targets, command
    for assignment in words[2:]:
        assert re.fullmatch(r"(VOLUMES|SERVICE)=\S+", assignment), command


def check_compose(scratch: Scratch, command: str) -> None:
    words = shlex.split(command)[2:]
    options: list[str] = []
    while words and words[0].startswith("-"):
        flag, value = words.pop(0), words.pop(0)
        options += [flag, str(scratch.root / value) if flag in ("-f", "--env-file") else value]
    subcommand, *arguments = words
    assert subcommand in ("up", "run", "exec", "rm"), command
    if subcommand in ("run", "exec"):
        # Naming a service starts it whatever its profile (the smoke run): every profile counts.
        options += ["--profile", "*"]
    rendered = docker_compose([*options, "config", "--services"], cwd=scratch.root)
    assert rendered.returncode == 0, f"{command}\n{rendered.stderr}"
    services = set(rendered.stdout.split())
    if subcommand in ("run", "exec"):
        # The first word that is neither an option nor an option's value (`-e NAME=value`).
        named = {next(a for a in arguments if not a.startswith("-") and "=" not in a)}
    else:
        named = {argument for argument in arguments if not argument.startswith("-")}
    assert named and named <= services, f"{command}: {named - services} not among {sorted(services)}"


def _all_services() -> set[str]:
    return set(yaml.safe_load((REPOSITORY / "compose" / "docker-compose.yml").read_text())["services"])


def check_helm(scratch: Scratch, command: str) -> None:
    words = shlex.split(command)
    verb, release, chart_path = words[1], words[2], words[3]
    assert (scratch.root / chart_path).resolve() == CHART_DIR.resolve(), command
    sets: dict[str, Any] = {}
    namespace = "default"
    reuse = False
    index = 4
    while index < len(words):
        flag = words[index]
        if flag in ("--set", "--set-string"):
            parser = helm_python.parse_set_string if flag == "--set" else helm_python.parse_set_string_values
            sets = _merge(sets, parser(words[index + 1]))
            index += 2
        elif flag in ("-n", "--namespace", "--timeout"):
            namespace = words[index + 1] if flag != "--timeout" else namespace
            index += 2
        elif flag in ("-f", "--values"):
            # The user's own values file (my-values.yaml): rendered without it.
            index += 2
        elif flag in ("--reuse-values", "--wait", "--create-namespace"):
            reuse = reuse or flag == "--reuse-values"
            index += 1
        else:
            raise AssertionError(f"{command}: an option this test does not know: {flag}")
    values = _merge(scratch.release.values, sets) if reuse else sets
    for path, keys in SECRET_KEYS.items():
        name = _get(values, path)
        if name and name in scratch.secrets:
            assert keys <= scratch.secrets[name], (
                f"{command}: Secret {name} lacks {keys - scratch.secrets[name]}"
            )
    with helm_python.Chart.load(CHART_DIR) as chart:
        output = chart.render(
            values,
            name=release,
            namespace=namespace,
            is_install=verb == "install",
            is_upgrade=verb == "upgrade",
        )
    scratch.release = Release(
        values,
        [
            doc
            for name, text in output.items()
            if not name.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text)
            if doc
        ],
    )


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        merged[key] = (
            _merge(merged[key], value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict)
            else value
        )
    return merged


def _get(values: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(values, dict) or key not in values:
            return None
        values = values[key]
    return values


def check_kubectl(scratch: Scratch, command: str) -> list[dict[str, Any]]:
    first_line, _, heredoc = command.partition("\n")
    lexer = shlex.shlex(first_line, posix=True, punctuation_chars="|")
    lexer.whitespace_split = True
    tokens = list(lexer)
    words = tokens[: tokens.index("|")] if "|" in tokens else tokens
    namespace = words[words.index("-n") + 1] if "-n" in words else "default"
    if words[words.index(namespace) + 1 : words.index(namespace) + 4] == ["create", "secret", "generic"]:
        name = words[words.index("generic") + 1]
        data = {}
        for word in words:
            source = re.match(r"--from-(?:literal|file)=([^=]+)=", word)
            if source:
                data[source.group(1)] = base64.b64encode(b"stand-in").decode()
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) and all(
            re.fullmatch(r"[-._a-zA-Z0-9]+", key) for key in data
        ), command
        manifests = [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "type": "Opaque",
                "data": data,
            }
        ]
        scratch.secrets[name] = set(data)
    else:
        assert words[words.index(namespace) + 1 : words.index(namespace) + 4] == ["apply", "-f", "-"], command
        manifests = [doc for doc in yaml.safe_load_all(heredoc.rsplit("\n", 1)[0]) if doc]
    for manifest in manifests:
        kubernetes_validate.validate(manifest, kube_version(), strict=True)
    scratch.applied += manifests
    return manifests


def names_chart_objects(command: str) -> bool:
    """A kubectl command `check_kubectl_objects` checks: it acts on the release's objects by name or label."""
    words = shlex.split(command.split("\n", 1)[0])
    if words[0] != "kubectl":
        return False
    positional = _positional(words)
    verb, rest = positional[0], positional[1:]
    return (
        verb in ("scale", "wait")
        or (verb == "create" and any(word.startswith("--from=") for word in words))
        or (verb == "delete" and rest[:1] in (["job"], ["jobs"]))
    )


def _positional(words: list[str]) -> list[str]:
    """The words after `kubectl` that are neither options nor the values of `-n` and `-l`."""
    return [
        word
        for i, word in enumerate(words[1:], 1)
        if not word.startswith("-") and words[i - 1] not in ("-n", "-l", "--selector")
    ]


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Kubernetes label selector syntax: `key=value`, `key!=value` and `key in (a,b)`, comma-separated."""
    for requirement in re.findall(r"[^,(]+(?:\([^)]*\))?", selector):
        within = re.fullmatch(r"\s*([\w./-]+)\s+in\s+\(([^)]*)\)\s*", requirement)
        if within:
            allowed = {value.strip() for value in within.group(2).split(",")}
            if labels.get(within.group(1)) not in allowed:
                return False
            continue
        equal = re.fullmatch(r"\s*([\w./-]+)\s*(!=|==|=)\s*([\w./-]*)\s*", requirement)
        assert equal, f"a selector this test does not read: {requirement!r}"
        key, operator, value = equal.groups()
        if (labels.get(key) == value) == (operator == "!="):
            return False
    return True


def _components(selector: str) -> set[str] | None:
    """The components a selector names (`component=x` or `component in (x,y)`); None when it names none."""
    within = re.search(rf"{re.escape(COMPONENT)}\s+in\s+\(([^)]*)\)", selector)
    if within:
        return {value.strip() for value in within.group(1).split(",")}
    equal = re.search(rf"{re.escape(COMPONENT)}\s*==?\s*([\w.-]+)", selector)
    return {equal.group(1)} if equal else None


def _objects(scratch: Scratch, kind: str) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of the objects of `kind` the release renders or the docs applied; for Pods, the pod
    templates of the release's workloads too (their pods' names are not known before they run)."""
    found = [
        (doc["metadata"]["name"], doc["metadata"].get("labels", {}))
        for doc in [*scratch.release.manifests, *scratch.applied]
        if doc["kind"] == kind
    ]
    if kind == "Pod":
        found += [
            ("", doc["spec"]["template"]["metadata"].get("labels", {}))
            for doc in scratch.release.manifests
            if doc["kind"] in ("Deployment", "StatefulSet", "Job")
        ]
    return found


def check_kubectl_objects(scratch: Scratch, command: str) -> None:
    words = shlex.split(command)
    positional = _positional(words)
    verb, targets = positional[0], positional[1:]
    named: list[tuple[str, str]] = []
    if verb == "create":
        [source] = [word.split("=", 1)[1] for word in words if word.startswith("--from=")]
        kind, name = source.split("/")
        named.append((kind, name))
        templates = [
            doc["spec"]["jobTemplate"]["metadata"].get("labels", {})
            for doc in scratch.release.manifests
            if doc["kind"] == KINDS[kind] and doc["metadata"]["name"] == name
        ]
        labels = templates[0] if templates else {}
        scratch.applied.append({"kind": "Job", "metadata": {"name": targets[-1], "labels": labels}})
    elif targets and "/" in targets[0]:
        named += [tuple(target.split("/", 1)) for target in targets]  # type: ignore[misc]
    elif len(targets) > 1:
        named += [(targets[0], name) for name in targets[1:]]
    for kind, name in named:
        names = {found for found, _ in _objects(scratch, KINDS[kind])}
        assert name in names, f"{command}: no {kind} {name!r} among {sorted(names)}"
    selector = next((words[i + 1] for i, word in enumerate(words[:-1]) if word in ("-l", "--selector")), None)
    if selector is None:
        assert named, f"{command}: names no object"
        return
    [kind] = targets
    selected = [name for name, labels in _objects(scratch, KINDS[kind]) if selector_matches(selector, labels)]
    assert selected, f"{command}: the selector selects no {kind} of the release"
    if KINDS[kind] == "Job":
        # A procedure reruns some of the Jobs (the init Job alone, or every Job of a restore): each Job of the
        # components the selector names must be selected, and each component named must have one.
        components = _components(selector)
        rendered = {
            doc["metadata"]["name"]
            for doc in scratch.release.manifests
            if doc["kind"] == "Job"
            and (components is None or doc["metadata"]["labels"].get(COMPONENT) in components)
        }
        assert set(selected) == rendered, (
            f"{command}: selects {sorted(selected)}, the chart renders {sorted(rendered)}"
        )
        for component in components or ():
            assert any(
                selector_matches(f"{COMPONENT}={component}", labels) for _, labels in _objects(scratch, "Job")
            ), f"{command}: the chart renders no Job of the component {component!r}"
        made_by_cronjobs = [
            doc["metadata"]["name"]
            for doc in scratch.release.manifests
            if doc["kind"] == "CronJob"
            and selector_matches(selector, doc["spec"]["jobTemplate"]["metadata"].get("labels", {}))
        ]
        assert made_by_cronjobs == [], f"{command}: selects the Jobs of {made_by_cronjobs}"


def check_selects_members(scratch: Scratch, manifests: list[dict[str, Any]]) -> None:
    """A Service or NetworkPolicy the docs apply must select the release's member pods as rendered."""
    members = [
        doc
        for doc in scratch.release.manifests
        if doc["kind"] == "StatefulSet" and doc["metadata"]["name"].endswith("-mongodb")
    ]
    if not members:
        return
    [statefulset] = members
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    pods = {f"{statefulset['metadata']['name']}-{index}" for index in range(statefulset["spec"]["replicas"])}
    for manifest in manifests:
        if manifest["kind"] == "Service":
            assert manifest["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] in pods, manifest
        if manifest["kind"] == "NetworkPolicy":
            assert manifest["spec"]["podSelector"]["matchLabels"].items() <= labels.items(), manifest


def check_ansible(scratch: Scratch, command: str) -> None:
    words = [word for word in shlex.split(command) if word != "--ask-vault-pass"]

    def ansible(flag: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / words[0]), *words[1:], flag],
            cwd=scratch.cwd,
            env={**os.environ, "ANSIBLE_CONFIG": str(scratch.root / "playbooks" / "ansible.cfg")},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    checked = ansible("--syntax-check")
    assert checked.returncode == 0, f"{command}\n{checked.stdout}{checked.stderr}"
    if "--tags" in words:
        tags = set(words[words.index("--tags") + 1].split(","))
        listed = ansible("--list-tasks")
        assert listed.returncode == 0, listed.stderr
        selected = {
            tag
            for line in listed.stdout.splitlines()
            if "\tTAGS: [" in line and "Validating arguments" not in line
            for tag in line.split("\tTAGS: [", 1)[1].rstrip("]").split(", ")
        }
        assert tags <= selected, f"{command}: no task carries {tags - selected}"


# --- the test -------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    checked: list[str]
    failures: list[str]
    unchecked: set[tuple[str, str]]
    release: Release  # as the part's last helm command left it


def run_commands(scratch: Scratch, text: str) -> Outcome:
    """Every command of `text` in order: checked, or matched to UNCHECKED. Failures are collected, not raised, so
    one report shows them all."""
    checked: list[str] = []
    failures: list[str] = []
    unchecked: set[tuple[str, str]] = set()
    for block in console_blocks(text):
        for command in commands(block):
            program, subcommand = program_of(command)
            entry = next((key for key in ((program, subcommand), (program, "")) if key in UNCHECKED), None)
            if entry is not None and not (program == "kubectl" and names_chart_objects(command)):
                unchecked.add(entry)
                continue
            try:
                if program in LOCAL:
                    check_local(scratch, command)
                elif program == "make":
                    check_make(command)
                elif program == "docker compose":
                    check_compose(scratch, command)
                elif program == "helm" and subcommand in ("install", "upgrade", "template"):
                    check_helm(scratch, command)
                elif program == "kubectl" and names_chart_objects(command):
                    check_kubectl_objects(scratch, command)
                elif program == "kubectl":
                    check_selects_members(scratch, check_kubectl(scratch, command))
                elif program == "ansible-playbook":
                    check_ansible(scratch, command)
                else:
                    raise AssertionError("neither checked nor listed in UNCHECKED")
            except (AssertionError, helm_python.HelmError, kubernetes_validate.ValidationError) as exc:
                failures.append(f"{command}\n    -> {exc}")
            else:
                checked.append(command)
    return Outcome(checked, failures, unchecked, scratch.release)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Each deployment part and each role README, run once for the whole module."""
    results: dict[str, Outcome] = {}
    for name, page in PARTS.items():
        # From the repository root; the Ansible part starts with `cd playbooks` and copies the example inventory.
        scratch = Scratch.make(tmp_path_factory.mktemp(name))
        results[name] = run_commands(scratch, page.read_text(encoding="utf-8"))
    for name in SUBSECTIONS:
        scratch = Scratch.make(tmp_path_factory.mktemp(name.replace(" ", "-")))
        results[name] = run_commands(scratch, subsection(name))
    for readme in ROLE_READMES:
        scratch = Scratch.make(tmp_path_factory.mktemp(readme.parent.name))
        scratch.cwd = scratch.root / "playbooks"
        results[f"role {readme.parent.name}"] = run_commands(scratch, readme.read_text())
    for readme in OTHER_READMES:
        name = str(readme.relative_to(REPOSITORY))
        results[name] = run_commands(Scratch.make(tmp_path_factory.mktemp("readme")), readme.read_text())
    return results


@pytest.mark.parametrize(
    "name",
    [
        *PARTS,
        *SUBSECTIONS,
        *(f"role {path.parent.name}" for path in ROLE_READMES),
        *(str(path.relative_to(REPOSITORY)) for path in OTHER_READMES),
    ],
)
def test_every_command_is_checked_or_listed_with_its_reason(name: str, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[name]

    assert outcome.failures == [], "\n".join(outcome.failures)
    if name in PARTS:
        assert len(outcome.checked) >= 10, outcome.checked


@pytest.mark.parametrize("name", list(PARTS))
def test_each_deployment_part_has_a_section_per_day_2_task(name: str) -> None:
    headings = re.findall(r"^### (.+)$", PARTS[name].read_text(encoding="utf-8"), re.MULTILINE)

    assert [task for task in DAY_2 if task not in headings] == []


@pytest.mark.parametrize("name", list(PARTS))
def test_each_day_2_section_links_to_what_the_deployments_share(name: str) -> None:
    """What every deployment shares of a task is written once, in docs/day-2.md, and each guide's section of that
    task points there."""
    shared = re.findall(r"^## (.+)$", DAY_2_PAGE.read_text(encoding="utf-8"), re.MULTILINE)
    text = PARTS[name].read_text(encoding="utf-8")

    assert shared == list(DAY_2)
    for task in DAY_2:
        anchor = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")
        assert f"(day-2.md#{anchor})" in section(text, task, level=3), task


def test_the_restore_names_the_jobs_as_the_chart_renders_them(outcomes: dict[str, Outcome]) -> None:
    """The restore's prose gives the init and ops-users Jobs' names with `<hash>` for the configuration's hash:
    each Job the release renders has one of those names, and each name is one of theirs."""
    restore = subsection("kubernetes backups").split("**Restore**", 1)[1]
    patterns = set(re.findall(r"`(harel-stack-[a-z-]+-<hash>)`", restore))
    jobs = {
        doc["metadata"]["name"]
        for doc in outcomes["kubernetes backups"].release.manifests
        if doc["kind"] == "Job"
    }

    matched = {
        pattern: {job for job in jobs if re.fullmatch(pattern.replace("<hash>", "[0-9a-f]{10}"), job)}
        for pattern in patterns
    }
    assert len(jobs) == 2 and all(len(found) == 1 for found in matched.values()), (patterns, jobs)
    assert set().union(*matched.values()) == jobs


def test_every_unchecked_entry_is_needed(outcomes: dict[str, Outcome]) -> None:
    used = set().union(*(outcome.unchecked for outcome in outcomes.values()))

    assert set(UNCHECKED) - used == set()


def test_a_wrong_command_is_caught(tmp_path: Path) -> None:
    """The checks above can fail: a value the chart refuses, an unknown service, a tag that selects nothing."""
    scratch = Scratch.make(tmp_path)
    text = """```console
helm upgrade harel-stack ./helm/harel-stack -n harel --set mongodb.members=4
docker compose -f compose/docker-compose.yml --env-file compose/.env -p harel up --detach mongo9
make deploy
sed -i 's/^HAREL_MEMBRES=.*/HAREL_MEMBRES=1/' compose/.env
```
"""
    ansible = """```console
ansible-playbook -i inventories/prod/hosts.yml site.yml --tags mongodb_fvc
```
"""

    outcome = run_commands(scratch, text)
    scratch.cwd = scratch.root / "playbooks"
    tagged = run_commands(scratch, ansible)

    assert [failure.split("\n")[0] for failure in outcome.failures + tagged.failures] == [
        "helm upgrade harel-stack ./helm/harel-stack -n harel --set mongodb.members=4",
        "docker compose -f compose/docker-compose.yml --env-file compose/.env -p harel up --detach mongo9",
        "make deploy",
        "sed -i 's/^HAREL_MEMBRES=.*/HAREL_MEMBRES=1/' compose/.env",
        "ansible-playbook -i inventories/prod/hosts.yml site.yml --tags mongodb_fvc",
    ]


def test_a_job_selector_must_select_every_job_of_the_components_it_names(tmp_path: Path) -> None:
    """The init Job alone, or the init and ops-users Jobs, pass; a component without a Job does not, nor a selector
    naming no component that leaves out one of the release's Jobs."""
    scratch = Scratch.make(tmp_path)
    selector = "kubectl -n harel delete job -l 'app.kubernetes.io/instance=harel-stack,{}'"
    text = "\n".join(
        [
            "```console",
            "helm install harel-stack ./helm/harel-stack -n harel --set worker.image.repository=r.example/w"
            " --set mongodbExporter.enabled=true",
            selector.format("app.kubernetes.io/component=mongodb-init"),
            selector.format("app.kubernetes.io/component in (mongodb-init,mongodb-ops)"),
            selector.format("app.kubernetes.io/component in (mongodb-init,mongodb-opz)"),
            selector.format("app.kubernetes.io/component!=mongodb-ops"),
            "```",
            "",
        ]
    )

    outcome = run_commands(scratch, text)

    assert [failure.split("\n")[0] for failure in outcome.failures] == [
        selector.format("app.kubernetes.io/component in (mongodb-init,mongodb-opz)"),
        selector.format("app.kubernetes.io/component!=mongodb-ops"),
    ]
