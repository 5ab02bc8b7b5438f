"""The baseline of benchmark 2: a commit that sends the whole execution document with `replace_one`.

It writes exactly the document MongoStore's partial update leaves behind — the same fields, the same
dedupe window and trace ring caps — only all of it, on every commit, under the same `{_id, version}` CAS.
That is what a store pays when it replaces documents instead of updating them. It covers what benchmark 2
commits (snapshot, timers, dedupe mark, trace step); steps that emit or spawn are not part of it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from harel.errors import StoreConflict
from harel.model import Execution, TimerOp
from harel.store import _documents as doc
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX


class WholeDocumentWrites:
    """Commits to the `executions` collection it is given, one `replace_one` each."""

    def __init__(
        self,
        executions: Any,
        *,
        trace_max: int = DEFAULT_TRACE_MAX,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
    ) -> None:
        self._executions = executions
        self.trace_max = trace_max
        self.dedupe_window = dedupe_window

    def commit(
        self,
        document: Mapping[str, Any],
        exe: Execution,
        timers: Sequence[TimerOp],
        processed_event_id: str,
        trace: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Replace `document` (as stored at `exe.version`) by its next version; returns what was written."""
        parts = doc.commit_parts(exe, 0, (), (), timers, processed_event_id, trace)
        replacement = self.next_document(document, exe, parts)
        cas = {"_id": document["_id"], "version": exe.version}
        if self._executions.replace_one(cas, replacement).matched_count != 1:
            found = self._executions.find_one({"_id": document["_id"]}, doc.only("version"))
            raise StoreConflict(str(document["_id"]), exe.version, found["version"] if found else None)
        return replacement

    def next_document(
        self, document: Mapping[str, Any], exe: Execution, parts: doc.CommitParts
    ) -> dict[str, Any]:
        """What MongoStore's update operators do to the stored document, done here in Python."""
        after = copy.deepcopy(dict(document))
        after.update(definition_id=exe.definition_id, version=exe.version + 1, data=parts.data)
        for path, fire_at in parts.timers.items():
            if fire_at is None:
                after["timers"].pop(doc.enc(path), None)
            else:
                after["timers"][doc.enc(path)] = fire_at
        if exe.next_fire_at is None:
            after.pop("next_fire_at", None)
        else:
            after["next_fire_at"] = exe.next_fire_at
        after["processed"] = [*after["processed"], parts.processed_event_id][-self.dedupe_window :]
        after["trace"] = [*after["trace"], parts.trace][-self.trace_max :]
        return after
