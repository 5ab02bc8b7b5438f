"""Access control of the local server: who a connection is (SCRAM authentication) and what it may run.

Off unless the server is started with `auth=True` (`--auth`). When on:

- A connection authenticates with `saslStart` / `saslContinue` (SCRAM-SHA-256 or SCRAM-SHA-1, see
  `harel_dev.scram`), or speculatively inside its first `hello` (`speculativeAuthenticate`), as drivers
  do. `hello` with `saslSupportedMechs: "<db>.<user>"` lists that user's mechanisms. A wrong password or an
  unknown user is AuthenticationFailed (18), "Authentication failed.", as mongod answers both.
- Before that, only the handshake and a few harmless commands run (`UNAUTHENTICATED_COMMANDS`); anything
  else is Unauthorized (13), "Command <name> requires authentication".
- The localhost exception: while no user exists, a client on a loopback address may create the first user
  in `admin` and initiate and inspect the replica set (`LOCALHOST_EXCEPTION_COMMANDS`), nothing else.
- An authenticated connection runs what its user's roles allow, checked per command (`harel_dev.roles`);
  otherwise Unauthorized (13), "not authorized on <db> to execute command ...".
"""

from __future__ import annotations

import ipaddress
import itertools
from dataclasses import dataclass, field
from typing import Any

from harel_dev import scram
from harel_dev.errors import CommandError
from harel_dev.roles import (
    CLUSTER,
    COMMAND_ACTIONS,
    LIST_DATABASES,
    Role,
    allows,
    readable_databases,
)
from harel_dev.users import UserStore

SASL_COMMANDS = frozenset({"saslStart", "saslContinue"})
# Commands mongod runs without authentication (the handshake is answered before access control).
UNAUTHENTICATED_COMMANDS = frozenset(
    {
        "hello",
        "isMaster",
        "ismaster",
        "ping",
        "buildInfo",
        "buildinfo",
        "connectionStatus",
        "logout",
        "endSessions",
        "authenticate",
    }
    | SASL_COMMANDS
)
LOCALHOST_EXCEPTION_COMMANDS = frozenset(
    {"createUser", "replSetInitiate", "replSetGetStatus", "replSetGetConfig"}
)
AUTHENTICATION_FAILED = 18
MECHANISM_UNAVAILABLE = 334


def authentication_failed() -> CommandError:
    return CommandError(AUTHENTICATION_FAILED, "Authentication failed.")


@dataclass
class _Exchange:
    """One SASL conversation in progress on a connection."""

    conversation: scram.Conversation
    db: str
    skip_empty_exchange: bool
    proven: bool = False  # the proof held; only the client's empty closing message is left


