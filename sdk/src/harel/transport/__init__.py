"""Transports: the Transport protocol, MongoTransport (sync + async) and the in-memory transport."""

from harel.transport.base import DeadLetter, Message, Transport

__all__ = ["DeadLetter", "Message", "Transport"]
