"""Retryable writes: the outcome of each write recorded by `(lsid, txnNumber)`, as a server keeps it.

Drivers retry a write once after a network error or a retryable error, with the same session and
`txnNumber`. A server that executed the retry again would apply the write twice (an `$inc` counted twice,
an event pushed twice), so the retry is answered with the recorded reply and not executed; an older
`txnNumber` is refused with TransactionTooOld. Only the latest write of a session is kept. Callers hold
the server's execution lock, so lookup, execution and record are one atomic step.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bson import Binary

from harel_dev.errors import CommandError, error_labels

log = logging.getLogger(__name__)


@dataclass
class _Outcome:
    txn_number: int
    reply: dict[str, Any]


@dataclass
class RetryRecords:
    _sessions: dict[bytes, _Outcome] = field(default_factory=dict)

    def run(self, command: dict[str, Any], execute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The reply to a retryable write (`lsid` + `txnNumber`): recorded if this is a retry, otherwise
        `execute()`'s, recorded. A failed write is not recorded (the driver may retry it)."""
        if "lsid" not in command:
            raise CommandError(72, "Transaction number requires a session ID to also be specified")
        lsid, txn_number = command["lsid"], int(command["txnNumber"])
        recorded = self.lookup(lsid, txn_number)
        if recorded is not None:
            log.debug(
                "retried %s (txnNumber %d) answered from its recorded outcome",
                next(iter(command)),
                txn_number,
            )
            return recorded
        try:
            reply = execute()
        except CommandError as exc:
            exc.labels = error_labels(exc.labels or None, exc.code, command)
            raise
        self.record(lsid, txn_number, reply)
        return reply

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

    def dump(self) -> list[dict[str, Any]]:
        """Every session's record, for a snapshot: a retry that reaches a restarted server is still
        answered from its record."""
        return [
            {"session": Binary(session), "txnNumber": outcome.txn_number, "reply": outcome.reply}
            for session, outcome in self._sessions.items()
        ]

    def load(self, records: list[dict[str, Any]]) -> None:
        self._sessions = {
            bytes(record["session"]): _Outcome(int(record["txnNumber"]), record["reply"])
            for record in records
        }


def _session_key(lsid: dict[str, Any]) -> bytes:
    session_id = lsid.get("id")
    if session_id is None:
        raise CommandError(9, "lsid must have an 'id' field")
    return bytes(session_id)
