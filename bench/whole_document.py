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

from harel.commands import only
from harel.errors import StoreConflict
from harel.executions.commits import CommitParts, commit_parts
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX
from harel.executions.records import StepRecord
from harel.model import Execution, TimerOp


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
        record = StepRecord(processed_event_id, (), (), trace)
        parts = commit_parts(exe, [record], expected=exe.version, timers_changed=bool(timers))
        replacement = self.next_document(document, exe, parts)
        cas = {"_id": document["_id"], "version": exe.version}
        if self._executions.replace_one(cas, replacement).matched_count != 1:
            found = self._executions.find_one({"_id": document["_id"]}, only("version"))
            raise StoreConflict(str(document["_id"]), exe.version, found["version"] if found else None)
        return replacement

    def next_document(
        self, document: Mapping[str, Any], exe: Execution, parts: CommitParts
    ) -> dict[str, Any]:
        """What MongoStore's update operators do to the stored document, done here in Python."""
        after = copy.deepcopy(dict(document))
        after.update(parts.promoted, version=parts.version, data=parts.data)
        if parts.timers is not None:
            after["timers"] = dict(parts.timers)
            after["next_fire_at"] = parts.next_fire_at
        after["processed"] = [*after["processed"], *parts.processed][-self.dedupe_window :]
        after["trace"] = [*after["trace"], *parts.traces][-self.trace_max :]
        return after
