"""What an action sends out: `Send` (an event, now or after a delay) and `Cancel` (a delayed send called off).

An action returns them in `ActionResult(send=[...])`, in the order they take effect; a chart writes the same
two as its own actions (`send:` and `cancel:` in an `entry`, `exit` or `actions` list), which `load_chart`
turns into these values, so both take one path through the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# `to="sibling:<region>"`: the child execution of another region of the same parallel state
SIBLING_PREFIX = "sibling:"


@dataclass(frozen=True)
class Send:
    """An event an action sends. `to`: "parent", "self", "sibling:<region>", or any execution id.

    `queue` is for events to self: "internal" (the default; processed within the same step, before any
    other event: SCXML's `<raise>`) or "external" (through the execution's own mailbox, behind the events
    already queued there: SCXML's `<send>` to its own session). Events to other executions always go
    through their mailbox; "internal" for one of them is refused with InvalidSend.

    `delay` (a duration, `"3d"`, `"90s"`, or seconds) holds the event back: it is a durable timer of the
    sender, and is delivered (an external event) once it is due. `id` names it for `Cancel(id)`; a send with
    the id of one still pending replaces it. Without `id`, the event's own id names it."""

    event: str
    to: str = "parent"
    data: Mapping[str, Any] = field(default_factory=dict)
    queue: Literal["internal", "external"] | None = None
    delay: str | float | None = None
    id: str | None = None


@dataclass(frozen=True)
class Cancel:
    """Calls off the delayed send named `id` (its `Send(id=...)`, or its event's id): the held event and its
    timer are dropped, so it is never delivered. An id with nothing pending is ignored."""

    id: str
