"""The roles the test double can play besides the local server's primary: secondary, standalone, mongos, and
a replica-set member awaiting `replSetInitiate`, each with the refusals a real server of that role gives."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Any

from harel.local.engine import WRITES
from harel.local.errors import CommandError
from harel.local.topology import Topology

WRITE_COMMANDS = WRITES | {"setDefaultRWConcern"}
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

    @property
    def is_replica_set(self) -> bool:
        return self.role in (Role.PRIMARY, Role.SECONDARY)

    @property
    def writable(self) -> bool:
        return self.role in (Role.STANDALONE, Role.MONGOS) or (self.role is Role.PRIMARY and self.initialized)

    def set_initialized(self, initialized: bool) -> None:
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
        fields = super().role_fields(now)
        if self.role is Role.SECONDARY:
            del fields["primary"], fields["electionId"]
            fields["secondary"] = True
        return fields

    def member_state(self) -> tuple[int, str]:
        return (2, "SECONDARY") if self.role is Role.SECONDARY else super().member_state()

    def admit(self, name: str, command: dict[str, Any]) -> None:
        if "txnNumber" in command and self.role is Role.STANDALONE:
            raise CommandError(20, "Transaction numbers are only allowed on a replica set member or mongos")
        if name in WRITE_COMMANDS and not self.writable:
            raise CommandError(10107, "not primary")
        if name in READ_COMMANDS and self.is_replica_set and self.role is not Role.PRIMARY:
            if not self.initialized:
                raise CommandError(13436, "node is not in primary or recovering state")
            preference = command.get("$readPreference") or {}
            if preference.get("mode", "primary") == "primary":
                raise CommandError(13435, "not primary and secondaryOk=false")
        elif name in READ_COMMANDS and not self.writable:
            raise CommandError(13436, "node is not in primary or recovering state")

    def repl_set_get_status(self) -> dict[str, Any]:
        if self.role is Role.MONGOS:
            raise CommandError(59, "no such command: 'replSetGetStatus'")
        if self.role is Role.STANDALONE:
            raise CommandError(76, "not running with --replSet")
        if not self.initialized:
            raise CommandError(94, "no replset config has been received")
        return super().repl_set_get_status()

    def repl_set_initiate(self, command: dict[str, Any]) -> dict[str, Any]:
        if not self.is_replica_set:
            raise CommandError(76, "This node was not started with replication enabled.")
        if self.initialized:
            return super().repl_set_initiate(command)
        config = command.get("replSetInitiate")
        if isinstance(config, dict) and config.get("_id") not in (None, self.set_name):
            raise CommandError(
                93,
                f"Attempting to initiate a replica set with name {config['_id']}, "
                f"but command line reports {self.set_name}; rejecting",
            )
        self.set_initialized(True)
        return {"ok": 1.0}

    def server_status(self, connections: int) -> dict[str, Any]:
        status = super().server_status(connections)
        if self.role is Role.MONGOS:
            status["process"] = "mongos"
        if not (self.is_replica_set and self.initialized):
            del status["repl"]
        return status
