"""A harel chart translated to sismic, and run there on a simulated clock.

The translation keeps every state under its harel path (the root state is `ROOT`), gives guarded
alternatives decreasing sismic priorities (sismic takes the first enabled priority class), and writes what
sismic has no key for in the terms sismic has:
- `after: {300ms: ...}` is an eventless transition guarded by `after(0.3)`;
- `on_done` is an eventless transition guarded by "a final child is active" (compound) or "every region has
  an active final state" (parallel);
- `always` is an eventless transition;
- `guard: {in: <state>}` is the guard `active(<state>)`;
- a history state is sismic's `shallow history` or `deep history`, its `memory` the history's default
  target (or its parent's initial state).
"""

from __future__ import annotations

from typing import Any

from sismic.clock import SimulatedClock
from sismic.interpreter import Interpreter
from sismic.io.datadict import import_from_dict

from harel.chart import Chart, Edge, Node

from .observation import Observation, lanes_of_actions
from .vocabulary import context_keys, sismic_action, sismic_guard

ROOT = "__root__"
TICK = 0.05  # the simulated clock moves in steps this long, so chained timers fire as they would in time


def translate(chart: Chart) -> dict[str, Any]:
    top = [node for node in chart.nodes.values() if node.parent is None]
    root = {"name": ROOT, "initial": chart.initial, "states": [_state(chart, node) for node in top]}
    return {"statechart": {"name": chart.id, "root state": root}}


def _state(chart: Chart, node: Node) -> dict[str, Any]:
    state: dict[str, Any] = {"name": node.path}
    if node.kind == "history":
        parent = chart.node(node.parent or "")
        return {**state, "type": f"{node.history} history", "memory": node.default or parent.initial}
    if node.entry:
        state["on entry"] = _code(node.entry)
    if node.exit:
        state["on exit"] = _code(node.exit)
    children = [_state(chart, chart.node(path)) for path in node.children]
    if node.kind == "final":
        state["type"] = "final"
    elif node.kind == "parallel":
        state["parallel states"] = children
    elif node.kind in ("compound", "region"):
        state["initial"] = node.initial
        state["states"] = children
    transitions = []
    for event, edges in node.on.items():
        transitions += _alternatives(chart, edges, event=event)
    for after in node.after:
        transitions += _alternatives(chart, after.edges, condition=f"after({after.seconds})")
    transitions += _alternatives(chart, node.always)
    if node.on_done:
        transitions += _alternatives(chart, node.on_done, condition=_done_condition(chart, node))
    if transitions:
        state["transitions"] = transitions
    return state


def _alternatives(
    chart: Chart, edges: tuple[Edge, ...], *, event: str | None = None, condition: str | None = None
) -> list[dict[str, Any]]:
    transitions = []
    for index, edge in enumerate(edges):
        guards = [condition] if condition else []
        if edge.guard is not None:
            guards.append(sismic_guard(edge.guard, chart.node(edge.source), chart))
        if edge.in_state is not None:
            guards.append(f"active({edge.in_state!r})")
        transition: dict[str, Any] = {}
        if event is not None:
            transition["event"] = event
        if edge.target is not None:
            transition["target"] = edge.target
        if guards:
            transition["guard"] = " and ".join(f"({guard})" for guard in guards)
        if edge.actions:
            transition["action"] = _code(edge.actions)
        if len(edges) > 1:
            transition["priority"] = len(edges) - index
        transitions.append(transition)
    return transitions


def _done_condition(chart: Chart, node: Node) -> str:
    def any_final(container: Node) -> str:
        finals = [path for path in container.children if chart.node(path).kind == "final"]
        return "(" + " or ".join(f"active({path!r})" for path in finals) + ")"

    if node.kind == "parallel":
        return " and ".join(any_final(chart.node(region)) for region in node.children)
    return any_final(node)


def _code(actions: tuple[str, ...]) -> str:
    return "\n".join(sismic_action(name) for name in actions)


class SismicRun:
    def __init__(self, chart: Chart) -> None:
        self.chart = chart
        self.log: list[str] = []
        self.clock = SimulatedClock()
        context = {"log": self.log.append, **context_keys(chart)}
        self.interpreter = Interpreter(
            import_from_dict(translate(chart)), initial_context=context, clock=self.clock
        )
        self.interpreter.execute()

    def send(self, *names: str) -> None:
        for name in names:
            self.interpreter.queue(name)
        self.interpreter.execute()

    def advance_to(self, seconds: float) -> None:
        """Move the clock to `seconds` since the start, tick by tick, taking what comes due on the way."""
        while self.clock.time + TICK <= seconds:
            self.clock.time += TICK
            self.interpreter.execute()
        self.clock.time = max(self.clock.time, seconds)
        self.interpreter.execute()

    def observe(self) -> Observation:
        lane_of = lanes_of_actions(self.chart)
        lanes: dict[str, list[str]] = {}
        for name in self.log:
            lanes.setdefault(lane_of[name], []).append(name)
        active = frozenset(self.interpreter.configuration) - {ROOT}
        return Observation(active, self.interpreter.final, lanes)
