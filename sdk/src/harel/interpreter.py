"""The pure step: `step(chart, execution, event, now)` returns the next state and everything to commit with it.

`step` never mutates its input and reads no clock, network or store: the same chart, execution, event,
`now` and registry give an equal Step. Every id it mints is derived from the execution's id and version
(emitted events `<id>@<version>#<n>`, children `<id>/<parallel>.<region>@<version>`), so a step retried
after a lost commit produces the same ids and every consumer can dedupe them. Actions and guards are the
one exception to purity: they are user code, called in a fixed order; whatever they do outside the
returned ActionResult (an HTTP call, an email) may happen again when an event is redelivered, since
delivery is at least once.

Semantics:
- Configuration. An execution's `configuration` holds its active leaf: one path, since parallel regions
  run as child executions (a parent in a parallel state P holds P itself). The ancestors of the leaf, down
  from the execution's scope (the top of the chart, or a child's region), are active too.
- Start. An execution is created inert; `harel.start` enters the chart's `initial` (a child: its region's
  `initial`). A start on a started execution is ignored. Other events before the start are ignored.
- Transitions. An event is offered to the active states innermost first; the first transition whose
  guard passes (or that has none) is taken. Taking it exits the active states below the transition's
  domain (inner to outer, running exit actions), runs the transition's actions, then enters the states
  down to the target (outer to inner, running entry actions) and on into initial states. The domain is
  the nearest state enclosing both source and target, so a transition to the source itself or to one of
  its descendants exits and re-enters the source. A transition without a target runs its actions only.
- Unknown events. An event no active state takes (no transition, or every guard false) is ignored:
  the execution is unchanged apart from `updated_at`, `handled` is False and the trace says why.
- Timers. Entering a state with `after` arms its timer (a `schedule` op, kept in `execution.timers`
  under the state's path); exiting the state disarms it (`cancel`). A timer event counts only if its
  state is active and still armed with that `fire_at`; any other (the state was left, or re-entered
  and re-armed since) is ignored as stale.
- Fork and join. Entering a parallel state spawns one child execution per region; each child runs its
  region and, on reaching a final state at the top of the region, completes and sends `harel.done` to
  its parent. When every region of the parallel state is done, its `on_done` fires, exactly once.
  Exiting a parallel state cancels its children that are not done.
- Final states. A final state at the top of the execution ends it: completed, or failed when the final
  state says `status: failed`. A final child of a compound state fires the compound's `on_done`.
- Cancel. `harel.cancel` exits every active state (running exit actions, disarming timers, cancelling
  children) and marks the execution cancelled. A finished execution ignores every event.
- Actions. An action returns an ActionResult (or None): its context updates are merged shallowly into
  the execution's context at once (later actions see them) and its sends become emitted events.
  An exception in an action or guard propagates out of `step`; an unregistered name raises UnknownAction.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from harel.app import EMPTY_REGISTRY, ActionContext, ActionResult, Registry, read_only
from harel.chart import Chart, Edge, Node
from harel.errors import InvalidSend
from harel.model import (
    CANCEL_EVENT,
    DONE_EVENT,
    START_EVENT,
    TERMINAL_STATUSES,
    TIMER_EVENT,
    ChildRef,
    ChildSeed,
    Event,
    Execution,
    ExecutionStatus,
    TimerOp,
)

SIBLING_PREFIX = "sibling:"


@dataclass
class Step:
    """What one event did: the new execution (same `version`: the store bumps it) and what to commit with it."""

    execution: Execution
    emits: list[tuple[str | None, Event]] = field(default_factory=list)
    spawns: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    timers: list[TimerOp] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)
    handled: bool = False


def step(
    chart: Chart, execution: Execution, event: Event, now: float, *, registry: Registry = EMPTY_REGISTRY
) -> Step:
    """Apply `event` to a copy of `execution` at time `now`. Raises what an action or guard raises."""
    if (execution.definition_id, execution.definition_version) != (chart.id, chart.version):
        raise ValueError(
            f"execution {execution.id!r} runs chart {execution.definition_id!r} version "
            f"{execution.definition_version}, not {chart.id!r} version {chart.version}"
        )
    run = _Run(chart, execution.model_copy(deep=True), event, now, registry)
    run.dispatch()
    return run.finish(before=list(execution.configuration))


def _prefixes(path: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]."""
    parts = path.split(".")
    return [".".join(parts[:depth]) for depth in range(1, len(parts) + 1)]


def _domain(source: str, target: str) -> str | None:
    """The deepest path that properly encloses both `source` and `target` (None: the top of the chart)."""
    common: list[str] = []
    for mine, theirs in zip(source.split(".")[:-1], target.split(".")[:-1], strict=False):
        if mine != theirs:
            break
        common.append(mine)
    return ".".join(common) or None


