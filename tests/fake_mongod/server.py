"""FakeMongod: harel-dev's local server (`harel_dev.server`) with what only a test double has.

Everything a server does (wire protocol, commands on mongomock, `$$NOW`, retryable writes, `hello`) is the
harel-dev's `LocalServer`; this subclass adds the roles a test needs (`topology.py`), the `failCommand` fail point,
and test controls that no client can trigger: faults (`fail_after_apply`, `deny`), network latency, a clock
offset, withheld write-concern acknowledgement, the simulated members' states (`set_member_state`), and
settings (`set_default_rw_concern`, `set_feature_compatibility_version`, `set_initialized`).
"""

from __future__ import annotations

import time
from typing import Any

from harel_dev.engine import Engine
from harel_dev.errors import CommandError, error_labels
from harel_dev.now import Clock
from harel_dev.server import (
    DEFAULT_RW_CONCERN,
    FEATURE_COMPATIBILITY_VERSION,
    HELLO_COMMANDS,
    Connection,
    LocalServer,
    Reply,
)

from .after_apply import AfterApplyFaults
from .failpoint import FailCommandPoint, Failure
from .topology import WRITE_COMMANDS, Role, RoleTopology
from .write_concern import WriteConcernGate

FAIL_POINT_ERRMSG = "Failing command via 'failCommand' failpoint"


