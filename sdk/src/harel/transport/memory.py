"""The in-memory transport (`memory://`): MongoTransport's mailbox semantics over a MemoryStore's documents.

Each operation is the Python reading of its builder in `harel.executions.writes`, under the database's
lock; the conformance suite runs the same checks on this and on MongoTransport.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

from harel.executions import fields, replies, writes
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW
from harel.executions.records import Claim, Failure, Parked, SendOutcome
from harel.model import Event
from harel.servertime import ServerClock
from harel.store.memory import MemoryDatabase, inbox_due_unless_busy, settle
from harel.transport.base import DEFAULT_MAX_ATTEMPTS
from harel.transport.mongo import new_owner_token


class MemoryTransport:
    def __init__(
        self,
        database: MemoryDatabase,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
    ) -> None:
        self.database = database
        self.max_attempts = max_attempts
        self.dedupe_window = dedupe_window
        # The deployment's clock is this process's: the estimate is exact.
        self.clock = ServerClock(local=database.clock, monotonic=database.clock)

    def _now(self) -> float:
        return self.database.clock()

    def send(self, target_id: str, event: Event, *, source: str | None = None) -> SendOutcome:
        with self.database.lock:
            now = self._now()
            document = self.database.documents.get(target_id)
            if document is None or "data" not in document:
                return SendOutcome.MISSING
            inbox = document.setdefault("inbox", [])
            if event.id in document.get("processed", []) or any(e["id"] == event.id for e in inbox):
                return SendOutcome.DUPLICATE
            new = writes.entry(event, source, now)
            if document.get("inbox_bytes", 0) + new["size"] > fields.INBOX_LIMIT_BYTES:
                return SendOutcome.FULL
            inbox.append(new)
            document["inbox_bytes"] = sum(int(e["size"]) for e in inbox)
            document["inbox_at"] = inbox_due_unless_busy(document, now)
            self.database.lock.notify_all()
            return SendOutcome.QUEUED

    def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        owner = new_owner_token()
        wanted = set(charts)
        with self.database.lock:
            now = self._now()
            due = [
                d
                for d in self.database.documents.values()
                if d.get("chart") in wanted
                and d.get("inbox_at") is not None
                and d["inbox_at"] <= min(now, bound)
            ]
            if not due:
                return None
            document = min(due, key=lambda d: d["inbox_at"])
            previous = (document.get("lease") or {}).get("owner")
            document["lease"] = {"owner": owner, "until": now + lease, "at": now}
            if previous is not None:
                document["lease"]["previous"] = previous
            document["inbox_at"] = now + lease
            claim = replies.parse_claim(copy.deepcopy(document), owner)
        self.clock.observe(claim.server_time)
        return claim

    def _owned(self, claim: Claim) -> dict | None:
        document = self.database.documents.get(claim.execution_id)
        if document is None or (document.get("lease") or {}).get("owner") != claim.owner:
            return None
        return document

    def extend(self, claim: Claim, lease: float) -> Claim | None:
        with self.database.lock:
            document = self._owned(claim)
            if document is None:
                return None
            until = self._now() + lease
            document["lease"]["until"] = until
            document["inbox_at"] = until
            return dataclasses.replace(claim, lease_until=until)

    def release(self, claim: Claim, delay: float = 0.0) -> bool:
        with self.database.lock:
            document = self._owned(claim)
            if document is None:
                return False
            document["lease"] = None
            document["inbox_at"] = self._now() + delay if document.get("inbox") else None
            self.database.lock.notify_all()
            return True

    def fail(self, claim: Claim, failure: Failure) -> bool:
        with self.database.lock:
            document = self._owned(claim)
            if document is None:
                return False
            settle(document, (), failure, self._now())
            return True

    def parked(self, limit: int = 100) -> list[Parked]:
        with self.database.lock:
            found = [
                copy.deepcopy(d) for d in self.database.documents.values() if d.get("parked") is not None
            ]
        found.sort(key=lambda d: d["parked"]["at"])
        return [replies.parse_parked(d) for d in found[:limit]]

    def retry(self, execution_id: str) -> bool:
        with self.database.lock:
            document = self.database.documents.get(execution_id)
            if document is None or document.get("parked") is None:
                return False
            document.update({"parked": None, "attempts": 0, "last_error": None, "inbox_at": self._now()})
            self.database.lock.notify_all()
            return True

    def drop(self, execution_id: str, event_id: str) -> bool:
        with self.database.lock:
            document = self.database.documents.get(execution_id)
            if document is None or (document.get("parked") or {}).get("event_id") != event_id:
                return False
            document["inbox"] = [e for e in document.get("inbox", []) if e["id"] != event_id]
            document["inbox_bytes"] = sum(int(e["size"]) for e in document["inbox"])
            document["processed"] = [*document.get("processed", []), event_id][-self.dedupe_window :]
            document.update({"parked": None, "attempts": 0, "last_error": None})
            document["inbox_at"] = self._now() if document["inbox"] else None
            self.database.lock.notify_all()
            return True

    def pending_count(self) -> int:
        with self.database.lock:
            return sum(len(d.get("inbox", [])) for d in self.database.documents.values())

    def wait_hint(self, timeout: float) -> bool:
        with self.database.lock:
            return self.database.lock.wait(timeout)

    def wake(self) -> None:
        with self.database.lock:
            self.database.lock.notify_all()

    def ensure_indexes(self) -> None:
        """Nothing to index in memory."""

    def close(self) -> None:
        """Nothing to release in memory."""
