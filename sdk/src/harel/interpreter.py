"""The pure step: `step(chart, execution, event, now)` returns the next state and everything to commit with it.

`step` never mutates its input and reads no clock, network or store: the same chart, execution, event,
`now` and registry give an equal Step. Every id it mints is derived from the execution's id and version
(events `<id>@<version>#<n>`, children `<id>/<parallel>.<region>@<version>`), so a step retried after a
lost commit produces the same ids and every consumer can dedupe them. Actions and guards are the one
exception to purity: they are user code, called in a fixed order; whatever they do outside the returned
ActionResult (an HTTP call, an email) may happen again when an event is redelivered, since delivery is at
least once.

Copy on write: the returned execution shares every value the step did not change with the input (the
context's untouched values, the siblings, ...). Treat both as immutable; the store serializes them.

The rules are written down, each with its tests, in docs/semantics.md. In short:
- An event is offered to the active states innermost first; per state the `on` keys that match it (a
  name, `prefix.*` or `*`) and their alternatives are tried in document order; the first enabled
  transition is taken. A transition into its own source leaves the source entered unless it says
  `reenter: true`; one to a history state enters what the history recorded when its parent was last left. An event none of them takes is forwarded to the
  running regions (child executions) whose chart handles it, or else ignored.
- After every transition the step takes the enabled eventless (`always`) transitions until none is
  enabled, then processes the events the execution sent to itself, one by one (run to completion), each
  followed by the eventless transitions again. All of it is one step, committed at once.
- Timers take effect in the order of their `fire_at` (innermost first on ties, then in the order a
  state's timers are written): a timer event also fires every other armed timer due at or before its own.
  A delayed send is held in `delayed` under a timer `send:<id>`; when that fires, the event leaves (or, to
  self, is processed in that step).
- A region's child ends at a final state: its exit actions run, then `harel.done` carries the final state,
  status, result and context to the parent, which records them under `context.regions.<region>`, takes
  that region's `on_region_done` transition if any, then evaluates the join.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from harel.app import EMPTY_REGISTRY, ActionContext, ActionResult, Registry
from harel.chart import (
    SEND_TIMER_PREFIX,
    Chart,
    ChartAction,
    Edge,
    Node,
    action_label,
    descriptor_matches,
    parse_duration,
    send_id_problem,
)
from harel.errors import InvalidDuration, InvalidSend, StepLimitExceeded
from harel.ids import REGIONS_KEY, check_context, check_json, child_id
from harel.model import (
    CANCEL_EVENT,
    DONE_EVENT,
    FAIL_EVENT,
    START_EVENT,
    TIMER_EVENT,
    ChildRef,
    DelayedSend,
    Event,
    Execution,
    ExecutionStatus,
    TimerOp,
)
from harel.sends import SIBLING_PREFIX, Cancel, Send

_RUNNING = ExecutionStatus.RUNNING  # compared on every step: a module constant, not an enum lookup
# Each status as the plain str a record stores: `str(status)` builds a new string on every call
_STATUS_TEXT = {status: str(status) for status in ExecutionStatus}
MAX_EVENTLESS = 100  # eventless transitions in a row before the step fails: an `always` loop
MAX_INTERNAL = 1000  # events sent to self processed in one step before it fails

Disposition = Literal["handled", "forwarded", "ignored"]


@dataclass(eq=False, slots=True)
class Step:
    """What one event did: the new execution (same `version`: the store bumps it) and what to commit with it.

    `handled`: the event took effect (a transition, a recorded region result, or forwarding). `disposition`
    says which: "handled" (this execution took it), "forwarded" (to the child ids in `forwarded_to`),
    "ignored" (the trace's `reason` says why). `trace` is the step's record for the store, built on first
    read: a worker that records no traces does not pay for it."""

    execution: Execution
    emits: list[tuple[str | None, Event]]
    spawns: list[tuple[str, str, dict[str, Any]]]
    timers: list[TimerOp]
    handled: bool
    disposition: Disposition
    forwarded_to: tuple[str, ...]
    record: Callable[[], dict[str, Any]] = field(repr=False)
    _trace: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def trace(self) -> dict[str, Any]:
        if self._trace is None:
            self._trace = self.record()
        return self._trace

    def _public(self) -> tuple[Any, ...]:
        return (
            self.execution,
            self.emits,
            self.spawns,
            self.timers,
            self.handled,
            self.disposition,
            self.forwarded_to,
            self.trace,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Step) and self._public() == other._public()

    __hash__ = None  # type: ignore[assignment]


def step(
    chart: Chart, execution: Execution, event: Event, now: float, *, registry: Registry = EMPTY_REGISTRY
) -> Step:
    """Apply `event` to `execution` at time `now`. Raises what an action or guard raises, InvalidContext for
    an action result that is not strict JSON, StepLimitExceeded for a step that does not come to rest."""
    if execution.definition_id != chart.id or execution.definition_version != chart.version:
        raise ValueError(
            f"execution {execution.id!r} runs chart {execution.definition_id!r} version "
            f"{execution.definition_version}, not {chart.id!r} version {chart.version}"
        )
    run = _Run(chart, execution, event, now, registry)
    run.dispatch()
    return run.finish()


def _matching(entries: tuple[tuple[tuple[str, ...], tuple[Edge, ...]], ...], name: str) -> tuple[Edge, ...]:
    """The alternatives of every `on` entry whose descriptors match `name`, in the entries' order."""
    matched: list[Edge] = []
    for descriptors, edges in entries:
        for descriptor in descriptors:
            if descriptor_matches(descriptor, name):
                matched.extend(edges)
                break
    return tuple(matched)


# Building pydantic models field by field costs about 1 µs each (validation, or model_copy's bookkeeping);
# a step builds several. The step builds them from values it knows are valid, the way pydantic's own
# `model_construct` does, for a fraction of that. tests/unit/test_interpreter.py checks the results stay
# equal to validated models.
M = TypeVar("M", bound=BaseModel)
_new = object.__new__
# The setters of BaseModel's four slots, bound once: calling them skips the attribute lookup that
# `object.__setattr__(model, name, value)` makes on every call (a third of the cost of building a model).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _construct(model: type[M], fields: dict[str, Any]) -> M:
    """`model(**fields)` without validation: every field given, every value already valid."""
    built = _new(model)
    _set_dict(built, fields)
    _set_fields_set(built, set(fields))
    _set_extra(built, None)
    _set_private(built, None)
    return built


class _Run:
    """One step in progress. Reads the input execution, never writes it: context, timers and children are
    copied on their first write."""

    __slots__ = (
        "actions",
        "chart",
        "children",
        "context",
        "delayed",
        "disposition",
        "emits",
        "ended_because",
        "event",
        "exe",
        "forwarded_to",
        "history",
        "internal",
        "internal_trace",
        "leaf",
        "minted",
        "nodes",
        "now",
        "reason",
        "received",
        "registry",
        "scope",
        "spawns",
        "status",
        "timer_ops",
        "timers",
        "transitions",
    )

    def __init__(self, chart: Chart, exe: Execution, event: Event, now: float, registry: Registry) -> None:
        self.chart = chart
        self.nodes = chart.nodes
        self.exe = exe
        self.received = event
        self.event = event  # the event being processed: the received one, then each internal one
        self.now = now
        self.registry = registry
        self.scope = exe.root_path
        self.leaf: str | None = exe.configuration[-1] if exe.configuration else None
        self.status = exe.status
        # the input's own dicts until the step first writes one: then a copy (`_own_*`), which `finish`
        # recognises by identity
        self.context: dict[str, Any] = exe.context
        self.timers: dict[str, float] = exe.timers
        self.children: dict[str, ChildRef] = exe.children
        self.history: dict[str, str] = exe.history
        self.delayed: dict[str, DelayedSend] = exe.delayed
        self.emits: list[tuple[str | None, Event]] = []
        self.spawns: list[tuple[str, str, dict[str, Any]]] = []
        self.timer_ops: list[TimerOp] = []
        self.actions: list[str] = []
        self.transitions: list[dict[str, str | None]] = []
        self.internal: deque[Event] | None = None  # events sent to self: created by the first one
        self.internal_trace: list[dict[str, Any]] = []
        self.minted = 0  # event ids minted so far: emitted and internal events share the numbering
        self.disposition: Disposition = "ignored"
        self.forwarded_to: tuple[str, ...] = ()
        self.reason: str | None = None
        self.ended_because: str | None = None

    # --- dispatch ----------------------------------------------------------------------------------

    def dispatch(self) -> None:
        name = self.received.name
        if self.status is not _RUNNING:
            self.reason = f"execution is {self.status}"
        elif name == START_EVENT:
            if self.leaf is not None:
                self.reason = "execution already started"
            else:
                self._start()
                self._settle()
        elif name == CANCEL_EVENT:
            self._cancel()
        elif name == FAIL_EVENT:
            self._fail(str(self.received.data.get("reason") or "failed by the engine"))
        elif self.leaf is None:  # running without an active state: not started yet
            self.reason = "execution has not started"
        elif name == TIMER_EVENT:
            self._timers()
        else:
            if name == DONE_EVENT:
                self._done()
            else:
                self.disposition, self.forwarded_to, self.reason = self._deliver(self.received)
            self._settle()

    def _start(self) -> None:
        entered = self.chart.start_states() if self.scope is None else self.nodes[self.scope].start
        self.disposition = "handled"
        self.transitions.append({"source": None, "target": entered[0], "via": "start"})
        for path in entered:
            self._enter_state(self.nodes[path])
        self._arrive(self.nodes[entered[-1]])

    def _cancel(self) -> None:
        self._leave_everything()
        self.status = ExecutionStatus.CANCELLED
        self.disposition = "handled"

    def _fail(self, reason: str) -> None:
        """The engine cannot carry the execution on: it ends failed, and a region's parent hears of it as
        of a region that ended in a failed final state."""
        self._leave_everything()
        self.status = ExecutionStatus.FAILED
        self.ended_because = reason
        self.disposition = "handled"
        self._tell_parent_done(state=None, result=None, reason=reason)

    def _tell_parent_done(self, *, state: str | None, result: Any, reason: str | None = None) -> None:
        """A region's end reaches its parent as `harel.done`: where it ended, how, and its data."""
        if self.exe.parent_id is None:
            return
        done: dict[str, Any] = {
            "child_id": self.exe.id,
            "root_path": self.scope,
            "state": state,
            "status": _STATUS_TEXT[self.status],
            "result": result,
            "context": self.context,
        }
        if reason is not None:
            done["reason"] = reason
        self._emit(self.exe.parent_id, DONE_EVENT, done)

    def _leave_everything(self) -> None:
        if self.leaf is not None:
            for path in reversed(self.nodes[self.leaf].chain):
                self._exit_state(self.nodes[path])

    def _deliver(self, event: Event) -> tuple[Disposition, tuple[str, ...], str | None]:
        """Offer a user event to the active states; else forward it to the regions that handle it."""
        assert self.leaf is not None
        leaf = self.nodes[self.leaf]
        if leaf.patterned:
            alternatives = _matching(leaf.patterned, event.name)
        else:
            alternatives = leaf.handlers.get(event.name, ())
        edge = self._first_enabled(alternatives) if alternatives else None
        if edge is not None:
            self._take(edge, f"on:{event.name}")
            return "handled", (), None
        forwarded = tuple(
            child
            for child, ref in self.children.items()
            if not ref.done
            and (
                event.name in (region := self.nodes[ref.root_path]).handles
                or region.handles_event(event.name)
            )
        )
        for child in forwarded:
            self._emit(child, event.name, event.data)
        if forwarded:
            return "forwarded", forwarded, None
        if alternatives:
            refused = ", ".join(f"guard {edge.guard_text} on {edge.source!r}" for edge in alternatives)
            return "ignored", (), f"no enabled transition for {event.name!r}: {refused} returned false"
        return "ignored", (), f"no active state handles {event.name!r}"

    def _timers(self) -> None:
        """Fire the received timer and every other armed timer due at or before it, in `fire_at` order,
        innermost first on ties, then in the order a state's timers are written: the order does not depend
        on the order their events arrive in. A timer's key is its state's path, or `<path>#<duration>`."""
        key = self.received.data.get("path")
        fire_at = self.received.data.get("fire_at")
        if not isinstance(key, str):
            self.reason = f"stale timer: state {key!r} is not active"
            return
        timer = None
        if key.startswith(SEND_TIMER_PREFIX):
            if key.removeprefix(SEND_TIMER_PREFIX) not in self.delayed:
                self.reason = f"stale timer: delayed send {key!r} was cancelled or sent"
                return
        else:
            timer = self.chart.timer(key)
            if timer is None or self.leaf is None or timer[0].path not in self.nodes[self.leaf].chain:
                self.reason = f"stale timer: state {key!r} is not active"
                return
        armed = self.timers.get(key)
        if armed != fire_at or not isinstance(fire_at, int | float):
            self.reason = f"stale timer: state {key!r} is armed for {armed!r}, not {fire_at!r}"
            return
        if len(self.timers) == 1:  # the common case: nothing to order (a sort costs a tenth of a step)
            due: list[tuple[float, str, tuple[Node, int] | None]] = [(fire_at, key, timer)]
        else:
            # on a tie: states' timers (innermost first, then as written), then delayed sends (as sent)
            ranked = sorted((at, *self._timer_rank(k), k) for k, at in self.timers.items() if at <= fire_at)
            due = [(at, k, None) for at, _, _, _, k in ranked]
        spent: list[str] = []
        for at, due_key, validated in due:
            if self.status is not _RUNNING or self.timers.get(due_key) != at:
                continue  # the execution ended, or an earlier timer's transition left or re-armed this state
            if due_key.startswith(SEND_TIMER_PREFIX):
                self._disarm(due_key)
                self._deliver_delayed(self._own_delayed().pop(due_key.removeprefix(SEND_TIMER_PREFIX)))
                self._settle()
                continue
            found = validated or self.chart.timer(due_key)
            if found is None:
                continue  # a key this chart version has no timer for: nothing of this chart armed it
            after = found[0].after[found[1]]
            self._disarm(due_key)
            edge = self._first_enabled(after.edges)
            if edge is None:
                guards = ", ".join(e.guard_text for e in after.edges)
                spent.append(f"guard {guards} on {after.key!r} returned false; the timer is spent")
            else:
                self.disposition = "handled"
                self._take(edge, "after")
            self._settle()
        if self.disposition != "handled":
            self.reason = "; ".join(spent)

    def _timer_rank(self, key: str) -> tuple[int, int, int]:
        if key.startswith(SEND_TIMER_PREFIX):
            pending = self.delayed.get(key.removeprefix(SEND_TIMER_PREFIX))
            return (1, *pending.order) if pending is not None else (2, 0, 0)
        found = self.chart.timer(key)
        return (0, -found[0].depth, found[1]) if found is not None else (2, 0, 0)

    def _deliver_delayed(self, pending: DelayedSend) -> None:
        """A delayed send is due: to another execution it leaves through the outbox as it was minted; to
        this one it is processed now, as the external event it is."""
        self.disposition = "handled"
        if pending.to != self.exe.id:
            self.emits.append((pending.to, pending.event))
            return
        self.event = pending.event
        disposition, forwarded, reason = self._deliver(pending.event)
        self.internal_trace.append(
            {"event": pending.event.name, "id": pending.event.id, "disposition": disposition}
            | ({"forwarded_to": list(forwarded)} if forwarded else {})
            | ({"reason": reason} if reason is not None else {})
        )

    def _done(self) -> None:
        data = self.received.data
        child = data.get("child_id")
        if not isinstance(child, str) or (ref := self.children.get(child)) is None:
            self.reason = f"done from {child!r}, which is not a running child of this execution"
            return
        if ref.done:
            self.reason = f"child {child!r} is already done"
            return
        children = self._own_children()
        children[child] = _construct(ChildRef, {"root_path": ref.root_path, "fork": ref.fork, "done": True})
        self._record_region(
            self.nodes[ref.fork],
            ref.root_path,
            {
                "state": data.get("state"),
                "status": data.get("status", _STATUS_TEXT[ExecutionStatus.COMPLETED]),
                "result": data.get("result"),
                "context": data.get("context", {}),
            },
        )
        self.disposition = "handled"
        fork = self.nodes[ref.fork]
        region_done = fork.on_region_done and fork.on_region_done.get(ref.root_path[len(fork.path) + 1 :])
        if region_done:
            edge = self._first_enabled(region_done)
            if edge is not None:
                self._take(edge, f"on_region_done:{ref.root_path[len(fork.path) + 1 :]}")
                if self.status is not _RUNNING or self.leaf != fork.path:
                    return  # the transition left the parallel state: there is no join to wait for
        for other in children.values():
            if other.fork == ref.fork and not other.done:
                return
        self._complete(fork)  # the join: every region of the parallel state is done

    # --- run to completion -------------------------------------------------------------------------

    def _settle(self) -> None:
        """Eventless transitions until none is enabled, then each internal event in the order sent, each
        followed by the eventless transitions."""
        if self.leaf is not None and self.nodes[self.leaf].eventless:
            self._eventless()
        processed = 0
        while self.internal:  # events sent to self, in the order sent
            event = self.internal.popleft()
            record: dict[str, Any] = {"event": event.name, "id": event.id}
            self.internal_trace.append(record)
            if self.status is not _RUNNING:
                record.update(disposition="ignored", reason=f"execution is {self.status}")
                continue
            processed += 1
            if processed > MAX_INTERNAL:
                recent = [r["event"] for r in self.internal_trace[-5:]]
                raise StepLimitExceeded(self.exe.id, "events sent to self", MAX_INTERNAL, recent)
            self.event = event
            disposition, forwarded, reason = self._deliver(event)
            record["disposition"] = disposition
            if forwarded:
                record["forwarded_to"] = list(forwarded)
            if reason is not None:
                record["reason"] = reason
            self._eventless()

    def _eventless(self) -> None:
        fired = 0
        while self.status is _RUNNING and self.leaf is not None:
            candidates = self.nodes[self.leaf].eventless
            edge = self._first_enabled(candidates) if candidates else None
            if edge is None:
                return
            fired += 1
            if fired > MAX_EVENTLESS:
                recent = [f"{t['source']} -> {t['target']}" for t in self.transitions[-5:]]
                raise StepLimitExceeded(self.exe.id, "eventless (always) transitions", MAX_EVENTLESS, recent)
            self._take(edge, "always")

    # --- moving through the chart ------------------------------------------------------------------

    def _take(self, edge: Edge, via: str) -> None:
        self.transitions.append({"source": edge.source, "target": edge.target, "via": via})
        if edge.target is None:
            self._run_actions(edge.actions, edge.source)
            return
        nodes = self.nodes
        left = self.leaf
        if left is not None:
            depth = edge.exit_depth
            for path in reversed(nodes[left].chain):
                node = nodes[path]
                if node.depth <= depth:
                    break
                if node.histories:
                    self._remember(node, left)
                self._exit_state(node)
        if edge.actions:
            self._run_actions(edge.actions, edge.source)
        entered = edge.enter if edge.history is None else (*edge.enter, *self._restore(edge.history))
        if not entered:
            return  # a transition to its own source that does not re-enter it: only the actions ran
        for path in entered:
            node = nodes[path]
            if node.entry or node.after:
                self._enter_state(node)
        self._arrive(node)

    def _remember(self, state: Node, leaf: str) -> None:
        """`state` is being left from the active leaf `leaf`: each of its history states remembers where."""
        remembered = self._own_history()
        for path in state.histories:
            if self.nodes[path].history == "deep":
                remembered[path] = leaf
            else:
                remembered[path] = ".".join(leaf.split(".")[: state.depth + 1])

    def _restore(self, path: str) -> tuple[str, ...]:
        """The states a transition to the history state at `path` enters below the history's parent: the
        remembered ones (with the initial states below a shallow history's child), else the default's."""
        history = self.nodes[path]
        remembered = self.history.get(path)
        if remembered is None:
            return history.restore_default
        if history.history == "shallow":
            return self.nodes[remembered].descent
        parts = remembered.split(".")
        return tuple(".".join(parts[:depth]) for depth in range(history.depth, len(parts) + 1))

    def _arrive(self, node: Node) -> None:
        """The entered leaf becomes the configuration; a parallel state forks, a final state completes."""
        self.leaf = node.path
        if node.kind == "parallel":
            self._fork(node)
        elif node.kind == "final":
            self._reach_final(node)

    def _enter_state(self, node: Node) -> None:
        if node.entry:
            self._run_actions(node.entry, node.path)
        if node.after:
            timers = self._own_timers()
            for after in node.after:
                fire_at = self.now + after.seconds
                timers[after.key] = fire_at
                self.timer_ops.append(TimerOp("schedule", after.key, fire_at))

    def _exit_state(self, node: Node) -> None:
        if node.kind == "parallel":
            self._cancel_children(node.path)
        if node.exit:
            self._run_actions(node.exit, node.path)
        if node.after:
            for after in node.after:
                if after.key in self.timers:
                    self._disarm(after.key)
        self.leaf = node.parent if node.parent != self.scope else None

    def _disarm(self, key: str) -> None:
        del self._own_timers()[key]
        self.timer_ops.append(TimerOp("cancel", key))

    def _fork(self, parallel: Node) -> None:
        start = len(parallel.path) + 1
        ids = {
            region[start:]: child_id(self.exe.id, region, self.exe.version) for region in parallel.children
        }
        results = self.context.get(REGIONS_KEY)
        # `results and` first: most forks find none, and the ABC check is slow
        if results and isinstance(results, Mapping) and any(name in results for name in ids):
            # a new fork starts without the results of this parallel state's previous run
            self._write_context(
                {REGIONS_KEY: {name: value for name, value in results.items() if name not in ids}}
            )
        # a region does not inherit the parent's region results: each fork would copy all earlier ones
        inherited = self.context
        if REGIONS_KEY in inherited:
            inherited = {key: value for key, value in inherited.items() if key != REGIONS_KEY}
        seed = {
            "definition_id": self.exe.definition_id,
            "definition_version": self.exe.definition_version,
            "context": inherited,
            "siblings": ids,
        }
        children = self._own_children()
        for region in parallel.children:
            child = ids[region[start:]]
            children[child] = _construct(
                ChildRef, {"root_path": region, "fork": parallel.path, "done": False}
            )
            self.spawns.append((child, region, seed))

    def _cancel_children(self, fork: str) -> None:
        children = self._own_children()
        for child, ref in list(children.items()):
            if ref.fork != fork:
                continue
            if not ref.done:
                self._emit(child, CANCEL_EVENT, {})
            del children[child]

    def _reach_final(self, final: Node) -> None:
        if final.parent != self.scope:
            assert final.parent is not None
            self._complete(self.nodes[final.parent])
            return
        # the execution ends: its final state is left (exit actions run), then the parent hears of it
        if final.exit:
            self._run_actions(final.exit, final.path)
        self.status = final.final_status or ExecutionStatus.COMPLETED
        self._tell_parent_done(state=final.name, result=final.result)

    def _complete(self, state: Node) -> None:
        """A compound state reached a final child, or every region of a parallel state is done."""
        edge = self._first_enabled(state.on_done)
        if edge is not None:
            self._take(edge, "on_done")

    # --- context, timers, children: copied on first write --------------------------------------------

    def _own_children(self) -> dict[str, ChildRef]:
        if self.children is self.exe.children:
            self.children = dict(self.children)
        return self.children

    def _own_delayed(self) -> dict[str, DelayedSend]:
        if self.delayed is self.exe.delayed:
            self.delayed = dict(self.delayed)
        return self.delayed

    def _own_history(self) -> dict[str, str]:
        if self.history is self.exe.history:
            self.history = dict(self.history)
        return self.history

    def _own_timers(self) -> dict[str, float]:
        if self.timers is self.exe.timers:
            self.timers = dict(self.timers)
        return self.timers

    def _write_context(self, updates: Mapping[str, Any]) -> None:
        if self.context is self.exe.context:
            self.context = dict(self.context)
        self.context.update(updates)

    def _record_region(self, parallel: Node, region: str, record: dict[str, Any]) -> None:
        """Record a region's result under its name; the parallel state's regions are kept in the chart's
        order, whatever order their dones arrive in, so the stored context does not depend on timing."""
        results = self.context.get(REGIONS_KEY)
        # `results and` first: the first region to end finds none, and the ABC check is slow
        merged = dict(results) if results and isinstance(results, Mapping) else {}
        start = len(parallel.path) + 1  # a region's name is its path below the parallel state's
        merged[region[start:]] = record
        ordered: dict[str, Any] = {}
        for path in parallel.children:
            name = path[start:]
            if name in merged:
                ordered[name] = merged[name]
        ordered.update(merged)  # then any other results, in their order
        self._write_context({REGIONS_KEY: ordered})

    # --- user code ---------------------------------------------------------------------------------

    def _context(self, state: str) -> ActionContext:
        return ActionContext(
            execution_id=self.exe.id,
            state=state,
            event=self.event,
            now=self.now,
            context=MappingProxyType(self.context),
        )

    def _enabled(self, edge: Edge) -> bool:
        if edge.in_state is not None:
            return self.leaf is not None and edge.in_state in self.nodes[self.leaf].chain
        if edge.guard is None:
            return True
        return bool(self.registry.get_guard(edge.guard)(self._context(edge.source)))

    def _first_enabled(self, alternatives: tuple[Edge, ...]) -> Edge | None:
        """The first alternative, in document order, whose guard passes (or that has none)."""
        for edge in alternatives:
            if not edge.guarded or self._enabled(edge):
                return edge
        return None

    def _run_actions(self, actions: tuple[ChartAction, ...], state: str) -> None:
        for action in actions:
            if isinstance(action, str):
                self._call(action, state)
            else:  # the chart's own send or cancel, checked at load
                label = action_label(action)
                self.actions.append(label)
                self._apply(action, f"the chart's {label}")

    def _call(self, name: str, state: str) -> None:
        action = self.registry.get_action(name)
        self.actions.append(name)
        result = action(self._context(state))
        if result is None:
            return
        if not isinstance(result, ActionResult):
            raise TypeError(
                f"action {name!r} returned {type(result).__name__}; return an ActionResult or None"
            )
        if result.context:
            check_context(result.context, f"action {name!r} returned a context")
            self._write_context(result.context)
        for sent in result.send:
            if not isinstance(sent, Send | Cancel):
                raise TypeError(f"action {name!r} sent {type(sent).__name__}; send a Send or a Cancel")
            self._apply(sent, f"action {name!r}")
        for send_id in result.cancel:  # shorthand for a Cancel each after the sends
            self._apply(Cancel(send_id), f"action {name!r}")

    def _apply(self, sent: Send | Cancel, origin: str) -> None:
        """A send takes effect (now, or held until due) or a delayed send is called off."""
        if isinstance(sent, Cancel):
            if sent.id in self.delayed:
                del self._own_delayed()[sent.id]
                self._disarm(SEND_TIMER_PREFIX + sent.id)
            return
        check_json(dict(sent.data), f"{origin} sent {sent.event!r} with data")
        if sent.delay is None:
            self._send(sent.to, sent.event, dict(sent.data), sent.queue)
        else:
            self._send_later(sent, dict(sent.data))

    def _send_later(self, send: Send, data: dict[str, Any]) -> None:
        """A delayed send: the event is minted now and held, with a timer of this execution, until due."""
        to = send.to
        if send.queue == "internal":
            raise InvalidSend(self.exe.id, to, "a delayed event is external: it cannot be internal")
        try:
            seconds = send.delay if isinstance(send.delay, int | float) else parse_duration(str(send.delay))
        except InvalidDuration as exc:
            raise InvalidSend(self.exe.id, to, str(exc)) from None
        if isinstance(seconds, bool) or seconds < 0:
            raise InvalidSend(self.exe.id, to, f"delay {send.delay!r} is not a duration")
        target = self._target(to)
        order = (self.exe.version, self.minted)
        event = self._mint(send.event, data)
        send_id = event.id if send.id is None else send.id
        if (problem := send_id_problem(send_id)) is not None:
            raise InvalidSend(self.exe.id, to, problem)
        delayed = self._own_delayed()
        delayed[send_id] = _construct(DelayedSend, {"to": target, "event": event, "order": order})
        key = SEND_TIMER_PREFIX + send_id
        fire_at = self.now + float(seconds)
        self._own_timers()[key] = fire_at
        self.timer_ops.append(TimerOp("schedule", key, fire_at))

    def _target(self, to: str) -> str:
        """The execution id an address names (InvalidSend when there is none)."""
        if to in ("self", self.exe.id):
            return self.exe.id
        if to == "parent":
            if self.exe.parent_id is None:
                raise InvalidSend(self.exe.id, to, "a root execution has no parent")
            return self.exe.parent_id
        if to.startswith(SIBLING_PREFIX):
            region = to.removeprefix(SIBLING_PREFIX)
            if region not in self.exe.siblings:
                known = ", ".join(sorted(self.exe.siblings)) or "none: it is not a region of a parallel state"
                raise InvalidSend(self.exe.id, to, f"no sibling region {region!r} (siblings: {known})")
            return self.exe.siblings[region]
        return to

    def _send(self, to: str, name: str, data: dict[str, Any], queue: str | None) -> None:
        if queue not in (None, "internal", "external"):
            raise InvalidSend(self.exe.id, to, f"queue {queue!r} is neither 'internal' nor 'external'")
        if queue == "internal" and to not in ("self", self.exe.id):
            raise InvalidSend(
                self.exe.id,
                to,
                "only an event to self can be internal; other executions get theirs by mailbox",
            )
        target = self._target(to)
        if target != self.exe.id or queue == "external":
            self._emit(target, name, data)  # to self: through the mailbox, behind what is queued there
            return
        if self.internal is None:
            self.internal = deque()
        self.internal.append(self._mint(name, data))

    def _mint(self, name: str, data: dict[str, Any]) -> Event:
        event = _construct(
            Event,
            {
                "id": f"{self.exe.id}@{self.exe.version}#{self.minted}",
                "name": name,
                "data": data,
                "source_id": self.exe.id,
                "created_at": self.now,
            },
        )
        self.minted += 1
        return event

    def _emit(self, target: str, name: str, data: dict[str, Any]) -> None:
        self.emits.append((target, self._mint(name, data)))

    # --- the result --------------------------------------------------------------------------------

    def finish(self) -> Step:
        exe = self.exe
        if self.delayed and self.status is not _RUNNING:
            for send_id in list(self.delayed):  # an execution that ended sends nothing more
                self._disarm(SEND_TIMER_PREFIX + send_id)
            self.delayed = {}
        before = exe.configuration
        unchanged = before[-1] == self.leaf if before else self.leaf is None
        changes: dict[str, Any] = {
            "configuration": before if unchanged else [] if self.leaf is None else [self.leaf],
            "updated_at": self.now,
        }
        if self.status is not exe.status:
            changes["status"] = self.status
        if self.ended_because is not None:
            changes["reason"] = self.ended_because
        if self.context is not exe.context:
            changes["context"] = self.context
        if self.timers is not exe.timers:
            changes["timers"] = self.timers
        if self.children is not exe.children:
            changes["children"] = self.children
        if self.history is not exe.history:
            changes["history"] = self.history
        if self.delayed is not exe.delayed:
            changes["delayed"] = self.delayed
        # the new execution, `exe.model_copy(update=changes)` built as `_construct` builds models: it
        # shares every value the step did not change
        evolved = _new(Execution)
        _set_dict(evolved, {**exe.__dict__, **changes})
        _set_fields_set(evolved, exe.__pydantic_fields_set__.union(changes))
        _set_extra(evolved, None)
        _set_private(evolved, None)
        return Step(
            evolved,
            self.emits,
            self.spawns,
            self.timer_ops,
            self.disposition != "ignored",
            self.disposition,
            self.forwarded_to,
            self.trace,
        )

    def trace(self) -> dict[str, Any]:
        """The step's record, as the store keeps it (`harel trace` shows it)."""
        received = self.received
        handled = self.disposition != "ignored"
        # `[]` where a list would be built from nothing, and loops rather than comprehensions for the
        # records of timers and emits (a comprehension is a function call): most steps have no timer,
        # emit, spawn or forward, the others one or two
        trace: dict[str, Any] = {
            "event": received.name,
            "event_id": received.id,
            "at": self.now,
            "from": self.exe.configuration,
            "to": [] if self.leaf is None else [self.leaf],
            "handled": handled,
            "disposition": self.disposition,
            "forwarded_to": list(self.forwarded_to) if self.forwarded_to else [],
            "reason": None if handled else self.reason,
            "transitions": self.transitions,
            "actions": self.actions,
            "internal": self.internal_trace,
            "timers": [],
            "emits": [],
            "spawns": [child for child, _, _ in self.spawns] if self.spawns else [],
            "status": _STATUS_TEXT[self.status],
        }
        if self.timer_ops:
            timers = trace["timers"]
            for op in self.timer_ops:
                timers.append({"op": op.action, "path": op.path, "fire_at": op.fire_at})
        if self.emits:
            emits = trace["emits"]
            for target, event in self.emits:
                emits.append({"target": target, "event": event.name, "id": event.id})
        if received.name == TIMER_EVENT:
            trace["timer_fire_at"] = received.data.get("fire_at")
        return trace
