"""`docker compose` as a subprocess (the Docker SDK has no compose API), always on this stack's project."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from harel_stack.errors import ComposeUnavailable
from harel_stack.project import Project

# Members mongo2 and mongo3 run only in this profile (HAREL_MEMBERS=3); `smoke` only when run.
THREE_MEMBERS_PROFILE = "three-members"
SMOKE_PROFILE = "smoke"
# compose/observability.yml: the exporter, Prometheus and Grafana (HAREL_OBSERVABILITY=1); the backup and restore
# one-shots, only when run.
OBSERVABILITY_PROFILE = "observability"
BACKUP_PROFILE = "backup"
# compose/sharded.yml: cfg1, sh1, sh2, mongos and sharded-init (HAREL_SHARDED=1); it moves the replica set's mongo1,
# mongo-init, mongo-ops-users and mongodb-exporter to a profile nothing starts but `down`, which reaches every service
# of either topology.
SHARDED_PROFILE = "sharded"
REPLICA_SET_ONLY_PROFILE = "replica-set-only"

# Runs a command with the terminal's stdin/stdout/stderr, the variables added to its environment, and returns its
# exit code.
Runner = Callable[[Sequence[str], Mapping[str, str]], int]
# Runs a command quietly and returns its exit code.
Probe = Callable[[Sequence[str]], int]


class Compose(Protocol):
    def __call__(self, *args: str, all_profiles: bool = False, profiles: Sequence[str] = ()) -> int:
        """Run `docker compose <project options> <args>`, output streamed, and return its exit code. `profiles`
        adds profiles for this one command (the backup one-shots)."""
        ...


def _run(command: Sequence[str], variables: Mapping[str, str], *, capture: bool) -> int:
    try:
        return subprocess.run(
            list(command), check=False, capture_output=capture, env={**os.environ, **variables}
        ).returncode
    except FileNotFoundError as exc:
        raise ComposeUnavailable(f"{command[0]} not found on PATH") from exc


def run_attached(command: Sequence[str], variables: Mapping[str, str]) -> int:
    return _run(command, variables, capture=False)


def run_quiet(command: Sequence[str]) -> int:
    return _run(command, {}, capture=True)


def caller_variables() -> dict[str, str]:
    """What compose reads from harel-stack's own environment (it wins over compose/.env): the backup and restore
    containers run as whoever runs harel-stack, so the archives on the host, and their password files, are theirs;
    the `tls` one-shot reads the caller's certificate folder with the caller's group."""
    return {"HAREL_BACKUPS_UID": str(os.getuid()), "HAREL_BACKUPS_GID": str(os.getgid())}


class DockerCompose:
    def __init__(
        self,
        project: Project,
        members: int,
        observability: bool = False,
        app: bool = False,
        sharded: bool = False,
        run: Runner = run_attached,
        probe: Probe = run_quiet,
    ) -> None:
        self.project = project
        self.members = members
        self.observability = observability
        self.app = app
        self.sharded = sharded
        self._run = run
        self._probe = probe
        self._available = False

    def command(self, *args: str, all_profiles: bool = False, profiles: Sequence[str] = ()) -> list[str]:
        """The full command line. `all_profiles` (for `down`) also reaches the services of earlier runs with other
        settings: members of a 3-member set, the observability services, the one-shots, the sharded cluster (with
        compose/sharded.yml) and the replica set it moves aside. `sharded` (HAREL_SHARDED) reads compose/sharded.yml
        after the compose file for every command, with its profile and, with `observability`, the observability
        profile (sharded.yml puts the cluster's monitor users and exporter in the replica set's place, and gives the
        backup services the router in place of the members). With `app` (HAREL_APP set) compose/app.yml follows, for every command: the
        workers are the user's app's; with `sharded` too, compose/sharded-app.yml last, which builds the app's image
        on sharded-init's (app.yml's names mongo-init, which the cluster does not run)."""
        if all_profiles:
            chosen = [THREE_MEMBERS_PROFILE, OBSERVABILITY_PROFILE, SMOKE_PROFILE, BACKUP_PROFILE]
            chosen += [SHARDED_PROFILE, REPLICA_SET_ONLY_PROFILE]
        else:
            if self.sharded:
                chosen = [SHARDED_PROFILE]
            else:
                chosen = [THREE_MEMBERS_PROFILE] if self.members == 3 else []
            if self.observability:
                chosen.append(OBSERVABILITY_PROFILE)
        chosen += [profile for profile in profiles if profile not in chosen]
        options = ["-f", str(self.project.compose_file)]
        if self.sharded or all_profiles:
            options += ["-f", str(self.project.sharded_compose_file)]
        if self.app:
            options += ["-f", str(self.project.app_compose_file)]
            if self.sharded:
                options += ["-f", str(self.project.sharded_app_compose_file)]
        options += ["--env-file", str(self.project.env_file), "-p", self.project.name]
        for profile in chosen:
            options += ["--profile", profile]
        return ["docker", "compose", *options, *args]

    def __call__(self, *args: str, all_profiles: bool = False, profiles: Sequence[str] = ()) -> int:
        if not self._available:
            if self._probe(["docker", "compose", "version"]) != 0:
                raise ComposeUnavailable("`docker compose version` failed")
            self._available = True
        return self._run(
            self.command(*args, all_profiles=all_profiles, profiles=profiles), caller_variables()
        )
