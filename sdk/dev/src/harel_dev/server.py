"""A MongoDB-compatible server for development: `python -m harel_dev.server`.

    python -m harel_dev.server [--port 27017] [--host 127.0.0.1] [--data FILE] [--auth]

It prints its URL (`mongodb://127.0.0.1:27017/?replicaSet=rs0`) as the first line on stdout and serves
until SIGTERM or Ctrl-C. Real drivers (PyMongo's MongoClient and AsyncMongoClient, Motor) and every
`harel` command connect to it as to a one-member replica set, so a worker in one terminal and
`harel start` / `harel send` / `harel status` in another share one store, with no Docker and no MongoDB.
From Python: `LocalServer(port=0).start()`, `.url`, `.stop()` (or `with LocalServer() as server:`).
`LocalServer(auth=True)` / `--auth` turns on SCRAM authentication and role checks (`harel_dev.access`).

**For development only, never for production.** What it is and is not:

- One process, one member, data in memory; commands run one at a time on mongomock (`harel_dev.engine`),
  with `$$NOW` bound from the server's clock once per command (`harel_dev.now`) and mongomock's
  expression results corrected where they differ from MongoDB's (`harel_dev.expressions`).
- It answers as a replica-set primary (`harel_dev.topology`): sessions are accepted, retryable writes are
  recorded and a retry is answered from the record, never applied twice (`harel_dev.retryable`).
- Change streams on a collection (`harel_dev.change_streams`, reading the writes `harel_dev.changes`
  records): a stream's `getMore` waits for an event without holding the execution lock.
- No replication, no failover, no oplog, no transactions: the write concern is acknowledged at once (`w`,
  `j` and `wtimeout` are accepted and have no effect), read concern has no effect. No TLS. No authentication unless `auth=True`: without it anyone who can reach the port can read
  and change everything, which is why it listens on loopback unless told otherwise. With it, SCRAM users
  (`harel_dev.users`, kept in `admin.system.users`) and a coarse check of built-in roles per command
  (`harel_dev.roles`).
- Durability: none without `--data`; with `--data FILE` a snapshot of everything is written shortly after
  changes and at a clean stop, and a crash loses the last fraction of a second
  (`harel_dev.persistence`).
- Unsupported commands and options are refused with NotImplemented (238), never answered wrongly where the
  difference is known; sdk/dev/README.md ("The local server") lists the limits.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from bson.errors import BSONError
from pymongo.errors import OperationFailure

from harel.errors import LocalDataError, LocalServerError
from harel_dev.access import Access, Session, is_loopback
from harel_dev.engine import GENERIC_FIELDS, WRITES, Engine
from harel_dev.errors import RETRYABLE_WRITE_COMMANDS, CommandError, not_modelled
from harel_dev.now import Clock
from harel_dev.persistence import DataFile, Snapshot
from harel_dev.retryable import RetryRecords
from harel_dev.topology import Topology
from harel_dev.users import USERS_COLLECTION, USERS_DB, UserStore
from harel_dev.wire import ConnectionClosed, ProtocolError, Request, encode_reply, read_request

log = logging.getLogger("harel_dev.server")  # the same name when run as __main__

Reply = dict[str, Any]

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 27017
HELLO_COMMANDS = frozenset({"hello", "isMaster", "ismaster"})
TRANSACTION_COMMANDS = frozenset({"commitTransaction", "abortTransaction"})
SESSION_COMMANDS = frozenset({"saslStart", "saslContinue", "logout", "connectionStatus", "authenticate"})
DEVELOPMENT_WARNING = (
    "This is harel_dev, a development server: one member, no replication; never use it in production"
)
NO_ACCESS_CONTROL_WARNING = (
    "Access control is not enabled for the database. Read and write access to data and configuration is "
    "unrestricted"
)
FEATURE_COMPATIBILITY_VERSION = "8.0"
DEFAULT_RW_CONCERN: dict[str, Any] = {
    "defaultReadConcern": {"level": "local"},
    "defaultWriteConcern": {"w": "majority", "wtimeout": 0},
    "defaultReadConcernSource": "implicit",
    "defaultWriteConcernSource": "implicit",
}
_STOP_JOIN_SECONDS = 5.0
# How soon the main thread notices SIGTERM or SIGINT (its handler only records the signal).
SIGNAL_POLL_SECONDS = 0.05


@dataclass
class Connection:
    sock: socket.socket
    connection_id: int
    session: Session
    app_name: str | None = None


class LocalServer:
    """A listening server; `start()` it (or use it as a context manager) and `stop()` it.

    `port=0` lets the OS choose (read it back from `.port` or `.url`). `data` names the file the data is
    kept in across restarts (None: memory only). `clock` (epoch seconds) is what `$$NOW`, `hello.localTime`
    and the server's other times read; tests give one that differs from the workers' clocks. `auth` turns
    on authentication and authorisation (see `harel_dev.access`); off, every client may do everything.
    `engine` is one shared with other servers in this process (a test double's routers in front of the
    same shards): its lock is then this server's execution lock; by default the server has its own.
    """

    def __init__(
        self,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        set_name: str = "rs0",
        data: Path | str | None = None,
        clock: Clock = time.time,
        auth: bool = False,
        engine: Engine | None = None,
    ) -> None:
        self.host = host
        self.set_name = set_name
        self.auth = auth
        self.data = Path(data).expanduser() if data is not None else None
        self._requested_port = port
        self._port = 0
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._topology = self._new_topology(set_name, clock)
        self._engine = Engine(clock, threading.Lock()) if engine is None else engine
        self._execution_lock = self._engine.lock
        self._users = UserStore(lambda: self._engine.collection(USERS_DB, USERS_COLLECTION))
        self._access = Access(self._users, enabled=auth)
        self._retries = RetryRecords()
        self._data_file: DataFile | None = None
        self._default_rw_concern = dict(DEFAULT_RW_CONCERN)
        self._feature_compatibility_version = FEATURE_COMPATIBILITY_VERSION
        self._connections: dict[int, Connection] = {}
        self._threads: set[threading.Thread] = set()
        self._connections_lock = threading.Lock()
        self._connection_ids = itertools.count(1)
        self._stopping = threading.Event()

    def _new_topology(self, set_name: str, clock: Clock) -> Topology:
        """The role this server answers as (a subclass may answer as another)."""
        return Topology(set_name, me="", clock=clock)

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        """Load the data file (if any), bind and serve in background threads. LocalDataError when the data
        file cannot be used, LocalServerError when the address cannot be bound."""
        if self.data is not None:
            self._data_file = DataFile(self.data, self._snapshot)
            self._restore(self._data_file.open())
        try:
            self._listener = _listen(self.host, self._requested_port)
        except LocalServerError:
            if self._data_file is not None:
                self._data_file.close()
            raise
        self._port = self._listener.getsockname()[1]
        self._topology.me = f"{_advertised(self.host)}:{self._port}"
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"harel-dev-{self._port}")
        self._accept_thread.daemon = True
        self._accept_thread.start()
        log.info("listening on %s", self.url)
        return self

    def stop(self) -> None:
        """Stop accepting, close every connection, and write the last snapshot (with a data file)."""
        self._stopping.set()
        self._topology.stop()
        with self._execution_lock:
            self._engine.changes.interrupt()  # change streams waiting for an event return now
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            self._listener.close()
        with self._connections_lock:
            connections = list(self._connections.values())
            threads = list(self._threads)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=_STOP_JOIN_SECONDS)
        deadline = time.monotonic() + _STOP_JOIN_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._data_file is not None:
            self._data_file.close()
            self._data_file = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def host_port(self) -> str:
        return self._topology.me

    @property
    def url(self) -> str:
        """The connection string drivers and `harel` commands use to reach this server."""
        return f"mongodb://{self.host_port}/?replicaSet={self.set_name}"

    # --- data file -----------------------------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        with self._execution_lock:
            return Snapshot(self._engine.dump(), self._retries.dump())

    def _restore(self, snapshot: Snapshot) -> None:
        with self._execution_lock:
            self._engine.load(snapshot.collections)
            self._retries.load(snapshot.retryable)
        log.info(
            "data file %s: %d documents in %d collections loaded",
            self.data,
            snapshot.document_count,
            len(snapshot.collections),
        )

    # --- sockets -------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = Connection(sock, next(self._connection_ids), Session(loopback=is_loopback(peer[0])))
            thread = threading.Thread(
                target=self._serve,
                args=(connection,),
                name=f"harel-dev-conn-{connection.connection_id}",
                daemon=True,
            )
            with self._connections_lock:
                self._connections[connection.connection_id] = connection
                self._threads.add(thread)
            thread.start()

    def _serve(self, connection: Connection) -> None:
        try:
            while not self._stopping.is_set():
                request = read_request(connection.sock)
                if not self._handle(connection, request):
                    return
        except ConnectionClosed:
            pass
        except ProtocolError as exc:
            log.warning("closing connection %d: %s", connection.connection_id, exc)
        except OSError as exc:
            log.debug("connection %d ends: %s", connection.connection_id, exc)
        finally:
            with self._connections_lock:
                self._connections.pop(connection.connection_id, None)
                self._threads.discard(threading.current_thread())
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
            connection.sock.close()

    def _handle(self, connection: Connection, request: Request) -> bool:
        """Answer one request; False closes the connection."""
        name, command = request.name, request.command
        if name in HELLO_COMMANDS and isinstance(command.get("client"), dict):
            connection.app_name = command["client"].get("application", {}).get("name")
        reply = self._respond(connection, name, request.db, command)
        if reply is None:
            return False
        if request.expects_reply:
            connection.sock.sendall(encode_reply(request, reply))
        return True

    # --- one command ---------------------------------------------------------------------------------

    def _respond(self, connection: Connection, name: str, db: str, command: dict[str, Any]) -> Reply | None:
        """The reply to one command, or None to close the connection without one. A test double overrides
        this to inject faults around `_execute`."""
        return self._execute(connection, name, db, command)

    def _execute(self, connection: Connection, name: str, db: str, command: dict[str, Any]) -> Reply:
        try:
            if name in HELLO_COMMANDS:
                if "topologyVersion" in command and "maxAwaitTimeMS" in command:
                    self._topology.await_change(command["topologyVersion"], int(command["maxAwaitTimeMS"]))
                reply = self._topology.hello(command, connection.connection_id)
                with self._execution_lock:
                    reply.update(self._access.hello_fields(connection.session, command))
                return reply
            with self._execution_lock:
                self._access.authorize(connection.session, name, db, command)
            if name in SESSION_COMMANDS:
                return self._session_command(connection.session, name, db, command)
            if command.get("startTransaction") or "autocommit" in command or name in TRANSACTION_COMMANDS:
                raise not_modelled("multi-document transactions")
            self._topology.admit(name, command)
            if self._users.serves(name):
                with self._execution_lock:
                    reply = self._users.execute(name, db, command)
                if self._data_file is not None:
                    self._data_file.changed()
                return reply
            if not self._engine.serves(name):
                return self._server_command(name, db, command)
            with self._execution_lock:
                reply = self._run(name, db, command)
                if name == "listDatabases":
                    _keep_visible(reply, self._access.visible_databases(connection.session))
            if name in WRITES and self._data_file is not None:
                self._data_file.changed()
            return reply
        except CommandError as exc:
            return exc.reply()
        except NotImplementedError as exc:
            return not_modelled(f"this use of {name}: {exc}").reply()
        except OperationFailure as exc:  # mongomock refusing a query, update or pipeline
            return CommandError(exc.code or 2, f"{name}: {exc}").reply()
        except (ValueError, TypeError, KeyError, AssertionError, BSONError) as exc:
            return CommandError(2, f"{name}: {exc!r}").reply()
        except Exception as exc:
            # A server answers every command; the connection and the server go on.
            log.exception("%s failed inside the local server", name)
            return CommandError(1, f"{name}: internal error in the local server: {exc!r}").reply()

    def _session_command(self, session: Session, name: str, db: str, command: dict[str, Any]) -> Reply:
        """Commands about the connection's own authentication."""
        with self._execution_lock:
            if name == "saslStart":
                return self._access.sasl_start(session, db, command)
            if name == "saslContinue":
                return self._access.sasl_continue(session, command)
            if name == "logout":
                return self._access.logout(session)
            if name == "connectionStatus":
                return self._access.connection_status(session)
        mechanism = command.get("mechanism")
        raise CommandError(334, f"Received authentication for mechanism {mechanism} which is not enabled")

    def _run(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        if name in RETRYABLE_WRITE_COMMANDS and "txnNumber" in command:
            return self._retries.run(command, lambda: self._engine.execute(name, db, command))
        return self._engine.execute(name, db, command)

    def _server_command(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        topology = self._topology
        if name in ("ping", "endSessions"):
            return {"ok": 1.0}
        if name in ("buildInfo", "buildinfo"):
            return topology.build_info()
        if name == "getDefaultRWConcern":
            return {**self._default_rw_concern, "ok": 1.0}
        if name == "setDefaultRWConcern":
            for key in ("defaultReadConcern", "defaultWriteConcern"):
                if key in command:
                    self._default_rw_concern[key] = command[key]
                    self._default_rw_concern[f"{key}Source"] = "global"
            return {**self._default_rw_concern, "ok": 1.0}
        if name == "getParameter":
            return self._get_parameter(db, command)
        if name == "replSetGetStatus":
            return topology.repl_set_get_status()
        if name == "replSetGetConfig":
            return topology.repl_set_get_config()
        if name == "replSetReconfig":
            return topology.repl_set_reconfig(command)
        if name == "replSetStepDown":
            return topology.repl_set_step_down(command)
        if name == "getCmdLineOpts":
            return {**self.command_line_options(), "ok": 1.0}
        if name == "getLog":
            return self._get_log(command["getLog"])
        if name == "replSetInitiate":
            return topology.repl_set_initiate(command)
        if name == "serverStatus":
            with self._connections_lock:
                connections = len(self._connections)
            return topology.server_status(connections)
        raise CommandError(59, f"no such command: '{name}'")

    def command_line_options(self) -> dict[str, Any]:
        """`getCmdLineOpts`: the command line that starts a server like this one, and its options in
        mongod's configuration-file shape (`parsed`)."""
        argv = ["python", "-m", "harel_dev.server", "--host", self.host, "--port", str(self.port)]
        argv += ["--set-name", self.set_name]
        parsed: dict[str, Any] = {
            "net": {"bindIp": self.host, "port": self.port},
            "replication": {"replSet": self.set_name},
        }
        if self.data is not None:
            argv += ["--data", str(self.data)]
            parsed["storage"] = {"dbPath": str(self.data.parent)}
        if self.auth:
            argv.append("--auth")
            parsed["security"] = {"authorization": "enabled"}
        return {"argv": argv, "parsed": parsed}

    def _get_log(self, which: Any) -> Reply:
        if which == "*":
            return {"names": ["startupWarnings"], "ok": 1.0}
        if which != "startupWarnings":
            raise not_modelled(f"getLog {which!r} (only startupWarnings is kept)")
        warnings = [DEVELOPMENT_WARNING] + ([] if self.auth else [NO_ACCESS_CONTROL_WARNING])
        lines = [_log_line(self._topology.now(), message) for message in warnings]
        return {"totalLinesWritten": len(lines), "log": lines, "ok": 1.0}

    def _get_parameter(self, db: str, command: dict[str, Any]) -> Reply:
        if db != "admin":
            raise CommandError(13, "getParameter may only be run against the admin database.")
        parameters = {"featureCompatibilityVersion": {"version": self._feature_compatibility_version}}
        if command["getParameter"] == "*":
            return {**parameters, "ok": 1.0}
        wanted = [key for key in command if key != "getParameter" and key not in GENERIC_FIELDS]
        found = {key: parameters[key] for key in wanted if key in parameters}
        if not found:
            raise CommandError(72, "no option found to get")
        return {**found, "ok": 1.0}


def _log_line(when: Any, message: str) -> str:
    """One line of mongod's structured log, as getLog returns it."""
    entry = {
        "t": {"$date": when.isoformat(timespec="milliseconds") + "+00:00"},
        "s": "W",
        "c": "CONTROL",
        "ctx": "initandlisten",
        "msg": message,
        "tags": ["startupWarnings"],
    }
    return json.dumps(entry, separators=(",", ":"))


def _keep_visible(reply: Reply, visible: set[str] | None) -> None:
    """listDatabases for a user without the privilege lists the databases that user may read, as mongod."""
    if visible is not None and "databases" in reply:
        reply["databases"] = [d for d in reply["databases"] if d["name"] in visible]


def _listen(host: str, port: int) -> socket.socket:
    address = f"{host}:{port}"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise LocalServerError(address, os.strerror(exc.errno) if exc.errno else str(exc)) from exc


def _advertised(host: str) -> str:
    """The host name members list: a wildcard address is not reachable as such, the machine's name is."""
    if host in ("0.0.0.0", "::", ""):
        return socket.getfqdn()
    return f"[{host}]" if ":" in host else host


# --- command line ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harel_dev.server",
        description="A MongoDB-compatible server for development (one-member replica set on mongomock). "
        "Prints its URL on the first line of stdout. Never use it in production: no replication, no TLS, "
        "authentication only with --auth, data in memory (or in one snapshot file with --data).",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port; 0 lets the OS choose (default: {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--host",
        default=LOOPBACK,
        help=f"address to listen on (default: {LOOPBACK}; anything else exposes the unauthenticated data)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        metavar="FILE",
        help="keep the data in FILE across restarts (loaded at start, saved after changes and at stop); "
        "without it nothing survives a stop",
    )
    parser.add_argument(
        "--auth",
        action="store_true",
        help="require SCRAM authentication and check each command against the user's built-in roles; while "
        "no user exists, a client on this machine may create the first one (the localhost exception)",
    )
    parser.add_argument("--set-name", default="rs0", help="replica set name (default: rs0)")
    parser.add_argument("--log-level", default="INFO", help="logging level on stderr (default: INFO)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"harel_dev.server: --port {args.port} is not a TCP port (0-65535)", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        server = LocalServer(
            host=args.host, port=args.port, set_name=args.set_name, data=args.data, auth=args.auth
        ).start()
    except (LocalServerError, LocalDataError) as exc:
        print(f"harel_dev.server: {exc}", file=sys.stderr)
        return 2
    return serve_until_signalled(server, lambda: _announce(server))


def _announce(server: LocalServer) -> None:
    print(server.url, flush=True)
    if server.auth:
        log.warning("a development server: one member, no replication, no TLS; never use it in production")
        log.info(
            "authentication required; while no user exists, a client on this machine may create the first "
            "(db.getSiblingDB('admin').createUser({user, pwd, roles: ['root']}))"
        )
    else:
        log.warning(
            "a development server: one member, no authentication, no replication; never use it in production"
        )
    if server.data is None:
        log.warning("no --data FILE: the data lives in memory and nothing survives a stop")
    else:
        log.info(
            "data kept in %s: saved shortly after changes and at stop; a crash loses the last changes",
            server.data,
        )
    if not is_loopback(server.host):
        log.warning(
            "listening on %s without TLS%s",
            server.host,
            ": data crosses the network in clear"
            if server.auth
            else " or authentication: anyone who reaches this port can read and change the data",
        )


class Stoppable(Protocol):
    def stop(self) -> None: ...


def serve_until_signalled(server: Stoppable, announce: Callable[[], None]) -> int:
    """Run a started server (or several, behind one `stop()`) until SIGTERM or SIGINT, after `announce()`;
    stop it cleanly. The exit code."""
    # The handler takes no lock: it runs on the main thread between two bytecodes, possibly while that thread
    # holds one (an Event's, inside its own wait), which the handler would then wait for forever.
    received: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signalled, _frame: received.append(signalled))
    try:
        announce()
        while not received:
            time.sleep(SIGNAL_POLL_SECONDS)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
