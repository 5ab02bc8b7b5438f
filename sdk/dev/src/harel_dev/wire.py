"""MongoDB's wire protocol, as much of it as a server needs for today's drivers.

Requests: OP_MSG (a kind-0 body section and any kind-1 document sequences, with or without the CRC-32C
checksum) and the legacy OP_QUERY, which drivers still use for the first `hello` of a connection. Replies:
OP_MSG to an OP_MSG, OP_REPLY to an OP_QUERY. Nothing else is spoken: OP_COMPRESSED is never negotiated
(the server advertises no compressors) and the opcodes removed in MongoDB 6.0 are refused.

Everything is decoded with PyMongo's `bson`, keeping binary values (UUIDs included) as they were sent, so a
document read back is byte-for-byte what was written.
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass
from typing import Any

import bson
from bson.codec_options import CodecOptions
from bson.errors import BSONError

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013

CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1
EXHAUST_ALLOWED = 1 << 16
# Bits 0-15 are "required": a receiver must refuse a message with one it does not know.
_REQUIRED_BITS = 0xFFFF
_KNOWN_FLAGS = CHECKSUM_PRESENT | MORE_TO_COME | EXHAUST_ALLOWED

MAX_MESSAGE_SIZE = 48_000_000
_HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_OP_REPLY_PREFIX = struct.Struct("<iqii")  # responseFlags, cursorID, startingFrom, numberReturned
CODEC_OPTIONS: CodecOptions[dict[str, Any]] = CodecOptions()
_reply_ids = itertools.count(1)


class ProtocolError(Exception):
    """The peer sent bytes that are not a request this server understands; the connection is closed."""


class ConnectionClosed(Exception):
    """The peer closed the connection between two messages."""


@dataclass(frozen=True)
class Request:
    """One decoded request: the command document (document sequences folded in) and how to answer it."""

    request_id: int
    op_code: int
    flags: int
    db: str
    command: dict[str, Any]

    @property
    def name(self) -> str:
        return next(iter(self.command), "")

    @property
    def expects_reply(self) -> bool:
        """False for an unacknowledged write (`moreToCome`): the client reads no reply."""
        return not (self.op_code == OP_MSG and self.flags & MORE_TO_COME)


def read_request(sock: socket.socket) -> Request:
    """Read and decode the next request; ConnectionClosed when the peer hung up cleanly before it."""
    header = _receive(sock, _HEADER.size, at_boundary=True)
    (length,) = _INT32.unpack_from(header)
    if not _HEADER.size < length <= MAX_MESSAGE_SIZE:
        raise ProtocolError(f"message length {length} outside 17..{MAX_MESSAGE_SIZE}")
    body = _receive(sock, length - _HEADER.size, at_boundary=False)
    return decode_request(header, body)


def decode_request(header: bytes, body: bytes) -> Request:
    """Decode one message from its 16-byte header and its body."""
    _, request_id, _, op_code = _HEADER.unpack(header)
    if op_code == OP_MSG:
        return _decode_op_msg(request_id, header, body)
    if op_code == OP_QUERY:
        return _decode_op_query(request_id, body)
    raise ProtocolError(f"opcode {op_code} is not served (only OP_MSG, and OP_QUERY for the handshake)")


def encode_reply(request: Request, reply: dict[str, Any]) -> bytes:
    """The reply message to `request`: OP_MSG for OP_MSG, OP_REPLY for the legacy OP_QUERY."""
    document = bson.encode(reply, codec_options=CODEC_OPTIONS)
    if request.op_code == OP_QUERY:
        payload = _OP_REPLY_PREFIX.pack(0, 0, 0, 1) + document
        op_code = OP_REPLY
    else:
        payload = _UINT32.pack(0) + b"\x00" + document
        op_code = OP_MSG
    header = _HEADER.pack(_HEADER.size + len(payload), next(_reply_ids), request.request_id, op_code)
    return header + payload


def _decode_op_msg(request_id: int, header: bytes, body: bytes) -> Request:
    if len(body) < 5:
        raise ProtocolError("OP_MSG shorter than its flags and one section")
    (flags,) = _UINT32.unpack_from(body)
    unknown = flags & _REQUIRED_BITS & ~_KNOWN_FLAGS
    if unknown:
        raise ProtocolError(f"OP_MSG sets required flag bits this server does not know: {unknown:#x}")
    end = len(body)
    if flags & CHECKSUM_PRESENT:
        end -= 4
        if end < 5:
            raise ProtocolError("OP_MSG with checksumPresent has no room for its checksum")
        (sent,) = _UINT32.unpack_from(body, end)
        computed = crc32c(header + body[:end])
        if sent != computed:
            raise ProtocolError(f"OP_MSG checksum mismatch: sent {sent:#010x}, computed {computed:#010x}")
    command: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    position = 4
    while position < end:
        kind = body[position]
        position += 1
        (size,) = _INT32.unpack_from(body, position)
        if size < 5 or position + size > end:
            raise ProtocolError(f"OP_MSG section of {size} bytes overruns the message")
        section = body[position : position + size]
        position += size
        if kind == 0:
            if command is not None:
                raise ProtocolError("OP_MSG with more than one body section")
            command = _decode_document(section)
        elif kind == 1:
            identifier, documents = _decode_sequence(section)
            if identifier in sequences:
                raise ProtocolError(f"OP_MSG repeats the document sequence {identifier!r}")
            sequences[identifier] = documents
        else:
            raise ProtocolError(f"OP_MSG section kind {kind} is not defined")
    if command is None:
        raise ProtocolError("OP_MSG without a body section")
    for identifier, documents in sequences.items():
        if identifier in command:
            raise ProtocolError(f"OP_MSG field {identifier!r} is both in the body and a document sequence")
        command[identifier] = documents
    db = command.get("$db")
    if not isinstance(db, str) or not db:
        raise ProtocolError("OP_MSG body without a '$db' string")
    return Request(request_id, OP_MSG, flags, db, command)


def _decode_sequence(section: bytes) -> tuple[str, list[dict[str, Any]]]:
    terminator = section.find(b"\x00", 4)
    if terminator < 0:
        raise ProtocolError("OP_MSG document sequence without an identifier")
    identifier = section[4:terminator].decode("utf-8")
    try:
        documents = bson.decode_all(section[terminator + 1 :], CODEC_OPTIONS)
    except BSONError as exc:
        raise ProtocolError(f"OP_MSG document sequence {identifier!r} is not BSON: {exc}") from exc
    return identifier, documents


def _decode_op_query(request_id: int, body: bytes) -> Request:
    terminator = body.find(b"\x00", 4)
    if terminator < 0:
        raise ProtocolError("OP_QUERY without a collection name")
    namespace = body[4:terminator].decode("utf-8")
    db, _, collection = namespace.partition(".")
    if collection != "$cmd":
        raise ProtocolError(f"OP_QUERY on {namespace!r}: only commands (<db>.$cmd) are served")
    (flags,) = _INT32.unpack_from(body)
    # numberToSkip and numberToReturn (8 bytes) do not apply to a command.
    command = _decode_document(body[terminator + 9 :])
    return Request(request_id, OP_QUERY, flags, db, command)


def _decode_document(data: bytes) -> dict[str, Any]:
    try:
        documents = bson.decode_all(data, CODEC_OPTIONS)
    except BSONError as exc:
        raise ProtocolError(f"not a BSON document: {exc}") from exc
    if len(documents) != 1:
        raise ProtocolError(f"expected one BSON document, found {len(documents)}")
    return documents[0]


def _receive(sock: socket.socket, size: int, *, at_boundary: bool) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:])
        if count == 0:
            if at_boundary and received == 0:
                raise ConnectionClosed
            raise ProtocolError(f"connection closed {received} bytes into a {size}-byte read")
        received += count
    return bytes(buffer)


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum OP_MSG uses. Drivers rarely send one; a plain loop is enough."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