class _Run:
    """One step in progress: the execution copy it changes and everything it records on the way."""

    def __init__(self, chart: Chart, exe: Execution, event: Event, now: float, registry: Registry) -> None:
        self.chart = chart
        self.exe = exe
        self.event = event
        self.now = now
        self.registry = registry
        self.scope = exe.root_path
        self.leaf: str | None = exe.configuration[-1] if exe.configuration else None
        self.emits: list[tuple[str | None, Event]] = []
        self.spawns: list[tuple[str, str, dict[str, Any]]] = []
        self.timers: list[TimerOp] = []
        self.actions: list[str] = []
        self.transitions: list[dict[str, str | None]] = []
        self.handled = False
        self.reason: str | None = None

    # --- dispatch ----------------------------------------------------------------------------------

    def dispatch(self) -> None:
        name = self.event.name
        if self.exe.status in TERMINAL_STATUSES:
            self._ignore(f"execution is {self.exe.status.value}")
        elif name == START_EVENT:
            if self.exe.started:
                self._ignore("execution already started")
            else:
                self._start()
        elif name == CANCEL_EVENT:
            self._cancel()
        elif not self.exe.started:
            self._ignore("execution has not started")
        elif name == TIMER_EVENT:
            self._timer()
        elif name == DONE_EVENT:
            self._done()
        else:
            self._transition_on(name)

    def _ignore(self, reason: str) -> None:
        self.handled = False
        self.reason = reason

    def _start(self) -> None:
        target = self.chart.initial_state(self.scope)
        self.handled = True
        self.transitions.append({"source": None, "target": target})
        self._enter(self.scope, target)

    def _cancel(self) -> None:
        for path in reversed(self._active()):
            self._exit_state(path)
        self.exe.status = ExecutionStatus.CANCELLED
        self.handled = True

    def _transition_on(self, name: str) -> None:
        refused: list[str] = []
        for path in reversed(self._active()):
            edge = self.chart.node(path).on.get(name)
            if edge is None:
                continue
            if self._enabled(edge):
                self.handled = True
                self._take(edge)
                return
            refused.append(f"guard {edge.guard!r} on {path!r}")
        if refused:
            self._ignore(f"no enabled transition for {name!r}: {', '.join(refused)} returned false")
        else:
            self._ignore(f"no active state handles {name!r}")

    def _timer(self) -> None:
        path = self.event.data.get("path")
        fire_at = self.event.data.get("fire_at")
        node = self.chart.nodes.get(path) if isinstance(path, str) else None
        if node is None or node.path not in self._active():
            self._ignore(f"stale timer: state {path!r} is not active")
            return
        armed = self.exe.timers.get(node.path)
        if node.after is None or armed != fire_at:
            self._ignore(f"stale timer: state {path!r} is armed for {armed!r}, not {fire_at!r}")
            return
        self._disarm(node.path)
        edge = node.after.edge
        if self._enabled(edge):
            self.handled = True
            self._take(edge)
        else:
            self._ignore(f"guard {edge.guard!r} on {path!r} returned false; the timer is spent")

    def _done(self) -> None:
        child_id = self.event.data.get("child_id")
        ref = self.exe.children.get(child_id) if isinstance(child_id, str) else None
        if ref is None:
            self._ignore(f"done from {child_id!r}, which is not a running child of this execution")
            return
        if ref.done:
            self._ignore(f"child {child_id!r} is already done")
            return
        ref.done = True
        self.handled = True
        if all(other.done for other in self.exe.children.values() if other.fork == ref.fork):
            on_done = self.chart.node(ref.fork).on_done
            if on_done is not None:
                self._take(on_done)

    # --- moving through the chart ------------------------------------------------------------------

    def _active(self) -> list[str]:
        """The active states of this execution, outer to inner."""
        if self.leaf is None:
            return []
        if self.scope is None:
            return _prefixes(self.leaf)
        return [path for path in _prefixes(self.leaf) if path.startswith(f"{self.scope}.")]

    def _take(self, edge: Edge) -> None:
        self.transitions.append({"source": edge.source, "target": edge.target})
        if edge.target is None:
            self._run_actions(edge.actions, edge.source)
            return
        domain = _domain(edge.source, edge.target)
        for path in reversed(self._active()):
            if domain is not None and not path.startswith(f"{domain}."):
                break
            self._exit_state(path)
        self._run_actions(edge.actions, edge.source)
        self._enter(domain, edge.target)

    def _enter(self, domain: str | None, target: str) -> None:
        """Enter every state below `domain` down to `target`, then on into initial states."""
        depth = 0 if domain is None else domain.count(".") + 1
        for path in _prefixes(target)[depth:]:
            self._enter_state(path)
        node = self.chart.node(target)
        while node.kind == "compound" and node.initial is not None:
            self._enter_state(node.initial)
            node = self.chart.node(node.initial)
        self.leaf = node.path
        if node.kind == "parallel":
            self._fork(node)
        elif node.kind == "final":
            self._reach_final(node)

    def _enter_state(self, path: str) -> None:
        node = self.chart.node(path)
        self._run_actions(node.entry, path)
        if node.after is not None:
            fire_at = self.now + node.after.seconds
            self.exe.timers[path] = fire_at
            self.timers.append(TimerOp("schedule", path, fire_at))

    def _exit_state(self, path: str) -> None:
        node = self.chart.node(path)
        if node.kind == "parallel":
            self._cancel_children(path)
        self._run_actions(node.exit, path)
        if path in self.exe.timers:
            self._disarm(path)
        self.leaf = node.parent if node.parent != self.scope else None

    def _disarm(self, path: str) -> None:
        del self.exe.timers[path]
        self.timers.append(TimerOp("cancel", path))

    def _fork(self, parallel: Node) -> None:
        child_ids = {
            region.rsplit(".", 1)[-1]: f"{self.exe.id}/{region}@{self.exe.version}"
            for region in parallel.children
        }
        for region in parallel.children:
            child_id = child_ids[region.rsplit(".", 1)[-1]]
            seed = ChildSeed(
                definition_id=self.exe.definition_id,
                definition_version=self.exe.definition_version,
                context=copy.deepcopy(self.exe.context),
                siblings=child_ids,
            )
            self.exe.children[child_id] = ChildRef(root_path=region, fork=parallel.path)
            self.spawns.append((child_id, region, seed.model_dump(mode="json")))

    def _cancel_children(self, fork: str) -> None:
        for child_id, ref in list(self.exe.children.items()):
            if ref.fork != fork:
                continue
            if not ref.done:
                self._emit(child_id, CANCEL_EVENT, {})
            del self.exe.children[child_id]

    def _reach_final(self, final: Node) -> None:
        if final.parent == self.scope:
            self.exe.status = final.final_status or ExecutionStatus.COMPLETED
            if self.exe.parent_id is not None:
                self._emit(self.exe.parent_id, DONE_EVENT, {"child_id": self.exe.id, "root_path": self.scope})
            return
        if final.parent is not None:
            on_done = self.chart.node(final.parent).on_done
            if on_done is not None:
                self._take(on_done)

    # --- user code ---------------------------------------------------------------------------------

    def _context(self, state: str) -> ActionContext:
        return ActionContext(
            execution_id=self.exe.id,
            state=state,
            event=self.event,
            now=self.now,
            context=read_only(self.exe.context),
        )

    def _enabled(self, edge: Edge) -> bool:
        if edge.guard is None:
            return True
        return bool(self.registry.get_guard(edge.guard)(self._context(edge.source)))

    def _run_actions(self, names: tuple[str, ...], state: str) -> None:
        for name in names:
            action = self.registry.get_action(name)
            self.actions.append(name)
            result = action(self._context(state))
            if result is None:
                continue
            if not isinstance(result, ActionResult):
                raise TypeError(
                    f"action {name!r} returned {type(result).__name__}; return an ActionResult or None"
                )
            self.exe.context.update(result.context)
            for send in result.send:
                self._emit(self._recipient(send.to), send.event, dict(send.data))

    def _recipient(self, to: str) -> str:
        if to == "parent":
            if self.exe.parent_id is None:
                raise InvalidSend(self.exe.id, to, "a root execution has no parent")
            return self.exe.parent_id
        if to == "self":
            return self.exe.id
        if to.startswith(SIBLING_PREFIX):
            region = to.removeprefix(SIBLING_PREFIX)
            if region not in self.exe.siblings:
                known = ", ".join(sorted(self.exe.siblings)) or "none: it is not a region of a parallel state"
                raise InvalidSend(self.exe.id, to, f"no sibling region {region!r} (siblings: {known})")
            return self.exe.siblings[region]
        return to

    def _emit(self, target: str, name: str, data: dict[str, Any]) -> None:
        event = Event(
            id=f"{self.exe.id}@{self.exe.version}#{len(self.emits)}",
            name=name,
            data=data,
            source_id=self.exe.id,
            created_at=self.now,
        )
        self.emits.append((target, event))

    # --- the result --------------------------------------------------------------------------------

    def finish(self, before: list[str]) -> Step:
        self.exe.configuration = [] if self.leaf is None else [self.leaf]
        self.exe.updated_at = self.now
        trace: dict[str, Any] = {
            "event": self.event.name,
            "event_id": self.event.id,
            "at": self.now,
            "from": before,
            "to": list(self.exe.configuration),
            "handled": self.handled,
            "reason": self.reason,
            "transitions": self.transitions,
            "actions": self.actions,
            "timers": [{"op": op.action, "path": op.path, "fire_at": op.fire_at} for op in self.timers],
            "emits": [
                {"target": target, "event": event.name, "id": event.id} for target, event in self.emits
            ],
            "spawns": [child_id for child_id, _, _ in self.spawns],
            "status": self.exe.status.value,
        }
        if self.event.name == TIMER_EVENT:
            trace["timer_fire_at"] = self.event.data.get("fire_at")
        return Step(self.exe, self.emits, self.spawns, self.timers, trace, self.handled)
