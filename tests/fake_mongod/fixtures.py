"""pytest fixtures for the fake MongoDB servers (loaded by `pytest_plugins` in tests/conftest.py).

In-process servers are session-scoped (one per role, started on first use) and reset before each test that
asks for them:
  fake_rs          a replica-set primary (`?replicaSet=rs0`)
  fake_standalone  a standalone mongod
  fake_secondary   a replica-set secondary (reached with directConnection=true)
  fake_mongos      a mongos
  fake_rs_auth     a primary requiring authentication, with a root user (per test; passwords made per run)
  mongo_rs         the replica set under test: every test asking for it runs on the fake primary (`fake-rs`)
                   and, as a second variant (`real-rs`, marker `real`), on the deployment given by
                   HAREL_TEST_MONGO_URL, reported as skipped when that variable is unset
  fake_cluster     a fake sharded cluster (cluster.py, router.py): 3 shards behind 2 routers, reset before each
                   test (shards emptied, sharding state, zones, metrics, balancer, mode, clock offsets)
Processes (for CLI and worker-process tests):
  fake_mongod_process  a factory: `fake_mongod_process("--standalone")` starts `python -m tests.fake_mongod`
  fake_rs_process      a primary in its own process, killed after the test
  fake_cluster_process a factory: `fake_cluster_process("--shards", "3")` starts a cluster in its own process
"""

from __future__ import annotations

import secrets
import select
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote_plus

import pytest
from pymongo import MongoClient

from tests.conftest import REAL_MONGO_URL, requires_real_mongo

from .deployment import ClusterDeployment, start_cluster
from .server import FakeMongod
from .topology import Role

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
# What every wire test's client asks for: the production connection discipline, plus a 500 ms heartbeat (the
# driver's minimum) so a monitor waiting in an awaitable hello notices a state change quickly.
CLIENT_OPTIONS: dict[str, object] = {
    "w": "majority",
    "journal": True,
    "readConcernLevel": "majority",
    "retryWrites": True,
    "heartbeatFrequencyMS": 500,
    "serverSelectionTimeoutMS": 10_000,
}
REAL_MONGO_URL_VARIABLE = "HAREL_TEST_MONGO_URL"
PROCESS_START_TIMEOUT = 20.0
CLUSTER_SHARDS = 3
CLUSTER_ROUTERS = 2


@dataclass
class FakeDeployment:
    """An in-process fake server, reset before the test that received it."""

    server: FakeMongod

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def reset(self) -> None:
        self.server.reset()


@dataclass
class AuthenticatedFake:
    """A fake primary that requires authentication; `root` holds the root user's generated password."""

    server: FakeMongod
    root_password: str

    ROOT = "root"

    @property
    def host_port(self) -> str:
        return self.server.host_port

    def url(self, user: str | None = None, password: str | None = None, *, options: str = "") -> str:
        """The replica-set URL, with `user`'s credentials (authSource admin) when given."""
        query = f"replicaSet={self.server.set_name}" + (f"&{options}" if options else "")
        if user is None:
            return f"mongodb://{self.host_port}/?{query}"
        assert password is not None
        credentials = f"{quote_plus(user)}:{quote_plus(password)}@"
        return f"mongodb://{credentials}{self.host_port}/?{query}&authSource=admin"

    @property
    def root_url(self) -> str:
        return self.url(self.ROOT, self.root_password)

    def add_user(self, name: str, roles: list[dict[str, str]]) -> str:
        """Create `name` with `roles` in admin (as root); its generated password."""
        password = secrets.token_urlsafe(18)
        with MongoClient(self.root_url, serverSelectionTimeoutMS=10_000) as client:
            client.admin.command("createUser", name, pwd=password, roles=roles)
        return password


def start_authenticated_fake(**options: object) -> AuthenticatedFake:
    """A started FakeMongod(auth=True) whose first user, root, was created through the localhost exception."""
    server = FakeMongod(auth=True, **options).start()  # type: ignore[arg-type]
    password = secrets.token_urlsafe(18)
    with MongoClient(server.url, serverSelectionTimeoutMS=10_000) as client:
        client.admin.command("createUser", AuthenticatedFake.ROOT, pwd=password, roles=["root"])
    return AuthenticatedFake(server, password)


@dataclass
class Deployment:
    """The replica set under test: a fake one here, or a real one when HAREL_TEST_MONGO_URL is set.

    `db_name` is fresh for each test; on a real deployment it is dropped after the test.
    """

    url: str
    db_name: str
    fake: FakeMongod | None

    @property
    def is_real(self) -> bool:
        return self.fake is None

    def require_fake(self, why: str) -> FakeMongod:
        """The fake server, or skip: `why` says what the test needs that a real server cannot give."""
        if self.fake is None:
            pytest.skip(f"runs only on the fake replica set: {why}")
        return self.fake

    def reset(self) -> None:
        if self.fake is not None:
            self.fake.reset()
            return
        with MongoClient(self.url, serverSelectionTimeoutMS=10_000) as client:
            client.drop_database(self.db_name)


@dataclass
class FakeProcess:
    """`python -m tests.fake_mongod` running in a child process."""

    process: subprocess.Popen[str]
    port: int
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


@dataclass
class _Servers:
    """One in-process server per role, started the first time a test asks for that role."""

    started: dict[Role, FakeMongod] = field(default_factory=dict)

    def fresh(self, role: Role) -> FakeMongod:
        if role not in self.started:
            self.started[role] = FakeMongod(role).start()
        server = self.started[role]
        server.reset()
        return server

    def stop(self) -> None:
        for server in self.started.values():
            server.stop()


