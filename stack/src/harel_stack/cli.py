"""`harel-stack`: bring up, inspect, smoke-check and tear down the local compose stack (compose/)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from harel_stack.archive import inspect
from harel_stack.compose import BACKUP_PROFILE, Compose, DockerCompose
from harel_stack.engine import DockerClient, Engine, ServiceState, client_from_environment
from harel_stack.errors import BAD_INPUT, FAILED, StackError
from harel_stack.probe import MongoProbe, StackProbe
from harel_stack.project import Project, find_project
from harel_stack.readiness import sharded_conditions, stack_conditions, wait_until_ready
from harel_stack.settings import StackSettings, add_missing_secrets, ensure_env_file, load_settings
from harel_stack.status import build_status

DEFAULT_UP_TIMEOUT = 180.0
# compose/sharded.yml's own services: a project running any of them is the sharded cluster.
SHARDED_SERVICES = frozenset({"cfg1", "sh1", "sh2", "mongos", "sharded-init"})


def _default_project() -> Project:
    return find_project(Path.cwd(), Path(__file__).resolve().parent)


def _default_compose(project: Project, settings: StackSettings) -> Compose:
    return DockerCompose(
        project, settings.members, settings.observability, app=bool(settings.app), sharded=settings.sharded
    )


@dataclass
class Dependencies:
    """Everything that touches the outside world; tests replace each with a fake."""

    docker_client: Callable[[], DockerClient] = client_from_environment
    compose: Callable[[Project, StackSettings], Compose] = _default_compose
    probe: Callable[[StackSettings], StackProbe] = MongoProbe
    project: Callable[[], Project] = _default_project
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harel-stack",
        description="The local harel stack in Docker: a MongoDB replica set with auth, workers, a smoke check.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = commands.add_parser("up", help="build and start the stack, then wait until it is ready")
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_UP_TIMEOUT,
        help=f"seconds to wait for readiness after the containers started (default {DEFAULT_UP_TIMEOUT:.0f})",
    )
    up.add_argument(
        "--sharded",
        action="store_true",
        help="the sharded cluster of compose/sharded.yml instead of the replica set (as HAREL_SHARDED=1 does)",
    )
    commands.add_parser(
        "status", help="services, replica-set members (or router and shards), workers, executions by status"
    )
    logs = commands.add_parser("logs", help="follow the logs (of one service)")
    logs.add_argument("service", nargs="?", help="e.g. mongo1, mongo-init, worker")
    commands.add_parser("smoke", help="run `harel smoke` against the running workers; its exit code is ours")
    down = commands.add_parser("down", help="stop and remove the containers (data volumes are kept)")
    down.add_argument("--volumes", action="store_true", help="also delete the data volumes and the keyfile")
    commands.add_parser(
        "backup",
        help="mongodump the replica set with its oplog (the sharded cluster: its harel database through the router, "
        "the workers paused) into HAREL_BACKUPS_DIR (keeps HAREL_BACKUP_KEEP archives)",
    )
    restore = commands.add_parser(
        "restore",
        help="stop the workers, restore FILE with its oplog replayed (every collection dropped first), start them; "
        "the sharded cluster: pause the workers, restore FILE's harel database through the router, leave them paused",
    )
    restore.add_argument("file", type=Path, metavar="FILE", help="an archive `harel-stack backup` wrote")
    restore.add_argument(
        "--yes",
        action="store_true",
        help="confirm: everything written since FILE's backup is replaced by FILE",
    )
    return parser


class Stack:
    """One command's view of the stack: project, engine, settings and compose, resolved in that order."""

    def __init__(self, deps: Dependencies) -> None:
        self.deps = deps
        self.project = deps.project()
        # Asked first, so that no Docker engine means one clear line before anything else happens.
        self.engine = Engine(deps.docker_client())

    def settings(self, sharded: bool | None = None) -> StackSettings:
        """compose/.env's; `sharded` (True or False) chooses the topology whatever HAREL_SHARDED says."""
        settings = load_settings(self.project.env_file)
        return settings if sharded is None else settings.model_copy(update={"sharded": sharded})

    def running_settings(self) -> StackSettings:
        """compose/.env's, in the topology of the containers there are, if any: a stack `up --sharded` started stays
        the sharded cluster for status, logs and smoke."""
        services = self.engine.services(self.project.name)
        return self.settings(sharded=is_sharded(services) if services else None)

    def compose(self, settings: StackSettings) -> Compose:
        return self.deps.compose(self.project, settings)

    def say(self, text: str) -> None:
        self.deps.out.write(text + "\n")
        self.deps.out.flush()


def is_sharded(services: Sequence[ServiceState]) -> bool:
    return any(service.service in SHARDED_SERVICES for service in services)


