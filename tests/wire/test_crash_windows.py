"""Every crash window: a worker dies at each point between two round trips of the claims that fire the
timers, of the committing worker's relay and of the background relay, and a fresh worker finishes the work.

One scene for all of them: a sink execution, and a root that on `go` sends three `ping`s to the sink and
forks two regions (two children), each waiting on a 100 ms durable timer before it finishes; the join
then completes the root. So one commit holds two spawns and three outbox events, and two claims each fire
a due timer.

The doomed worker is driven by hand and dies (tests/wire/crashes.py) at the chosen point:
- the committing worker's path: claim -> commit -> create_children -> send x3 -> ack_relay;
- the background relay's path (after a committer died right after its commit): take_relay_work ->
  create_children -> send x3 -> ack_relay;
- the timers' path: claim (the timer appended to the mailbox in the claim's command) -> commit_claim, for
  each child.

Then a fresh worker runs until the scene settles, and the store-wide audit (tests/audit.py) must pass:
every execution completed (the sink aside), each child created and started once, each event applied
once (the sink received exactly three pings), no timer early, nothing left in a mailbox, outbox, spawns,
relay hold, lease or dead letter.

"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from harel.app import ActionContext, ActionResult, App, Send
from harel.client import send_event, start_execution
from harel.model import ExecutionStatus
from harel.worker import Worker
from tests.audit import Audit, audit
from tests.wire.crashes import Crash, Dying, Killed
from tests.wire.in_process import Seam, Seams, loaded, running
from tests.wire.processes import wait_until

pytestmark = pytest.mark.wire

PINGS = 3
REGION = {"initial": "waiting", "states": {"waiting": {"after": {"100ms": "done"}}, "done": {"final": True}}}
FANOUT_CHART: dict[str, Any] = {
    "id": "crash.fanout",
    "version": 1,
    "initial": "idle",
    "states": {
        "idle": {"on": {"go": {"target": "fanned", "actions": ["crash.ping_sink"]}}},
        "fanned": {"parallel": {"left": REGION, "right": REGION}, "on_done": "finished"},
        "finished": {"final": True},
    },
}
SINK_CHART: dict[str, Any] = {
    "id": "crash.sink",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"ping": {"actions": ["crash.count"]}}}},
}
# The doomed worker's lease, and so its hold on the relay work it committed: short, so the fresh worker
# takes over soon.
DOOMED_LEASE = 0.4
SETTLE_TIMEOUT = 15.0
# The planted bug's loss: the timers are due 100 ms after the regions start; this long without them is loss.
LOSS_SHOWN_AFTER = 4.0
FAST_POLLS = {"idle_poll_max": 0.05, "relay_poll_max": 0.05}


def ping_sink(ctx: ActionContext) -> ActionResult:
    return ActionResult(send=[Send("ping", to=ctx.context["sink"], data={"n": n}) for n in range(PINGS)])


def count(ctx: ActionContext) -> ActionResult:
    return ActionResult(context={"received": ctx.context.get("received", 0) + 1})


def fanout_app() -> App:
    app = App("crash-windows")
    app.chart(FANOUT_CHART)
    app.chart(SINK_CHART)
    app.action("crash.ping_sink")(ping_sink)
    app.action("crash.count")(count)
    return app


@dataclass
class Scene:
    seams: Seams
    app: App
    driver_seam: Seam
    driver: Worker
    root_id: str = "fanout"
    sink_id: str = "fanout-sink"

    def documents(self) -> list[dict[str, Any]]:
        return list(self.driver_seam.store._executions.find({}))


def _scene(seams: Seams) -> Scene:
    app = fanout_app()
    seam = seams.open("driver")
    driver = seam.worker(app)
    scene = Scene(seams, app, seam, driver)
    start_execution(seam.store, seam.transport, app, "crash.sink", execution_id=scene.sink_id)
    start_execution(
        seam.store,
        seam.transport,
        app,
        "crash.fanout",
        execution_id=scene.root_id,
        context={"sink": scene.sink_id},
    )
    assert driver.process_one() and driver.process_one(), "the start events were not claimable"
    send_event(seam.store, seam.transport, app, scene.root_id, "go", event_id="go")
    return scene


def _doomed(scene: Scene, name: str, crash: Crash) -> Worker:
    seam = scene.seams.open(name)
    worker = seam.worker(scene.app, lease_seconds=DOOMED_LEASE)
    if crash.part == "store":
        worker.store = Dying(seam.store, crash)  # type: ignore[assignment]
    elif crash.part == "transport":
        worker.transport = Dying(seam.transport, crash)  # type: ignore[assignment]
    else:
        seam.store._executions = Dying(seam.store._executions, crash)
    return worker


def _until_killed(work: Any, what: str, timeout: float = 10.0) -> None:
    """Call `work` until the worker dies in it (it may find nothing to do at first: a hold not yet over)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            work()
        except Killed:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the worker never reached its crash point in {what}")
        time.sleep(0.02)


def _drive_until_idle(worker: Worker) -> None:
    """Claim until nothing is due, then acknowledge what was delivered, as the worker's relay loop would."""
    while worker.process_one():
        pass
    worker.acknowledge_delivered()


def _timers_due(scene: Scene) -> bool:
    armed = [d.get("next_fire_at") for d in scene.documents() if d.get("parent_id") == scene.root_id]
    return len(armed) == 2 and all(at is not None and at < time.time() for at in armed)