@pytest.fixture(scope="session")
def _fake_servers() -> Iterator[_Servers]:
    servers = _Servers()
    yield servers
    servers.stop()


@pytest.fixture
def fake_rs(_fake_servers: _Servers) -> FakeDeployment:
    return FakeDeployment(_fake_servers.fresh(Role.PRIMARY))


@pytest.fixture
def fake_standalone(_fake_servers: _Servers) -> FakeDeployment:
    return FakeDeployment(_fake_servers.fresh(Role.STANDALONE))


@pytest.fixture
def fake_secondary(_fake_servers: _Servers) -> FakeDeployment:
    return FakeDeployment(_fake_servers.fresh(Role.SECONDARY))


@pytest.fixture
def fake_mongos(_fake_servers: _Servers) -> FakeDeployment:
    return FakeDeployment(_fake_servers.fresh(Role.MONGOS))


@pytest.fixture(scope="session")
def _fake_cluster_deployment() -> Iterator[ClusterDeployment]:
    deployment = start_cluster(CLUSTER_SHARDS, routers=CLUSTER_ROUTERS)
    yield deployment
    deployment.stop()


@pytest.fixture
def fake_cluster(_fake_cluster_deployment: ClusterDeployment) -> ClusterDeployment:
    """The fake cluster, reset: `.url` (both routers), `.cluster` (`FakeCluster`: `metrics()`,
    `reset_metrics()`, `move_range(...)`, `shard_of(ns, p)`, `documents(shard, ns)`, `set_mode("7.0")`),
    `.routers` (each a `Router`, a `FakeMongod`: `.url`, `set_clock_offset(seconds)`, fail points)."""
    _fake_cluster_deployment.reset()
    return _fake_cluster_deployment


@pytest.fixture
def fake_rs_auth() -> Iterator[AuthenticatedFake]:
    fake = start_authenticated_fake()
    yield fake
    fake.server.stop()


@pytest.fixture(
    params=[
        pytest.param("fake", id="fake-rs"),
        pytest.param("real", id="real-rs", marks=(pytest.mark.real, requires_real_mongo)),
    ]
)
def mongo_rs(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """The replica set under test, with a fresh database name (dropped afterwards on a real one)."""
    db_name = f"harel_test_{uuid.uuid4().hex[:12]}"
    if request.param == "fake":
        server = request.getfixturevalue("_fake_servers").fresh(Role.PRIMARY)
        yield Deployment(server.url, db_name, fake=server)
        return
    assert REAL_MONGO_URL is not None
    deployment = Deployment(REAL_MONGO_URL, db_name, fake=None)
    yield deployment
    deployment.reset()


def _process_factory() -> Iterator[Callable[..., FakeProcess]]:
    started: list[FakeProcess] = []

    def start(*arguments: str) -> FakeProcess:
        fake = start_fake_mongod_process(*arguments)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def fake_mongod_process() -> Iterator[Callable[..., FakeProcess]]:
    yield from _process_factory()


@pytest.fixture
def fake_rs_process(fake_mongod_process: Callable[..., FakeProcess]) -> FakeProcess:
    return fake_mongod_process()


@pytest.fixture
def fake_cluster_process() -> Iterator[Callable[..., FakeProcess]]:
    """A factory: `fake_cluster_process("--shards", "3", "--routers", "2")`; `.url` lists every router."""
    yield from _process_factory()


def start_fake_mongod_process(*arguments: str) -> FakeProcess:
    """Start `python -m tests.fake_mongod --port 0 ARGUMENTS...` and wait until it accepts connections."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_mongod", "--port", "0", *arguments],
        cwd=REPOSITORY_ROOT,
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
    )
    routers = int(arguments[arguments.index("--routers") + 1]) if "--routers" in arguments else 1
    assert process.stdout is not None
    try:
        # A cluster prints its further routers' lines at once after the first (perhaps already buffered).
        ports = [_read_port(process)]
        ports += [
            _port_of(process.stdout.readline()) for _ in range(routers - 1 if "--shards" in arguments else 0)
        ]
        for port in ports:
            _wait_accepting(port)
    except BaseException:
        process.kill()
        process.wait(timeout=5)
        raise
    port = ports[0]
    if "--shards" in arguments:
        return FakeProcess(process, port, "mongodb://" + ",".join(f"127.0.0.1:{p}" for p in ports) + "/")
    role_flags = {"--standalone", "--mongos", "--secondary"} & set(arguments)
    host_port = f"127.0.0.1:{port}"
    if "--secondary" in role_flags or "--uninitialized" in arguments:
        url = f"mongodb://{host_port}/?directConnection=true"
    elif role_flags:
        url = f"mongodb://{host_port}/"
    else:
        set_name = arguments[arguments.index("--set-name") + 1] if "--set-name" in arguments else "rs0"
        url = f"mongodb://{host_port}/?replicaSet={set_name}"
    return FakeProcess(process, port, url)


def _read_port(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], PROCESS_START_TIMEOUT)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("listening "):
        raise RuntimeError(f"fake mongod process did not start (exit code {process.poll()}, said {line!r})")
    return _port_of(line)


def _port_of(line: str) -> int:
    if not line.startswith("listening "):
        raise RuntimeError(f"fake mongod process did not announce a router: said {line!r}")
    return int(line.rsplit(":", 1)[1])


def _wait_accepting(port: int) -> None:
    deadline = time.monotonic() + PROCESS_START_TIMEOUT
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
