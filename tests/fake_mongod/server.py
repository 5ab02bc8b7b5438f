"""FakeMongod: a wire-protocol test double of a mongod (replica-set member or standalone) or a mongos.

mockupdb decodes requests (OP_MSG, and the OP_QUERY handshake) and encodes replies; this module owns the
sockets so each connection has its own thread and nothing but command execution is serialised: an
awaitable `hello` or a `blockConnection` fail point waits without holding up other clients, while every
data command runs alone under one lock on mongomock.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Self

from mockupdb import OP_MSG_FLAGS, Request, bind_tcp_socket, mock_server_receive_request

from harel.local.now import bind_command, server_now

from .after_apply import AfterApplyFaults
from .engine import Engine
from .errors import RETRYABLE_WRITE_CODES, RETRYABLE_WRITE_LABEL, CommandError, not_modelled
from .failpoint import FailCommandPoint, Failure
from .retryable import RETRYABLE_WRITE_COMMANDS, RetryRecords
from .topology import Role, Topology

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
HELLO_COMMANDS = frozenset({"hello", "isMaster", "ismaster"})
WRITE_COMMANDS = frozenset(
    {
        "insert",
        "update",
        "delete",
        "findAndModify",
        "findandmodify",
        "create",
        "drop",
        "dropDatabase",
        "createIndexes",
        "dropIndexes",
        "setDefaultRWConcern",
    }
)
READ_COMMANDS = frozenset(
    {"find", "aggregate", "count", "distinct", "listIndexes", "listCollections", "listDatabases"}
)
TRANSACTION_COMMANDS = frozenset({"commitTransaction", "abortTransaction"})
FAIL_POINT_ERRMSG = "Failing command via 'failCommand' failpoint"

DEFAULT_RW_CONCERN: dict[str, Any] = {
    "defaultReadConcern": {"level": "local"},
    "defaultWriteConcern": {"w": "majority", "wtimeout": 0},
    "defaultReadConcernSource": "implicit",
    "defaultWriteConcernSource": "implicit",
}


@dataclass
class _Connection:
    sock: socket.socket
    connection_id: int
    app_name: str | None = None


class FakeMongod:
    """One listening server on 127.0.0.1; `start()` it (or use it as a context manager) and `stop()` it."""

    def __init__(self, role: Role = Role.PRIMARY, *, set_name: str = "rs0", port: int = 0) -> None:
        self.role = role
        self.set_name = set_name
        self._requested_port = port
        self._port = 0
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._topology = Topology(role, set_name, me="")
        self._engine = Engine()
        self._handlers = self._engine.handlers()
        self._execution_lock = threading.Lock()
        self._fail_command = FailCommandPoint()
        self._after_apply = AfterApplyFaults()
        self._retries = RetryRecords()
        self._denied: set[str] = set()
        self._default_rw_concern = dict(DEFAULT_RW_CONCERN)
        self._connections: dict[int, _Connection] = {}
        self._connections_lock = threading.Lock()
        self._connection_ids = itertools.count(1)
        self._stopping = threading.Event()

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        self._listener, (_, self._port) = bind_tcp_socket((HOST, self._requested_port))
        self._topology.me = self.host_port
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"fake-mongod-{self._port}")
        self._accept_thread.daemon = True
        self._accept_thread.start()
        log.info("fake mongod (%s) listening on %s", self.role.value, self.host_port)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._topology.stop()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            self._listener.close()
        with self._connections_lock:
            connections = list(self._connections.values())
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def host_port(self) -> str:
        return f"{HOST}:{self._port}"

    @property
    def url(self) -> str:
        """A connection string that discovers this server as the role it plays."""
        if self.role is Role.PRIMARY:
            return f"mongodb://{self.host_port}/?replicaSet={self.set_name}"
        if self.role is Role.SECONDARY:
            return f"mongodb://{self.host_port}/?directConnection=true"
        return f"mongodb://{self.host_port}/"

    # --- test controls -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget all data, cursors, recorded writes, fail points, faults and settings."""
        with self._execution_lock:
            self._engine.reset()
            self._retries.clear()
        self._fail_command.reset()
        self._after_apply.clear()
        self._denied.clear()
        self._default_rw_concern = dict(DEFAULT_RW_CONCERN)
        if not self._topology.initialized:
            self._topology.set_initialized(True)

    def fail_after_apply(self, command: str, times: int = 1, app_name: str | None = None) -> None:
        """Test-only fault (no real fail point does this): apply the next `times` `command`s, then close
        their connections without replying. `app_name` limits it to clients with that appName."""
        self._after_apply.arm(command, times, app_name)

    def set_initialized(self, initialized: bool) -> None:
        """False: behave as a member started with --replSet before `replSetInitiate` (NotYetInitialized)."""
        if not self._topology.is_replica_set:
            raise ValueError(f"a {self.role.value} has no replica-set configuration")
        self._topology.set_initialized(initialized)

    def deny(self, *commands: str) -> None:
        """Answer these commands with Unauthorized, as a server does for a user without the privilege."""
        self._denied.update(commands)

    def set_default_rw_concern(self, reply: dict[str, Any]) -> None:
        """The fields `getDefaultRWConcern` answers with (besides `ok`)."""
        self._default_rw_concern = dict(reply)

    # --- sockets -------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(sock, next(self._connection_ids))
            with self._connections_lock:
                self._connections[connection.connection_id] = connection
            threading.Thread(
                target=self._serve,
                args=(connection,),
                name=f"fake-mongod-conn-{connection.connection_id}",
                daemon=True,
            ).start()

    def _serve(self, connection: _Connection) -> None:
        try:
            while not self._stopping.is_set():
                request = mock_server_receive_request(connection.sock, None)
                if not self._handle(connection, request):
                    return
        except (OSError, ValueError, AssertionError, NotImplementedError) as exc:
            log.debug("connection %d ends: %s", connection.connection_id, exc)
        finally:
            with self._connections_lock:
                self._connections.pop(connection.connection_id, None)
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
            connection.sock.close()

    # --- one request ---------------------------------------------------------------------------------

    def _handle(self, connection: _Connection, request: Request) -> bool:
        """Answer one request; False closes the connection."""
        if not request.is_command:
            log.warning("closing connection %d: legacy opcode %r", connection.connection_id, request)
            return False
        command: dict[str, Any] = request.doc
        name = next(iter(command))
        if name in HELLO_COMMANDS and isinstance(command.get("client"), dict):
            connection.app_name = command["client"].get("application", {}).get("name")
        failure = None if name == "configureFailPoint" else self._fail_command.take(name, connection.app_name)
        if failure is not None:
            if failure.block_ms:
                time.sleep(failure.block_ms / 1000)
            if failure.close_connection:
                return False
            if failure.error_code is not None:
                labels = _labels(failure.error_labels, failure.error_code, command)
                return self._reply(
                    request, CommandError(failure.error_code, FAIL_POINT_ERRMSG, labels).reply()
                )
        reply = self._execute(connection, name, request.namespace, command)
        if failure is not None and failure.write_concern_error is not None and reply.get("ok"):
            _add_write_concern_error(reply, failure, command)
        if self._after_apply.take(name, connection.app_name):
            return False
        return self._reply(request, reply)

    def _reply(self, request: Request, reply: dict[str, Any]) -> bool:
        if request.flags and request.flags & OP_MSG_FLAGS["moreToCome"]:
            return True  # an unacknowledged write (w=0): the client reads no reply
        request.replies(reply)
        return True

    def _execute(
        self, connection: _Connection, name: str, db: str, command: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            if name in HELLO_COMMANDS:
                if "topologyVersion" in command and "maxAwaitTimeMS" in command:
                    self._topology.await_change(command["topologyVersion"], int(command["maxAwaitTimeMS"]))
                return self._topology.hello(command, connection.connection_id)
            if name in self._denied:
                raise CommandError(13, f"not authorized on {db} to execute command {{ {name}: ... }}")
            self._check_allowed(name, command)
            with self._execution_lock:
                return self._execute_locked(name, db, command)
        except CommandError as exc:
            return exc.reply()
        except NotImplementedError as exc:
            return not_modelled(f"this use of {name}: {exc}").reply()
        except (ValueError, TypeError, KeyError) as exc:
            return CommandError(2, f"{name}: {exc!r}").reply()

    def _check_allowed(self, name: str, command: dict[str, Any]) -> None:
        if command.get("startTransaction") or "autocommit" in command or name in TRANSACTION_COMMANDS:
            raise not_modelled("multi-document transactions")
        topology = self._topology
        if "txnNumber" in command and topology.role is Role.STANDALONE:
            raise CommandError(20, "Transaction numbers are only allowed on a replica set member or mongos")
        if name in WRITE_COMMANDS and not topology.writable:
            raise CommandError(10107, "not primary")
        if name in READ_COMMANDS and topology.is_replica_set and topology.role is not Role.PRIMARY:
            if not topology.initialized:
                raise CommandError(13436, "node is not in primary or recovering state")
            preference = command.get("$readPreference") or {}
            if preference.get("mode", "primary") == "primary":
                raise CommandError(13435, "not primary and secondaryOk=false")
        elif name in READ_COMMANDS and not topology.writable:
            raise CommandError(13436, "node is not in primary or recovering state")

    def _execute_locked(self, name: str, db: str, command: dict[str, Any]) -> dict[str, Any]:
        handler = self._handlers.get(name)
        if handler is not None:
            command = bind_command(name, command, server_now(time.time()))
            if name in RETRYABLE_WRITE_COMMANDS and "txnNumber" in command:
                return self._retryable_write(name, db, command)
            return handler(db, command)
        return self._server_command(name, db, command)

    def _retryable_write(self, name: str, db: str, command: dict[str, Any]) -> dict[str, Any]:
        if "lsid" not in command:
            raise CommandError(72, "Transaction number requires a session ID to also be specified")
        lsid, txn_number = command["lsid"], int(command["txnNumber"])
        recorded = self._retries.lookup(lsid, txn_number)
        if recorded is not None:
            log.debug("retried %s (txnNumber %d) answered from its recorded outcome", name, txn_number)
            return recorded
        try:
            reply = self._handlers[name](db, command)
        except CommandError as exc:
            exc.labels = _labels(exc.labels or None, exc.code, command)
            raise
        self._retries.record(lsid, txn_number, reply)
        return reply

    def _server_command(self, name: str, db: str, command: dict[str, Any]) -> dict[str, Any]:
        topology = self._topology
        if name == "ping":
            return {"ok": 1.0}
        if name in ("buildInfo", "buildinfo"):
            return topology.build_info()
        if name == "endSessions":
            return {"ok": 1.0}
        if name == "configureFailPoint":
            if db != "admin":
                raise CommandError(13, "configureFailPoint may only be run against the admin database.")
            return self._fail_command.configure(command)
        if name == "getDefaultRWConcern":
            return {**self._default_rw_concern, "ok": 1.0}
        if name == "setDefaultRWConcern":
            for key in ("defaultReadConcern", "defaultWriteConcern"):
                if key in command:
                    self._default_rw_concern[key] = command[key]
                    self._default_rw_concern[f"{key}Source"] = "global"
            return {**self._default_rw_concern, "ok": 1.0}
        if name == "replSetGetStatus":
            return topology.repl_set_get_status()
        if name == "replSetInitiate":
            return topology.repl_set_initiate(command)
        if name == "serverStatus":
            with self._connections_lock:
                connections = len(self._connections)
            return topology.server_status(connections)
        raise CommandError(59, f"no such command: '{name}'")


def _labels(requested: list[str] | None, code: int, command: dict[str, Any]) -> list[str]:
    """The fail point's labels when given; otherwise what the server adds to a retryable write's error."""
    if requested is not None:
        return requested
    if _is_retryable_write(command) and code in RETRYABLE_WRITE_CODES:
        return [RETRYABLE_WRITE_LABEL]
    return []


def _add_write_concern_error(reply: dict[str, Any], failure: Failure, command: dict[str, Any]) -> None:
    error = dict(failure.write_concern_error or {})
    reply["writeConcernError"] = error
    labels = _labels(failure.error_labels, int(error.get("code", 0)), command)
    if labels:
        reply["errorLabels"] = labels


def _is_retryable_write(command: dict[str, Any]) -> bool:
    return next(iter(command)) in RETRYABLE_WRITE_COMMANDS and "txnNumber" in command
