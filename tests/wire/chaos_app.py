"""The App that `harel worker` processes run in the clock-skew and chaos tests
(`--app tests.wire.chaos_app:app`); the tests start executions of its charts through the same module.

- the smoke chart with short timers (`SMOKE_CHART_ID`): a three-region fork/join, a durable timer in each
  region and one after the join;
- `chaos.approval`: three reviewer regions each think on a durable timer, then vote — an action that takes
  `VOTE_SECONDS`, as a call to another system would, so a worker killed or stalled at random is often
  in the middle of a step — sending the vote to the parent, then finish; the join records how many votes the parent had, and a last timer runs before completion.
  A region's `done` overtaking its own vote would leave a vote missing at the join, so order matters;
- `chaos.timer`: one state with a 2 s durable timer and nothing else, so the only write its worker makes
  around the due time is the sweep's (the `kill -9` mid-sweep scenarios hold exactly that write);
- `skew.stall`: `work` runs an action that stalls the first time this process runs it for an execution
  (longer than a short lease), so another worker takes the lease over while the first still holds it,
  and the lease stays visible in the store while it does.
"""

from __future__ import annotations

import threading
import time

from harel.app import ActionContext, ActionResult, App
from harel.smoke import register_smoke
from tests.wire import ordering_app

TIMER_SECONDS = 0.3
REVIEWERS = ("legal", "finance", "security")
APPROVAL_CHART_ID = "chaos.approval"
TIMER_CHART_ID = "chaos.timer"
LONE_TIMER_SECONDS = 2.0
STALL_CHART_ID = "skew.stall"
STALL_SECONDS = 2.5
VOTE_SECONDS = 0.2

REVIEWER = {
    "initial": "thinking",
    "states": {
        "thinking": {"after": {f"{int(TIMER_SECONDS * 1000)}ms": "voting"}},
        "voting": {"entry": ["chaos.cast_vote"], "on": {"cast": "voted"}},
        "voted": {"final": True},
    },
}
APPROVAL_CHART = {
    "id": APPROVAL_CHART_ID,
    "version": 1,
    "initial": "review",
    "states": {
        "review": {
            "parallel": dict.fromkeys(REVIEWERS, REVIEWER),
            "on": {"vote": {"actions": ["chaos.count_vote"]}},
            "on_done": {"target": "deciding", "actions": ["chaos.record_join"]},
        },
        "deciding": {"after": {f"{int(TIMER_SECONDS * 1000)}ms": "decided"}},
        "decided": {"final": True},
    },
}
TIMER_CHART = {
    "id": TIMER_CHART_ID,
    "version": 1,
    "initial": "waiting",
    "states": {
        "waiting": {"after": {f"{int(LONE_TIMER_SECONDS * 1000)}ms": "done"}},
        "done": {"final": True},
    },
}
STALL_CHART = {
    "id": STALL_CHART_ID,
    "version": 1,
    "initial": "idle",
    "states": {
        "idle": {"on": {"work": {"target": "done", "actions": ["skew.stall_once"]}}},
        "done": {"final": True},
    },
}

_stalled: set[str] = set()
_stalled_lock = threading.Lock()


def cast_vote(ctx: ActionContext) -> ActionResult:
    time.sleep(VOTE_SECONDS)
    return ordering_app.cast_vote(ctx)


def stall_once(ctx: ActionContext) -> ActionResult:
    with _stalled_lock:
        first = ctx.execution_id not in _stalled
        _stalled.add(ctx.execution_id)
    if first:
        time.sleep(STALL_SECONDS)
    return ActionResult(context={"stalled": first})


app = App("chaos")
SMOKE_CHART_ID = register_smoke(app, region_timer=TIMER_SECONDS, final_timer=TIMER_SECONDS)
app.chart(APPROVAL_CHART)
app.chart(TIMER_CHART)
app.chart(STALL_CHART)
app.action("chaos.cast_vote")(cast_vote)
app.action("chaos.count_vote")(ordering_app.count_vote)
app.action("chaos.record_join")(ordering_app.record_join)
app.action("skew.stall_once")(stall_once)
