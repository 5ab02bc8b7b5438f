"""Replica-set init and membership reconcile: the compose stack's `mongo-init` one-shot and the Helm chart's
init Job run it on every `up` / install / upgrade. Every run, the first or the hundredth, ends in the same state.

1. Decide from the first member's replSetGetStatus reply and its stored replica-set config whether the set must
   be initiated. Only a member that never held a config is initiated, with itself alone, and only when no other
   wanted member already reports a set (the first member lost its volume and rejoins: a second replSetInitiate
   would start a second, diverging set).
2. Wait until the set has a primary.
3. The root password: when the current one is refused and a previous one is given, log in with the previous one
   and set the current one (a rotation).
4. Reconcile the members with the wanted ones, one change at a time (replica_set_plan.next_step): a new member is
   added without a vote and given it once it is SECONDARY, a member no longer wanted is removed, never at the cost
   of the majority.
5. Cluster-wide default write concern: majority (a set with an arbiter would otherwise default to w:1).
6. The app user in `admin` with readWrite on the app database only, created or reset to the given password.
7. Optionally, the app user's connection URL written to a file (mode 0400) for the workers (HAREL_MONGO_URL_FILE).

Exit 0 when all are done; exit 1 with one line saying what is wrong and what to do otherwise. Secrets are read
from files (<NAME>_FILE), never from the command line or a plain environment value. The decisions are pure
functions over server replies, unit-tested on recorded replies (tests/unit/test_stack_rs_init.py,
tests/unit/test_replica_set_plan.py); whole runs of this script, growing and shrinking a set, are tested over the
wire (tests/wire/test_rs_init_membership.py). Only pymongo and the standard library are used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from pymongo import MongoClient
from pymongo.errors import ConnectionFailure, OperationFailure
from replica_set_plan import Done, Reconfig, Refuse, StepDown, Wait, Wanted, next_step

SET_NAME = "rs0"
MEMBER_PORT = 27017

# mongod's --tlsMode values in the order a deployment moves through them. Clients switch to TLS at preferTLS: by
# then every member accepts TLS (allowTLS was rolled out first), and from then on members talk TLS to each other.
TLS_MODES = ("disabled", "allowTLS", "preferTLS", "requireTLS")
CLIENT_TLS_MODES = ("preferTLS", "requireTLS")

# Server error codes acted upon.
UNAUTHORIZED = 13
AUTHENTICATION_FAILED = 18
ALREADY_INITIALIZED = 23
NO_REPLICATION_ENABLED = 76
NOT_YET_INITIALIZED = 94
# Member states (replSetGetStatus `myState` / `members[].state`).
PRIMARY = 1
SECONDARY = 2

T = TypeVar("T")


class Decision(Enum):
    INITIATE = "not yet initiated: initiating"
    INITIATED = "already initiated: nothing to initiate"
    RESTARTED = "restarted member (stored config, not primary or secondary yet): nothing to initiate"


class InitError(Exception):
    """A state this script must not or cannot change. The message says what to do."""


class NotYet(Exception):
    """A step that can still succeed (a member starting, an election running): retried until the deadline."""


class Database(Protocol):
    """What this script needs of a pymongo Database: `command` with a command's name or document."""

    def command(self, command: str | MutableMapping[str, Any]) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Settings:
    """What the deployment wants: the set's name and members, the app database and the two users."""

    replica_set: str
    members: tuple[Wanted, ...]
    database: str = "harel"
    root_user: str = "root"
    app_user: str = "harel"
    tls_ca_file: str | None = None

    @property
    def first(self) -> str:
        return self.members[0].host

    @property
    def data_hosts(self) -> list[str]:
        return [member.host for member in self.members if not member.arbiter]

    def app_url(self, password: str) -> str:
        query = f"replicaSet={self.replica_set}&authSource=admin"
        if self.tls_ca_file:
            query += f"&tls=true&tlsCAFile={quote(self.tls_ca_file)}"
        credentials = f"{quote(self.app_user, safe='')}:{quote(password, safe='')}"
        return f"mongodb://{credentials}@{','.join(self.data_hosts)}/{self.database}?{query}"


