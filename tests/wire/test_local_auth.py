"""Authentication and authorisation of the local server (`harel_dev.access`, `users`, `roles`), with real
drivers over sockets: SCRAM-SHA-256 and SCRAM-SHA-1 from MongoClient, AsyncMongoClient and Motor, speculative
authentication, the localhost exception, the user commands with mongod's replies and errors, the coarse role
checks, and users kept across a restart. Every password is generated per run."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import OperationFailure

from harel_dev.roles import COMMAND_ACTIONS
from harel_dev.server import Connection, LocalServer, Reply
from tests.fake_mongod.fixtures import AuthenticatedFake
from tests.fake_mongod.raw_client import RawConnection

pytestmark = pytest.mark.wire

AUTHENTICATION_FAILED = 18
UNAUTHORIZED = 13
USER_NOT_FOUND = 11
ROLE_NOT_FOUND = 31
DUPLICATE_USER = 51003
SELECTION = {"serverSelectionTimeoutMS": 10_000}


def _password() -> str:
    return secrets.token_urlsafe(18)


def _refused(call: Any) -> OperationFailure:
    with pytest.raises(OperationFailure) as refused:
        call()
    return refused.value


class RecordingServer(LocalServer):
    """The harel-dev server, noting the name of every command it answers."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.names: list[str] = []

    def _respond(self, connection: Connection, name: str, db: str, command: dict[str, Any]) -> Reply | None:
        self.names.append(name)
        return super()._respond(connection, name, db, command)


# --- authentication --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_mongoclient_authenticates_with_each_mechanism(
    fake_rs_auth: AuthenticatedFake, mechanism: str
) -> None:
    url = fake_rs_auth.url(
        AuthenticatedFake.ROOT, fake_rs_auth.root_password, options=f"authMechanism={mechanism}"
    )
    with MongoClient(url, **SELECTION) as client:
        status = client.admin.command("connectionStatus")

    assert status["authInfo"]["authenticatedUsers"] == [{"user": "root", "db": "admin"}]
    assert status["authInfo"]["authenticatedUserRoles"] == [{"role": "root", "db": "admin"}]


def test_async_clients_authenticate(fake_rs_auth: AuthenticatedFake) -> None:
    password = fake_rs_auth.add_user("harel", [{"role": "readWrite", "db": "harel"}])
    url = fake_rs_auth.url("harel", password)

    async def both() -> tuple[int, int]:
        native = AsyncMongoClient(url, **SELECTION)
        motor: AsyncIOMotorClient[Any] = AsyncIOMotorClient(url, **SELECTION)
        try:
            await native.harel.items.insert_one({"by": "async"})
            await motor.harel.items.insert_one({"by": "motor"})
            return await native.harel.items.count_documents({}), await motor.harel.items.count_documents({})
        finally:
            await native.close()
            motor.close()

    assert asyncio.run(both()) == (2, 2)


def test_the_default_mechanism_authenticates_speculatively_inside_hello() -> None:
    with RecordingServer(auth=True) as server:
        password = _password()
        with MongoClient(server.url, **SELECTION) as client:
            client.admin.command("createUser", "root", pwd=password, roles=["root"])
        server.names.clear()
        with MongoClient(server.url, username="root", password=password, **SELECTION) as client:
            client.admin.command("ping")

    assert "saslContinue" in server.names
    assert "saslStart" not in server.names  # the first step rode in hello's speculativeAuthenticate