def ensure_secrets(stack: Stack) -> None:
    """compose/.env with every secret: written whole the first time, completed when an older one lacks some."""
    if ensure_env_file(stack.project.env_file, stack.project.env_example):
        stack.say(
            f"wrote {stack.project.env_file} with new random secrets (mode 0600). Keep it: the data volumes "
            "are created with these credentials."
        )
    elif added := add_missing_secrets(stack.project.env_file):
        stack.say(f"added new random secrets to {stack.project.env_file}: {', '.join(added)}")


def command_up(stack: Stack, timeout: float, sharded: bool) -> int:
    """`sharded` (`--sharded`): the sharded cluster whatever HAREL_SHARDED says; without it, as HAREL_SHARDED says."""
    ensure_secrets(stack)
    settings = stack.settings(sharded=True if sharded else None)
    if settings.sharded:
        shards = stack.project.shard_names()
        init_service, name = "sharded-init", "sharded cluster"
        topology = f"{name} (config server cfg1, shards {', '.join(shards)}, router mongos)"
    else:
        init_service, name = "mongo-init", "replica set rs0"
        topology = f"{name} ({'3 members' if settings.members == 3 else '1 member'})"
    running = stack.engine.services(stack.project.name)
    if running and is_sharded(running) != settings.sharded:
        # Both publish HAREL_MONGO_PORT, and the cluster's sets are new volumes: one topology at a time.
        now_running = "the sharded cluster" if is_sharded(running) else "the replica set rs0"
        stack.deps.err.write(
            f"{now_running} is running: stop it with `make down` (its data volumes are kept) before starting the "
            f"{name}\n"
        )
        return BAD_INPUT
    stack.say(f"starting the stack: {topology}, {settings.workers} worker(s)")
    code = stack.compose(settings)("up", "--detach", "--build")
    if code != 0:
        stack.deps.err.write(
            f"docker compose up failed (exit {code}): see its output above, and `make logs SERVICE={init_service}`\n"
        )
        return FAILED
    stack.say(f"waiting for the stack (timeout {timeout:.0f}s):")
    probe = stack.deps.probe(settings)
    conditions = (
        sharded_conditions(probe, shards, settings.workers, stack.deps.now)
        if settings.sharded
        else stack_conditions(probe, settings.workers, stack.deps.now)
    )
    try:
        took = wait_until_ready(
            conditions,
            timeout=timeout,
            clock=stack.deps.clock,
            sleep=stack.deps.sleep,
            out=stack.deps.out,
            init_service=init_service,
        )
    finally:
        probe.close()
    stack.say(f"ready in {took:.0f}s.")
    stack.say(f"host tools: {settings.app_url_shown}")
    if settings.observability:
        stack.say(
            f"grafana: http://127.0.0.1:{settings.grafana_port} (admin, HAREL_GRAFANA_ADMIN_PASSWORD in compose/.env); "
            f"prometheus alerts: http://127.0.0.1:{settings.prometheus_port}/alerts"
        )
    stack.say("next: make status, make smoke, make logs, make down")
    return 0


def command_status(stack: Stack) -> int:
    services = stack.engine.services(stack.project.name)
    if not services:
        stack.say(
            f"the stack is not running (no containers in compose project {stack.project.name!r}): make up"
        )
        return FAILED
    sharded = is_sharded(services)
    probe = stack.deps.probe(stack.settings(sharded=sharded))
    try:
        shards = stack.project.shard_names() if sharded else None
        report = build_status(services, probe, stack.deps.now(), shards)
    finally:
        probe.close()
    stack.deps.out.write(report.render())
    return 0 if report.healthy else FAILED


def command_logs(stack: Stack, service: str | None) -> int:
    return stack.compose(stack.running_settings())(
        "logs", "--follow", "--tail", "100", *([service] if service else [])
    )


def command_smoke(stack: Stack) -> int:
    # With the running stack's files and profiles: the sharded cluster's smoke reads sharded-init's URL, the router's.
    return stack.compose(stack.running_settings())("run", "--rm", "smoke")


def command_down(stack: Stack, volumes: bool) -> int:
    return stack.compose(stack.settings())("down", *(["--volumes"] if volumes else []), all_profiles=True)


def command_backup(stack: Stack) -> int:
    ensure_secrets(stack)
    # The topology of the containers there are (HAREL_SHARDED's when none): a stack `up --sharded` started is backed
    # up as the cluster. compose/sharded.yml gives the backup one-shot the router in place of mongo1..3.
    settings = stack.running_settings()
    directory = settings.backups_path(stack.project)
    # Made here, owned by the caller: compose would create a missing bind-mount source as root.
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if settings.sharded:
        stack.say(
            f"backing up the sharded cluster's harel database through the router into {directory} (keeping "
            f"{settings.backup_keep}): the balancer stopped and the workers paused for the dump, both started again "
            "after it"
        )
    else:
        stack.say(
            f"backing up the replica set with its oplog into {directory} (keeping {settings.backup_keep})"
        )
    # As the caller (compose/observability.yml's HAREL_BACKUPS_UID/GID, which harel-stack sets): the archives are theirs.
    code = stack.compose(settings)("run", "--rm", "backup", profiles=[BACKUP_PROFILE])
    if code != 0:
        stack.deps.err.write(
            f"the backup failed (exit {code}): its last lines above say why; it is recorded in harel.backups, "
            "and `harel check` reports it\n"
        )
        return FAILED
    return 0


