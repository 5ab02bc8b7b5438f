"""The console blocks of the README and of the documentation pages run as shown, and print what they show.

Every ```console block of README.md and of docs/*.md (tests/documents.py) is named by its first command and is
either in RUNS (run here, by the function named) or in CANNOT_RUN (with the reason). A block in neither fails
`test_every_block_is_decided`, and so does a name two blocks share.

In a block with `$ ` prompts, the lines after a command are what it prints (stdout, then stderr), matched
line by line: `…` inside a line stands for any text, a line of its own for any number of lines; in
sessions, runs of blanks and of dashes count as one (column widths follow the data). A comment
`# ... exit code N` on a command line is its expected exit code; otherwise it is 0.

Substituted, and nothing else: the deployment in `export HAREL_MONGO_URL=...` and the port 27017 become the
test's fake replica set (tests/fake_mongod); `make demo` gets a temporary VENV and PYTHON (the interpreter
this environment is made from) and pip installs from wheels of this environment (`--no-index`), so the
run downloads nothing; `harel worker` runs in the background with its HTTP endpoints on a free port.

The `harel dev` session runs as a user would: the README's chart and app written into an empty folder,
`harel dev` in the background there (what it prints on stdout is matched when Ctrl-C has stopped it), the
other commands in the same folder with no URL, no PYTHONPATH and no HAREL_* variable, their stdout and
stderr matched in the order they were written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from pymongo import MongoClient

from harel.cli import devstate
from tests.documents import documents, file_blocks
from tests.fake_mongod.fixtures import FakeDeployment
from tests.wheelhouse import fill_wheelhouse, runtime_dependencies
from tests.wire.processes import REPOSITORY_ROOT, clean_environment, free_port, wait_until

pytestmark = pytest.mark.wire

BLOCK = re.compile(r"^( *)```console\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
COMMENT = re.compile(r"\s{2,}#\s*(.*)$")
EXIT_CODE = re.compile(r"exit code (\d+)")
ELLIPSIS = "…"
BASE_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
WORKER_READY_TIMEOUT = 30.0


@dataclass(frozen=True)
class Step:
    command: str
    shown: tuple[str, ...]
    exit_code: int


@dataclass(frozen=True)
class Block:
    name: str  # its first command as written, `$ ` included
    steps: tuple[Step, ...]


def parse_block(body: str) -> Block:
    lines = [line.removeprefix("  ") if body.startswith("  ") else line for line in body.splitlines()]
    prompted = any(line.startswith("$ ") for line in lines)
    steps: list[tuple[str, list[str], int]] = []
    pending = ""
    for line in lines:
        if prompted and not line.startswith("$ "):
            steps[-1][1].append(line)
            continue
        text = pending + (line.lstrip() if pending else line.removeprefix("$ "))
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        comment = COMMENT.search(text)
        code = EXIT_CODE.search(comment.group(1)) if comment else None
        command = text[: comment.start()] if comment else text
        steps.append((command.strip(), [], int(code.group(1)) if code else 0))
    name = ("$ " if prompted else "") + steps[0][0]
    return Block(name, tuple(Step(command, tuple(shown), code) for command, shown, code in steps))


def console_blocks() -> list[Block]:
    return [
        parse_block(match.group(2))
        for document in documents()
        for match in BLOCK.finditer(document.read_text(encoding="utf-8"))
    ]


# --- matching what a command printed against what the README shows ----------------------------------------


def collapse(line: str) -> str:
    return re.sub(r"-{2,}", "--", re.sub(r"[ \t]+", " ", line)).strip()


def matches(shown: tuple[str, ...], printed: str, *, collapsed: bool) -> bool:
    normal = collapse if collapsed else (lambda line: line.rstrip())
    pattern = ""
    for line in shown:
        if line.strip() == ELLIPSIS:
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*?".join(re.escape(part) for part in normal(line).split(ELLIPSIS)) + r"\n"
    text = "".join(normal(line) + "\n" for line in printed.splitlines())
    return re.fullmatch(pattern, text) is not None


def masked(line: str) -> str:
    """A demo line without what differs between runs: ids, numbers, column padding."""
    line = re.sub(r"smoke-[0-9a-f]{12}", "smoke-ID", line)
    return collapse(re.sub(r"\d+(\.\d+)?", "N", line))


# --- running commands ----------------------------------------------------------------------------------------


@dataclass
class Shell:
    cwd: Path
    environment: dict[str, str]

    merged: bool = False  # stderr into stdout, in the order they were written (as on a terminal)

    def run(self, command: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if self.merged else subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_held(
        self, step: Step, started: Callable[[], None] | None, timeout: float = 180.0
    ) -> subprocess.CompletedProcess[str]:
        """`step.command` run as by `run`, calling `started` once it printed a line like its last one shown."""
        with tempfile.TemporaryFile("w+") as errors:
            process = subprocess.Popen(
                ["bash", "-c", step.command],
                cwd=self.cwd,
                env=self.environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
            assert process.stdout is not None
            printed: list[str] = []
            with process:
                for line in process.stdout:
                    printed.append(line)
                    if started is not None and matches(step.shown[-1:], line, collapsed=True):
                        started()
                        started = None
                process.wait(timeout=timeout)
            errors.seek(0)
            return subprocess.CompletedProcess(
                process.args, process.returncode, "".join(printed), errors.read()
            )

    def check(
        self,
        step: Step,
        *,
        collapsed: bool = True,
        substitute: Callable[[str], str] = str,
        started: Callable[[], None] | None = None,
    ) -> None:
        """Run `step` and match what it printed; `started`, when given, is called once it has printed a
        line like the last one shown: the end of its first screen, for a command that prints screens."""
        result = self.run(substitute(step.command)) if started is None else self.run_held(step, started)
        printed = result.stdout + (result.stderr or "")
        assert "Traceback" not in printed, printed
        assert result.returncode == step.exit_code, f"{step.command}\n{printed}"
        if step.shown:
            shown = tuple(substitute(line) for line in step.shown)
            assert matches(shown, printed, collapsed=collapsed), f"{step.command} printed:\n{printed}"


def offline_pip(wheelhouse: Path) -> dict[str, str]:
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


@dataclass
class Demo:
    venv: Path
    shell: Shell
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def make_demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """`make demo` into a .venv of its own, as on a fresh clone (run once for the blocks that show it)."""
    scratch = tmp_path_factory.mktemp("make-demo")
    build = {"setuptools", "wheel"}  # what `pip install` of sdk/ and sdk/dev/ builds with
    (scratch / "wheels").mkdir()
    # harel itself comes from sdk/, and harel-dev's dependencies include harel's
    wheelhouse = fill_wheelhouse(scratch / "wheels", runtime_dependencies("harel-dev") - {"harel"} | build)
    venv = scratch / ".venv"
    outside_make = {k: v for k, v in clean_environment().items() if not k.startswith(("MAKE", "MFLAGS"))}
    environment = {
        **outside_make,  # when the suite runs under `make test`: this make is not a sub-make of it
        **offline_pip(wheelhouse),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    shell = Shell(REPOSITORY_ROOT, environment)
    result = shell.run(f"make demo VENV={venv} PYTHON={BASE_PYTHON}")
    return Demo(venv, shell, result)


@pytest.fixture(scope="module")
def blocks() -> dict[str, Block]:
    return {block.name: block for block in console_blocks()}


# --- the blocks that run here --------------------------------------------------------------------------------


def quick_start(block: Block, request: pytest.FixtureRequest) -> None:
    make_demo: Demo = request.getfixturevalue("make_demo")
    assert [step.command for step in block.steps] == ["make demo"]
    assert make_demo.result.returncode == 0, make_demo.result.stdout + make_demo.result.stderr
    installed = subprocess.run(
        [str(make_demo.venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        env=make_demo.shell.environment,
    )
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(installed.stdout)}
    venv_itself = {"pip", "setuptools"}
    assert names - venv_itself == {"harel", "harel-dev"} | runtime_dependencies("harel-dev"), (
        "make demo installs the SDK and harel-dev only"
    )


def demo_transcript(block: Block, request: pytest.FixtureRequest) -> None:
    make_demo: Demo = request.getfixturevalue("make_demo")
    (step,) = block.steps
    assert step.command == "make demo"
    printed = make_demo.result.stdout
    assert make_demo.result.returncode == 0, printed + make_demo.result.stderr
    own = printed[printed.index("harel demo: ") :].splitlines()  # after the install steps of a fresh clone
    assert own[:2] == list(step.shown[:2])
    assert Counter(map(masked, own)) == Counter(map(masked, step.shown)), (
        "the same lines, ids and times aside"
    )


def pip_install(block: Block, request: pytest.FixtureRequest) -> None:
    make_demo: Demo = request.getfixturevalue("make_demo")
    assert [step.command for step in block.steps] == ["pip install ./sdk ./sdk/dev", "harel demo"]
    shell = Shell(REPOSITORY_ROOT, make_demo.shell.environment)
    for step in block.steps:
        shell.check(step)
    where = shell.run("python -c 'import harel, harel_dev; print(harel.__file__); print(harel_dev.__file__)'")
    assert [line.startswith(str(make_demo.venv)) for line in where.stdout.splitlines()] == [True, True], (
        "installed into the environment, not linked to sdk/"
    )


def write_example_app(folder: Path) -> None:
    for path, text in file_blocks().items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)


def user_environment() -> dict[str, str]:
    """A shell of a user who installed the SDK: its `harel` on PATH, and nothing pointing into the repository."""
    environment = {k: v for k, v in clean_environment().items() if k != "PYTHONPATH"}
    return {**environment, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def order_session(block: Block, request: pytest.FixtureRequest) -> None:
    fake: FakeDeployment = request.getfixturevalue("fake_rs")
    folder: Path = request.getfixturevalue("tmp_path")
    write_example_app(folder)
    port = free_port()
    shell = Shell(
        folder,
        {
            **clean_environment(),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "HAREL_HTTP_PORT": str(port),
            "HAREL_HTTP_HOST": "127.0.0.1",
        },
    )
    worker: subprocess.Popen[bytes] | None = None
    log = folder / "worker.log"
    try:
        for step in block.steps:
            if step.command.startswith("export "):
                name, _, value = step.command.removeprefix("export ").partition("=")
                assert ELLIPSIS in value, "the URL shown is a placeholder for the reader's deployment"
                shell.environment[name] = fake.url
            elif step.command.startswith("harel worker"):
                with log.open("wb") as output:
                    worker = subprocess.Popen(
                        ["bash", "-c", f"exec {step.command}"],
                        cwd=folder,
                        env=shell.environment,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                    )
                wait_ready(worker, port, log)
            elif step.command.startswith("harel send"):
                assert worker is not None, "the worker runs before the event is sent"
                # The worker is held from the send until `--watch` has printed its first snapshot, so that
                # the watch sees the order before it finishes however slowly its process starts.
                wait_until(lambda: idle(fake, "order-42"), WORKER_READY_TIMEOUT, "the worker to be idle")
                worker.send_signal(signal.SIGSTOP)
                shell.check(step)
            elif "--watch" in step.command:
                assert worker is not None, "the worker was held at the send"
                shell.check(step, started=partial(worker.send_signal, signal.SIGCONT))
            else:
                shell.check(step)
        assert worker is not None, "the session runs a worker"
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGCONT)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0, log.read_text()


def idle(fake: FakeDeployment, execution_id: str) -> bool:
    """No lease held on the execution and nothing in its mailbox: the worker has nothing of it in hand."""
    with MongoClient(fake.url, serverSelectionTimeoutMS=10_000) as client:
        document = client.harel.executions.find_one({"_id": execution_id}, {"lease": 1, "inbox": 1})
    return document is not None and document.get("lease") is None and not document.get("inbox")


def wait_ready(worker: subprocess.Popen[bytes], port: int, log: Path) -> None:
    def ready() -> bool:
        assert worker.poll() is None, f"the worker exited:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    wait_until(ready, WORKER_READY_TIMEOUT, "the worker to be ready", poll=0.1)


def dev_session(block: Block, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue("tmp_path") / "shop"
    folder.mkdir()
    write_example_app(folder)
    shell = Shell(folder, user_environment(), merged=True)
    first, *others = block.steps
    assert first.command.startswith("harel dev "), "the session opens with harel dev"
    printed, logs = folder.parent / "dev.out", folder.parent / "dev.err"
    with printed.open("wb") as stdout, logs.open("wb") as stderr:
        dev = subprocess.Popen(
            ["bash", "-c", f"exec {first.command}"],
            cwd=folder,
            env=shell.environment,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        wait_until(
            lambda: (
                dev.poll() is None and devstate.find(folder) is not None and "commands" in printed.read_text()
            ),
            WORKER_READY_TIMEOUT,
            "harel dev to serve",
            poll=0.1,
        )
        for step in others:
            shell.check(step)
    finally:
        dev.send_signal(signal.SIGINT)
        assert dev.wait(timeout=30) == 0, logs.read_text()
    assert matches(first.shown, printed.read_text(), collapsed=True), printed.read_text()
    assert "Traceback" not in printed.read_text() + logs.read_text()
    assert devstate.find(folder) is None and not (folder / devstate.STATE_FILE).exists(), "Ctrl-C cleans up"


def check_transcript(block: Block, request: pytest.FixtureRequest) -> None:
    fake: FakeDeployment = request.getfixturevalue("fake_rs")
    shell = Shell(
        REPOSITORY_ROOT,
        {**clean_environment(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
    )
    (step,) = block.steps
    assert "27017" in step.command
    shell.check(step, collapsed=False, substitute=lambda text: text.replace("27017", str(fake.port)))


RUNS: dict[str, Callable[[Block, pytest.FixtureRequest], None]] = {
    "make demo": quick_start,
    "pip install ./sdk ./sdk/dev": pip_install,
    "$ make demo": demo_transcript,
    "$ harel dev --app orders.app:app": dev_session,
    "$ export HAREL_MONGO_URL='mongodb://harel:…@mongo1:27017,mongo2:27017,mongo3:27017/harel?replicaSet=rs0&authSource=admin'": order_session,
    "$ harel check 'mongodb://127.0.0.1:27017/harel?replicaSet=rs0&w=1&readPreference=secondaryPreferred&retryWrites=false&readConcernLevel=local'": check_transcript,
}

DOCKER = "needs a Docker engine, which this machine does not have"
CLUSTER = (
    "needs a Kubernetes cluster (the chart is rendered, linted and validated in tests/infra/test_helm.py)"
)
HOSTS = "needs SSH hosts to provision (the roles are checked in tests/infra/test_ansible.py)"
# The day-2 procedures of each deployment part: tests/infra/test_readme_commands.py checks every command in them.
# docs/sharded-clusters.md: its commands are checked in tests/infra/test_sharding_docs.py (helm renders, compose
# config, syntax checks) and its init runs against the fake sharded cluster (tests/infra/test_sharded_init.py).
SHARDED = "needs a sharded cluster (config servers, shards, routers), which this machine does not have"
SHARDED_CHECKED = " (test_sharding_docs.py checks it)"
DAY_2_COMPOSE = DOCKER + " (test_readme_commands.py runs its edits and `docker compose config`)"
DAY_2_CLUSTER = CLUSTER + " (test_readme_commands.py renders its helm commands and validates its manifests)"
DAY_2_HOSTS = HOSTS + " (test_readme_commands.py runs its edits and syntax-checks its playbook commands)"
# docs/worker-image.md: the user's image pipeline.
REGISTRY = (
    DOCKER + ", a registry and cosign's signing identity (the Dockerfile is linted, its lock regenerated)"
)
CANNOT_RUN: dict[str, str] = {
    "make test": "is this test suite: it would run itself",
    "docker buildx imagetools inspect python:3.11.16-slim-bookworm --format '{{json .Manifest.Digest}}'": REGISTRY,
    "docker buildx build -f compose/Dockerfile.worker --target worker --sbom=true --provenance=mode=max "
    "-t registry.example.com/harel-stack/worker:0.1.0 --push --metadata-file build.json .": REGISTRY,
    'syft "registry.example.com/harel-stack/worker@${digest}" -o spdx-json > worker.spdx.json': REGISTRY,
    'cosign verify "registry.example.com/harel-stack/worker@${digest}" '
    "--certificate-identity-regexp 'https://github.com/your-org/.*' "
    "--certificate-oidc-issuer https://token.actions.githubusercontent.com": REGISTRY,
    "docker run --rm -v harel_keyfile:/keyfile mongo:8.0.26 chown 999:999 /keyfile": DOCKER,
    "$ make up": DOCKER,
    "$ make status": DOCKER,
    'mongosh "mongodb://harel:<HAREL_APP_PASSWORD>@127.0.0.1:27017/harel?directConnection=true&authSource=admin"': DOCKER,
    "docker compose -f compose/docker-compose.yml --env-file compose/.env -p harel run --rm --no-deps smoke check": DOCKER,
    "docker build -f compose/Dockerfile.worker --target worker -t registry.example.com/harel-stack/worker:0.1.0 .": DOCKER,
    "helm install harel-stack ./helm/harel-stack -n harel --create-namespace --set worker.image.repository=registry.example.com/harel-stack/worker": CLUSTER,
    "kubectl -n harel create secret generic harel-mongodb-url --from-file=mongodb-url=./mongodb-url.txt": CLUSTER,
    'app_password="$(openssl rand -hex 24)"': CLUSTER,
    "helm upgrade harel-stack ./helm/harel-stack -n harel -f my-values.yaml": CLUSTER,
    "helm test harel-stack -n harel --logs": CLUSTER,
    "helm uninstall harel-stack -n harel": CLUSTER,
    "kubectl -n harel delete pvc -l app.kubernetes.io/instance=harel-stack,app.kubernetes.io/component=mongodb": CLUSTER,
    "cd playbooks": "opens $EDITOR on the new inventory: an interactive step",
    "ansible-vault create inventories/prod/group_vars/all/vault.yml": "asks for a vault password and opens an editor",
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --ask-vault-pass": HOSTS,
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --ask-vault-pass --tags firewall,workers,smoke": HOSTS,
    # docs/observability.md and docs/backups.md: every command is checked in tests/infra/test_operations_readme.py
    # (bash syntax, make targets, chart values, the restore Pod's schema, Ansible tags), and the backup finding of
    # `harel check` runs in tests/wire/test_check_backups.py.
    '$ HAREL_BACKUP_WINDOW=26h harel check "$HAREL_MONGO_URL"': "shows no output to compare: the backup finding runs in test_check_backups.py",
    "$ echo HAREL_OBSERVABILITY=1 >> compose/.env": DOCKER,
    "$ make backup": DOCKER,
    "$ crontab -l | { cat; echo '0 3 * * * cd /path/to/harel-stack && .venv/bin/harel-stack backup >> compose/backups/backup.log 2>&1'; } | crontab -": "edits the user's crontab",
    "$ make restore FILE=compose/backups/harel-20250106T030000Z.archive.gz YES=1": DOCKER,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set mongodbExporter.enabled=true --set mongodbExporter.serviceMonitor.enabled=true --set 'worker.metrics.from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring' --set grafanaDashboard.enabled=true --set prometheusRule.enabled=true": CLUSTER,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set backup.enabled=true --set backup.keep=14": CLUSTER,
    'kubectl -n harel create secret generic harel-backup-s3 --from-literal=access-key-id="$AWS_ACCESS_KEY_ID" --from-literal=secret-access-key="$AWS_SECRET_ACCESS_KEY"': CLUSTER,
    "$ kubectl -n harel create job --from=cronjob/harel-stack-backup harel-stack-backup-now": CLUSTER,
    "$ kubectl -n harel scale deployment harel-stack-worker --replicas=0": CLUSTER,
    "$ $EDITOR inventories/prod/group_vars/all/main.yml": "opens an editor on the inventory: an interactive step",
    "$ ansible-vault edit inventories/prod/group_vars/all/vault.yml": "asks for the vault password and opens an editor",
    # docs/deploying-your-app.md: its files and settings are checked in tests/infra (order_app.py lays the app out).
    "docker build -f compose/Dockerfile.worker --target worker -t registry.example/harel-stack/worker:0.1.0 .": DOCKER,
    "cd ../shop": DOCKER
    + " (test_compose.py runs hadolint on compose/Dockerfile.app, the template it copies)",
    "helm upgrade --install harel-stack ./helm/harel-stack -n harel --create-namespace -f order-values.yaml": CLUSTER
    + " (test_helm.py renders it with the page's order-values.yaml)",
    "make up": DOCKER + " (test_compose.py renders compose/app.yml with the page's compose/.env lines)",
    "docker compose -f compose/docker-compose.yml -f compose/app.yml --env-file compose/.env -p harel config": "needs the page's compose/.env and the app's folder; test_compose.py runs this config with both",
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --tags workers --check --diff --ask-vault-pass": HOSTS
    + " (test_ansible.py runs the worker role with the page's variables, in check mode and for real)",
    # docs/sharded-clusters.md
    "docker compose -f compose/docker-compose.yml -f compose/sharded.yml --env-file compose/.env -p harel --profile "
    "sharded up -d --build --wait worker": DOCKER + SHARDED_CHECKED,
    "docker compose -f compose/docker-compose.yml -f compose/sharded.yml --env-file compose/.env -p harel --profile "
    "sharded up -d --wait mongos": DOCKER + SHARDED_CHECKED,
    "make up SHARDED=1": DOCKER + " (test_stack_cli.py runs `harel-stack up --sharded` on a fake engine)",
    "make backup": DOCKER
    + " (test_stack_backup.py runs `harel-stack backup` and `restore` on the cluster against a fake engine, and"
    " test_compose_sharded.py renders their one-shots)",
    "harel partitions init --partitions 256 --database harel": SHARDED
    + " (test_partitions_cli.py runs it through the fake cluster's routers)",
    "helm install harel-sharded ./helm/harel-stack -n harel --set mongodb.topology=sharded --set "
    "worker.image.repository=registry.example.com/harel-stack/worker": CLUSTER + SHARDED_CHECKED,
    "helm install harel-stack ./helm/harel-stack -n harel --create-namespace --set mongodb.topology=sharded --set "
    "worker.image.repository=registry.example.com/harel-stack/worker": CLUSTER + SHARDED_CHECKED,
    "helm upgrade harel-sharded ./helm/harel-stack -n harel --reuse-values": CLUSTER + SHARDED_CHECKED,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set mongodb.sharded.shards=3": CLUSTER
    + SHARDED_CHECKED,
    "kubectl -n harel exec -i deploy/harel-sharded-harel-stack-mongodb-mongos -- mongorestore --uri "
    "\"$ROUTERS_ADMIN_URL\" --archive --gzip --nsInclude 'harel.*' < harel.archive.gz": CLUSTER,
    "kubectl -n harel scale deployment harel-stack-worker --replicas=0": CLUSTER + SHARDED_CHECKED,
    "mongorestore --uri \"$ROUTERS_ADMIN_URL\" --archive=harel-sharded.archive.gz --gzip --nsInclude 'harel.*'": SHARDED,
    "mongosh \"$ROUTERS_ADMIN_URL\" --quiet --eval 'sh.stopBalancer()'": SHARDED,
    "cd ./playbooks": HOSTS + SHARDED_CHECKED,
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --ask-vault-pass --diff": HOSTS
    + SHARDED_CHECKED,
    # docs/runbook.md
    "harel dead list": "needs a deployment with parked executions (`harel dead list | retry | drop` run in tests/wire/test_cli_waits.py)",
    '$ ansible workers -i inventories/prod/hosts.yml -b -m ansible.builtin.systemd_service -a "name=harel-worker state=stopped"': HOSTS,
    # The day-2 procedures (add or remove a member, rotations, TLS, upgrades, reaching the set) of each part.
    "# a new vault_harel_app_password": DAY_2_HOSTS,
    "# vault_mongodb_keyfile: a list, the current key and a new one": DAY_2_HOSTS,
    "# vault_mongodb_previous_root_password: the current root password; vault_mongodb_root_password: a new one": DAY_2_HOSTS,
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --ask-vault-pass --tags firewall": DAY_2_HOSTS,
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --ask-vault-pass --tags mongodb,workers": DAY_2_HOSTS,
    "ansible-playbook -i inventories/prod/hosts.yml site.yml --ask-vault-pass --tags mongodb_fcv": DAY_2_HOSTS,
    "docker compose -f compose/docker-compose.yml --env-file compose/.env -p harel exec mongo1 mongosh --quiet --norc \"mongodb://127.0.0.1:27017/admin?directConnection=true\" --eval \"db.auth('root', require('fs').readFileSync('/run/secrets/mongo_root_password', 'utf8').trim()); printjson(db.adminCommand({ setFeatureCompatibilityVersion: '8.2', confirm: true }))\"": DAY_2_COMPOSE,
    "docker compose -f compose/docker-compose.yml --env-file compose/.env -p harel run --rm -e HAREL_KEYFILE_ROTATION=add keyfile": DAY_2_COMPOSE,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set mongodb.image.tag=8.2.1 --wait --timeout 30m": DAY_2_CLUSTER,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set mongodb.members=3 --wait --timeout 30m": DAY_2_CLUSTER,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set mongodb.members=5 --wait --timeout 30m": DAY_2_CLUSTER,
    "kubectl -n harel apply -f - <<'EOF'": DAY_2_CLUSTER,
    "kubectl -n harel create secret generic harel-stack-mongodb-tls --from-file=tls.crt=./tls.crt --from-file=tls.key=./tls.key --from-file=ca.crt=./ca.crt": DAY_2_CLUSTER,
    "kubectl -n harel create secret generic harel-stack-mongodb-tls --from-file=tls.crt=./tls.crt --from-file=tls.key=./tls.key --from-file=ca.crt=./ca.crt --dry-run=client -o yaml | kubectl apply -f -": DAY_2_CLUSTER,
    "kubectl -n harel get secret harel-stack-mongodb-auth -o jsonpath='{.data.root-password}' | base64 -d | kubectl -n harel exec -i harel-stack-mongodb-0 -c mongod -- mongosh --quiet --norc \"mongodb://127.0.0.1:27017/admin?replicaSet=rs0\" --eval \"db.auth('root', require('fs').readFileSync(0, 'utf8').trim()); printjson(db.adminCommand({ setFeatureCompatibilityVersion: '8.2', confirm: true }))\"": DAY_2_CLUSTER,
    'kubectl -n harel patch secret harel-stack-mongodb-auth --type merge -p "{\\"stringData\\":{\\"app-password\\":\\"$(openssl rand -hex 24)\\"}}"': DAY_2_CLUSTER,
    'kubectl -n harel patch secret harel-stack-mongodb-auth --type merge -p "{\\"stringData\\":{\\"previous-root-password\\":\\"$(kubectl -n harel get secret harel-stack-mongodb-auth -o jsonpath=\'{.data.root-password}\' | base64 -d)\\",\\"root-password\\":\\"$(openssl rand -hex 24)\\"}}"': DAY_2_CLUSTER,
    "kubectl -n harel port-forward pod/harel-stack-mongodb-0 27017:27017": DAY_2_CLUSTER,
    "kubectl -n harel logs -l app.kubernetes.io/component=mongodb-init --prefix --tail=20": DAY_2_CLUSTER,
    "kubectl -n harel delete job -l 'app.kubernetes.io/instance=harel-stack,app.kubernetes.io/component=mongodb-init'": DAY_2_CLUSTER,
    "helm upgrade harel-stack ./helm/harel-stack -n harel --reuse-values --set mongodb.init.deadlineSeconds=3600 --wait --timeout 30m": DAY_2_CLUSTER,
    'mongosh "mongodb://harel:<HAREL_APP_PASSWORD>@127.0.0.1:27017/harel?directConnection=true&authSource=admin&tls=true&tlsCAFile=compose/tls/ca.crt&tlsAllowInvalidHostnames=true"': DAY_2_COMPOSE,
    "old_key=\"$(kubectl -n harel get secret harel-stack-mongodb-auth -o jsonpath='{.data.keyfile}' | base64 -d)\"": DAY_2_CLUSTER,
    "printf 'firewall_extra_sources: [\"198.51.100.0/24\"]\\n' >> inventories/prod/group_vars/mongodb.yml": DAY_2_HOSTS,
    "printf 'mongodb_version: \"8.2.1\"\\n' >> inventories/prod/group_vars/mongodb.yml": DAY_2_HOSTS,
    'sed -i "s/^HAREL_APP_PASSWORD=.*/HAREL_APP_PASSWORD=$(openssl rand -hex 24)/" compose/.env': DAY_2_COMPOSE,
    "sed -i 's/^HAREL_MEMBERS=.*/HAREL_MEMBERS=1/' compose/.env": DAY_2_COMPOSE,
    "sed -i 's/^HAREL_MEMBERS=.*/HAREL_MEMBERS=3/' compose/.env": DAY_2_COMPOSE,
    "sed -i 's/^HAREL_MONGO_VERSION=.*/HAREL_MONGO_VERSION=8.2.1/' compose/.env": DAY_2_COMPOSE,
    "sed -i 's/^HAREL_TLS_MODE=.*/HAREL_TLS_MODE=allowTLS/' compose/.env": DAY_2_COMPOSE,
    "sed -i 's/^harel_tls_mode: .*/harel_tls_mode: allowTLS/' inventories/prod/group_vars/all/main.yml": DAY_2_HOSTS,
    'sed -i -e "s/^HAREL_MONGO_PREVIOUS_ROOT_PASSWORD=.*/HAREL_MONGO_PREVIOUS_ROOT_PASSWORD=$(sed -n \'s/^HAREL_MONGO_ROOT_PASSWORD=//p\' compose/.env)/" -e "s/^HAREL_MONGO_ROOT_PASSWORD=.*/HAREL_MONGO_ROOT_PASSWORD=$(openssl rand -hex 24)/" compose/.env': DAY_2_COMPOSE,
}


def test_every_block_is_decided(blocks: dict[str, Block]) -> None:
    names = set(blocks)
    assert len(names) == len(console_blocks()), "two blocks open with the same command"
    assert not set(RUNS) & set(CANNOT_RUN)
    assert names - set(RUNS) - set(CANNOT_RUN) == set(), "a new block: run it here, or say why it cannot run"
    assert set(RUNS) | set(CANNOT_RUN) <= names, "a block named here is no longer in the README or docs/"


@pytest.mark.parametrize("name", list(RUNS), ids=[run.__name__ for run in RUNS.values()])
def test_the_block_runs_as_shown(name: str, blocks: dict[str, Block], request: pytest.FixtureRequest) -> None:
    RUNS[name](blocks[name], request)


def test_matching_honours_the_ellipsis() -> None:
    shown = ("execution  order-42", "status     …", "…", "updated    …")
    assert matches(
        shown, "execution  order-42\nstatus     running\nactive  a\nupdated    now\n", collapsed=True
    )
    assert matches(shown, "execution order-42\nstatus done\nupdated x\n", collapsed=True)
    assert not matches(shown, "execution  order-43\nstatus     running\nupdated    now\n", collapsed=True)
    assert not matches(shown, "execution  order-42\nstatus     running\n", collapsed=True)
