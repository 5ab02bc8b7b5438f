"""The app the shutdown test runs in a `harel worker` process (`--app tests.wire.shutdown_app:fanout`).

`shutdown.fanout`: `go` sends PINGS numbered pings to the execution named in its data, in one step, so the
committing worker relays them one send each. `shutdown.sink` records the numbers it received, in order.
"""

from __future__ import annotations

from harel.app import ActionContext, ActionResult, App, Send

PINGS = 200

FANOUT_CHART = {
    "id": "shutdown.fanout",
    "version": 1,
    "initial": "idle",
    "states": {"idle": {"on": {"go": {"target": "sent", "actions": ["fan"]}}}, "sent": {"final": True}},
}
SINK_CHART = {
    "id": "shutdown.sink",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"ping": {"actions": ["count"]}}}},
}


def fan(ctx: ActionContext) -> ActionResult:
    return ActionResult(send=[Send("ping", to=ctx.event.data["to"], data={"n": n}) for n in range(PINGS)])


def count(ctx: ActionContext) -> ActionResult:
    return ActionResult(context={"seen": [*ctx.context.get("seen", []), ctx.event.data["n"]]})


fanout = App("fanout")
fanout.chart(FANOUT_CHART)
fanout.chart(SINK_CHART)
fanout.action("fan")(fan)
fanout.action("count")(count)