def compose_settings(count: int, root_user: str = "root", tls_ca_file: str | None = None) -> Settings:
    """The compose stack: mongo1..mongoN. mongo1 holds the root user from its first start and is the member
    published to the host, so it has the highest priority: it is elected first, and takes primary back when it
    returns after a restart."""
    return Settings(
        SET_NAME,
        tuple(
            Wanted(f"mongo{index}:{MEMBER_PORT}", priority=2.0 if index == 1 else 1.0)
            for index in range(1, count + 1)
        ),
        root_user=root_user,
        tls_ca_file=tls_ca_file,
    )


def file_settings(path: Path) -> Settings:
    """The Helm chart's init-config.json: replicaSetName, dataMembers, arbiter, database, user names, tlsCAFile."""
    config = json.loads(path.read_text(encoding="utf-8"))
    members = [Wanted(str(host)) for host in config["dataMembers"]]
    if config.get("arbiter"):
        members.append(Wanted(str(config["arbiter"]), arbiter=True))
    return Settings(
        replica_set=str(config["replicaSetName"]),
        members=tuple(members),
        database=str(config["database"]),
        root_user=str(config["rootUsername"]),
        app_user=str(config["appUsername"]),
        tls_ca_file=config.get("tlsCAFile"),
    )


def initiate_config(settings: Settings) -> dict[str, Any]:
    """The first member alone: the others join through the reconcile, one at a time, once they answer."""
    first = settings.members[0]
    return {
        "_id": settings.replica_set,
        "members": [{"_id": 0, "host": first.host, "priority": first.priority}],
    }


def decide(
    status_reply: Mapping[str, Any], stored_config: Mapping[str, Any] | None, set_name: str
) -> Decision:
    """What to do, given the first member's replSetGetStatus reply (ok or not) and its stored config (or None)."""
    code = status_reply.get("code")
    if code in (UNAUTHORIZED, AUTHENTICATION_FAILED):
        raise InitError(
            "the first member refused the root credentials: its data holds another root password. Give the one "
            "the data was created with, or give it as the previous root password to rotate to the new one "
            "(compose: HAREL_MONGO_PREVIOUS_ROOT_PASSWORD in compose/.env; Helm: the Secret's key "
            "previous-root-password). Starting afresh deletes every execution (compose: make down VOLUMES=1)"
        )
    if code == NO_REPLICATION_ENABLED:
        raise InitError("the first member runs without --replSet: start it with --replSet " + set_name)
    if status_reply.get("ok") != 1 and code != NOT_YET_INITIALIZED:
        raise InitError(
            f"replSetGetStatus on the first member failed: {status_reply.get('codeName', code)}: "
            f"{status_reply.get('errmsg')}"
        )
    if status_reply.get("ok") != 1 and stored_config is None:
        return Decision.INITIATE
    found = status_reply.get("set") or (stored_config or {}).get("_id")
    if found != set_name:
        raise InitError(
            f"the first member belongs to replica set {found!r}, not {set_name!r}: its data is from another "
            "deployment"
        )
    if status_reply.get("ok") == 1 and status_reply.get("myState") in (PRIMARY, SECONDARY):
        return Decision.INITIATED
    return Decision.RESTARTED


def primary_of(status_reply: Mapping[str, Any]) -> str | None:
    for member in status_reply.get("members", []):
        if member.get("state") == PRIMARY:
            return str(member["name"])
    return None


def describe_members(status_reply: Mapping[str, Any]) -> str:
    if status_reply.get("ok") != 1:
        return f"{status_reply.get('codeName', 'error')}: {status_reply.get('errmsg', '')}"
    return ", ".join(
        f"{m['name']} {m.get('stateStr', m.get('state'))}" for m in status_reply.get("members", [])
    )


def app_user_command(
    users_info_reply: Mapping[str, Any], settings: Settings, password: str
) -> dict[str, Any]:
    """createUser when the app user is absent, else updateUser: either way exactly readWrite on the app database."""
    verb = "updateUser" if users_info_reply.get("users") else "createUser"
    return {
        verb: settings.app_user,
        "pwd": password,
        "roles": [{"role": "readWrite", "db": settings.database}],
        "mechanisms": ["SCRAM-SHA-256"],
        "writeConcern": {"w": "majority", "wtimeout": 30_000},
    }


# --- talking to the servers --------------------------------------------------------------------------


