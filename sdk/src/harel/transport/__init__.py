"""Transports: the Transport protocol (each execution's mailbox), MongoTransport (sync + async) and the
in-memory transport."""

from harel.transport.base import Claim, Parked, Pending, SendOutcome, Transport

__all__ = ["Claim", "Parked", "Pending", "SendOutcome", "Transport"]