def test_hello_lists_the_mechanisms_of_a_known_user_only(fake_rs_auth: AuthenticatedFake) -> None:
    with MongoClient(fake_rs_auth.root_url, **SELECTION) as client:
        client.admin.command("createUser", "modern", pwd=_password(), roles=[], mechanisms=["SCRAM-SHA-256"])
    with RawConnection(fake_rs_auth.host_port) as raw:
        known = raw.command("admin", {"hello": 1, "saslSupportedMechs": "admin.root"})
        modern = raw.command("admin", {"hello": 1, "saslSupportedMechs": "admin.modern"})
        unknown = raw.command("admin", {"hello": 1, "saslSupportedMechs": "admin.nobody"})

    assert known["saslSupportedMechs"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert modern["saslSupportedMechs"] == ["SCRAM-SHA-256"]
    assert "saslSupportedMechs" not in unknown


@pytest.mark.parametrize("who", ["wrong password", "unknown user", "mechanism the user lacks"])
def test_a_refused_login_is_authentication_failed_as_mongod_answers(
    fake_rs_auth: AuthenticatedFake, who: str
) -> None:
    user, password, options = "root", _password(), ""
    if who == "unknown user":
        user = "nobody"
    if who == "mechanism the user lacks":
        user, password = "modern", _password()
        with MongoClient(fake_rs_auth.root_url, **SELECTION) as client:
            client.admin.command("createUser", user, pwd=password, roles=[], mechanisms=["SCRAM-SHA-256"])
        options = "authMechanism=SCRAM-SHA-1"

    with MongoClient(fake_rs_auth.url(user, password, options=options), **SELECTION) as client:
        error = _refused(lambda: client.admin.command("ping"))

    assert error.code == AUTHENTICATION_FAILED
    assert error.details == {
        "ok": 0.0,
        "errmsg": "Authentication failed.",
        "code": AUTHENTICATION_FAILED,
        "codeName": "AuthenticationFailed",
    }


def test_sasl_protocol_errors_and_unsupported_mechanisms(fake_rs_auth: AuthenticatedFake) -> None:
    with RawConnection(fake_rs_auth.host_port) as raw:
        plain = raw.command("admin", {"saslStart": 1, "mechanism": "PLAIN", "payload": b"\x00u\x00p"})
        orphan = raw.command("admin", {"saslContinue": 1, "conversationId": 7, "payload": b"c=biws"})
        garbled = raw.command("admin", {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": b"nonsense"})

    assert (plain["code"], plain["codeName"]) == (334, "MechanismUnavailable")
    assert (orphan["code"], orphan["errmsg"]) == (17, "No SASL session state found")
    assert garbled["codeName"] == "ProtocolError"


def test_the_empty_closing_exchange_is_served_to_a_client_that_does_not_skip_it(
    fake_rs_auth: AuthenticatedFake,
) -> None:
    """A client that does not send `skipEmptyExchange` gets `done: false` with the signature, then `done: true`
    for its empty message (mongod before 4.4 always ran this third step)."""
    password = fake_rs_auth.root_password
    nonce = secrets.token_urlsafe(18)
    first_bare = f"n=root,r={nonce}".encode()
    with RawConnection(fake_rs_auth.host_port) as raw:
        start = raw.command(
            "admin", {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": b"n,," + first_bare}
        )
        fields = dict(part.split(b"=", 1) for part in start["payload"].split(b","))
        salted = hashlib.pbkdf2_hmac(
            "sha256", password.encode(), base64.b64decode(fields[b"s"]), int(fields[b"i"])
        )
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        without_proof = b"c=biws,r=" + fields[b"r"]
        message = b",".join((first_bare, start["payload"], without_proof))
        signature = hmac.new(hashlib.sha256(client_key).digest(), message, "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
        final = raw.command(
            "admin",
            {
                "saslContinue": 1,
                "conversationId": start["conversationId"],
                "payload": without_proof + b",p=" + proof,
            },
        )
        closing = raw.command(
            "admin", {"saslContinue": 1, "conversationId": start["conversationId"], "payload": b""}
        )
        status = raw.command("admin", {"connectionStatus": 1})

    assert final["done"] is False and final["payload"].startswith(b"v=")
    assert closing["done"] is True
    assert status["authInfo"]["authenticatedUsers"] == [{"user": "root", "db": "admin"}]


# --- before authentication ---------------------------------------------------------------------------------


def test_unauthenticated_clients_run_only_the_handshake_and_harmless_commands(
    fake_rs_auth: AuthenticatedFake,
) -> None:
    with RawConnection(fake_rs_auth.host_port) as raw:
        answered = {
            name: raw.command("admin", {name: 1}) for name in ("ping", "buildInfo", "connectionStatus")
        }
        find = raw.command("harel", {"find": "items"})
        status = raw.command("admin", {"replSetGetStatus": 1})
        unknown = raw.command("admin", {"atlasVersion": 1})

    assert all(reply["ok"] == 1.0 for reply in answered.values())
    assert answered["connectionStatus"]["authInfo"]["authenticatedUsers"] == []
    assert (find["code"], find["errmsg"]) == (UNAUTHORIZED, "Command find requires authentication")
    assert status["code"] == UNAUTHORIZED
    assert unknown["codeName"] == "CommandNotFound"  # mongod looks a command up before it checks access


def test_the_localhost_exception_allows_the_first_user_and_ends_with_it() -> None:
    with LocalServer(auth=True) as server, MongoClient(server.url, **SELECTION) as anonymous:
        elsewhere = _refused(lambda: anonymous.harel.command("createUser", "x", pwd=_password(), roles=[]))
        reading = _refused(anonymous.harel.items.find_one)
        anonymous.admin.command("createUser", "root", pwd=_password(), roles=["root"])
        second = _refused(
            lambda: anonymous.admin.command("createUser", "other", pwd=_password(), roles=["root"])
        )

    assert elsewhere.code == UNAUTHORIZED  # the first user goes in admin
    assert reading.code == UNAUTHORIZED
    assert second.code == UNAUTHORIZED
    assert second.details["errmsg"] == "Command createUser requires authentication"


def test_without_auth_credentials_are_still_checked_but_nothing_is_required() -> None:
    password = _password()
    with LocalServer() as server:
        with MongoClient(server.url, **SELECTION) as anonymous:
            anonymous.harel.items.insert_one({"open": True})
            anonymous.admin.command(
                "createUser", "app", pwd=password, roles=[{"role": "read", "db": "harel"}]
            )
        with MongoClient(server.url, username="app", password=password, **SELECTION) as client:
            assert client.harel.items.count_documents({}) == 1
            client.other.items.insert_one({"roles": "not enforced without auth"})
        with MongoClient(server.url, username="app", password=_password(), **SELECTION) as wrong:
            assert _refused(lambda: wrong.admin.command("ping")).code == AUTHENTICATION_FAILED


# --- user commands ---------------------------------------------------------------------------------------


def test_create_user_stores_salted_credentials_and_refuses_a_duplicate(
    fake_rs_auth: AuthenticatedFake,
) -> None:
    password = _password()
    with MongoClient(fake_rs_auth.root_url, **SELECTION) as root:
        created = root.admin.command(
            "createUser",
            "harel",
            pwd=password,
            roles=[{"role": "readWrite", "db": "harel"}],
            customData={"team": "a"},
        )
        duplicate = _refused(lambda: root.admin.command("createUser", "harel", pwd=password, roles=[]))
        stored = root.admin["system.users"].find_one({"_id": "admin.harel"})
        info = root.admin.command("usersInfo", "harel", showCredentials=True)

    assert created == {"ok": 1.0}
    assert duplicate.code == DUPLICATE_USER
    assert duplicate.details["errmsg"] == 'User "harel@admin" already exists'
    assert stored is not None and password not in repr(stored)
    assert set(stored["credentials"]) == {"SCRAM-SHA-1", "SCRAM-SHA-256"}
    assert set(stored["credentials"]["SCRAM-SHA-256"]) == {"iterationCount", "salt", "storedKey", "serverKey"}
    (user,) = info["users"]
    assert {key: user[key] for key in ("_id", "user", "db", "roles", "mechanisms", "customData")} == {
        "_id": "admin.harel",
        "user": "harel",
        "db": "admin",
        "roles": [{"role": "readWrite", "db": "harel"}],
        "mechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"],
        "customData": {"team": "a"},
    }
    assert user["credentials"] == stored["credentials"]


@pytest.mark.parametrize(
    ("command", "code", "errmsg"),
    [
        ({"createUser": "u", "pwd": "", "roles": []}, 2, "User passwords must not be empty"),
        ({"createUser": "u", "roles": []}, 2, None),
        (
            {"createUser": "u", "pwd": "p-generated"},
            40414,
            "BSON field 'createUser.roles' is missing but a required field",
        ),
        (
            {"createUser": "u", "pwd": "p-generated", "roles": ["nosuchrole"]},
            ROLE_NOT_FOUND,
            "Could not find role: nosuchrole@admin",
        ),
        (
            {"createUser": "u", "pwd": "p-generated", "roles": [{"role": "root", "db": "harel"}]},
            ROLE_NOT_FOUND,
            "Could not find role: root@harel",
        ),
        (
            {"createUser": "u", "pwd": "p-generated", "roles": [], "mechanisms": ["PLAIN"]},
            2,
            "Unknown auth mechanism 'PLAIN'",
        ),
        ({"createUser": "u", "pwd": "p-generated", "roles": ["dbOwner"]}, 238, None),
        (
            {"updateUser": "nobody", "roles": []},
            USER_NOT_FOUND,
            'Could not find user "nobody" for db "admin"',
        ),
        ({"updateUser": "root"}, 2, "Must specify at least one field to update in updateUser"),
        ({"dropUser": "nobody"}, USER_NOT_FOUND, "User 'nobody@admin' not found"),
        (
            {"grantRolesToUser": "nobody", "roles": ["root"]},
            USER_NOT_FOUND,
            'Could not find user "nobody" for db "admin"',
        ),
        (
            {"revokeRolesFromUser": "nobody", "roles": ["root"]},
            USER_NOT_FOUND,
            'Could not find user "nobody" for db "admin"',
        ),
    ],
)
def test_user_command_errors(
    fake_rs_auth: AuthenticatedFake, command: dict[str, Any], code: int, errmsg: str | None
) -> None:
    command = {key: (_password() if value == "p-generated" else value) for key, value in command.items()}
    with MongoClient(fake_rs_auth.root_url, **SELECTION) as root:
        reply = _refused(lambda: root.admin.command(command)).details

    assert reply is not None and reply["ok"] == 0.0
    assert reply["code"] == code
    if errmsg is not None:
        assert reply["errmsg"] == errmsg


def test_update_user_changes_the_password_and_the_roles(fake_rs_auth: AuthenticatedFake) -> None:
    old = fake_rs_auth.add_user("harel", [{"role": "read", "db": "harel"}])
    new = _password()
    with MongoClient(fake_rs_auth.root_url, **SELECTION) as root:
        root.admin.command(
            "updateUser",
            "harel",
            pwd=new,
            roles=[{"role": "readWrite", "db": "harel"}],
            mechanisms=["SCRAM-SHA-256"],
        )
        (user,) = root.admin.command("usersInfo", {"user": "harel", "db": "admin"})["users"]

    with MongoClient(fake_rs_auth.url("harel", old), **SELECTION) as stale:
        assert _refused(lambda: stale.admin.command("ping")).code == AUTHENTICATION_FAILED
    with MongoClient(fake_rs_auth.url("harel", new), **SELECTION) as fresh:
        fresh.harel.items.insert_one({"written": True})
    assert user["roles"] == [{"role": "readWrite", "db": "harel"}]
    assert user["mechanisms"] == ["SCRAM-SHA-256"]


def test_grant_and_revoke_change_what_a_connected_user_may_do(fake_rs_auth: AuthenticatedFake) -> None:
    password = fake_rs_auth.add_user("harel", [{"role": "read", "db": "harel"}])
    with (
        MongoClient(fake_rs_auth.root_url, **SELECTION) as root,
        MongoClient(fake_rs_auth.url("harel", password), **SELECTION) as app,
    ):
        assert _refused(lambda: app.harel.items.insert_one({})).code == UNAUTHORIZED
        root.admin.command("grantRolesToUser", "harel", roles=[{"role": "readWrite", "db": "harel"}])
        app.harel.items.insert_one({"after": "grant"})
        root.admin.command(
            "revokeRolesFromUser",
            "harel",
            roles=[{"role": "readWrite", "db": "harel"}, {"role": "read", "db": "harel"}],
        )
        assert _refused(app.harel.items.find_one).code == UNAUTHORIZED
        (user,) = root.admin.command("usersInfo", "harel")["users"]

    assert user["roles"] == []


def test_users_info_forms(fake_rs_auth: AuthenticatedFake) -> None:
    fake_rs_auth.add_user("harel", [{"role": "readWrite", "db": "harel"}])
    with MongoClient(fake_rs_auth.root_url, **SELECTION) as root:
        root.harel.command("createUser", "local", pwd=_password(), roles=["read"])
        every_admin = root.admin.command("usersInfo", 1)["users"]
        listed = root.admin.command(
            "usersInfo", [{"user": "harel", "db": "admin"}, {"user": "local", "db": "harel"}]
        )["users"]
        everywhere = root.admin.command("usersInfo", {"forAllDBs": True})["users"]
        missing = root.admin.command("usersInfo", "nobody")["users"]
        dropped = root.harel.command("dropUser", "local")

    assert [u["user"] for u in every_admin] == ["harel", "root"]
    assert [u["_id"] for u in listed] == ["admin.harel", "harel.local"]
    assert [u["_id"] for u in everywhere] == ["admin.harel", "admin.root", "harel.local"]
    assert all("credentials" not in u for u in everywhere)
    assert missing == []
    assert dropped == {"ok": 1.0}


# --- authorisation ---------------------------------------------------------------------------------------


def test_read_write_on_one_database_is_confined_to_it(fake_rs_auth: AuthenticatedFake) -> None:
    password = fake_rs_auth.add_user("harel", [{"role": "readWrite", "db": "harel"}])
    with MongoClient(fake_rs_auth.root_url, **SELECTION) as root:
        root.other.items.insert_one({"theirs": True})
    with MongoClient(fake_rs_auth.url("harel", password), **SELECTION) as app:
        app.harel.items.insert_one({"ours": True})
        app.harel.items.create_index("ours")
        refusals = {
            "insert elsewhere": _refused(lambda: app.other.items.insert_one({})),
            "read elsewhere": _refused(app.other.items.find_one),
            "drop database": _refused(lambda: app.drop_database("harel")),
            "replSetGetStatus": _refused(lambda: app.admin.command("replSetGetStatus")),
            "getDefaultRWConcern": _refused(lambda: app.admin.command("getDefaultRWConcern")),
            "createUser": _refused(lambda: app.admin.command("createUser", "x", pwd=_password(), roles=[])),
        }
        databases = app.list_database_names()
        myself = app.admin.command("usersInfo", "harel")["users"]

    assert {name: error.code for name, error in refusals.items()} == dict.fromkeys(refusals, UNAUTHORIZED)
    assert (
        refusals["insert elsewhere"].details["errmsg"]
        == 'not authorized on other to execute command { insert: "items" }'
    )
    assert databases == ["harel"]
    assert [u["user"] for u in myself] == ["harel"]


@pytest.mark.parametrize(
    ("role", "allowed", "refused"),
    [
        (
            "clusterMonitor",
            ["replSetGetStatus", "serverStatus", "getCmdLineOpts", "getDefaultRWConcern"],
            ["setDefaultRWConcern", "insert"],
        ),
        ("clusterAdmin", ["replSetGetStatus", "setDefaultRWConcern"], ["insert", "createUser"]),
        ("userAdminAnyDatabase", ["createUser", "usersInfo"], ["insert", "replSetGetStatus"]),
        ("backup", ["find", "listDatabases"], ["insert", "replSetGetStatus"]),
        ("restore", ["insert"], ["find", "replSetGetStatus"]),
        ("root", ["insert", "find", "replSetGetStatus", "setDefaultRWConcern", "createUser"], []),
    ],
)
def test_built_in_roles(
    fake_rs_auth: AuthenticatedFake, role: str, allowed: list[str], refused: list[str]
) -> None:
    commands: dict[str, tuple[str, dict[str, Any]]] = {
        "replSetGetStatus": ("admin", {"replSetGetStatus": 1}),
        "serverStatus": ("admin", {"serverStatus": 1}),
        "getCmdLineOpts": ("admin", {"getCmdLineOpts": 1}),
        "getDefaultRWConcern": ("admin", {"getDefaultRWConcern": 1}),
        "setDefaultRWConcern": (
            "admin",
            {"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": "majority"}},
        ),
        "insert": ("harel", {"insert": "items", "documents": [{"x": 1}]}),
        "find": ("harel", {"find": "items"}),
        "listDatabases": ("admin", {"listDatabases": 1}),
        "createUser": ("admin", {"createUser": f"made-by-{role}", "pwd": _password(), "roles": []}),
        "usersInfo": ("admin", {"usersInfo": 1}),
    }
    password = fake_rs_auth.add_user(f"as-{role}", [{"role": role, "db": "admin"}])
    with MongoClient(fake_rs_auth.url(f"as-{role}", password), **SELECTION) as client:

        def run(name: str) -> dict[str, Any]:
            db, command = commands[name]
            try:
                return client[db].command(command)
            except OperationFailure as exc:
                return exc.details or {}

        outcomes = {name: run(name) for name in allowed + refused}

    assert {name: outcomes[name].get("code") for name in allowed} == dict.fromkeys(allowed)
    assert {name: outcomes[name].get("code") for name in refused} == dict.fromkeys(refused, UNAUTHORIZED)


def test_every_served_command_is_checked(fake_rs_auth: AuthenticatedFake) -> None:
    """Each command the server runs (data, users, administration) is refused before authentication, so none
    slips past access control."""
    with RawConnection(fake_rs_auth.host_port) as raw:
        replies = {name: raw.command("admin", {name: 1}) for name in COMMAND_ACTIONS}

    refused = {name for name, reply in replies.items() if reply.get("code") == UNAUTHORIZED}
    assert refused == set(COMMAND_ACTIONS)


# --- the harel-dev server's command line and data file -----------------------------------------------------------


def test_users_survive_a_restart_with_a_data_file(tmp_path: Path) -> None:
    data = tmp_path / "dev.db"
    password = _password()
    with LocalServer(auth=True, data=data) as server, MongoClient(server.url, **SELECTION) as client:
        client.admin.command("createUser", "root", pwd=password, roles=["root"])
    with LocalServer(auth=True, data=data) as server:
        with MongoClient(server.url, username="root", password=password, **SELECTION) as client:
            (user,) = client.admin.command("usersInfo", "root")["users"]
        with MongoClient(server.url, **SELECTION) as anonymous:
            # The localhost exception is over: a user exists.
            late = _refused(
                lambda: anonymous.admin.command("createUser", "x", pwd=_password(), roles=["root"])
            )

    assert user["roles"] == [{"role": "root", "db": "admin"}]
    assert late.code == UNAUTHORIZED
    assert password.encode() not in data.read_bytes()


def test_the_command_line_auth_flag() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "harel_dev.server", "--port", "0", "--auth", "--log-level", "INFO"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        with MongoClient(url, **SELECTION) as anonymous:
            refused = _refused(anonymous.harel.items.find_one)
            options = _refused(lambda: anonymous.admin.command("getCmdLineOpts"))
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)

    assert process.returncode == 0
    assert refused.code == UNAUTHORIZED and options.code == UNAUTHORIZED
    assert "authentication required" in stderr
    assert "no authentication" not in stderr


def test_get_cmd_line_opts_and_startup_warnings_describe_the_server(tmp_path: Path) -> None:
    with LocalServer(data=tmp_path / "dev.db") as server, MongoClient(server.url, **SELECTION) as client:
        options = client.admin.command("getCmdLineOpts")
        warnings = client.admin.command("getLog", "startupWarnings")
        names = client.admin.command("getLog", "*")

    assert options["parsed"]["net"] == {"bindIp": "127.0.0.1", "port": server.port}
    assert options["parsed"]["replication"] == {"replSet": "rs0"}
    assert "security" not in options["parsed"]
    assert options["argv"][:3] == ["python", "-m", "harel_dev.server"]
    assert warnings["totalLinesWritten"] == len(warnings["log"]) == 2
    assert any("Access control is not enabled" in line for line in warnings["log"])
    assert names["names"] == ["startupWarnings"]
