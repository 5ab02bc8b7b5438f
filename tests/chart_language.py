"""The chart-language examples of docs/charts.md run as a user runs them, on any store and transport.

`SCENARIOS` holds, by name, an example chart's id and a script that starts the chart through the client API, sends it
events and checks what the worker made of them. Each scenario replaces its worker at least once between
two steps (a new Worker over the same store: nothing carried over in memory, as after a worker was killed
and another took over), so what a step must remember is shown to be in the stored execution.

tests/unit/test_chart_language_runs.py runs every scenario on `mongomock://`, tests/wire/test_chart_language.py
on the replica set over the wire.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from harel.app import ActionContext, ActionResult, App, Cancel, Send
from harel.chart import Chart, load_chart
from harel.client import send_event, start_execution
from harel.model import Execution, ExecutionStatus
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig

CHARTS_MD = Path(__file__).parents[1] / "docs" / "charts.md"
ROUNDS = 200
TIMER_WAIT = 15.0  # seconds a scenario waits for a timer of a few hundred milliseconds to fire
REMIND_AFTER = 0.3
ESCALATE_AFTER = 0.6


# The delays of the docs' charts that write them, shortened ("3 days" and "7 days" to 0.3 s and 0.6 s)
SHORTENED = {"follow-up": {"delay: 3d": f"delay: {REMIND_AFTER}", "delay: 7d": f"delay: {ESCALATE_AFTER}"}}


def docs_chart(chart_id: str, shortened: Mapping[str, str] | None = None) -> Chart:
    """The YAML example of docs/charts.md whose `id` is `chart_id`, with its delays `shortened` (by default
    as `SHORTENED` says): each written text replaced by its short one."""
    replacements = SHORTENED.get(chart_id, {}) if shortened is None else shortened
    for example in re.findall(r"```yaml\n(.*?)```", CHARTS_MD.read_text(encoding="utf-8"), flags=re.DOTALL):
        if re.match(rf"id: {re.escape(chart_id)}\n", example):
            text = example
            for written, short in replacements.items():
                assert written in text, f"docs/charts.md: {chart_id} no longer says {written!r}"
                text = text.replace(written, short)
            return load_chart(text)
    raise AssertionError(f"docs/charts.md has no example chart {chart_id!r}")


def logging_action(name: str) -> Callable[[ActionContext], ActionResult]:
    """Appends `<action>@<event>` to the context's `log`, so the order actions ran in is stored."""

    def action(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"log": [*ctx.context.get("log", []), f"{name}@{ctx.event.name}"]})

    return action


def ask_now_and_later(ctx: ActionContext) -> ActionResult:
    logged = logging_action("ask_now_and_later")(ctx)
    return ActionResult(
        context=logged.context,
        send=[Send("now", to="self"), Send("later", to="self", queue="external")],
    )


def schedule_reminders(ctx: ActionContext) -> ActionResult:
    """The docs' reminder, with "3 days" and "7 days" shortened to 0.3 s and 0.6 s."""
    return ActionResult(
        send=[
            Send("remind", to="self", delay=REMIND_AFTER, id="remind"),
            Send("escalate", to="self", delay=ESCALATE_AFTER, id="escalate"),
        ]
    )


def call_off_escalation(ctx: ActionContext) -> ActionResult:
    return ActionResult(context=logging_action("call_off_escalation")(ctx).context, send=[Cancel("escalate")])


SPECIAL_ACTIONS: dict[str, Callable[[ActionContext], ActionResult]] = {
    "ask_now_and_later": ask_now_and_later,
    "schedule_reminders": schedule_reminders,
    "call_off_escalation": call_off_escalation,
}


def payment_failed(ctx: ActionContext) -> bool:
    return bool(ctx.context["regions"]["payment"]["status"] == "failed")


def language_app(chart: Chart) -> App:
    app = App("chart-language")
    app.chart(chart)
    for kind, name in chart.references():
        if kind == "action":
            app.registry.actions[name] = SPECIAL_ACTIONS.get(name) or logging_action(name)
        elif name == "payment_failed":
            app.registry.guards[name] = payment_failed
    return app