def command_restore(stack: Stack, file: Path, confirmed: bool) -> int:
    settings = stack.running_settings()
    archive = file.resolve()
    prelude = inspect(archive, sharded=settings.sharded)
    stack.say(f"{archive.name}: {prelude.describe()}")
    if not confirmed:
        replaced = "the harel database's collections" if settings.sharded else "every collection it holds"
        stack.deps.err.write(
            f"restoring {archive.name} replaces {replaced} with its content as of the end of that "
            "backup; anything written since is lost. Run again with --yes to restore.\n"
        )
        return BAD_INPUT
    if settings.sharded:
        return restore_cluster(stack, settings, archive)
    compose = stack.compose(settings)
    stack.say("stopping the workers (each drains its in-flight events) ...")
    if compose("stop", "worker") != 0:
        stack.deps.err.write("could not stop the workers: nothing was restored; see `make status`\n")
        return FAILED
    stack.say("restoring (mongorestore --oplogReplay --drop) ...")
    mount = f"{archive}:/restore/archive.gz:ro"
    if compose("run", "--rm", "--no-deps", "--volume", mount, "restore", profiles=[BACKUP_PROFILE]) != 0:
        stack.deps.err.write(
            "the restore failed: mongorestore's messages above say why. The workers stay stopped; fix the cause "
            "and restore again, or `make up` to start them on the data as it is now\n"
        )
        return FAILED
    # The archive brought back the users as they were then: make their passwords compose/.env's again.
    for service, profiles in (("mongo-init", []), ("mongo-ops-users", [BACKUP_PROFILE])):
        if compose("run", "--rm", "--no-deps", service, profiles=profiles) != 0:
            stack.deps.err.write(
                f"restored, but {service} failed: the workers stay stopped; `make logs SERVICE={service}`, then "
                "`make up`\n"
            )
            return FAILED
    if compose("start", "worker") != 0:
        stack.deps.err.write("restored, but the workers did not start: `make up`\n")
        return FAILED
    stack.say(f"restored {archive.name}; workers started. Check with: make status, make smoke")
    return 0


def restore_cluster(stack: Stack, settings: StackSettings, archive: Path) -> int:
    """The sharded cluster's restore (harel-backup.sh's sharded mode, through the router): the workers are paused, not
    stopped, and stay paused; the archive holds the harel database only, so the users are untouched. What is left
    to the operator, as the script says: `harel partitions init` (sharded-init runs it), then `harel resume`."""
    stack.say(
        "restoring through the router (mongorestore --drop of the harel database; the balancer stopped and the "
        "workers paused first, and they stay paused) ..."
    )
    mount = f"{archive}:/restore/archive.gz:ro"
    code = stack.compose(settings)(
        "run", "--rm", "--no-deps", "--volume", mount, "restore", profiles=[BACKUP_PROFILE]
    )
    if code != 0:
        stack.deps.err.write(
            f"the restore failed (exit {code}): its last lines above say why and whether the workers stay paused "
            "(a restore that did not start resumed them). Fix the cause and restore again\n"
        )
        return FAILED
    shown = shown_compose(stack.project, settings)
    stack.say(
        f"restored {archive.name}; the workers stay paused. Next, `harel partitions init` shards the executions "
        f"again and sets their zones (sharded-init runs it):\n  {shown} run --rm --no-deps sharded-init\n"
        f"then `harel resume` lets the workers go on:\n  {shown} exec worker harel resume\n"
        "Check with: make status, make smoke"
    )
    return 0


def shown_compose(project: Project, settings: StackSettings) -> str:
    """The `docker compose` command line harel-stack runs for `settings` (its project options), for the operator to
    type from the repository's root."""
    command = DockerCompose(
        project, settings.members, settings.observability, app=bool(settings.app), sharded=settings.sharded
    ).command()
    root = f"{project.root}/"
    return " ".join(shlex.quote(part.removeprefix(root)) for part in command)


def main(argv: Sequence[str] | None = None, deps: Dependencies | None = None) -> int:
    args = build_parser().parse_args(argv)
    deps = deps or Dependencies()
    try:
        stack = Stack(deps)
        if args.command == "up":
            return command_up(stack, args.timeout, args.sharded)
        if args.command == "status":
            return command_status(stack)
        if args.command == "logs":
            return command_logs(stack, args.service)
        if args.command == "smoke":
            return command_smoke(stack)
        if args.command == "backup":
            return command_backup(stack)
        if args.command == "restore":
            return command_restore(stack, args.file, args.yes)
        return command_down(stack, args.volumes)
    except StackError as exc:
        deps.err.write(f"{exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
