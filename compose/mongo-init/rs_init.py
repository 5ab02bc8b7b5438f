"""Replica-set init for the compose stack: the one-shot `mongo-init` service runs it on every `up`.

1. Decide from mongo1's replSetGetStatus reply and its stored replica-set config whether rs0 must be
   initiated. Only a member that has never held a config is initiated. A set that is initiated, or a
   restarted member still loading its stored config (it answers NotYetInitialized for a moment), is
   never initiated again: a second replSetInitiate would start a second, diverging set.
2. Wait until the set has a primary.
3. Create the app user `harel` in `admin` with readWrite on the `harel` database only, or, when it
   exists, reset its password and roles to what compose/.env says.

Exit 0 when all three are done; exit 1 with one line saying what is wrong and what to do otherwise.
The decisions are pure functions over server replies, unit-tested on recorded replies
(tests/unit/test_stack_rs_init.py). Only pymongo and the standard library are used.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, TypeVar

from pymongo import MongoClient
from pymongo.errors import ConnectionFailure, OperationFailure

SET_NAME = "rs0"
MEMBER_PORT = 27017
APP_USER = "harel"
APP_ROLES = [{"role": "readWrite", "db": "harel"}]

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
    """What this script needs of a pymongo Database: `command` with a document."""

    def command(self, command: Mapping[str, Any]) -> Mapping[str, Any]: ...


def member_hosts(count: int) -> list[str]:
    return [f"mongo{index}:{MEMBER_PORT}" for index in range(1, count + 1)]


def initiate_config(hosts: Sequence[str]) -> dict[str, Any]:
    # mongo1 holds the root user from its first start and is the member published to the host, so it has
    # the highest priority: it is elected first, and takes primary back when it returns after a restart.
    return {
        "_id": SET_NAME,
        "members": [
            {"_id": index, "host": host, "priority": 2 if index == 0 else 1}
            for index, host in enumerate(hosts)
        ],
    }


def configured_hosts(status_reply: Mapping[str, Any], stored_config: Mapping[str, Any] | None) -> list[str]:
    if stored_config is not None:
        return [member["host"] for member in stored_config.get("members", [])]
    return [member["name"] for member in status_reply.get("members", [])]


def decide(
    status_reply: Mapping[str, Any], stored_config: Mapping[str, Any] | None, hosts: Sequence[str]
) -> Decision:
    """What to do, given mongo1's replSetGetStatus reply (ok or not) and its stored config (or None)."""
    code = status_reply.get("code")
    if code in (UNAUTHORIZED, AUTHENTICATION_FAILED):
        raise InitError(
            "mongo1 refused the root credentials: the data volumes were created with another "
            "HAREL_MONGO_ROOT_PASSWORD. Restore the compose/.env they were created with, or delete them "
            "with `make down VOLUMES=1` (this deletes every execution)"
        )
    if code == NO_REPLICATION_ENABLED:
        raise InitError(
            "mongo1 runs without --replSet: start it with the command in compose/docker-compose.yml"
        )
    if status_reply.get("ok") != 1 and code != NOT_YET_INITIALIZED:
        raise InitError(
            f"replSetGetStatus on mongo1 failed: {status_reply.get('codeName', code)}: {status_reply.get('errmsg')}"
        )
    if status_reply.get("ok") != 1 and stored_config is None:
        return Decision.INITIATE
    set_name = status_reply.get("set") or (stored_config or {}).get("_id")
    if set_name != SET_NAME:
        raise InitError(
            f"mongo1 belongs to replica set {set_name!r}, not {SET_NAME!r}: delete the data volumes with "
            "`make down VOLUMES=1`"
        )
    found = configured_hosts(status_reply, stored_config)
    if sorted(found) != sorted(hosts):
        raise InitError(
            f"rs0 is configured with {', '.join(found)} but HAREL_MEMBERS asks for {', '.join(hosts)}: "
            "set HAREL_MEMBERS back, or start afresh with `make down VOLUMES=1` (this deletes every execution)"
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


def app_user_command(users_info_reply: Mapping[str, Any], password: str) -> dict[str, Any]:
    """createUser when `harel` is absent, else updateUser: either way exactly readWrite on `harel`."""
    verb = "updateUser" if users_info_reply.get("users") else "createUser"
    return {
        verb: APP_USER,
        "pwd": password,
        "roles": APP_ROLES,
        "mechanisms": ["SCRAM-SHA-256"],
        "writeConcern": {"w": "majority", "wtimeout": 30_000},
    }


# --- talking to the servers --------------------------------------------------------------------------


def send(database: Database, command: Mapping[str, Any]) -> dict[str, Any]:
    """The command's reply, an error reply included (pymongo raises it; here it is data to decide on)."""
    try:
        return dict(database.command(command))
    except OperationFailure as exc:
        return dict(exc.details or {"ok": 0, "code": exc.code, "errmsg": str(exc)})


def require_ok(reply: Mapping[str, Any], what: str) -> None:
    if reply.get("ok") == 1:
        return
    problem = f"{what}: {reply.get('codeName', reply.get('code'))}: {reply.get('errmsg')}"
    if reply.get("code") in (UNAUTHORIZED, AUTHENTICATION_FAILED):
        raise InitError(problem)
    raise NotYet(problem)


def stored_config(local: Database) -> dict[str, Any] | None:
    reply = send(local, {"find": "system.replset", "limit": 1})
    require_ok(reply, "reading local.system.replset")
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


def initiate_step(admin: Database, local: Database, hosts: Sequence[str]) -> Decision:
    decision = decide(send(admin, {"replSetGetStatus": 1}), stored_config(local), hosts)
    if decision is not Decision.INITIATE:
        return decision
    reply = send(admin, {"replSetInitiate": initiate_config(hosts)})
    if reply.get("code") == ALREADY_INITIALIZED:
        return Decision.INITIATED
    # The quorum check fails while another member is still starting: retried.
    require_ok(reply, "replSetInitiate")
    return Decision.INITIATE


def primary_step(admin: Database) -> str:
    reply = send(admin, {"replSetGetStatus": 1})
    primary = primary_of(reply)
    if primary is None:
        raise NotYet(f"no primary yet: {describe_members(reply)}")
    return primary


def app_user_step(set_admin: Database, password: str) -> str:
    users = send(set_admin, {"usersInfo": {"user": APP_USER, "db": "admin"}})
    require_ok(users, "usersInfo")
    command = app_user_command(users, password)
    require_ok(send(set_admin, command), next(iter(command)))
    return "updated" if "updateUser" in command else "created"


def run_init(
    admin: Database,
    local: Database,
    set_admin: Database,
    hosts: Sequence[str],
    app_password: str,
    deadline: Deadline,
    log: Callable[[str], None],
) -> Decision:
    """The whole init against mongo1 (`admin`, `local`) and the set (`set_admin`). Safe to run any number of times."""
    decision = deadline.until("initiate rs0", lambda: initiate_step(admin, local, hosts))
    log(f"mongo-init: rs0 {decision.value} (members: {', '.join(hosts)})")
    primary = deadline.until("elect a primary", lambda: primary_step(admin))
    log(f"mongo-init: primary is {primary}")
    outcome = deadline.until("ensure the app user", lambda: app_user_step(set_admin, app_password))
    log(f"mongo-init: app user {APP_USER!r} {outcome} (readWrite on 'harel' only)")
    return decision


def required_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise InitError(f"{name} is not set: it comes from compose/.env (make up writes it)")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rs_init", description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, choices=[1, 3], default=3, help="HAREL_MEMBERS")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for all three steps")
    args = parser.parse_args(argv)
    try:
        root = {
            "username": os.environ.get("HAREL_MONGO_ROOT_USER") or "root",
            "password": required_env("HAREL_MONGO_ROOT_PASSWORD"),
            "authSource": "admin",
            "serverSelectionTimeoutMS": 3000,
            "connectTimeoutMS": 3000,
        }
        app_password = required_env("HAREL_APP_PASSWORD")
        hosts = member_hosts(args.members)
        mongo1: MongoClient[dict[str, Any]] = MongoClient(hosts[0], directConnection=True, **root)
        replica_set: MongoClient[dict[str, Any]] = MongoClient(hosts, replicaSet=SET_NAME, **root)
        with mongo1, replica_set:
            run_init(
                mongo1.admin,
                mongo1.local,
                replica_set.admin,
                hosts,
                app_password,
                Deadline(args.timeout),
                print,
            )
    except InitError as exc:
        print(f"mongo-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