class ChartRun:
    """One execution of a chart: started and sent events through the client API, stepped by a worker from
    the test thread until nothing moves (every claim and relay done)."""

    def __init__(self, store: MongoStore, transport: MongoTransport, chart: Chart, execution_id: str) -> None:
        self.store = store
        self.transport = transport
        self.chart = chart
        self.app = language_app(chart)
        self.execution_id = execution_id
        self.worker = self._new_worker()
        start_execution(store, transport, self.app, chart.id, execution_id=execution_id)
        self.settle()

    def _new_worker(self) -> Worker:
        return Worker(self.store, self.transport, self.app, config=WorkerConfig(concurrency=1))

    def replace_worker(self) -> None:
        """Another worker takes over: whatever the step needs next must come from the store."""
        self.worker = self._new_worker()

    def settle(self) -> None:
        for _ in range(ROUNDS):
            moved = self.worker.process_one()  # a claim also fires the timers that are due
            moved |= self.worker.relay_once() > 0
            if not moved:
                return
        raise AssertionError(f"{self.execution_id} did not come to rest")

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        """Let the worker go on, timers included (they fire on the deployment's clock), until `condition`."""
        deadline = time.monotonic() + TIMER_WAIT
        while not condition():
            assert time.monotonic() < deadline, f"{self.execution_id}: {what} within {TIMER_WAIT}s"
            time.sleep(0.05)
            self.settle()

    def send(self, *names: str) -> None:
        """Queue every event before the worker looks, then let it work."""
        for name in names:
            send_event(self.store, self.transport, self.app, self.execution_id, name)
        self.settle()

    def execution(self, execution_id: str | None = None) -> Execution:
        exe = self.store.load(execution_id or self.execution_id)
        assert exe is not None
        return exe

    @property
    def leaf(self) -> str | None:
        configuration = self.execution().configuration
        return configuration[-1] if configuration else None

    @property
    def log(self) -> list[str]:
        return list(self.execution().context.get("log", []))

    def vias(self) -> list[str]:
        return [t["via"] for step in self.store.read_trace(self.execution_id) for t in step["transitions"]]


def keyboard(run: ChartRun) -> None:
    run.send("key.a", "key", "mouse")
    assert run.log == ["echo_key@key.a", "echo_key@key", "note_other@mouse"]
    run.replace_worker()
    run.send("key.enter")  # the first key that matches, in document order: not `key.*`
    assert run.leaf == "sent"
    assert run.execution().status is ExecutionStatus.COMPLETED


def player(run: ChartRun) -> None:
    assert run.log == ["start_clock@harel.start"]
    run.send("speed_up")
    assert run.leaf == "playing.fast"
    run.replace_worker()
    run.send("rewind", "tick")
    assert run.leaf == "playing.normal"
    assert run.log == ["start_clock@harel.start", "count@tick"], "playing was neither left nor entered"
    run.send("restart")
    assert run.log[-2:] == ["stop_clock@restart", "start_clock@restart"]
    assert run.leaf == "playing.normal"


def document(run: ChartRun) -> None:
    run.send("submit", "approve")
    run.replace_worker()
    run.send("close")
    assert run.leaf == "archived"


def wizard(run: ChartRun) -> None:
    run.send("next", "next", "pause")
    assert run.execution().history == {"form.resume": "form.address.city", "form.step": "form.address"}
    run.replace_worker()
    run.send("resume")
    assert run.leaf == "form.address.city"
    run.send("pause")
    run.replace_worker()
    run.send("redo_step")
    assert run.leaf == "form.address.street"


def shipment(run: ChartRun) -> None:
    run.send("charged")  # forwarded to the payment region
    assert run.log == ["email_receipt@harel.done"]
    assert run.leaf == "preparing", "the warehouse region is still packing"
    run.replace_worker()
    run.send("packed")
    assert run.leaf == "shipped"
    assert run.vias()[-2:] == ["on_region_done:payment", "on_done"]


def shipment_declined(run: ChartRun) -> None:
    warehouse = next(
        child for child, ref in run.execution().children.items() if ref.root_path.endswith("warehouse")
    )
    run.send("declined")
    assert run.leaf == "cancelled"
    assert run.execution().status is ExecutionStatus.FAILED
    assert run.log == [], "the receipt alternative was not taken"
    assert run.execution(warehouse).status is ExecutionStatus.CANCELLED, (
        "no join: the other region is cancelled"
    )


