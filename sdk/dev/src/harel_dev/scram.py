"""SCRAM (RFC 5802, RFC 7677) as MongoDB runs it on the server: stored credentials and one conversation.

A user's credentials hold, per mechanism, a random salt, an iteration count and two keys derived from the
password (StoredKey = H(ClientKey), ServerKey), never the password itself. MongoDB's two mechanisms differ
in what they feed PBKDF2: SCRAM-SHA-256 the SASLprep'd password, SCRAM-SHA-1 the hex MD5 of
`user:mongo:password` (the digest MongoDB has always stored for SHA-1).

A conversation is two steps: the client's first message (`n,,n=user,r=nonce`) is answered with the salt,
the iteration count and the combined nonce; the client's final message carries a proof, which is checked
against StoredKey, and is answered with the server's signature (`v=...`), which proves to the client that
the server knows the credentials too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from bson import Binary
from pymongo.saslprep import saslprep

SCRAM_SHA_1 = "SCRAM-SHA-1"
SCRAM_SHA_256 = "SCRAM-SHA-256"
MECHANISMS = (SCRAM_SHA_1, SCRAM_SHA_256)
# mongod's defaults (scramIterationCount, scramSHA256IterationCount) and salt lengths.
ITERATIONS = {SCRAM_SHA_1: 10_000, SCRAM_SHA_256: 15_000}
_SALT_BYTES = {SCRAM_SHA_1: 16, SCRAM_SHA_256: 28}
_HASH = {SCRAM_SHA_1: "sha1", SCRAM_SHA_256: "sha256"}
_SERVER_NONCE_BYTES = 24


class ScramError(Exception):
    """The client's message is malformed (a protocol error), as opposed to a wrong proof."""


class ProofRejected(Exception):
    """The client's proof does not match the stored credentials: a wrong password."""


