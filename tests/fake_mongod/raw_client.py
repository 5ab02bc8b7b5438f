"""A minimal wire-protocol client for tests that must send exactly what a driver would only send in a fault:
the same retryable write twice, or a command whose reply shape is checked byte for byte."""

from __future__ import annotations

import itertools
import socket
import struct
from types import TracebackType
from typing import Any, Self

import bson

from harel_dev.wire import CHECKSUM_PRESENT, OP_MSG, crc32c

HEADER = struct.Struct("<iiii")
_request_ids = itertools.count(1)


def op_msg(
    body: dict[str, Any],
    *,
    flags: int = 0,
    sequences: dict[str, list[dict[str, Any]]] | None = None,
    request_id: int = 7,
    checksum: int | None = None,
) -> tuple[bytes, bytes]:
    """An OP_MSG as a driver sends it, as (header, body); with CHECKSUM_PRESENT, its CRC-32C (or `checksum`)."""
    payload = struct.pack("<I", flags) + b"\x00" + bson.encode(body)
    for identifier, documents in (sequences or {}).items():
        section = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in documents)
        payload += b"\x01" + struct.pack("<i", 4 + len(section)) + section
    with_checksum = bool(flags & CHECKSUM_PRESENT)
    header = HEADER.pack(16 + len(payload) + 4 * with_checksum, request_id, 0, OP_MSG)
    if with_checksum:
        payload += struct.pack("<I", crc32c(header + payload) if checksum is None else checksum)
    return header, payload


class RawConnection:
    """One TCP connection; `command(db, document)` sends an OP_MSG and returns the reply document."""

    def __init__(self, host_port: str) -> None:
        host, port = host_port.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=30)

    def command(self, db: str, document: dict[str, Any]) -> dict[str, Any]:
        header, body = op_msg({**document, "$db": db}, request_id=next(_request_ids))
        self._sock.sendall(header + body)
        length, _, _, op_code = HEADER.unpack(self._receive(HEADER.size))
        reply = self._receive(length - HEADER.size)
        assert op_code == OP_MSG, f"expected an OP_MSG reply, got opcode {op_code}"
        assert reply[:5] == b"\x00" * 5, "expected no flags and one kind-0 section"
        return bson.decode(reply[5:])

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def _receive(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data
