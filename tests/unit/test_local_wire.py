"""The local server's wire codec: OP_MSG sections and checksum, the OP_QUERY handshake, OP_REPLY, refusals."""

from __future__ import annotations

import socket
import struct
from typing import Any

import bson
import pytest
from bson import Binary
from bson.binary import UUID_SUBTYPE

from harel_dev.wire import (
    CHECKSUM_PRESENT,
    EXHAUST_ALLOWED,
    MORE_TO_COME,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    ConnectionClosed,
    ProtocolError,
    Request,
    crc32c,
    decode_request,
    encode_reply,
    read_request,
)
from tests.fake_mongod.raw_client import HEADER, op_msg


def op_query(namespace: str, command: dict[str, Any], request_id: int = 3) -> tuple[bytes, bytes]:
    payload = (
        struct.pack("<i", 0) + namespace.encode() + b"\x00" + struct.pack("<ii", 0, -1) + bson.encode(command)
    )
    return HEADER.pack(16 + len(payload), request_id, 0, OP_QUERY), payload


def test_crc32c_matches_the_published_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C (Castagnoli) check value
    assert crc32c(b"") == 0


def test_an_op_msg_body_section_is_the_command() -> None:
    request = decode_request(*op_msg({"find": "items", "filter": {"a": 1}, "$db": "harel"}))
    assert request == Request(7, OP_MSG, 0, "harel", {"find": "items", "filter": {"a": 1}, "$db": "harel"})
    assert request.name == "find"
    assert request.expects_reply


def test_document_sequences_become_command_fields_in_order() -> None:
    documents = [{"_id": 1}, {"_id": 2, "u": Binary(b"\x01" * 16, UUID_SUBTYPE)}]
    request = decode_request(
        *op_msg({"insert": "items", "$db": "harel"}, sequences={"documents": documents, "extra": [{"x": 1}]})
    )
    assert request.command["documents"] == documents
    assert request.command["extra"] == [{"x": 1}]
    # Binary values (UUIDs included) are kept as sent, so they are stored and returned byte for byte.
    assert isinstance(request.command["documents"][1]["u"], Binary)


def test_a_checksum_is_verified() -> None:
    good = decode_request(*op_msg({"ping": 1, "$db": "admin"}, flags=CHECKSUM_PRESENT))
    assert good.command == {"ping": 1, "$db": "admin"}
    with pytest.raises(ProtocolError, match="checksum mismatch"):
        decode_request(*op_msg({"ping": 1, "$db": "admin"}, flags=CHECKSUM_PRESENT, checksum=12345))


def test_more_to_come_means_no_reply_and_exhaust_allowed_is_accepted() -> None:
    unacknowledged = decode_request(*op_msg({"insert": "c", "$db": "d"}, flags=MORE_TO_COME))
    awaitable = decode_request(*op_msg({"hello": 1, "$db": "admin"}, flags=EXHAUST_ALLOWED))
    assert not unacknowledged.expects_reply
    assert awaitable.expects_reply


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        (op_msg({"ping": 1, "$db": "admin"}, flags=1 << 2), "required flag bits"),
        (op_msg({"ping": 1}), "'\\$db'"),
        (
            op_msg({"insert": "c", "documents": [], "$db": "d"}, sequences={"documents": [{}]}),
            "both in the body",
        ),
        ((HEADER.pack(20, 1, 0, 2001), b"\x00" * 4), "opcode 2001"),
        (op_query("harel.items", {"a": 1}), "only commands"),
    ],
)
def test_malformed_or_unserved_messages_are_refused(message: tuple[bytes, bytes], complaint: str) -> None:
    with pytest.raises(ProtocolError, match=complaint):
        decode_request(*message)


def test_a_section_overrunning_the_message_is_refused() -> None:
    header, body = op_msg({"ping": 1, "$db": "admin"})
    with pytest.raises(ProtocolError, match="overruns"):
        decode_request(header, body[:-3])


def test_the_op_query_handshake_and_its_op_reply() -> None:
    request = decode_request(*op_query("admin.$cmd", {"isMaster": 1, "client": {"driver": {"name": "x"}}}))
    assert (request.op_code, request.db, request.name) == (OP_QUERY, "admin", "isMaster")

    reply = encode_reply(request, {"ismaster": True, "ok": 1.0})
    length, _, response_to, op_code = HEADER.unpack_from(reply)
    flags, cursor_id, starting_from, returned = struct.unpack_from("<iqii", reply, 16)
    assert (length, response_to, op_code) == (len(reply), 3, OP_REPLY)
    assert (flags, cursor_id, starting_from, returned) == (0, 0, 0, 1)
    assert bson.decode(reply[36:]) == {"ismaster": True, "ok": 1.0}


def test_an_op_msg_reply_has_one_body_section() -> None:
    request = decode_request(*op_msg({"ping": 1, "$db": "admin"}, request_id=41))
    reply = encode_reply(request, {"ok": 1.0})
    length, _, response_to, op_code = HEADER.unpack_from(reply)
    assert (length, response_to, op_code) == (len(reply), 41, OP_MSG)
    assert reply[16:21] == b"\x00\x00\x00\x00\x00"  # no flags, a kind-0 section
    assert bson.decode(reply[21:]) == {"ok": 1.0}


def test_reading_from_a_socket() -> None:
    left, right = socket.socketpair()
    with left, right:
        header, body = op_msg({"ping": 1, "$db": "admin"})
        message = header + body
        for start in range(0, len(message), 5):  # arrives in pieces, as over TCP
            left.sendall(message[start : start + 5])
        assert read_request(right).command == {"ping": 1, "$db": "admin"}
        left.sendall(message[:10])
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(ProtocolError, match="closed 10 bytes into"):
            read_request(right)
    a, b = socket.socketpair()
    with a, b:
        a.close()
        with pytest.raises(ConnectionClosed):
            read_request(b)


def test_an_impossible_length_is_refused_before_reading_the_body() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(HEADER.pack(49_000_000, 1, 0, OP_MSG))
        with pytest.raises(ProtocolError, match="outside"):
            read_request(right)
