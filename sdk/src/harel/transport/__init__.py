"""Transports: the Transport protocol (each execution's mailbox) and MongoTransport (sync + async)."""

from harel.transport.base import Claim, Parked, Pending, SendOutcome, Transport

__all__ = ["Claim", "Parked", "Pending", "SendOutcome", "Transport"]