@dataclass
class Session:
    """The authentication state of one connection."""

    loopback: bool
    user: tuple[str, str] | None = None  # (name, db) once authenticated
    exchanges: dict[int, _Exchange] = field(default_factory=dict)
    conversation_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class Access:
    """Authentication and authorisation against `users`; every method is called under the server's
    execution lock (the user store is a collection of the engine)."""

    def __init__(self, users: UserStore, *, enabled: bool) -> None:
        self.users = users
        self.enabled = enabled

    # --- authentication ------------------------------------------------------------------------------

    def sasl_start(self, session: Session, db: str, command: dict[str, Any]) -> dict[str, Any]:
        mechanism = command.get("mechanism")
        if not isinstance(mechanism, str) or mechanism not in scram.MECHANISMS:
            raise CommandError(
                MECHANISM_UNAVAILABLE,
                f"Received authentication for mechanism {mechanism} which is not enabled",
            )
        conversation = scram.Conversation(mechanism, lambda user: self.users.credential(user, db, mechanism))
        try:
            server_first = conversation.start(scram.payload_bytes(command.get("payload")))
        except scram.ProofRejected as exc:
            raise authentication_failed() from exc
        except scram.ScramError as exc:
            raise CommandError(17, f"SCRAM: {exc}") from exc
        conversation_id = next(session.conversation_ids)
        skip = bool((command.get("options") or {}).get("skipEmptyExchange"))
        session.exchanges[conversation_id] = _Exchange(conversation, db, skip)
        return {"conversationId": conversation_id, "done": False, "payload": server_first, "ok": 1.0}

    def sasl_continue(self, session: Session, command: dict[str, Any]) -> dict[str, Any]:
        conversation_id = command.get("conversationId")
        if not isinstance(conversation_id, int) or conversation_id not in session.exchanges:
            raise CommandError(17, "No SASL session state found")
        exchange = session.exchanges[conversation_id]
        if exchange.proven:  # the client's empty closing message, when it did not ask to skip it
            del session.exchanges[conversation_id]
            return {"conversationId": conversation_id, "done": True, "payload": b"", "ok": 1.0}
        try:
            server_final = exchange.conversation.finish(scram.payload_bytes(command.get("payload", b"")))
        except (scram.ProofRejected, scram.ScramError) as exc:
            del session.exchanges[conversation_id]
            if isinstance(exc, scram.ScramError):
                raise CommandError(17, f"SCRAM: {exc}") from exc
            raise authentication_failed() from exc
        session.user = (exchange.conversation.user, exchange.db)
        exchange.proven = True
        if exchange.skip_empty_exchange:
            del session.exchanges[conversation_id]
        return {
            "conversationId": conversation_id,
            "done": exchange.skip_empty_exchange,
            "payload": server_final,
            "ok": 1.0,
        }

    def hello_fields(self, session: Session, command: dict[str, Any]) -> dict[str, Any]:
        """What `hello` adds for authentication: the mechanisms of the user named by `saslSupportedMechs`
        (left out for an unknown user, as mongod does), and the reply to a speculative `saslStart` (left out
        when it fails: the driver then authenticates the ordinary way and meets the error there)."""
        fields: dict[str, Any] = {}
        named = command.get("saslSupportedMechs")
        if isinstance(named, str) and "." in named:
            db, _, name = named.partition(".")
            user = self.users.find(name, db)
            if user is not None:
                fields["saslSupportedMechs"] = user.mechanisms
        speculative = command.get("speculativeAuthenticate")
        if isinstance(speculative, dict) and "saslStart" in speculative:
            db = speculative.get("db", "admin")
            try:
                reply = self.sasl_start(session, db if isinstance(db, str) else "admin", speculative)
            except CommandError:
                return fields
            del reply["ok"]
            fields["speculativeAuthenticate"] = reply
        return fields

    def logout(self, session: Session) -> dict[str, Any]:
        session.user = None
        session.exchanges.clear()
        return {"ok": 1.0}

    def connection_status(self, session: Session) -> dict[str, Any]:
        roles = self._roles(session)
        users = [] if session.user is None else [{"user": session.user[0], "db": session.user[1]}]
        return {
            "authInfo": {
                "authenticatedUsers": users,
                "authenticatedUserRoles": [role.to_document() for role in roles],
            },
            "ok": 1.0,
        }

    # --- authorisation -------------------------------------------------------------------------------

    def authorize(self, session: Session, name: str, db: str, command: dict[str, Any]) -> None:
        """Raise Unauthorized (13) unless this connection may run `command` on `db`."""
        if not self.enabled or name in UNAUTHENTICATED_COMMANDS or name not in COMMAND_ACTIONS:
            # Every command the server runs is in COMMAND_ACTIONS; any other is answered CommandNotFound or
            # NotImplemented whoever asks, as mongod looks a command up before it checks access.
            return
        if session.user is None:
            if self._localhost_exception(session, name, db):
                return
            raise CommandError(13, f"Command {name} requires authentication")
        action, on_cluster = COMMAND_ACTIONS[name]
        if name == "usersInfo" and _names_only(command["usersInfo"], db) == {session.user}:
            return  # viewing oneself needs no privilege
        if name == "listDatabases" and not allows(self._roles(session), LIST_DATABASES, CLUSTER):
            return  # answered with the databases the user may read (filtered by `visible_databases`)
        if not allows(self._roles(session), action, CLUSTER if on_cluster else db):
            raise CommandError(
                13, f"not authorized on {db} to execute command {{ {name}: {_shown(command[name])} }}"
            )

    def _localhost_exception(self, session: Session, name: str, db: str) -> bool:
        """A loopback client before the first user exists: the first user (in admin) and the set's
        initiation, as mongod allows."""
        if not session.loopback or name not in LOCALHOST_EXCEPTION_COMMANDS or self.users.any_user():
            return False
        return name != "createUser" or db == "admin"

    def visible_databases(self, session: Session) -> set[str] | None:
        """The databases listDatabases shows this connection (None: all)."""
        if not self.enabled:
            return None
        roles = self._roles(session)
        if allows(roles, LIST_DATABASES, CLUSTER):
            return None
        return readable_databases(roles) or set()

    def _roles(self, session: Session) -> list[Role]:
        if session.user is None:
            return []
        user = self.users.find(*session.user)
        return [] if user is None else user.roles


def is_loopback(address: str) -> bool:
    """True for a loopback address (or the name localhost)."""
    try:
        return ipaddress.ip_address(address.split("%", maxsplit=1)[0]).is_loopback
    except ValueError:
        return address == "localhost"


def _names_only(selector: object, db: str) -> set[tuple[str, str]]:
    if isinstance(selector, str):
        return {(selector, db)}
    if isinstance(selector, dict) and isinstance(selector.get("user"), str):
        return {(selector["user"], str(selector.get("db", db)))}
    return set()


def _shown(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