@dataclass(frozen=True)
class Credential:
    """What the server keeps for one user and one mechanism."""

    iteration_count: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def to_document(self) -> dict[str, Any]:
        """The shape mongod stores under `credentials.<mechanism>` (base64 strings)."""
        return {
            "iterationCount": self.iteration_count,
            "salt": _b64(self.salt),
            "storedKey": _b64(self.stored_key),
            "serverKey": _b64(self.server_key),
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> Credential:
        return cls(
            int(document["iterationCount"]),
            base64.b64decode(document["salt"]),
            base64.b64decode(document["storedKey"]),
            base64.b64decode(document["serverKey"]),
        )


def derive(
    mechanism: str, user: str, password: str, *, salt: bytes | None = None, iterations: int | None = None
) -> Credential:
    """The credential for `user` with `password` under `mechanism`; a fresh random salt unless given."""
    digest = _HASH[mechanism]
    salt = os.urandom(_SALT_BYTES[mechanism]) if salt is None else salt
    iterations = ITERATIONS[mechanism] if iterations is None else iterations
    salted = hashlib.pbkdf2_hmac(digest, _secret(mechanism, user, password), salt, iterations)
    client_key = _hmac(digest, salted, b"Client Key")
    server_key = _hmac(digest, salted, b"Server Key")
    return Credential(iterations, salt, hashlib.new(digest, client_key).digest(), server_key)


def _secret(mechanism: str, user: str, password: str) -> bytes:
    if mechanism == SCRAM_SHA_256:
        prepared = cast(str, saslprep(password))  # typed Any by pymongo; a str for a str
        return prepared.encode("utf-8")
    return hashlib.md5(f"{user}:mongo:{password}".encode()).hexdigest().encode()


def _client_first(payload: bytes) -> tuple[str, str, bytes]:
    """(user, client nonce, client-first-message-bare) of a client-first message."""
    text = _text(payload)
    header, separator, bare = _split_gs2(text)
    if not separator:
        raise ScramError("the client's first message has no GS2 header")
    if header[0] == "p":
        raise ScramError("channel binding is not supported")
    if header[0] not in "ny":
        raise ScramError(f"unknown GS2 channel-binding flag {header[0]!r}")
    attributes = _attributes(bare)
    if "m" in attributes:
        raise ScramError("mandatory SCRAM extensions are not supported")
    if "n" not in attributes or "r" not in attributes:
        raise ScramError("the client's first message lacks n= or r=")
    user = attributes["n"].replace("=2C", ",").replace("=3D", "=")
    return user, attributes["r"], bare.encode("utf-8")


class Conversation:
    """The server's side of one SCRAM conversation for one user; `start` then `finish`."""

    def __init__(self, mechanism: str, credential_for: Callable[[str], Credential | None]) -> None:
        self.mechanism = mechanism
        self.user = ""
        self._credential_for = credential_for
        self._credential: Credential | None = None
        self._nonce = ""
        self._first_bare = b""
        self._server_first = b""

    def start(self, payload: bytes) -> bytes:
        """The server-first message for the client-first `payload`. ProofRejected when the user has no
        credential for this mechanism (MongoDB answers an unknown user as it answers a wrong password)."""
        self.user, client_nonce, self._first_bare = _client_first(payload)
        self._credential = self._credential_for(self.user)
        if self._credential is None:
            raise ProofRejected(self.user)
        self._nonce = client_nonce + _b64(os.urandom(_SERVER_NONCE_BYTES))
        credential = self._credential
        self._server_first = (
            f"r={self._nonce},s={_b64(credential.salt)},i={credential.iteration_count}".encode()
        )
        return self._server_first

    def finish(self, payload: bytes) -> bytes:
        """The server-final message (`v=signature`) when the client's proof holds; ProofRejected if not."""
        if self._credential is None:
            raise ScramError("the conversation has not started")
        text = _text(payload)
        without_proof, separator, proof_part = text.rpartition(",p=")
        if not separator:
            raise ScramError("the client's final message has no proof")
        attributes = _attributes(without_proof)
        if attributes.get("r") != self._nonce:
            raise ScramError("the client's final message carries another nonce")
        if "c" not in attributes:
            raise ScramError("the client's final message lacks c=")
        auth_message = b",".join((self._first_bare, self._server_first, without_proof.encode()))
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as exc:
            raise ScramError("the client's proof is not base64") from exc
        if not verify_proof(self.mechanism, self._credential, auth_message, proof):
            raise ProofRejected(self.user)
        return b"v=" + base64.b64encode(server_signature(self.mechanism, self._credential, auth_message))


def verify_proof(mechanism: str, credential: Credential, auth_message: bytes, proof: bytes) -> bool:
    """True when `proof` (ClientKey XOR ClientSignature) shows the client knows the password: H(ClientKey)
    equals StoredKey."""
    digest = _HASH[mechanism]
    client_signature = _hmac(digest, credential.stored_key, auth_message)
    if len(proof) != len(client_signature):
        return False
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    return hmac.compare_digest(hashlib.new(digest, client_key).digest(), credential.stored_key)


def server_signature(mechanism: str, credential: Credential, auth_message: bytes) -> bytes:
    """HMAC(ServerKey, AuthMessage): what the server sends to prove it knows the credential too."""
    return _hmac(_HASH[mechanism], credential.server_key, auth_message)


def payload_bytes(value: Any) -> bytes:
    """A command's `payload` (BinData, or a string from older clients) as bytes."""
    if isinstance(value, Binary | bytes):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ScramError(f"payload must be BinData, not {type(value).__name__}")


def _split_gs2(text: str) -> tuple[str, str, str]:
    """('n,,' style header, separator found, rest)."""
    flag, comma1, rest = text.partition(",")
    _authzid, comma2, bare = rest.partition(",")
    if not (comma1 and comma2 and flag):
        return "", "", text
    return flag, ",", bare


def _attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        key, separator, value = part.partition("=")
        if not separator or len(key) != 1:
            raise ScramError(f"malformed SCRAM attribute {part!r}")
        attributes[key] = value
    return attributes


def _text(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScramError("the SCRAM message is not UTF-8") from exc


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