def send(database: Database, command: Mapping[str, Any]) -> dict[str, Any]:
    """The command's reply, an error reply included (pymongo raises it; here it is data to decide on)."""
    try:
        return dict(database.command(dict(command)))
    except OperationFailure as exc:
        return dict(exc.details or {"ok": 0, "code": exc.code, "errmsg": str(exc)})


def require_ok(reply: Mapping[str, Any], what: str) -> dict[str, Any]:
    if reply.get("ok") == 1:
        return dict(reply)
    problem = f"{what}: {reply.get('codeName', reply.get('code'))}: {reply.get('errmsg')}"
    if reply.get("code") in (UNAUTHORIZED, AUTHENTICATION_FAILED):
        raise InitError(problem)
    raise NotYet(problem)


def stored_config(local: Database) -> dict[str, Any] | None:
    reply = require_ok(send(local, {"find": "system.replset", "limit": 1}), "reading local.system.replset")
    batch = reply["cursor"]["firstBatch"]
    return dict(batch[0]) if batch else None


@dataclass
class Deadline:
    seconds: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    pause_seconds: float = 2.0
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def until(self, what: str, attempt: Callable[[], T]) -> T:
        """Run `attempt` until it returns; NotYet and unreachable servers are retried, InitError is not."""
        while True:
            try:
                return attempt()
            except NotYet as exc:
                problem = str(exc)
            except ConnectionFailure as exc:
                problem = f"not reachable yet ({exc.__class__.__name__}: {str(exc)[:200]})"
            if self.clock() - self.started >= self.seconds:
                raise InitError(f"{what}: not done after {self.seconds:.0f}s; last: {problem}")
            self.sleep(self.pause_seconds)


class Servers(Protocol):
    """The connections the init needs, each authenticated as the root user unless said otherwise."""

    def first_admin(self) -> Database: ...

    def first_local(self) -> Database: ...

    def set_admin(self) -> Database: ...

    def hello(self, host: str) -> Mapping[str, Any] | None:
        """`hello` on one member, without credentials; None when it does not answer."""
        ...


def initiate_step(servers: Servers, settings: Settings) -> Decision:
    decision = decide(
        send(servers.first_admin(), {"replSetGetStatus": 1}),
        stored_config(servers.first_local()),
        settings.replica_set,
    )
    if decision is not Decision.INITIATE:
        return decision
    for member in settings.members[1:]:
        reply = servers.hello(member.host) or {}
        if reply.get("setName"):
            raise NotYet(
                f"{settings.first} has no config but {member.host} belongs to {reply['setName']}: "
                f"waiting for {settings.first} to rejoin it"
            )
    reply = send(servers.first_admin(), {"replSetInitiate": initiate_config(settings)})
    if reply.get("code") == ALREADY_INITIALIZED:
        return Decision.INITIATED
    require_ok(reply, "replSetInitiate")
    return Decision.INITIATE


def primary_step(servers: Servers) -> str:
    reply = send(servers.first_admin(), {"replSetGetStatus": 1})
    primary = primary_of(reply)
    if primary is None:
        raise NotYet(f"no primary yet: {describe_members(reply)}")
    return primary


def reconcile_step(servers: Servers, settings: Settings, log: Callable[[str], None]) -> str:
    """One round of the membership plan; NotYet until the plan says Done."""
    admin = servers.set_admin()
    config = require_ok(send(admin, {"replSetGetConfig": 1}), "replSetGetConfig")["config"]
    status = require_ok(send(admin, {"replSetGetStatus": 1}), "replSetGetStatus")
    configured = {member["host"] for member in config["members"]}
    reachable = {m.host for m in settings.members if m.host not in configured and servers.hello(m.host)}
    step = next_step(config, status, settings.members, reachable)
    match step:
        case Done():
            return step.reason
        case Refuse():
            raise InitError(f"membership change refused: {step.reason}")
        case Wait():
            raise NotYet(step.reason)
        case StepDown():
            log(f"mongo-init: {step.reason}")
            send(admin, {"replSetStepDown": 60, "secondaryCatchUpPeriodSecs": 30})
            raise NotYet(f"waiting for a new primary after {step.host} stepped down")
        case Reconfig():
            require_ok(send(admin, {"replSetReconfig": step.config, "maxTimeMS": 60_000}), "replSetReconfig")
            log(f"mongo-init: {step.reason} (config version {step.config['version']})")
            raise NotYet(f"applied: {step.reason}")
    raise AssertionError(step)


