"""Users: MongoDB's user commands on a user store kept where mongod keeps it, `admin.system.users`.

Each user is one document of mongod's shape: `{_id: "<db>.<user>", userId, user, db, credentials: {
"SCRAM-SHA-1": {...}, "SCRAM-SHA-256": {...}}, roles: [{role, db}], customData?}`. The credentials are
salted keys (`harel_dev.scram`), never the password. Because the store is an ordinary collection of the
engine, a data file (`--data`) keeps the users across restarts with everything else.

Commands, with mongod's reply shapes and errors: `createUser` (duplicate: 51003), `updateUser` (password,
mechanisms, roles, customData), `dropUser`, `usersInfo` (one user, several, all of a database, all of every
database; `showCredentials`), `grantRolesToUser`, `revokeRolesFromUser` (unknown user: UserNotFound 11,
unknown role: RoleNotFound 31). Callers hold the server's execution lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mongomock
from bson import Binary

from harel_dev import scram
from harel_dev.errors import CommandError, not_modelled
from harel_dev.roles import Role, parse_roles

Reply = dict[str, Any]
USERS_DB, USERS_COLLECTION = "admin", "system.users"
EXTERNAL_DB = "$external"


@dataclass(frozen=True)
class User:
    name: str
    db: str
    roles: list[Role]
    mechanisms: list[str]


class UserStore:
    """The users of one server, on the collection `admin.system.users` that `collection()` returns."""

    def __init__(self, collection: Callable[[], mongomock.Collection[dict[str, Any]]]) -> None:
        self._collection = collection
        self._handlers: dict[str, Callable[[str, dict[str, Any]], Reply]] = {
            "createUser": self.create_user,
            "updateUser": self.update_user,
            "dropUser": self.drop_user,
            "usersInfo": self.users_info,
            "grantRolesToUser": self.grant_roles,
            "revokeRolesFromUser": self.revoke_roles,
        }

    # --- lookups -------------------------------------------------------------------------------------

    def serves(self, name: str) -> bool:
        return name in self._handlers

    def execute(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        return self._handlers[name](db, command)

    def any_user(self) -> bool:
        return self._collection().find_one({}, {"_id": 1}) is not None

    def find(self, name: str, db: str) -> User | None:
        document = self._collection().find_one({"_id": _user_id(db, name)})
        return None if document is None else _user(document)

    def credential(self, name: str, db: str, mechanism: str) -> scram.Credential | None:
        document = self._collection().find_one({"_id": _user_id(db, name)})
        stored = (document or {}).get("credentials", {}).get(mechanism)
        return None if stored is None else scram.Credential.from_document(stored)

    # --- commands ------------------------------------------------------------------------------------

    def create_user(self, db: str, command: dict[str, Any]) -> Reply:
        name = _name(command, "createUser")
        _refuse_external(db)
        if "roles" not in command:
            raise CommandError(40414, "BSON field 'createUser.roles' is missing but a required field")
        roles = parse_roles(command["roles"], db, "createUser.roles")
        if "pwd" not in command:
            raise CommandError(
                2,
                "Must provide a 'pwd' field for all user documents, except those with '$external' as the "
                "user's source db",
            )
        mechanisms = _mechanisms(command.get("mechanisms"), scram.MECHANISMS)
        _refuse_unmodelled_options(command)
        if self._collection().find_one({"_id": _user_id(db, name)}) is not None:
            raise CommandError(51003, f'User "{name}@{db}" already exists')
        document: dict[str, Any] = {
            "_id": _user_id(db, name),
            "userId": Binary(uuid.uuid4().bytes, 4),
            "user": name,
            "db": db,
            "credentials": _credentials(name, _password(command), mechanisms),
            "roles": [role.to_document() for role in roles],
        }
        if "customData" in command:
            document["customData"] = _custom_data(command["customData"])
        self._collection().insert_one(document)
        return {"ok": 1.0}

    def update_user(self, db: str, command: dict[str, Any]) -> Reply:
        name = _name(command, "updateUser")
        _refuse_unmodelled_options(command)
        document = self._existing(name, db)
        changes: dict[str, Any] = {}
        if "roles" in command:
            changes["roles"] = [role.to_document() for role in parse_roles(command["roles"], db, "roles")]
        if "customData" in command:
            changes["customData"] = _custom_data(command["customData"])
        if "pwd" in command:
            mechanisms = _mechanisms(command.get("mechanisms"), scram.MECHANISMS)
            changes["credentials"] = _credentials(name, _password(command), mechanisms)
        elif "mechanisms" in command:
            current = list(document.get("credentials", {}))
            mechanisms = _mechanisms(command["mechanisms"], scram.MECHANISMS)
            if not set(mechanisms) <= set(current):
                raise CommandError(
                    2,
                    "mechanisms field must be a subset of previously set mechanisms when no new password is given",
                )
            changes["credentials"] = {
                mechanism: document["credentials"][mechanism] for mechanism in mechanisms
            }
        if not changes:
            raise CommandError(2, "Must specify at least one field to update in updateUser")
        self._collection().update_one({"_id": document["_id"]}, {"$set": changes})
        return {"ok": 1.0}

    def drop_user(self, db: str, command: dict[str, Any]) -> Reply:
        name = _name(command, "dropUser")
        result = self._collection().delete_one({"_id": _user_id(db, name)})
        if result.deleted_count == 0:
            raise CommandError(11, f"User '{name}@{db}' not found")
        return {"ok": 1.0}

    def grant_roles(self, db: str, command: dict[str, Any]) -> Reply:
        name = _name(command, "grantRolesToUser")
        document = self._existing(name, db)
        granted = parse_roles(command.get("roles"), db, "grantRolesToUser.roles")
        roles = _roles(document)
        roles.extend(role for role in granted if role not in roles)
        self._set_roles(document, roles)
        return {"ok": 1.0}

    def revoke_roles(self, db: str, command: dict[str, Any]) -> Reply:
        name = _name(command, "revokeRolesFromUser")
        document = self._existing(name, db)
        revoked = parse_roles(command.get("roles"), db, "revokeRolesFromUser.roles")
        self._set_roles(document, [role for role in _roles(document) if role not in revoked])
        return {"ok": 1.0}

    def users_info(self, db: str, command: dict[str, Any]) -> Reply:
        if command.get("showPrivileges") or command.get("showAuthenticationRestrictions"):
            raise not_modelled("usersInfo's showPrivileges and showAuthenticationRestrictions")
        query = _users_query(command["usersInfo"], db)
        documents = sorted(self._collection().find(query), key=lambda d: (d["db"], d["user"]))
        users = [_info(document, command) for document in documents]
        return {"users": users, "ok": 1.0}

    # --- helpers -------------------------------------------------------------------------------------

    def _existing(self, name: str, db: str) -> dict[str, Any]:
        document = self._collection().find_one({"_id": _user_id(db, name)})
        if document is None:
            raise CommandError(11, f'Could not find user "{name}" for db "{db}"')
        return document

    def _set_roles(self, document: dict[str, Any], roles: list[Role]) -> None:
        self._collection().update_one(
            {"_id": document["_id"]}, {"$set": {"roles": [role.to_document() for role in roles]}}
        )


def _user_id(db: str, name: str) -> str:
    return f"{db}.{name}"


def _user(document: dict[str, Any]) -> User:
    return User(document["user"], document["db"], _roles(document), sorted(document.get("credentials", {})))


def _roles(document: dict[str, Any]) -> list[Role]:
    return [Role(role["role"], role["db"]) for role in document.get("roles", [])]


def _info(document: dict[str, Any], command: dict[str, Any]) -> dict[str, Any]:
    info = {
        "_id": document["_id"],
        "userId": document["userId"],
        "user": document["user"],
        "db": document["db"],
        "roles": document.get("roles", []),
        "mechanisms": sorted(document.get("credentials", {})),
    }
    if "customData" in document and command.get("showCustomData", True):
        info["customData"] = document["customData"]
    if command.get("showCredentials"):
        info["credentials"] = document.get("credentials", {})
    return info


def _users_query(selector: Any, db: str) -> dict[str, Any]:
    """The filter on `admin.system.users` for usersInfo's forms: 1 (every user of `db`), "name", {user, db},
    a list of those, or {forAllDBs: true}."""
    if selector == 1 or selector is True:
        return {"db": db}
    if isinstance(selector, dict) and selector.get("forAllDBs") is True:
        return {}
    selectors = selector if isinstance(selector, list) else [selector]
    ids = []
    for one in selectors:
        if isinstance(one, str):
            ids.append(_user_id(db, one))
        elif isinstance(one, dict) and isinstance(one.get("user"), str) and isinstance(one.get("db"), str):
            ids.append(_user_id(one["db"], one["user"]))
        else:
            raise CommandError(2, f"User name must be a string or a {{user, db}} document, not {one!r}")
    return {"_id": {"$in": ids}}


def _name(command: dict[str, Any], field: str) -> str:
    name = command[field]
    if not isinstance(name, str) or not name:
        raise CommandError(2, f"{field} needs a non-empty user name")
    return name


def _password(command: dict[str, Any]) -> str:
    password = command["pwd"]
    if not isinstance(password, str):
        raise CommandError(14, "BSON field 'pwd' is the wrong type, expected type 'string'")
    if not password:
        raise CommandError(2, "User passwords must not be empty")
    return password


def _mechanisms(value: Any, default: tuple[str, ...]) -> list[str]:
    if value is None:
        return list(default)
    if not isinstance(value, list) or not value:
        raise CommandError(2, "mechanisms field must not be empty")
    for mechanism in value:
        if mechanism not in scram.MECHANISMS:
            raise CommandError(2, f"Unknown auth mechanism '{mechanism}'")
    return sorted(set(value))


def _credentials(name: str, password: str, mechanisms: list[str]) -> dict[str, Any]:
    return {mechanism: scram.derive(mechanism, name, password).to_document() for mechanism in mechanisms}


def _custom_data(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CommandError(14, "BSON field 'customData' is the wrong type, expected type 'object'")
    return value


def _refuse_external(db: str) -> None:
    if db == EXTERNAL_DB:
        raise not_modelled("users in $external (x.509, LDAP, Kerberos)")


def _refuse_unmodelled_options(command: dict[str, Any]) -> None:
    if command.get("digestPassword") is False:
        raise not_modelled("digestPassword: false")
    if "authenticationRestrictions" in command:
        raise not_modelled("authenticationRestrictions")