def typing(run: ChartRun) -> None:
    started = run.execution().created_at
    assert set(run.execution().timers) == {"typing#300ms", "typing#900ms"}
    run.replace_worker()  # between arming and firing
    run.wait_until(lambda: run.log == ["show_paused@harel.timer"], "the 300ms timer")
    assert run.leaf == "typing", "a targetless timer leaves the state entered"
    assert list(run.execution().timers) == ["typing#900ms"]
    run.replace_worker()
    run.wait_until(lambda: run.leaf == "idle", "the 900ms timer")
    assert run.log == ["show_paused@harel.timer"], "each timer fired once"
    fired = [step["at"] for step in run.store.read_trace(run.execution_id) if step["event"] == "harel.timer"]
    assert fired[0] >= started + 0.3 and fired[-1] >= started + 0.9, "no timer fired early"


def reminder(run: ChartRun) -> None:
    started = run.execution().created_at
    assert set(run.execution().timers) == {"send:remind", "send:escalate"}
    run.replace_worker()  # between arming and firing
    run.wait_until(lambda: run.log == ["send_reminder@remind"], "the delayed remind")
    run.send("acknowledge")
    assert set(run.execution().timers) == set() and run.execution().delayed == {}
    run.replace_worker()
    time.sleep(ESCALATE_AFTER + 0.2)  # past the escalation's due time: it was called off
    run.settle()
    assert run.leaf == "waiting"
    assert run.log == ["send_reminder@remind", "call_off_escalation@acknowledge"], (
        "remind once, escalate never"
    )
    fired = [step["at"] for step in run.store.read_trace(run.execution_id) if step["event"] == "harel.timer"]
    assert len(fired) == 1 and fired[0] >= started + REMIND_AFTER, "delivered once, not early"
    run.send("reply")
    assert run.leaf == "answered"


def follow_up(run: ChartRun) -> None:
    """The reminder with its sends and its cancel written in the chart: the same held sends, timers and
    outcome as the reminder's Python actions."""
    started = run.execution().created_at
    assert set(run.execution().timers) == {"send:remind", "send:escalate"}
    assert run.execution().delayed["escalate"].event.data == {"level": 2}
    run.replace_worker()  # between arming and firing
    run.wait_until(lambda: run.log == ["send_reminder@remind"], "the delayed remind")
    run.send("acknowledge")
    assert set(run.execution().timers) == set() and run.execution().delayed == {}
    run.replace_worker()
    time.sleep(ESCALATE_AFTER + 0.2)  # past the escalation's due time: it was called off
    run.settle()
    assert run.leaf == "waiting"
    assert run.log == ["send_reminder@remind"], "remind once, escalate never"
    steps = run.store.read_trace(run.execution_id)
    assert [step["actions"] for step in steps if step["event"] == "acknowledge"] == [["cancel:escalate"]]
    fired = [step["at"] for step in steps if step["event"] == "harel.timer"]
    assert len(fired) == 1 and fired[0] >= started + REMIND_AFTER, "delivered once, not early"
    run.send("reply")
    assert run.leaf == "answered"


def turns(run: ChartRun) -> None:
    run.send("go", "other")
    assert run.log == [
        "ask_now_and_later@go",
        "log_turn@now",  # internal: processed within go's step
        "log_turn@other",  # queued before go ran
        "log_turn@later",  # external: through the mailbox, behind `other`
    ]
    run.replace_worker()
    run.send("go")
    assert run.log[-3:] == ["ask_now_and_later@go", "log_turn@now", "log_turn@later"]


SCENARIOS: dict[str, tuple[str, Callable[[ChartRun], None]]] = {
    "keyboard": ("keyboard", keyboard),
    "player": ("player", player),
    "document": ("document", document),
    "wizard": ("wizard", wizard),
    "shipment": ("shipment", shipment),
    "shipment-declined": ("shipment", shipment_declined),
    "reminder": ("reminder", reminder),
    "follow-up": ("follow-up", follow_up),
    "turns": ("turns", turns),
    "typing": ("typing", typing),
}
