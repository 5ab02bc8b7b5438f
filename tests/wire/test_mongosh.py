"""The real mongosh (npm, pinned in tests/tools) against the test replica set, as deployment scripts run it:
connecting with and without authentication, `rs.initiate()`, `rs.status()`, `rs.conf()`, `rs.reconfig()`,
`db.createUser()`, and `db.auth()` with a wrong password. Passwords are generated per run and reach mongosh
through its environment, never its command line.

Marked `fake_server`: these tests prove the test replica set (and, where HAREL_TEST_MONGO_URL is set, that a
real deployment agrees with it), not harel; harel's own behaviour over the same sockets is in the unmarked
wire tests and the conformance suite.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harel_dev.server import Connection, Reply
from tests.fake_mongod import FakeMongod
from tests.fake_mongod.fixtures import AuthenticatedFake, start_authenticated_fake
from tests.tools.mongosh import TOOLS, mongosh_path, mongosh_version
from tests.wire.processes import run_harel

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

MONGOSH_TIMEOUT = 90


def mongosh(url: str, script: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """`mongosh URL --quiet --eval SCRIPT`; `environment` is visible to the script as process.env."""
    return subprocess.run(
        [str(mongosh_path()), url, "--quiet", "--norc", "--eval", script],
        capture_output=True,
        text=True,
        timeout=MONGOSH_TIMEOUT,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), **environment},
        check=False,
    )


def last_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def uninitialized() -> Iterator[FakeMongod]:
    """A member started with --replSet and --auth that has neither a configuration nor a user yet."""
    server = FakeMongod(auth=True).start()
    server.set_initialized(False)
    yield server
    server.stop()


def test_the_pinned_version_is_installed() -> None:
    pinned = json.loads((TOOLS / "package.json").read_text())["dependencies"]["mongosh"]

    assert mongosh_version() == pinned


def test_first_run_initiates_and_creates_the_root_user_through_the_localhost_exception(
    uninitialized: FakeMongod,
) -> None:
    password = secrets.token_urlsafe(18)
    direct = f"mongodb://{uninitialized.host_port}/?directConnection=true"

    first = mongosh(
        direct,
        "const initiated = rs.initiate();"
        "const created = db.getSiblingDB('admin').createUser({user: 'root', pwd: process.env.ROOT_PASSWORD,"
        " roles: ['root']});"
        "print(JSON.stringify({initiated: initiated.ok, created: created.ok}));",
        ROOT_PASSWORD=password,
    )
    again = mongosh(direct, "rs.status()")
    as_root = mongosh(
        f"mongodb://root:{password}@{uninitialized.host_port}/?directConnection=true&authSource=admin",
        "const s = rs.status(); const c = rs.conf();"
        "print(JSON.stringify({set: s.set, states: s.members.map((m) => m.stateStr), hosts: c.members.map((m) => m.host)}));",
    )

    assert last_json(first) == {"initiated": 1, "created": 1}
    assert again.returncode != 0  # the exception ended with the first user
    assert "requires authentication" in again.stderr + again.stdout
    assert last_json(as_root) == {"set": "rs0", "states": ["PRIMARY"], "hosts": [uninitialized.host_port]}
    assert password not in first.stdout + first.stderr


@pytest.fixture
def authenticated() -> Iterator[AuthenticatedFake]:
    fake = start_authenticated_fake()
    yield fake
    fake.server.stop()


def test_reconfig_adds_a_member_and_status_follows(authenticated: AuthenticatedFake) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        new_member = f"127.0.0.1:{probe.getsockname()[1]}"
    url = authenticated.url(AuthenticatedFake.ROOT, authenticated.root_password)

    result = mongosh(
        url,
        "const conf = rs.conf(); conf.members.push({_id: 1, host: process.env.NEW_MEMBER}); conf.version += 1;"
        "const reconfigured = rs.reconfig(conf);"
        "const status = rs.status();"
        "print(JSON.stringify({ok: reconfigured.ok, version: rs.conf().version,"
        " members: status.members.map((m) => [m.name, m.stateStr])}));",
        NEW_MEMBER=new_member,
    )
    authenticated.server.set_member_state(new_member, "DOWN")
    down = mongosh(url, "print(JSON.stringify(rs.status().members.map((m) => [m.stateStr, m.health])))")

    assert last_json(result) == {
        "ok": 1,
        "version": 2,
        "members": [[authenticated.host_port, "PRIMARY"], [new_member, "SECONDARY"]],
    }
    assert last_json(down) == [["PRIMARY", 1], ["DOWN", 0]]


def test_reconfig_adding_two_voters_fails_as_on_mongod(authenticated: AuthenticatedFake) -> None:
    result = mongosh(
        authenticated.root_url,
        "const conf = rs.conf(); conf.version += 1;"
        "conf.members.push({_id: 1, host: '127.0.0.1:1'}, {_id: 2, host: '127.0.0.1:2'});"
        "try { rs.reconfig(conf); print('reconfigured'); }"
        " catch (error) { print(JSON.stringify({code: error.code, codeName: error.codeName})); }",
    )

    assert last_json(result) == {"code": 103, "codeName": "NewReplicaSetConfigurationIncompatible"}


def test_create_user_then_the_new_user_connects_with_least_privilege(
    authenticated: AuthenticatedFake,
) -> None:
    password = secrets.token_urlsafe(18)
    created = mongosh(
        authenticated.root_url,
        "db.getSiblingDB('admin').createUser({user: 'harel', pwd: process.env.APP_PASSWORD,"
        " roles: [{role: 'readWrite', db: 'harel'}], mechanisms: ['SCRAM-SHA-256']});"
        "print(JSON.stringify(db.getSiblingDB('admin').getUser('harel').roles));",
        APP_PASSWORD=password,
    )
    as_app = mongosh(
        authenticated.url("harel", password),
        "db.getSiblingDB('harel').items.insertOne({by: 'mongosh'});"
        "let denied = null;"
        "try { db.getSiblingDB('admin').runCommand({replSetGetStatus: 1}); }"
        " catch (error) { denied = error.codeName; }"
        "print(JSON.stringify({count: db.getSiblingDB('harel').items.countDocuments({}), denied}));",
    )

    assert last_json(created) == [{"role": "readWrite", "db": "harel"}]
    assert last_json(as_app) == {"count": 1, "denied": "Unauthorized"}


def test_auth_with_a_wrong_password_fails(authenticated: AuthenticatedFake) -> None:
    wrong = secrets.token_urlsafe(18)
    in_script = mongosh(
        authenticated.url(),
        "try { db.getSiblingDB('admin').auth('root', process.env.WRONG); print('authenticated'); }"
        " catch (error) { print(JSON.stringify({code: error.code, message: error.message})); }",
        WRONG=wrong,
    )
    in_url = mongosh(authenticated.url("root", wrong), "db.runCommand({ping: 1})")
    right = mongosh(
        authenticated.url(),
        "db.getSiblingDB('admin').auth('root', process.env.RIGHT);"
        "print(JSON.stringify(db.runCommand({connectionStatus: 1}).authInfo.authenticatedUsers));",
        RIGHT=authenticated.root_password,
    )

    assert last_json(in_script) == {"code": 18, "message": "Authentication failed."}
    assert in_url.returncode != 0
    assert "Authentication failed" in in_url.stderr + in_url.stdout
    assert last_json(right) == [{"user": "root", "db": "admin"}]


def test_without_auth_a_script_file_runs_against_the_replica_set(fake_rs: Any, tmp_path: Path) -> None:
    script = tmp_path / "status.js"
    script.write_text(
        "const hello = db.hello();\n"
        "print(JSON.stringify({primary: hello.isWritablePrimary, set: hello.setName, version: db.version(),"
        " fcv: db.adminCommand({getParameter: 1, featureCompatibilityVersion: 1}).featureCompatibilityVersion.version}));\n"
    )

    result = subprocess.run(
        [str(mongosh_path()), fake_rs.url, "--quiet", "--norc", str(script)],
        capture_output=True,
        text=True,
        timeout=MONGOSH_TIMEOUT,
        check=False,
    )

    assert last_json(result) == {"primary": True, "set": "rs0", "version": "8.0.4", "fcv": "8.0"}


def test_the_sdk_server_with_auth_as_its_readme_shows(tmp_path: Path) -> None:
    """sdk/dev/README.md, "Authentication and authorisation": start with --auth, create root with mongosh through
    the localhost exception, then `harel check` as root passes with authentication ok."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harel_dev.server",
            "--auth",
            "--port",
            "0",
            "--data",
            str(tmp_path / "dev.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    password = secrets.token_urlsafe(18)
    try:
        assert server.stdout is not None
        host_port = server.stdout.readline().strip().removeprefix("mongodb://").split("/")[0]
        created = mongosh(
            f"mongodb://{host_port}/",
            "db.getSiblingDB('admin').createUser({user: 'root', pwd: process.env.ROOT_PASSWORD, roles: ['root']})",
            ROOT_PASSWORD=password,
        )
        check = run_harel(
            "check",
            f"mongodb://root:{password}@{host_port}/?replicaSet=rs0&authSource=admin",
            "--json",
            "--deadline",
            "20",
        )
    finally:
        server.terminate()
        server.wait(timeout=20)

    assert created.returncode == 0, created.stdout + created.stderr
    assert check.returncode == 0, check.stdout + check.stderr
    findings = {finding["check"]: finding for finding in json.loads(check.stdout)["findings"]}
    assert findings["authentication"]["status"] == "ok"
    assert password not in check.stdout + check.stderr


class Recording(FakeMongod):
    """The fake, noting each command's name and the code of its reply (0 for ok)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.answered: list[tuple[str, int]] = []

    def _respond(self, connection: Connection, name: str, db: str, command: dict[str, Any]) -> Reply | None:
        reply = super()._respond(connection, name, db, command)
        if reply is not None:
            self.answered.append((name, 0 if reply.get("ok") else int(reply.get("code", -1))))
        return reply


@pytest.mark.parametrize("authenticate", [False, True], ids=["anonymous", "root"])
def test_what_mongosh_sends_on_connecting_is_answered_as_mongod_answers(authenticate: bool) -> None:
    server = Recording(auth=True).start()
    try:
        password = secrets.token_urlsafe(18)
        with MongoClient(server.url, serverSelectionTimeoutMS=10_000) as client:
            client.admin.command("createUser", "root", pwd=password, roles=["root"])
        server.answered.clear()
        credentials = f"root:{password}@" if authenticate else ""
        result = mongosh(
            f"mongodb://{credentials}{server.host_port}/?directConnection=true", "db.runCommand({ping: 1})"
        )
    finally:
        server.stop()

    assert result.returncode == 0, result.stdout + result.stderr
    answered = {
        (name, code) for name, code in server.answered if name not in ("hello", "isMaster", "ismaster")
    }
    # mongosh sends some probes in the background and may exit before their replies: they are checked when sent.
    allowed = {
        "buildInfo": {0},
        "ping": {0},
        "atlasVersion": {59},  # CommandNotFound, as on mongod
        "getParameter": {0, 72} if authenticate else {13},
        "aggregate": {0} if authenticate else {13},  # the admin.atlascli probe
        "saslStart": {0},
        "saslContinue": {0},
        "endSessions": {0},
    }
    assert {("buildInfo", 0), ("ping", 0)} <= answered
    assert {(name, code) for name, code in answered if code not in allowed.get(name, set())} == set()
