"""The local server's SCRAM computations: RFC 7677's published exchange, and whole conversations driven by a
client written here from the RFC (PyMongo's own client is the wire tests' job)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

import pytest

from harel_dev import scram

# RFC 7677, section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)
RFC7677_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_rfc7677_exchange_verifies_with_the_derived_credential() -> None:
    credential = scram.derive(scram.SCRAM_SHA_256, "user", "pencil", salt=RFC7677_SALT, iterations=4096)

    assert scram.verify_proof(scram.SCRAM_SHA_256, credential, RFC7677_AUTH_MESSAGE, RFC7677_PROOF)
    assert (
        scram.server_signature(scram.SCRAM_SHA_256, credential, RFC7677_AUTH_MESSAGE)
        == RFC7677_SERVER_SIGNATURE
    )


def test_rfc7677_proof_is_refused_for_another_password() -> None:
    credential = scram.derive(scram.SCRAM_SHA_256, "user", "pencil2", salt=RFC7677_SALT, iterations=4096)

    assert not scram.verify_proof(scram.SCRAM_SHA_256, credential, RFC7677_AUTH_MESSAGE, RFC7677_PROOF)


def _client_secret(mechanism: str, user: str, password: str) -> bytes:
    if mechanism == scram.SCRAM_SHA_256:
        return password.encode()
    return hashlib.md5(f"{user}:mongo:{password}".encode()).hexdigest().encode()  # MongoDB's SHA-1 input


def _converse(mechanism: str, stored_user: str, stored_password: str, user: str, password: str) -> bytes:
    """Run one conversation as an RFC 5802 client would; the server-final message."""
    digest = {scram.SCRAM_SHA_1: "sha1", scram.SCRAM_SHA_256: "sha256"}[mechanism]
    stored = scram.derive(mechanism, stored_user, stored_password)
    conversation = scram.Conversation(mechanism, lambda name: stored if name == stored_user else None)
    nonce = secrets.token_urlsafe(18)
    first_bare = f"n={user},r={nonce}".encode()
    server_first = conversation.start(b"n,," + first_bare)
    fields = dict(part.split(b"=", 1) for part in server_first.split(b","))
    assert fields[b"r"].startswith(nonce.encode())
    salted = hashlib.pbkdf2_hmac(
        digest, _client_secret(mechanism, user, password), base64.b64decode(fields[b"s"]), int(fields[b"i"])
    )
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    without_proof = b"c=biws,r=" + fields[b"r"]
    auth_message = b",".join((first_bare, server_first, without_proof))
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = conversation.finish(without_proof + b",p=" + base64.b64encode(proof))
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest())
    assert server_final == b"v=" + expected
    return server_final


@pytest.mark.parametrize("mechanism", scram.MECHANISMS)
def test_a_conversation_with_the_right_password_ends_with_the_server_signature(mechanism: str) -> None:
    password = secrets.token_urlsafe(16)

    assert _converse(mechanism, "harel", password, "harel", password).startswith(b"v=")


@pytest.mark.parametrize("mechanism", scram.MECHANISMS)
def test_a_wrong_password_is_rejected(mechanism: str) -> None:
    with pytest.raises(scram.ProofRejected):
        _converse(mechanism, "harel", secrets.token_urlsafe(16), "harel", secrets.token_urlsafe(16))


def test_an_unknown_user_is_rejected_at_the_first_message() -> None:
    password = secrets.token_urlsafe(16)
    with pytest.raises(scram.ProofRejected):
        _converse(scram.SCRAM_SHA_256, "harel", password, "someone", password)


def test_sha1_credentials_follow_mongodb_password_digest() -> None:
    """SCRAM-SHA-1 in MongoDB salts the hex MD5 of `user:mongo:password`: the same password under another
    user name gives other keys even with the same salt."""
    salt = bytes(16)
    password = secrets.token_urlsafe(12)
    one = scram.derive(scram.SCRAM_SHA_1, "a", password, salt=salt)
    other = scram.derive(scram.SCRAM_SHA_1, "b", password, salt=salt)

    assert one.stored_key != other.stored_key
    assert one.iteration_count == 10_000


def test_the_stored_document_holds_keys_not_the_password() -> None:
    password = secrets.token_urlsafe(16)
    credential = scram.derive(scram.SCRAM_SHA_256, "harel", password)
    document = credential.to_document()

    assert set(document) == {"iterationCount", "salt", "storedKey", "serverKey"}
    assert password not in repr(document)
    assert scram.Credential.from_document(document) == credential
    assert document["iterationCount"] == 15_000


@pytest.mark.parametrize(
    "first",
    [b"n=harel,r=abc", b"p=tls-unique,,n=harel,r=abc", b"n,,r=abc", b"n,,n=harel,r=abc,m=ext", b"\xff"],
)
def test_malformed_first_messages_are_protocol_errors(first: bytes) -> None:
    conversation = scram.Conversation(scram.SCRAM_SHA_256, lambda name: None)
    with pytest.raises(scram.ScramError):
        conversation.start(first)


def test_a_final_message_with_another_nonce_is_a_protocol_error() -> None:
    stored = scram.derive(scram.SCRAM_SHA_256, "harel", secrets.token_urlsafe(12))
    conversation = scram.Conversation(scram.SCRAM_SHA_256, lambda name: stored)
    conversation.start(b"n,,n=harel,r=client-nonce")

    with pytest.raises(scram.ScramError, match="another nonce"):
        conversation.finish(b"c=biws,r=client-nonce-forged,p=" + base64.b64encode(bytes(32)))