def app_user_step(admin: Database, settings: Settings, password: str) -> str:
    users = require_ok(send(admin, {"usersInfo": {"user": settings.app_user, "db": "admin"}}), "usersInfo")
    command = app_user_command(users, settings, password)
    require_ok(send(admin, command), next(iter(command)))
    return "updated" if "updateUser" in command else "created"


def write_url_file(path: Path, url: str) -> None:
    """Replace `path` with `url`, readable by its owner only, in one rename (a reader never sees half a file)."""
    staged = path.with_name(f".{path.name}.new")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(url)
    os.replace(staged, path)


def run_init(
    servers: Servers,
    settings: Settings,
    app_password: str,
    deadline: Deadline,
    log: Callable[[str], None],
) -> Decision:
    """The whole init against the servers. Safe to run any number of times."""
    decision = form_set(servers, settings, deadline, log)
    default_write_concern_step(servers.set_admin(), log)
    outcome = deadline.until(
        "ensure the app user", lambda: app_user_step(servers.set_admin(), settings, app_password)
    )
    log(f"mongo-init: app user {settings.app_user!r} {outcome} (readWrite on {settings.database!r} only)")
    return decision


def form_set(
    servers: Servers, settings: Settings, deadline: Deadline, log: Callable[[str], None]
) -> Decision:
    """Steps 1, 2 and 4: the set initiated, with a primary, and its members the wanted ones. A sharded cluster's
    config-server and shard sets stop here: their default write concern and users are the routers' business."""
    hosts = ", ".join(member.host for member in settings.members)
    decision = deadline.until(f"initiate {settings.replica_set}", lambda: initiate_step(servers, settings))
    log(f"mongo-init: {settings.replica_set} {decision.value} (wanted members: {hosts})")
    primary = deadline.until("elect a primary", lambda: primary_step(servers))
    log(f"mongo-init: primary is {primary}")
    members = deadline.until("reconcile the members", lambda: reconcile_step(servers, settings, log))
    log(f"mongo-init: {members}")
    return decision


def default_write_concern_step(admin: Database, log: Callable[[str], None]) -> None:
    require_ok(
        send(
            admin,
            {
                "setDefaultRWConcern": 1,
                "defaultWriteConcern": {"w": "majority"},
                "writeConcern": {"w": "majority"},
            },
        ),
        "setDefaultRWConcern",
    )
    log("mongo-init: default write concern: majority")


# --- the real servers ----------------------------------------------------------------------------------------


class MongoServers:
    """pymongo clients for `Servers`. Logs in as root with the current password; when the first member refuses it
    and a previous password is given, logs in with that one, and `rotate_root` then sets the current one."""

    def __init__(self, settings: Settings, root_password: str, previous_root_password: str | None) -> None:
        self.settings = settings
        self.password = root_password
        self.previous = previous_root_password
        self.options: dict[str, Any] = {"serverSelectionTimeoutMS": 3000, "connectTimeoutMS": 3000}
        if settings.tls_ca_file:
            self.options.update(tls=True, tlsCAFile=settings.tls_ca_file)
        self.clients: list[MongoClient[dict[str, Any]]] = []
        self._first: MongoClient[dict[str, Any]] | None = None
        self._set: MongoClient[dict[str, Any]] | None = None
        self.rotating = False

    def _client(self, hosts: str | list[str], password: str, **extra: Any) -> MongoClient[dict[str, Any]]:
        client: MongoClient[dict[str, Any]] = MongoClient(
            hosts,
            username=self.settings.root_user,
            password=password,
            authSource="admin",
            **self.options,
            **extra,
        )
        self.clients.append(client)
        return client

    def _login(self, hosts: str | list[str], **extra: Any) -> MongoClient[dict[str, Any]]:
        client = self._client(hosts, self.password, **extra)
        if self.previous is None:
            return client
        try:
            client.admin.command("ping")
        except OperationFailure as exc:
            if exc.code != AUTHENTICATION_FAILED:
                raise
            self.rotating = True
            return self._client(hosts, self.previous, **extra)
        return client

    def first_admin(self) -> Database:
        if self._first is None:
            self._first = self._login(self.settings.first, directConnection=True)
        return self._first.admin

    def first_local(self) -> Database:
        self.first_admin()
        assert self._first is not None
        return self._first.local

    def set_admin(self) -> Database:
        if self._set is None:
            self._set = self._login(self.settings.data_hosts, replicaSet=self.settings.replica_set)
        return self._set.admin

    def hello(self, host: str) -> Mapping[str, Any] | None:
        with MongoClient(host, directConnection=True, **self.options) as client:
            try:
                return dict(client.admin.command("hello"))
            except ConnectionFailure:
                return None

    def rotate_root(self, log: Callable[[str], None]) -> None:
        """After a login with the previous root password: set the current one, then use it."""
        if not self.rotating:
            return
        admin = self.set_admin()
        require_ok(
            send(
                admin,
                {
                    "updateUser": self.settings.root_user,
                    "pwd": self.password,
                    "writeConcern": {"w": "majority"},
                },
            ),
            "updateUser (root password)",
        )
        log(f"mongo-init: root user {self.settings.root_user!r}: password rotated")
        self.close()
        self.previous = None
        self.rotating = False

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        self._first = self._set = None


