"""The roles the test double can play besides the local server's primary: secondary, standalone, mongos, and
a replica-set member awaiting `replSetInitiate`, each with the refusals a real server of that role gives; and,
as a primary, a configured replica set of several members (`replset.py`) whose other members are simulated."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any

from harel_dev.change_streams import opens_change_stream
from harel_dev.engine import WRITES
from harel_dev.errors import CommandError, not_modelled
from harel_dev.topology import Topology

from .replset import ReplicaSetState

WRITE_COMMANDS = WRITES | {
    "setDefaultRWConcern",
    "createUser",
    "updateUser",
    "dropUser",
    "grantRolesToUser",
    "revokeRolesFromUser",
}
READ_COMMANDS = frozenset(
    {"find", "aggregate", "count", "distinct", "listIndexes", "listCollections", "listDatabases"}
)


class Role(enum.Enum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    STANDALONE = "standalone"
    MONGOS = "mongos"


@dataclass
class RoleTopology(Topology):
    role: Role = Role.PRIMARY
    initialized: bool = True
    replica_set: ReplicaSetState = field(init=False)

    def __post_init__(self) -> None:
        self.replica_set = ReplicaSetState(on_change=self.changed)

    @property
    def is_replica_set(self) -> bool:
        return self.role in (Role.PRIMARY, Role.SECONDARY)

    @property
    def writable(self) -> bool:
        if self.role in (Role.STANDALONE, Role.MONGOS):
            return True
        return self.role is Role.PRIMARY and self.initialized and not self.replica_set.stepped_down

    def reset(self) -> None:
        """Back to the one-member set of term 1, initialized, every simulated member forgotten."""
        self.replica_set.reset()
        self.initialized = True
        self.changed()

    def set_initialized(self, initialized: bool) -> None:
        """False: a member started with --replSet that has no configuration yet."""
        if not initialized:
            self.replica_set.reset()
        self.initialized = initialized
        self.changed()

    def role_fields(self, now: dt.datetime) -> dict[str, Any]:
        if self.role is Role.MONGOS:
            return {"msg": "isdbgrid"}
        if self.role is Role.STANDALONE:
            return {}
        if not self.initialized:
            return {
                "secondary": False,
                "isreplicaset": True,
                "info": "Does not have a valid replica set config",
            }
        return super().role_fields(now)

    def member_state(self) -> tuple[int, str]:
        return (1, "PRIMARY") if self.writable else (2, "SECONDARY")

    def config(self) -> dict[str, Any]:
        return self.replica_set.config or super().config()

    def term(self) -> int:
        return self.replica_set.term

    def primary_host(self) -> str | None:
        return self.me if self.writable else self.replica_set.simulated_primary

    def peer_state(self, host: str) -> str:
        member = next(m for m in self.config()["members"] if m["host"] == host)
        return self.replica_set.peer_state(member)

    def admit(self, name: str, command: dict[str, Any]) -> None:
        if "txnNumber" in command and self.role is Role.STANDALONE:
            raise CommandError(20, "Transaction numbers are only allowed on a replica set member or mongos")
        if command.get("$db") == "local":
            # mongod serves the `local` database in every state: a member awaiting replSetInitiate or restarting
            # is read there (local.system.replset) to learn whether it ever held a configuration.
            return
        if name in WRITE_COMMANDS and not self.writable:
            raise CommandError(10107, "not primary")
        if name in READ_COMMANDS and self.is_replica_set and not self.writable:
            if not self.initialized:
                raise CommandError(13436, "node is not in primary or recovering state")
            preference = command.get("$readPreference") or {}
            if preference.get("mode", "primary") == "primary":
                raise CommandError(13435, "not primary and secondaryOk=false")
        elif name in READ_COMMANDS and not self.writable:
            raise CommandError(13436, "node is not in primary or recovering state")
        if opens_change_stream(name, command):
            self._admit_change_stream()

    def _admit_change_stream(self) -> None:
        """Only the primary of a replica set serves change streams here."""
        if self.role is Role.STANDALONE:
            raise CommandError(40573, "The $changeStream stage is only supported on replica sets")
        if self.role is Role.MONGOS:
            raise not_modelled("change streams through a mongos")
        if not self.writable:
            raise not_modelled("change streams on a secondary")

    def repl_set_get_status(self) -> dict[str, Any]:
        self._require_config("replSetGetStatus")
        return super().repl_set_get_status()

    def repl_set_initiate(self, command: dict[str, Any]) -> dict[str, Any]:
        if not self.is_replica_set:
            raise CommandError(76, "This node was not started with replication enabled.")
        if self.initialized:
            return super().repl_set_initiate(command)
        reply = self.replica_set.initiate(
            command.get("replSetInitiate"), self.set_name, self.me, self.replica_set_id
        )
        self.set_initialized(True)
        return reply

    def repl_set_get_config(self) -> dict[str, Any]:
        self._require_config("replSetGetConfig")
        return super().repl_set_get_config()

    def repl_set_reconfig(self, command: dict[str, Any]) -> dict[str, Any]:
        self._require_config("replSetReconfig")
        return self.replica_set.reconfig(command, self.config(), self.me, primary=self.writable)

    def repl_set_step_down(self, command: dict[str, Any]) -> dict[str, Any]:
        self._require_config("replSetStepDown")
        if not self.writable:
            raise CommandError(10107, "not primary so can't step down")
        return self.replica_set.step_down(command, self.config(), self.me, self.now().isoformat())

    def _require_config(self, name: str) -> None:
        if self.role is Role.MONGOS:
            raise CommandError(59, f"no such command: '{name}'")
        if self.role is Role.STANDALONE:
            raise CommandError(76, "not running with --replSet")
        if not self.initialized:
            raise CommandError(94, "no replset config has been received")

    def server_status(self, connections: int) -> dict[str, Any]:
        status = super().server_status(connections)
        if self.role is Role.MONGOS:
            status["process"] = "mongos"
        return status

    def repl_status(self) -> dict[str, Any] | None:
        return super().repl_status() if self.is_replica_set and self.initialized else None
