"""Apps the ordering tests run in `harel worker` processes (`--app tests.wire.ordering_app:<name>`).

- `ordered`: S0 --e1 (its action takes 20 ms)--> S1 --e2--> S2. Sent e1 then e2, it must end in S2: with a
  queue shared by consumers, e2 could be stepped first, be ignored in S0, and the run ended in S1.
- `approval`: two reviewer regions each send their vote to the parent, then finish in `yes` or `no` (the
  root's start context says which, `yes` where it is silent), with that as their result; the join records
  how many votes the parent had when it fired and decides from both regions' results. A region's `done`
  must never overtake its own vote, and a region's result must reach the join.
- `orders` and `billing`: two applications on one database, each with a chart of its own.
"""

from __future__ import annotations

import time

from harel.app import ActionContext, ActionResult, App, Send

SLOW_SECONDS = 0.02

ORDERED_CHART = {
    "id": "ordering.sequence",
    "version": 1,
    "initial": "S0",
    "states": {
        "S0": {"on": {"e1": {"target": "S1", "actions": ["slow"]}}},
        "S1": {"on": {"e2": "S2"}},
        "S2": {"final": True},
    },
}

REVIEWER = {
    "initial": "voting",
    "states": {
        "voting": {"entry": ["cast_vote"], "on": {"cast": [{"target": "yes", "guard": "approves"}, "no"]}},
        "yes": {"final": True, "result": "approved"},
        "no": {"final": True, "result": "rejected"},
    },
}
APPROVAL_CHART = {
    "id": "ordering.approval",
    "version": 1,
    "initial": "review",
    "states": {
        "review": {
            "parallel": {"legal": REVIEWER, "finance": REVIEWER},
            "on": {"vote": {"actions": ["count_vote"]}},
            "on_done": [
                {"target": "approved", "guard": "both_approved", "actions": ["record_join"]},
                {"target": "rejected", "actions": ["record_join"]},
            ],
        },
        "approved": {"final": True},
        "rejected": {"final": True},
    },
}


def slow(ctx: ActionContext) -> ActionResult:
    time.sleep(SLOW_SECONDS)
    return ActionResult(context={"slow_ran": ctx.context.get("slow_ran", 0) + 1})


def cast_vote(ctx: ActionContext) -> ActionResult:
    region = ctx.state.split(".")[1]
    approves = bool(ctx.context.get(region, True))  # a reviewer the start context does not name approves
    return ActionResult(
        send=[
            Send("vote", to="parent", data={"from": region}),
            Send("cast", to="self", data={"yes": approves}),
        ]
    )


def approves(ctx: ActionContext) -> bool:
    return bool(ctx.event.data["yes"])


def both_approved(ctx: ActionContext) -> bool:
    regions = ctx.context.get("regions", {})
    return all(
        regions.get(name, {}).get("result") == "approved"
        for name in APPROVAL_CHART["states"]["review"]["parallel"]
    )


def count_vote(ctx: ActionContext) -> ActionResult:
    return ActionResult(context={"votes": [*ctx.context.get("votes", []), ctx.event.data["from"]]})


def record_join(ctx: ActionContext) -> ActionResult:
    return ActionResult(context={"votes_at_join": len(ctx.context.get("votes", []))})


ordered = App("ordered")
ordered.chart(ORDERED_CHART)
ordered.action("slow")(slow)

approval = App("approval")
approval.chart(APPROVAL_CHART)
for name, action in (("cast_vote", cast_vote), ("count_vote", count_vote), ("record_join", record_join)):
    approval.action(name)(action)
approval.guard("approves")(approves)
approval.guard("both_approved")(both_approved)


def _tally_app(name: str) -> App:
    app = App(name)
    app.chart(
        {
            "id": f"ordering.{name}",
            "version": 1,
            "initial": "open",
            "states": {"open": {"on": {"close": "closed"}}, "closed": {"final": True}},
        }
    )
    return app


orders = _tally_app("orders")
billing = _tally_app("billing")