def secret(name: str, *, required: bool = True) -> str | None:
    """The content of the file named by <name>_FILE (a mounted secret), without the trailing newline."""
    path = os.environ.get(f"{name}_FILE", "")
    if not path:
        if required:
            raise InitError(f"{name}_FILE is not set: it names the file that holds {name}")
        return None
    try:
        value = Path(path).read_text(encoding="utf-8").rstrip("\n")
    except OSError as exc:
        # An optional Secret key that is absent (Helm's previous-root-password outside a rotation) mounts as no
        # file at all: not given, like an empty one.
        if isinstance(exc, FileNotFoundError) and not required:
            return None
        raise InitError(f"{name}_FILE={path}: cannot read it ({exc.strerror})") from None
    if not value and required:
        raise InitError(f"{name}_FILE={path} is empty")
    return value or None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rs_init", description=__doc__.splitlines()[0])
    members = parser.add_mutually_exclusive_group(required=True)
    members.add_argument(
        "--members", type=int, choices=[1, 3], help="compose: HAREL_MEMBERS (mongo1..mongoN)"
    )
    members.add_argument("--config", type=Path, help="Helm: init-config.json with the wanted members")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for every step together")
    parser.add_argument(
        "--url-file", type=Path, help="write the app user's URL here (mode 0400) for the workers"
    )
    parser.add_argument(
        "--root-user", default="root", help="compose: the root user's name (HAREL_MONGO_ROOT_USER)"
    )
    parser.add_argument(
        "--tls-mode",
        choices=TLS_MODES,
        default="disabled",
        help="compose: the members' --tlsMode; clients (this script, the URL file) use TLS from preferTLS on",
    )
    parser.add_argument(
        "--tls-ca-file", default="/tls/ca.crt", help="compose: the CA of the members' certificates"
    )
    args = parser.parse_args(argv)
    try:
        if args.members:
            client_tls = args.tls_mode in CLIENT_TLS_MODES
            settings = compose_settings(
                args.members, args.root_user, args.tls_ca_file if client_tls else None
            )
        else:
            settings = file_settings(args.config)
        root_password = secret("HAREL_MONGO_ROOT_PASSWORD")
        app_password = secret("HAREL_APP_PASSWORD")
        assert root_password is not None and app_password is not None
        servers = MongoServers(
            settings, root_password, secret("HAREL_MONGO_PREVIOUS_ROOT_PASSWORD", required=False)
        )
        deadline = Deadline(args.timeout)
        try:
            deadline.until("log in as root", lambda: servers.first_admin().command("ping"))
            run_init(servers, settings, app_password, deadline, print)
            servers.rotate_root(print)
        finally:
            servers.close()
        if args.url_file:
            write_url_file(args.url_file, settings.app_url(app_password))
            print(f"mongo-init: wrote the app user's URL to {args.url_file}")
    except OperationFailure as exc:
        # Authentication refused at connection time: the same remedy as a refused replSetGetStatus.
        try:
            decide(dict(exc.details or {"code": exc.code}), None, SET_NAME)
        except InitError as refused:
            print(f"mongo-init: {refused}", file=sys.stderr)
            return 1
        print(f"mongo-init: {exc.code}: {str(exc)[:300]}", file=sys.stderr)
        return 1
    except InitError as exc:
        print(f"mongo-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
