"""Per-operation deadlines: a worker's loops bound each command they send, so a deployment that stops answering
(a partition that drops packets, a stalled primary) costs a few seconds, not the 30 s reply bound.

A loop runs its passes inside `per_operation(seconds)`. Each call of a store, transport or heartbeat method
made there (`harel.driver_errors.translating` marks those classes) is one operation under a deadline of its
own, PyMongo's client-side operation timeout (`pymongo.timeout`): server selection, connection checkout, the
round trip, retries and the wait for a majority all count against it, and the command sent carries what is
left as `maxTimeMS` (PyMongo then sends no `wtimeout`: the deadline bounds the wait for the majority too).
When it passes the call raises DeploymentUnavailable, CommitOutcomeUnknown for a commit, as for any network
error; PyMongo closes the connection the command was on, so no later command reads its late reply.

Only the calls are bounded, never what runs between them: a step's actions take as long as they take
(`max_step_seconds` bounds those). Outside `per_operation` nothing changes, and the client's own `timeoutMS` (or
`socketTimeoutMS`, 30 s by `connect`'s default) stays the bound. Context variables belong to the thread or
task that sets them, so one loop's setting never reaches another's commands.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

import pymongo

_per_operation: ContextVar[float | None] = ContextVar("harel_per_operation_seconds", default=None)


@contextlib.contextmanager
def per_operation(seconds: float) -> Iterator[None]:
    """Inside, each store, transport and heartbeat call runs under a deadline of `seconds` of its own."""
    token = _per_operation.set(seconds)
    try:
        yield
    finally:
        _per_operation.reset(token)


@contextlib.contextmanager
def one_operation() -> Iterator[None]:
    """One boundary call: under its own deadline inside `per_operation`, as the client bounds it elsewhere."""
    seconds = _per_operation.get()
    if seconds is None:
        yield
        return
    with pymongo.timeout(seconds):
        yield