def _settled(scene: Scene, timeout: float) -> Audit:
    """A fresh worker runs until the audit passes (or the timeout), then stops; the final audit."""
    survivor = scene.seams.open("survivor").worker(scene.app, **FAST_POLLS)
    last = Audit()

    def done() -> bool:
        nonlocal last
        last = audit(scene.documents(), running={scene.sink_id})
        return last.passed and last.executions == 4

    with running([survivor]):
        try:
            wait_until(done, timeout, "the scene to settle", poll=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last.failures}") from None
    return audit(scene.documents(), running={scene.sink_id})


def _assert_nothing_lost_or_doubled(scene: Scene, timeout: float = SETTLE_TIMEOUT) -> None:
    result = _settled(scene, timeout)
    assert result.passed, result.failures
    assert result.executions == 4, "root, sink and two children"
    seam = scene.driver_seam
    assert loaded(seam, scene.root_id).status is ExecutionStatus.COMPLETED
    sink = loaded(seam, scene.sink_id)
    assert sink.context["received"] == PINGS, "each ping applied once"
    pings = [s for s in seam.store.read_trace(scene.sink_id) if s["handled"] and s["event"] == "ping"]
    assert len({s["event_id"] for s in pings}) == PINGS
    assert result.timers == 2, "each region's timer fired once"


COMMITTER_WINDOWS = [
    Crash("transport", "claim"),  # leased, nothing stepped
    Crash("store", "commit_claim", applied=False),  # stepped, the commit never sent
    Crash("store", "commit_claim"),  # committed: two spawns and three pings wait for their relay
    Crash("store", "create_children", applied=False),  # about to create the children: nothing relayed yet
    Crash("store", "create_children"),  # children created, no ping sent
    Crash("transport", "send", 1),
    Crash("transport", "send", 2),
    Crash("transport", "send", 3),  # every ping sent, nothing acknowledged
]


@pytest.mark.parametrize("crash", COMMITTER_WINDOWS, ids=[c.name for c in COMMITTER_WINDOWS])
def test_the_committing_worker_dying_between_round_trips(seams: Seams, crash: Crash) -> None:
    """Nothing lost or doubled when the worker that claimed `go` dies at `crash`."""
    scene = _scene(seams)
    with pytest.raises(Killed):
        _doomed(scene, "committer", crash).process_one()
    _assert_nothing_lost_or_doubled(scene)


ACKNOWLEDGEMENT_WINDOWS = [
    Crash("store", "ack_delivered", applied=False),  # delivered in full, the acknowledgement never sent
    Crash("store", "ack_delivered"),  # acknowledged, the reply never seen
]


@pytest.mark.parametrize("crash", ACKNOWLEDGEMENT_WINDOWS, ids=[c.name for c in ACKNOWLEDGEMENT_WINDOWS])
def test_the_committing_worker_dying_with_its_acknowledgement_deferred(seams: Seams, crash: Crash) -> None:
    """The worker that claimed `go` delivered its two spawns and three pings in full and dies before or at
    the one acknowledgement of what it delivered: the work it still held is delivered again once its hold
    ran out, and the receivers drop the repeats."""
    scene = _scene(seams)
    committer = _doomed(scene, "committer", crash)
    assert committer.process_one()
    with pytest.raises(Killed):
        committer.acknowledge_delivered()
    _assert_nothing_lost_or_doubled(scene)


RELAY_WINDOWS = [
    Crash("store", "take_relay_work"),  # the work held for the relay's lease, nothing done
    Crash("store", "create_children", applied=False),
    Crash("store", "create_children"),
    Crash("transport", "send", 1),
    Crash("transport", "send", 2),
    Crash("transport", "send", 3),
    Crash("store", "ack_relay"),
]


@pytest.mark.parametrize("crash", RELAY_WINDOWS, ids=[c.name for c in RELAY_WINDOWS])
def test_the_background_relay_dying_between_round_trips(seams: Seams, crash: Crash) -> None:
    """The committer died right after its commit; the background relay that takes its work over dies at
    `crash`; nothing is lost or doubled."""
    scene = _scene(seams)
    with pytest.raises(Killed):
        _doomed(scene, "committer", Crash("store", "commit_claim")).process_one()
    relay = _doomed(scene, "relay", crash)
    _until_killed(relay.relay_once, "the background relay")
    _assert_nothing_lost_or_doubled(scene)


TIMER_WINDOWS = [
    Crash("transport", "claim"),  # the first timer fired into its mailbox by the claim, never stepped
    Crash("transport", "claim", 2),  # both fired by their claims, neither stepped
    Crash("store", "commit_claim", applied=False),  # the first timer's step taken, its commit never sent
    Crash("store", "commit_claim"),  # the first timer's step committed, the reply never seen
]


@pytest.mark.parametrize("crash", TIMER_WINDOWS, ids=[c.name for c in TIMER_WINDOWS])
def test_the_claims_that_fire_the_timers_dying_between_round_trips(seams: Seams, crash: Crash) -> None:
    """Both regions' timers are due; the worker whose claims fire them dies at `crash`; every timer still
    fires once, when its lease has run out, by the fresh worker's claim."""
    scene = _scene(seams)
    _drive_until_idle(scene.driver)  # go, its relay, the children's starts: both timers armed
    wait_until(lambda: _timers_due(scene), 5.0, "both region timers to be due")
    claimer = _doomed(scene, "claimer", crash)
    _until_killed(claimer.process_one, "the claims that fire the timers")
    _assert_nothing_lost_or_doubled(scene)
