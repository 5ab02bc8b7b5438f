"""Retryable writes: the outcome of each write recorded by `(lsid, txnNumber)`, as a server keeps it.

A retry of the same `txnNumber` on the same session is answered with the recorded reply and is not executed
again; an older `txnNumber` is refused with TransactionTooOld. Only the latest write of a session is kept.
Callers hold the server's execution lock, so lookup, execution and record are one atomic step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .errors import CommandError

RETRYABLE_WRITE_COMMANDS = frozenset({"insert", "update", "delete", "findAndModify", "findandmodify"})


@dataclass
class _Outcome:
    txn_number: int
    reply: dict[str, Any]


@dataclass
class RetryRecords:
    _sessions: dict[bytes, _Outcome] = field(default_factory=dict)

    def lookup(self, lsid: dict[str, Any], txn_number: int) -> dict[str, Any] | None:
        """The recorded reply of this write, or None when it must be executed."""
        outcome = self._sessions.get(_session_key(lsid))
        if outcome is None or txn_number > outcome.txn_number:
            return None
        if txn_number < outcome.txn_number:
            raise CommandError(
                225,
                f"Retryable write with txnNumber {txn_number} is prohibited on session because a newer "
                f"retryable write with txnNumber {outcome.txn_number} has already started on this session.",
            )
        return copy.deepcopy(outcome.reply)

    def record(self, lsid: dict[str, Any], txn_number: int, reply: dict[str, Any]) -> None:
        self._sessions[_session_key(lsid)] = _Outcome(txn_number, copy.deepcopy(reply))

    def clear(self) -> None:
        self._sessions.clear()


def _session_key(lsid: dict[str, Any]) -> bytes:
    session_id = lsid.get("id")
    if session_id is None:
        raise CommandError(9, "lsid must have an 'id' field")
    return bytes(session_id)
