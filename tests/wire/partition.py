"""A TCP proxy in front of one server that a test can partition: while partitioned it reads every message in
both directions and discards it, the connections kept open, as a network that drops packets does; then it
forwards again on the same connections. Dropping the replies alone loses the answers of commands the server
ran.

It works on whole wire-protocol messages (each starts with its length), so a message is either forwarded or
lost, never cut: a request sent during the partition never reaches the server and its reply never comes; a
reply sent during it is lost though the command ran. Connections opened meanwhile are accepted and lose their
handshake the same way.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

_HEADER = struct.Struct("<i")


def _read_exactly(connection: socket.socket, count: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = connection.recv(count - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _read_message(connection: socket.socket) -> bytes | None:
    header = _read_exactly(connection, _HEADER.size)
    if header is None:
        return None
    rest = _read_exactly(connection, _HEADER.unpack(header)[0] - _HEADER.size)
    return None if rest is None else header + rest


@dataclass
class PartitionProxy:
    """Listens on 127.0.0.1 (`port`), forwards to `upstream` (host, port). `dropped` counts discarded messages."""

    upstream: tuple[str, int]
    port: int = 0
    dropped: int = 0
    _dropping_requests: threading.Event = field(default_factory=threading.Event)
    _dropping_replies: threading.Event = field(default_factory=threading.Event)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _sockets: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, options: str = "") -> str:
        """A URL through the proxy: a direct connection, so the client never learns the server's own address
        from its `hello` and goes round the proxy."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true{options}"

    def partition(self) -> None:
        self._dropping_requests.set()
        self._dropping_replies.set()

    def drop_replies(self) -> None:
        self._dropping_replies.set()

    def heal(self) -> None:
        self._dropping_requests.clear()
        self._dropping_replies.clear()

    def _pump(self, source: socket.socket, target: socket.socket, dropping: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while (message := _read_message(source)) is not None:
                if dropping.is_set():
                    with self._lock:
                        self.dropped += 1
                    continue
                target.sendall(message)
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets += [client, server]
        for source, target, dropping in (
            (client, server, self._dropping_requests),
            (server, client, self._dropping_replies),
        ):
            threading.Thread(
                target=self._pump, args=(source, target, dropping), name="partition-pump", daemon=True
            ).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._serve(client)

    @contextlib.contextmanager
    def running(self) -> Iterator[PartitionProxy]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        listener.settimeout(
            0.1
        )  # so the thread sees `_stopping` soon: closing the socket does not wake accept()
        self.port = listener.getsockname()[1]
        thread = threading.Thread(target=self._accept, args=(listener,), name="partition-proxy", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stopping.set()
            thread.join(timeout=5)
            listener.close()
            with self._lock:
                for connection in self._sockets:
                    with contextlib.suppress(OSError):
                        connection.shutdown(socket.SHUT_RDWR)  # wakes its pump: close alone does not
                    connection.close()