class FakeMongod(LocalServer):
    """One listening test server on 127.0.0.1 in `role`; `start()` it (or use it as a context manager).

    `latency_ms` delays every command by that much before it runs, outside the execution lock, so concurrent
    commands overlap as they would over a network. `clock_offset` (seconds) puts the server's clock ahead
    (positive) or behind (negative) real time: `$$NOW`, `hello.localTime` and the server's other times.
    `auth` requires authentication, as the harel-dev server's (`harel_dev.access`). `engine` is one shared
    with other servers (a fake cluster's routers, `router.py`).
    """

    def __init__(
        self,
        role: Role = Role.PRIMARY,
        *,
        set_name: str = "rs0",
        port: int = 0,
        latency_ms: float = 0.0,
        clock_offset: float = 0.0,
        auth: bool = False,
        engine: Engine | None = None,
    ) -> None:
        if latency_ms < 0:
            raise ValueError(f"latency_ms must not be negative, got {latency_ms}")
        self.role = role
        self.latency_ms = latency_ms
        self._initial_clock_offset = clock_offset
        self._clock_offset = clock_offset
        self._fail_command = FailCommandPoint()
        self._after_apply = AfterApplyFaults()
        self._write_concern = WriteConcernGate()
        self._denied: set[str] = set()
        super().__init__(port=port, set_name=set_name, clock=self._clock, auth=auth, engine=engine)

    def _new_topology(self, set_name: str, clock: Clock) -> RoleTopology:
        return RoleTopology(set_name, me="", clock=clock, role=self.role)

    @property
    def _role_topology(self) -> RoleTopology:
        topology = self._topology
        assert isinstance(topology, RoleTopology)
        return topology

    def _clock(self) -> float:
        return time.time() + self._clock_offset

    @property
    def url(self) -> str:
        """A connection string that discovers this server as the role it plays."""
        if self.role is Role.PRIMARY:
            return super().url
        if self.role is Role.SECONDARY:
            return f"mongodb://{self.host_port}/?directConnection=true"
        return f"mongodb://{self.host_port}/"

    def stop(self) -> None:
        self._write_concern.stop()
        super().stop()

    # --- test controls -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget all data, cursors, recorded writes, fail points, faults and settings."""
        with self._execution_lock:
            self._engine.reset()
            self._retries.clear()
        self._fail_command.reset()
        self._after_apply.clear()
        self._denied.clear()
        self._write_concern.release()
        self._clock_offset = self._initial_clock_offset
        self._default_rw_concern = dict(DEFAULT_RW_CONCERN)
        self._feature_compatibility_version = FEATURE_COMPATIBILITY_VERSION
        self._role_topology.reset()

    def fail_after_apply(self, command: str, times: int = 1, app_name: str | None = None) -> None:
        """Test-only fault (no real fail point does this): apply the next `times` `command`s, then close
        their connections without replying. `app_name` limits it to clients with that appName."""
        self._after_apply.arm(command, times, app_name)

    def set_initialized(self, initialized: bool) -> None:
        """False: behave as a member started with --replSet before `replSetInitiate` (NotYetInitialized)."""
        topology = self._role_topology
        if not topology.is_replica_set:
            raise ValueError(f"a {self.role.value} has no replica-set configuration")
        topology.set_initialized(initialized)

    def set_member_state(self, host: str, state: str) -> None:
        """The state of the simulated member `host` (one of `replset.SIMULATED_STATES`: "SECONDARY",
        "STARTUP2", "DOWN", "RECOVERING", ...): what `replSetGetStatus` reports for it, and what quorum checks
        and step-down see. It may be set before `host` is in the configuration (a member that is down when
        it is added). This process's own state follows its role."""
        if host == self.host_port:
            raise ValueError(f"{host} is this process, whose state follows its role, not a simulated member")
        self._role_topology.replica_set.set_peer_state(host, state)

    def deny(self, *commands: str) -> None:
        """Answer these commands with Unauthorized, as a server does for a user without the privilege."""
        self._denied.update(commands)

    def set_default_rw_concern(self, reply: dict[str, Any]) -> None:
        """The fields `getDefaultRWConcern` answers with (besides `ok`)."""
        self._default_rw_concern = dict(reply)

    def set_feature_compatibility_version(self, version: str) -> None:
        """What `getParameter: {featureCompatibilityVersion: 1}` answers (`{version: ...}`)."""
        self._feature_compatibility_version = version

    def set_clock_offset(self, seconds: float) -> None:
        """Run the server's clock `seconds` ahead of real time (behind when negative)."""
        self._clock_offset = seconds

    def waiting_change_streams(self) -> int:
        """How many change-stream getMores are waiting for an event now (no command tells)."""
        with self._execution_lock:
            return self._engine.changes.waiting

    def withhold_write_concern(self) -> None:
        """Lose the majority: `w: "majority"` writes still apply, but their replies wait (see
        write_concern.py) until `release_write_concern()`, their `wtimeout` or their `maxTimeMS`."""
        self._write_concern.withhold()

    def release_write_concern(self) -> None:
        """The majority is back: every waiting reply is sent, acknowledged."""
        self._write_concern.release()

    # --- one command ---------------------------------------------------------------------------------

    def _respond(self, connection: Connection, name: str, db: str, command: dict[str, Any]) -> Reply | None:
        arrived = time.monotonic()
        if self.latency_ms:
            time.sleep(self.latency_ms / 1000)
        failure = None if name == "configureFailPoint" else self._fail_command.take(name, connection.app_name)
        if failure is not None:
            if failure.block_ms:
                time.sleep(failure.block_ms / 1000)
            if failure.close_connection:
                return None
            if failure.error_code is not None:
                labels = error_labels(failure.error_labels, failure.error_code, command)
                return CommandError(failure.error_code, FAIL_POINT_ERRMSG, labels).reply()
        if name in self._denied and name not in HELLO_COMMANDS:
            return CommandError(13, f"not authorized on {db} to execute command {{ {name}: ... }}").reply()
        reply: Reply | None = self._execute(connection, name, db, command)
        assert reply is not None
        if failure is not None and failure.write_concern_error is not None and reply.get("ok"):
            _add_write_concern_error(reply, failure, command)
        if name in WRITE_COMMANDS and reply.get("ok"):
            reply = self._write_concern.acknowledge(
                command,
                reply,
                self._default_rw_concern.get("defaultWriteConcern") or {},
                str(self._default_rw_concern.get("defaultWriteConcernSource")),
                arrived,
            )
        if reply is None or self._after_apply.take(name, connection.app_name):
            return None
        return reply

    def _server_command(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        if name == "configureFailPoint":
            if db != "admin":
                raise CommandError(13, "configureFailPoint may only be run against the admin database.")
            return self._fail_command.configure(command)
        return super()._server_command(name, db, command)


def _add_write_concern_error(reply: dict[str, Any], failure: Failure, command: dict[str, Any]) -> None:
    error = dict(failure.write_concern_error or {})
    reply["writeConcernError"] = error
    labels = error_labels(failure.error_labels, int(error.get("code", 0)), command)
    if labels:
        reply["errorLabels"] = labels
