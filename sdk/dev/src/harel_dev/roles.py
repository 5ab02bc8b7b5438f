"""Authorisation: the built-in roles the local server knows, and which commands each allows, coarsely.

MongoDB grants actions on resources through roles; the local server keeps the idea and coarsens it. Each
command belongs to one *action class* (`COMMAND_ACTIONS`), checked on the command's database or on the
cluster; each modelled built-in role grants some classes on one database or on all of them (`ROLE_GRANTS`).
What is enforced and what is not is listed in sdk/dev/README.md ("Authentication and authorisation").

| class | commands | granted by |
| --- | --- | --- |
| read | find, aggregate, count, distinct, getMore, killCursors, listCollections, listIndexes | read, readWrite (that database); readAnyDatabase, readWriteAnyDatabase, backup, root (every database) |
| write | insert, update, delete, findAndModify, create, drop, createIndexes, dropIndexes | readWrite (that database); readWriteAnyDatabase, restore, root |
| dropDatabase | dropDatabase | root |
| userAdmin | createUser, updateUser, dropUser, usersInfo, grantRolesToUser, revokeRolesFromUser | userAdminAnyDatabase, root (usersInfo on oneself needs nothing) |
| clusterMonitor | serverStatus, replSetGetStatus, replSetGetConfig, getCmdLineOpts, getLog, getParameter, getDefaultRWConcern, listDatabases | clusterMonitor, clusterAdmin, root; listDatabases also backup |
| clusterAdmin | replSetInitiate, replSetReconfig, replSetStepDown, setDefaultRWConcern, configureFailPoint | clusterAdmin, root |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harel_dev.engine import WRITES
from harel_dev.errors import CommandError, not_modelled

ANY_DATABASE = "*"
CLUSTER = ""  # the resource of cluster-wide actions

READ, WRITE, DROP_DATABASE, USER_ADMIN = "read", "write", "dropDatabase", "userAdmin"
CLUSTER_MONITOR, CLUSTER_ADMIN, LIST_DATABASES = "clusterMonitor", "clusterAdmin", "listDatabases"

# Which action class a command needs, and whether on its database (False) or on the cluster (True).
COMMAND_ACTIONS: dict[str, tuple[str, bool]] = {
    **dict.fromkeys(
        (
            "find",
            "aggregate",
            "count",
            "distinct",
            "getMore",
            "killCursors",
            "listCollections",
            "listIndexes",
        ),
        (READ, False),
    ),
    **dict.fromkeys(WRITES - {"dropDatabase"}, (WRITE, False)),
    "dropDatabase": (DROP_DATABASE, False),
    **dict.fromkeys(
        ("createUser", "updateUser", "dropUser", "usersInfo", "grantRolesToUser", "revokeRolesFromUser"),
        (USER_ADMIN, False),
    ),
    **dict.fromkeys(
        (
            "serverStatus",
            "replSetGetStatus",
            "replSetGetConfig",
            "getCmdLineOpts",
            "getLog",
            "getParameter",
            "getDefaultRWConcern",
        ),
        (CLUSTER_MONITOR, True),
    ),
    "listDatabases": (LIST_DATABASES, True),
    **dict.fromkeys(
        (
            "replSetInitiate",
            "replSetReconfig",
            "replSetStepDown",
            "setDefaultRWConcern",
            "configureFailPoint",
        ),
        (CLUSTER_ADMIN, True),
    ),
}

# Built-in roles: the classes each grants, and whether on every database (True) or only its own.
ROLE_GRANTS: dict[str, tuple[frozenset[str], bool]] = {
    "read": (frozenset({READ}), False),
    "readWrite": (frozenset({READ, WRITE}), False),
    "readAnyDatabase": (frozenset({READ}), True),
    "readWriteAnyDatabase": (frozenset({READ, WRITE}), True),
    "userAdminAnyDatabase": (frozenset({USER_ADMIN}), True),
    "clusterMonitor": (frozenset({CLUSTER_MONITOR, LIST_DATABASES}), True),
    "clusterAdmin": (frozenset({CLUSTER_MONITOR, LIST_DATABASES, CLUSTER_ADMIN}), True),
    "backup": (frozenset({READ, LIST_DATABASES}), True),
    "restore": (frozenset({WRITE}), True),
    "root": (
        frozenset({READ, WRITE, DROP_DATABASE, USER_ADMIN, CLUSTER_MONITOR, CLUSTER_ADMIN, LIST_DATABASES}),
        True,
    ),
}
# Roles that exist only in the admin database, as in MongoDB.
ADMIN_ONLY_ROLES = frozenset(role for role, (_, any_database) in ROLE_GRANTS.items() if any_database)
# MongoDB's other built-in roles: granting one is refused as not modelled rather than as unknown.
UNMODELLED_ROLES = frozenset(
    {"dbAdmin", "dbOwner", "userAdmin", "clusterManager", "hostManager", "dbAdminAnyDatabase", "__system"}
)


@dataclass(frozen=True)
class Role:
    role: str
    db: str

    def to_document(self) -> dict[str, str]:
        return {"role": self.role, "db": self.db}


def parse_roles(value: Any, db: str, field: str) -> list[Role]:
    """The roles of a user command (`"readWrite"` meaning on `db`, or `{role, db}`), each checked to exist:
    RoleNotFound (31) as mongod answers for an unknown one."""
    if not isinstance(value, list):
        raise CommandError(
            14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected type 'array'"
        )
    roles = []
    for entry in value:
        if isinstance(entry, str):
            role = Role(entry, db)
        elif (
            isinstance(entry, dict)
            and isinstance(entry.get("role"), str)
            and isinstance(entry.get("db"), str)
        ):
            role = Role(entry["role"], entry["db"])
        else:
            raise CommandError(2, f"role names must be strings or {{role, db}} documents, not {entry!r}")
        if role.role in UNMODELLED_ROLES:
            raise not_modelled(f"the built-in role {role.role}")
        if role.role not in ROLE_GRANTS or (role.role in ADMIN_ONLY_ROLES and role.db != "admin"):
            raise CommandError(31, f"Could not find role: {role.role}@{role.db}")
        if role not in roles:
            roles.append(role)
    return roles


def allows(roles: list[Role], action: str, db: str) -> bool:
    """True when one of `roles` grants `action` on database `db` (CLUSTER for a cluster-wide action)."""
    for role in roles:
        granted, any_database = ROLE_GRANTS.get(role.role, (frozenset(), False))
        if action in granted and (any_database or role.db == db):
            return True
    return False


def readable_databases(roles: list[Role]) -> set[str] | None:
    """The databases `roles` may read (None: every one)."""
    databases: set[str] = set()
    for role in roles:
        granted, any_database = ROLE_GRANTS.get(role.role, (frozenset(), False))
        if READ in granted or WRITE in granted:
            if any_database:
                return None
            databases.add(role.db)
    return databases
