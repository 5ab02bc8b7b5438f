"""The Docker engine, through the Docker SDK: is it there, and what state are the stack's containers in."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import docker
import requests
from docker.context import ContextAPI
from docker.errors import DockerException

from harel_stack.errors import DockerUnavailable

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
ONE_OFF_LABEL = "com.docker.compose.oneoff"
DEFAULT_ENDPOINT = "unix:///var/run/docker.sock"


class Container(Protocol):
    name: str
    labels: Mapping[str, str]
    attrs: Mapping[str, Any]


class Containers(Protocol):
    def list(self, *, all: bool, filters: Mapping[str, Any]) -> Iterable[Container]: ...


class DockerClient(Protocol):
    """The part of `docker.DockerClient` the stack uses."""

    containers: Containers

    def ping(self) -> bool: ...


@dataclass(frozen=True)
class ServiceState:
    service: str
    container: str
    state: str  # running, exited, restarting, created, ...
    health: str | None  # healthy, unhealthy, starting; None for a service without a healthcheck
    exit_code: int

    @property
    def settled(self) -> bool:
        """Long-running and healthy, or a one-shot that finished successfully."""
        if self.state == "exited":
            return self.exit_code == 0 and self.health is None
        return self.state == "running" and self.health in (None, "healthy")


def current_endpoint() -> str:
    """Where the Docker CLI would connect: DOCKER_HOST, else the current `docker context`'s host."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    try:
        return ContextAPI.get_current_context().Host or DEFAULT_ENDPOINT
    except DockerException:
        return DEFAULT_ENDPOINT


def client_from_environment() -> DockerClient:
    """A Docker client the way the Docker CLI would build it, proven by a ping; DockerUnavailable otherwise."""
    endpoint = current_endpoint()
    try:
        if os.environ.get("DOCKER_HOST"):
            client = docker.from_env()
        else:
            context = ContextAPI.get_current_context()
            client = docker.DockerClient(
                base_url=context.Host or DEFAULT_ENDPOINT, tls=context.TLSConfig or False
            )
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise DockerUnavailable(endpoint, str(exc)) from None
    return client


class Engine:
    def __init__(self, client: DockerClient) -> None:
        self._client = client

    def services(self, project: str) -> list[ServiceState]:
        """Every container of the compose project (one-off `compose run` containers left out), by service."""
        containers = self._client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"})
        states = [
            _state(container)
            for container in containers
            if container.labels.get(ONE_OFF_LABEL, "False") != "True"
        ]
        return sorted(states, key=lambda s: (s.service, s.container))


def _state(container: Container) -> ServiceState:
    state = container.attrs.get("State", {})
    health = state.get("Health")
    return ServiceState(
        service=container.labels.get(SERVICE_LABEL, "?"),
        container=container.name,
        state=str(state.get("Status", "unknown")),
        health=str(health["Status"]) if health else None,
        exit_code=int(state.get("ExitCode", 0)),
    )
