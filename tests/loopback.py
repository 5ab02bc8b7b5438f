"""Servers on 127.0.0.1 that turn a client away the way a deployment does, so `connect` meets the real driver's
errors: the test double of mongod requiring authentication, which refuses credentials it does not know as
mongod does (AuthenticationFailed, code 18), a TLS listener whose certificate no client trusts, a
listener that closes every connection mid-handshake (what a member that is restarting looks like), and one that
takes every connection and never answers (a stalled process, a load balancer with nothing behind it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.fake_mongod import FakeMongod, Role

# What mongod answers to a wrong password, or a user it does not know.
AUTHENTICATION_FAILED = {
    "ok": 0,
    "errmsg": "Authentication failed.",
    "code": 18,
    "codeName": "AuthenticationFailed",
}


@contextlib.contextmanager
def mongod(port: int = 0, *, refuse_credentials: bool = False) -> Iterator[FakeMongod]:
    """A standalone mongod (the test double) on `port` (0: any free one); with `refuse_credentials` it requires
    authentication and has no user, so every login fails as a wrong password does. `.host_port` is its
    address."""
    server = FakeMongod(Role.STANDALONE, port=port, auth=refuse_credentials).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Listener:
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for `localhost` signed by its own key: a client that trusts only real CAs rejects it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harel test server")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "server.pem", directory / "server.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@contextlib.contextmanager
def _listening(handle: Callable[[socket.socket], None]) -> Iterator[Listener]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)  # so the thread sees `stopping` soon: closing the socket does not wake accept()
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(
                target=serve, args=(connection,), name="loopback-connection", daemon=True
            ).start()

    def serve(connection: socket.socket) -> None:
        connection.settimeout(5)
        with contextlib.suppress(OSError):
            handle(connection)
        connection.close()

    thread = threading.Thread(target=accept, name="loopback-listener", daemon=True)
    thread.start()
    try:
        yield Listener(listener.getsockname()[1])
    finally:
        stopping.set()
        thread.join(timeout=5)
        listener.close()


@contextlib.contextmanager
def untrusted_tls(directory: Path) -> Iterator[Listener]:
    """A TLS listener presenting a self-signed certificate for `localhost`. Its certificate file is
    `directory / "server.pem"`, for a client told to trust it."""
    cert_file, key_file = _self_signed(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)

    def handshake(connection: socket.socket) -> None:
        context.wrap_socket(connection, server_side=True).close()

    with _listening(handshake) as listener:
        yield listener


@contextlib.contextmanager
def hanging_up() -> Iterator[Listener]:
    """A listener that closes every connection as soon as it is accepted."""
    with _listening(lambda _connection: None) as listener:
        yield listener


def _swallow(connection: socket.socket) -> None:
    while connection.recv(1 << 16):  # until the client hangs up, or 5 s pass without a byte from it
        pass


@contextlib.contextmanager
def silent() -> Iterator[Listener]:
    """A listener that accepts every connection, reads what is sent and never answers."""
    with _listening(_swallow) as listener:
        yield listener
