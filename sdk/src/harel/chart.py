"""Statechart definitions: the data format, loading it from YAML, JSON or a dict, and validating it.

A chart is data. Behaviour (actions, guards) is referenced by registered name, so a chart can be stored,
diffed and versioned like any other document. docs/charts.md is the reference of every key, with examples;
docs/semantics.md says what a step does with them.

    id: order
    version: 1
    initial: placed
    states:
      placed:
        on:
          approve:                 # guarded alternatives: the first enabled one, in document order, wins
            - {target: fulfilling, guard: order_is_valid}
            - {target: rejected}
      fulfilling:
        parallel:                  # orthogonal regions: each runs as a child execution
          payment: {initial: charging, states: {charging: {after: {30s: failed}}, failed: {final: true}}}
        on_done: delivered         # the join: fires once every region has reached a final state
      delivered: {final: true}
      rejected: {final: true}

State kinds: atomic; compound (`initial` + `states`); parallel (`parallel: {region: {initial, states}}`);
final (`final: true`, with `status: failed` to end the execution as failed rather than completed, and an
optional JSON `result`); history (`history: shallow | deep` and an optional default `target`, a
pseudo-state inside a compound state). A state may carry `entry` and `exit` action lists (registered
actions' names, and the chart's own `{send: {event, to, delay, id, queue}}` and `{cancel: <id>}`, which load
as the `Send` and `Cancel` an action could return), `on` transitions (keyed by event descriptors: names,
`prefix.*`, `*`, several separated by spaces), `after` timers, `always` (eventless) transitions and, when
it is compound or parallel, `on_done`; a parallel state also `on_region_done` per region. A transition is a target name, or `{target, guard, actions, reenter}`, or a
list of those (alternatives tried in document order); its guard is a registered name or `{in: <state>}`;
without a target it is internal (it runs its actions and leaves the configuration alone). Durations are
`250ms`, `2s`, `1.5s`, `5m`, `1h`, `3d`, or a plain number of seconds.

Paths and targets. Every node has a path: the names from the top joined with `.`
(`fulfilling.payment.charging`). A region is a node (`fulfilling.payment`) but not a state. Targets are
resolved once, at load time:
- a dotted target (`fulfilling.payment.paid`) is an absolute path from the top of the chart;
- a bare name (`paid`) names a sibling of the state that declares the transition (same parent) first;
  when there is no such sibling, the enclosing levels are searched outward, ending at the top level.
A region runs as its own child execution, so a transition must stay in the region it starts in: it can
neither leave its region (send the parent an event instead) nor enter a region from outside (target the
parallel state; every region then starts at its own initial state).

State and region names become MongoDB keys (the durable timers are keyed by path), so a name that MongoDB
could not store is rejected: empty, starting with `$`, containing `.`, U+FF0E or NUL.

`load_chart` reports every problem it finds at once as a `ChartError`, each as `<location>: <problem>`
where the location is the key path in the source (`states.fulfilling.parallel.payment.initial`). A key
given twice in one mapping of YAML or JSON text (two `go:` under one `on:`, two states named `a`) is
refused before anything else, since the parsers would silently keep the last one. Problems of shape
(unknown keys, wrong types) come next; the checks that need the whole tree (targets, regions) run once the
shape is right.

Loading also precomputes what the interpreter needs on every step (`Node.chain`, `Node.handlers`,
`Node.eventless`, `Edge.enter`, ...), so a step does dictionary lookups, not tree walks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from harel.errors import ChartError, InvalidContext, InvalidDuration
from harel.ids import check_json
from harel.model import RESERVED_EVENT_PREFIX, ExecutionStatus
from harel.sends import SIBLING_PREFIX, Cancel, Send

CHART_SUFFIXES = (".yaml", ".yml", ".json")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds in `250ms`, `2s`, `1.5s`, `5m`, `1h`, `3d` or a plain number of seconds; InvalidDuration
    otherwise."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise InvalidDuration(text)
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


# --- the format ----------------------------------------------------------------------------------------


def _alternatives(value: Any) -> Any:
    """A transition slot holds one transition or a list of alternatives; each is a target name (`event:
    target`), a mapping, or null (an internal transition without actions)."""

    def one(item: Any) -> Any:
        if item is None:
            return {}
        if isinstance(item, str):
            return {"target": item}
        return item

    if isinstance(value, list | tuple):
        return tuple(one(item) for item in value)
    return (one(value),)


class SentEvent(BaseModel):
    """`event: {name, data}` in a chart's `send:` action: an event with data (`event: <name>` has none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    data: dict[str, Any] = Field(default_factory=dict)


def _event_kind(value: Any) -> str:
    return "<event>" if isinstance(value, Mapping | SentEvent) else "<name>"


class SendSpec(BaseModel):
    """The value of a chart's `send:` action: `Send`'s fields, to self and through the mailbox by default
    (SCXML's `<send>`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: Annotated[
        Annotated[str, Tag("<name>")] | Annotated[SentEvent, Tag("<event>")], Discriminator(_event_kind)
    ]
    to: str = "self"
    delay: str | float | None = None
    id: str | None = None
    queue: Literal["internal", "external"] = "external"

    @field_validator("delay", mode="before")
    @classmethod
    def _no_boolean_delay(cls, value: Any) -> Any:
        if isinstance(value, bool):  # a float field would take true as 1 second
            raise PydanticCustomError(
                "delay", "a delay is a duration ('3d', '90s') or seconds, not a boolean"
            )
        return value


class SendAction(BaseModel):
    """`{send: {event, to, delay, id, queue}}` in an action list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    send: SendSpec


class CancelAction(BaseModel):
    """`{cancel: <id>}` in an action list: calls off the delayed send with that id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cancel: str


def _action_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "<registered>"
    if isinstance(value, SendAction) or (isinstance(value, Mapping) and "send" in value):
        return "<send>"
    if isinstance(value, CancelAction) or (isinstance(value, Mapping) and "cancel" in value):
        return "<cancel>"
    return None


# An action in an `entry`, `exit` or `actions` list: a registered action's name, or one of the chart's own
ActionSpec = Annotated[
    Annotated[str, Tag("<registered>")]
    | Annotated[SendAction, Tag("<send>")]
    | Annotated[CancelAction, Tag("<cancel>")],
    Discriminator(
        _action_kind,
        custom_error_type="action",
        custom_error_message="an action is a registered action's name, {send: {...}} or {cancel: <id>}",
    ),
]
# The tags above name the branch pydantic validated in an error's location; the author never wrote them
_UNION_TAGS = frozenset({"<name>", "<event>", "<registered>", "<send>", "<cancel>"})


class StateGuard(BaseModel):
    """`guard: {in: <state>}`: enabled while the state is active in the execution's own configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: str = Field(alias="in", min_length=1)


class Transition(BaseModel):
    """One alternative of an `on`, `after`, `always`, `on_done` or `on_region_done` slot: taken when its
    guard (if any) passes. `reenter: true` exits and re-enters a source that encloses the target."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str | None = None
    guard: str | StateGuard | None = None
    actions: tuple[ActionSpec, ...] = ()
    reenter: bool = False


Alternatives = Annotated[tuple[Transition, ...], BeforeValidator(_alternatives)]


class State(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entry: tuple[ActionSpec, ...] = ()
    exit: tuple[ActionSpec, ...] = ()
    on: dict[str, Alternatives] = Field(default_factory=dict)
    after: dict[str, Alternatives] = Field(default_factory=dict)
    always: Alternatives = ()
    initial: str | None = None
    states: dict[str, State] | None = None
    parallel: dict[str, Region] | None = None
    on_done: Alternatives = ()
    on_region_done: dict[str, Alternatives] = Field(default_factory=dict)
    final: bool = False
    status: Literal["completed", "failed"] | None = None
    result: Any = None
    history: Literal["shallow", "deep"] | None = None
    target: str | None = None

    @field_validator("after", mode="before")
    @classmethod
    def _numeric_durations(cls, value: Any) -> Any:
        # YAML reads `after: {5: done}` with an int key; a plain number means seconds.
        if isinstance(value, Mapping):
            return {
                str(k) if isinstance(k, int | float) and not isinstance(k, bool) else k: v
                for k, v in value.items()
            }
        return value


class Region(BaseModel):
    """One orthogonal region of a parallel state: compound-like, run as a child execution."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial: str
    states: dict[str, State]


# --- the resolved tree the interpreter walks ------------------------------------------------------------

NodeKind = Literal["atomic", "compound", "parallel", "final", "region", "history"]
HistoryKind = Literal["shallow", "deep"]

# What an action list holds once loaded: a registered action's name, or a chart's own `send:` or `cancel:`
ChartAction = str | Send | Cancel


def action_label(action: ChartAction) -> str:
    """How traces and diagrams name an action: its registered name, `send:<event>` or `cancel:<id>`."""
    if isinstance(action, str):
        return action
    if isinstance(action, Send):
        return f"send:{action.event}"
    return f"cancel:{action.id}"


def send_id_problem(send_id: object) -> str | None:
    """Why `send_id` cannot name a delayed send (its timer is `send:<id>`, a MongoDB key), or None."""
    if not isinstance(send_id, str) or not send_id or "\x00" in send_id or "\uff0e" in send_id:
        return f"send id {send_id!r} must be a non-empty string without NUL or U+FF0E"
    return None


WILDCARD = "*"
# The key of a delayed send's timer in an execution's `timers` is `send:<send id>`; no state's timer key
# may take that form.
SEND_TIMER_PREFIX = "send:"
_WILDCARD_SUFFIX = ".*"


def event_descriptors(key: str) -> tuple[str, ...]:
    """The event descriptors of an `on` key, each once: `open close` lists two. A descriptor is an event
    name, a name followed by `.*` (`mouse.*`), or `*`."""
    return tuple(dict.fromkeys(key.split()))


def is_pattern(descriptor: str) -> bool:
    return descriptor == WILDCARD or descriptor.endswith(_WILDCARD_SUFFIX)


def descriptor_matches(descriptor: str, name: str) -> bool:
    """SCXML's descriptor matching for the patterns: `*` matches every event, `mouse.*` matches `mouse` and
    every name whose dot-separated tokens start with `mouse` (`mouse.click`, not `mousepad`). A plain name
    matches itself only."""
    if descriptor == WILDCARD:
        return True
    if descriptor.endswith(_WILDCARD_SUFFIX):
        prefix = descriptor[:-2]
        return name == prefix or (name.startswith(prefix) and name[len(prefix) : len(prefix) + 1] == ".")
    return name == descriptor


def _descriptor_problem(descriptor: str) -> str | None:
    if descriptor.startswith(RESERVED_EVENT_PREFIX):
        return f"event names starting with {RESERVED_EVENT_PREFIX!r} are reserved for the engine"
    if WILDCARD not in descriptor or descriptor == WILDCARD:
        return None
    prefix = descriptor.removesuffix(_WILDCARD_SUFFIX)
    if prefix == descriptor or WILDCARD in prefix or not prefix or prefix.endswith("."):
        return f"{descriptor!r}: a wildcard is '*' alone or '.*' ending a name ('mouse.*')"
    return None


@dataclass(frozen=True)
class Edge:
    """A transition with its target resolved to an absolute path (None: internal, actions only).

    `enter` (the states a transition enters, outer to inner, default initial states included; for a target
    that is a history state, down to the history's parent, the rest decided when it is taken) and
    `exit_depth` (active states deeper than this many path components are exited) are precomputed.
    `in_state` is the state a `guard: {in: ...}` requires active; `guarded` says the edge has a guard of
    either kind."""

    source: str
    target: str | None
    guard: str | None = None
    actions: tuple[ChartAction, ...] = ()
    in_state: str | None = None
    reenter: bool = False
    enter: tuple[str, ...] = field(default=(), compare=False, repr=False)
    exit_depth: int = field(default=0, compare=False, repr=False)
    history: str | None = field(default=None, compare=False, repr=False)
    guarded: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "guarded", self.guard is not None or self.in_state is not None)

    @property
    def guard_text(self) -> str:
        """The guard as written: its name, or `{in: <state>}`."""
        return repr(self.guard) if self.guard is not None else f"{{in: {self.in_state!r}}}"


@dataclass(frozen=True)
class After:
    """One of a state's durable timers: the first enabled of `edges` is taken `seconds` after the state was
    entered. `key` names it in the execution's `timers`: the state's path for a state's only timer (as
    before states had several), else `<path>#<duration as written>` (`waiting#30s`)."""

    seconds: float
    edges: tuple[Edge, ...]
    duration: str
    key: str


@dataclass(frozen=True)
class Node:
    """A state or region at `path`. `scope` is the innermost region that encloses it (None: the top).

    Precomputed for the interpreter (not part of equality): `depth` (path components); `chain`, the states
    active in an execution whose active leaf is this node (from the top of its scope down to it);
    `handlers`, per event name the `on` alternatives of that chain, innermost state first; `patterned`,
    when the chain has an `on` pattern (`*`, `mouse.*`), every `on` entry of the chain as (descriptors,
    alternatives), innermost state first and in document order within a state (the interpreter then
    matches these instead of `handlers`); `eventless`, the chain's `always` alternatives, innermost first;
    `descent`, the node and the initial states below it; `histories`, its history states; for a history
    state, `restore_default` (what it enters below its parent with nothing remembered); for a region,
    `handles` and `handles_patterns` (the event names and patterns an `on` inside it handles) and `start`
    (the states its child execution enters when it starts)."""

    path: str
    kind: NodeKind
    parent: str | None
    scope: str | None
    children: tuple[str, ...] = ()
    initial: str | None = None
    entry: tuple[ChartAction, ...] = ()
    exit: tuple[ChartAction, ...] = ()
    on: Mapping[str, tuple[Edge, ...]] = field(default_factory=dict)
    after: tuple[After, ...] = ()
    always: tuple[Edge, ...] = ()
    on_done: tuple[Edge, ...] = ()
    on_region_done: Mapping[str, tuple[Edge, ...]] = field(default_factory=dict)
    final_status: ExecutionStatus | None = None
    result: Any = None
    history: HistoryKind | None = None
    default: str | None = None
    depth: int = field(default=0, compare=False, repr=False)
    chain: tuple[str, ...] = field(default=(), compare=False, repr=False)
    handlers: Mapping[str, tuple[Edge, ...]] = field(default_factory=dict, compare=False, repr=False)
    patterned: tuple[tuple[tuple[str, ...], tuple[Edge, ...]], ...] = field(
        default=(), compare=False, repr=False
    )
    eventless: tuple[Edge, ...] = field(default=(), compare=False, repr=False)
    descent: tuple[str, ...] = field(default=(), compare=False, repr=False)
    histories: tuple[str, ...] = field(default=(), compare=False, repr=False)
    restore_default: tuple[str, ...] = field(default=(), compare=False, repr=False)
    handles: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    handles_patterns: tuple[str, ...] = field(default=(), compare=False, repr=False)
    start: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def handles_event(self, name: str) -> bool:
        """For a region: whether an `on` somewhere inside it handles the event `name`."""
        if name in self.handles:
            return True
        return bool(self.handles_patterns) and any(descriptor_matches(d, name) for d in self.handles_patterns)

    def edges(self) -> Iterator[tuple[str, Edge]]:
        """Every transition this node declares with its slot (`on:<event>`, `after:<duration>`, `always`,
        `on_done`, `on_region_done:<region>`)."""
        for event, alternatives in self.on.items():
            for edge in alternatives:
                yield f"on:{event}", edge
        for after in self.after:
            for edge in after.edges:
                yield f"after:{after.duration}", edge
        for edge in self.always:
            yield "always", edge
        for edge in self.on_done:
            yield "on_done", edge
        for region, alternatives in self.on_region_done.items():
            for edge in alternatives:
                yield f"on_region_done:{region}", edge


class Chart(BaseModel):
    """A validated statechart. Build it with `load_chart`, which reports problems as one ChartError."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    version: int = Field(ge=1, strict=True)
    description: str | None = None
    initial: str
    states: dict[str, State]

    _nodes: dict[str, Node] = PrivateAttr(default_factory=dict)
    _start: tuple[str, ...] = PrivateAttr(default=())
    _timers: dict[str, tuple[Node, int]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _resolve(self) -> Chart:
        builder = _TreeBuilder(self)
        if builder.problems:
            raise ChartError(self.id, builder.problems)
        self._nodes = builder.nodes
        self._start = builder.start
        self._timers = {key: (builder.nodes[path], index) for key, (path, index) in builder.timers.items()}
        return self

    def timer(self, key: str) -> tuple[Node, int] | None:
        """The state a key of an execution's `timers` belongs to and the timer's index in its `after`; None
        for a key this chart has not."""
        private = self.__pydantic_private__
        assert private is not None
        found: tuple[Node, int] | None = private["_timers"].get(key)
        return found

    def node(self, path: str) -> Node:
        """The state or region at `path`; KeyError when the chart has none."""
        try:
            return self._nodes[path]
        except KeyError:
            raise KeyError(f"chart {self.id!r} has no state or region at {path!r}") from None

    def region(self, root_path: str) -> Node:
        """The region a child execution runs (`root_path` like `fulfilling.payment`)."""
        node = self.node(root_path)
        if node.kind != "region":
            raise KeyError(f"chart {self.id!r}: {root_path!r} is a {node.kind} state, not a region")
        return node

    def initial_state(self, root_path: str | None = None) -> str:
        """Where an execution starts: the chart's `initial`, or for a child its region's `initial`."""
        if root_path is None:
            return self.initial
        return self.region(root_path).initial or ""

    def start_states(self, root_path: str | None = None) -> tuple[str, ...]:
        """The states an execution enters when it starts, outer to inner (its initial state, then initial
        states down to a leaf)."""
        if root_path is None:
            return self._start
        return self.region(root_path).start

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Every state and region by path, in document order."""
        # read on every step: the private-attribute dict directly, not pydantic's __getattr__ (30x slower)
        private = self.__pydantic_private__
        assert private is not None
        nodes: dict[str, Node] = private["_nodes"]
        return nodes

    def references(self) -> list[tuple[Literal["action", "guard"], str]]:
        """Every action and guard name the chart uses, each once, in document order."""
        seen: dict[tuple[Literal["action", "guard"], str], None] = {}
        for node in self._nodes.values():
            for ref in _node_references(node):
                seen.setdefault(ref, None)
        return list(seen)

    def event_names(self) -> tuple[str, ...]:
        """Every event descriptor some `on` transition names (event names and patterns), sorted."""
        return tuple(
            sorted({d for node in self._nodes.values() for key in node.on for d in event_descriptors(key)})
        )

    def accepts(self, name: str) -> bool:
        """Whether some `on` transition of the chart matches the event `name`."""
        return any(descriptor_matches(d, name) for d in self.event_names())


def _node_references(node: Node) -> Iterator[tuple[Literal["action", "guard"], str]]:
    for action in (*node.entry, *node.exit):
        if isinstance(action, str):
            yield "action", action
    for _, edge in node.edges():
        if edge.guard is not None:
            yield "guard", edge.guard
        for action in edge.actions:
            if isinstance(action, str):
                yield "action", action


def _prefixes(path: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]."""
    parts = path.split(".")
    return [".".join(parts[:depth]) for depth in range(1, len(parts) + 1)]


def _domain_depth(source: str, target: str) -> int:
    """Path components of the deepest state that properly encloses both `source` and `target` (0: the top).
    A transition exits the active states below it and enters the target's ancestors below it, so a
    transition to the source itself or to one of its descendants exits and re-enters the source."""
    depth = 0
    for mine, theirs in zip(source.split(".")[:-1], target.split(".")[:-1], strict=False):
        if mine != theirs:
            break
        depth += 1
    return depth


# --- validation -----------------------------------------------------------------------------------------


@dataclass
class _Draft:
    """A node as first collected: kind and place known, targets not yet resolved."""

    path: str
    kind: NodeKind
    parent: str | None
    scope: str | None
    location: str
    spec: State | Region


def _name_problem(name: str) -> str | None:
    if not name:
        return "a state name cannot be empty"
    if name.startswith("$"):
        return f"state name {name!r} starts with '$', which MongoDB cannot store as a key"
    if "." in name:
        return f"state name {name!r} contains '.', the path separator (MongoDB cannot store it in a key)"
    if "\uff0e" in name:
        return f"state name {name!r} contains U+FF0E '．', which stands for '.' in stored paths"
    if "\x00" in name:
        return f"state name {name!r} contains NUL, which MongoDB cannot store in a key"
    return None


class _TreeBuilder:
    """Collects every node, resolves every transition, then precomputes the interpreter's indexes; records
    every problem on the way."""

    def __init__(self, chart: Chart) -> None:
        self.problems: list[str] = []
        self.drafts: dict[str, _Draft] = {}
        self.nodes: dict[str, Node] = {}
        self.start: tuple[str, ...] = ()
        self.timers: dict[str, tuple[str, int]] = {}
        if not chart.states:
            self.problems.append("states: a chart needs at least one state")
        elif chart.initial not in chart.states:
            self.problems.append(f"initial: no state named {chart.initial!r}")
        self._collect(chart.states, parent=None, scope=None, location="states")
        for draft in self.drafts.values():
            self.nodes[draft.path] = self._build(draft)
        if not self.problems:
            self.start = self._descent(chart.initial)
            self.nodes = {path: self._index(node) for path, node in self.nodes.items()}

    def _problem(self, location: str, text: str) -> None:
        self.problems.append(f"{location}: {text}")

    # pass 1: structure ------------------------------------------------------------------------------

    def _collect(
        self, states: dict[str, State], parent: str | None, scope: str | None, location: str
    ) -> None:
        for name, state in states.items():
            here = f"{location}.{name}"
            path = name if parent is None else f"{parent}.{name}"
            if (problem := _name_problem(name)) is not None:
                self._problem(here, problem)
            self.drafts[path] = _Draft(path, self._kind(state, here), parent, scope, here, state)
            if state.history is not None:
                self._check_history_place(parent, here)
            self._check_local(state, here)
            if state.states:
                self._collect(state.states, path, scope, f"{here}.states")
            for region_name, region in (state.parallel or {}).items():
                region_here = f"{here}.parallel.{region_name}"
                region_path = f"{path}.{region_name}"
                if (problem := _name_problem(region_name)) is not None:
                    self._problem(region_here, problem.replace("state name", "region name"))
                self.drafts[region_path] = _Draft(region_path, "region", path, scope, region_here, region)
                if not region.states:
                    self._problem(f"{region_here}.states", "a region needs at least one state")
                elif region.initial not in region.states:
                    self._problem(f"{region_here}.initial", f"no state named {region.initial!r}")
                self._collect(region.states, region_path, region_path, f"{region_here}.states")

    def _check_history_place(self, parent: str | None, here: str) -> None:
        if parent is None:
            self._problem(
                here,
                "a history state belongs in a compound state; the top level is never left, so it has "
                "nothing to remember",
            )
        elif self.drafts[parent].kind == "region":
            self._problem(
                here,
                f"a history state cannot be at the top of the region {parent!r}: a region runs as a child "
                "execution that starts afresh, at its initial state, every time the parallel state is "
                "entered, so there is nothing to remember; put the history in a compound state inside "
                "the region",
            )

    def _kind(self, state: State, here: str) -> NodeKind:
        if state.history is not None:
            extras = sorted(state.model_fields_set - {"history", "target"})
            if extras:
                self._problem(
                    here,
                    "a history state has only `history` and a default `target`; remove " + ", ".join(extras),
                )
            return "history"
        if state.target is not None:
            self._problem(
                f"{here}.target",
                "only a history state has a target of its own (`history: shallow`); a transition's target "
                "goes under on, after, always or on_done",
            )
        if state.on_region_done and state.parallel is None:
            self._problem(
                f"{here}.on_region_done",
                "only a parallel state has regions to be done; remove on_region_done",
            )
        for region in state.on_region_done:
            if state.parallel is not None and region not in state.parallel:
                known = ", ".join(state.parallel) or "none"
                self._problem(
                    f"{here}.on_region_done.{region}", f"no region named {region!r} (regions: {known})"
                )
        if state.final:
            extras = [
                key
                for key in (
                    "on",
                    "after",
                    "always",
                    "on_done",
                    "on_region_done",
                    "initial",
                    "states",
                    "parallel",
                )
                if getattr(state, key)
            ]
            if extras:
                self._problem(
                    here, f"a final state has no transitions or children; remove {', '.join(extras)}"
                )
            if state.result is not None:
                try:
                    check_json(state.result, "result")
                except InvalidContext as exc:
                    self._problem(f"{here}.result" + (f".{exc.key_path}" if exc.key_path else ""), exc.reason)
            return "final"
        if state.status is not None:
            self._problem(f"{here}.status", "only a final state has a status")
        if state.result is not None:
            self._problem(f"{here}.result", "only a final state has a result")
        if state.parallel is not None:
            if state.states is not None or state.initial is not None:
                self._problem(here, "a state is either compound (initial, states) or parallel, not both")
            if not state.parallel:
                self._problem(f"{here}.parallel", "a parallel state needs at least one region")
            return "parallel"
        if state.states is not None or state.initial is not None:
            if not state.states:
                self._problem(f"{here}.states", "a compound state needs at least one child state")
            elif state.initial is None:
                self._problem(f"{here}.initial", "required: the child state a compound state starts in")
            elif state.initial not in state.states:
                self._problem(f"{here}.initial", f"no state named {state.initial!r}")
            elif state.states[state.initial].history is not None:
                self._problem(
                    f"{here}.initial",
                    f"{state.initial!r} is a history state; the initial state is a real state (a history "
                    "state's default `target` is where it goes with nothing remembered)",
                )
            return "compound"
        if state.on_done:
            self._problem(
                f"{here}.on_done",
                "an atomic state never completes; on_done needs a compound or parallel state",
            )
        return "atomic"

    def _check_local(self, state: State, here: str) -> None:
        for event, alternatives in state.on.items():
            descriptors = event_descriptors(event)
            problems = [p for p in map(_descriptor_problem, descriptors) if p is not None]
            if not descriptors:
                self._problem(f"{here}.on", "an event name cannot be empty")
            elif problems:
                for problem in problems:
                    self._problem(f"{here}.on.{event}", problem)
            elif not alternatives:
                self._problem(f"{here}.on.{event}", "an empty list; give at least one transition")
        for duration, alternatives in state.after.items():
            try:
                parse_duration(duration)
            except InvalidDuration as exc:
                self._problem(f"{here}.after.{duration}", str(exc))
            if not alternatives:
                self._problem(f"{here}.after.{duration}", "an empty list; give at least one transition")
        for region, alternatives in state.on_region_done.items():
            if not alternatives:
                self._problem(
                    f"{here}.on_region_done.{region}", "an empty list; give at least one transition"
                )
        for index, transition in enumerate(state.always):
            if transition.guard is None and transition.target is None:
                where = f"{here}.always" + (f".{index}" if len(state.always) > 1 else "")
                self._problem(
                    where,
                    "an eventless transition with neither guard nor target would fire forever; "
                    "give it a guard or a target",
                )

    # pass 2: targets ------------------------------------------------------------------------------------

    def _build(self, draft: _Draft) -> Node:
        if isinstance(draft.spec, Region):
            return Node(
                path=draft.path,
                kind="region",
                parent=draft.parent,
                scope=draft.scope,
                children=tuple(f"{draft.path}.{name}" for name in draft.spec.states),
                initial=f"{draft.path}.{draft.spec.initial}",
            )
        spec = draft.spec
        if draft.kind == "history":
            return Node(
                path=draft.path,
                kind="history",
                parent=draft.parent,
                scope=draft.scope,
                history=spec.history,
                default=self._history_default(draft, spec.target),
            )
        on = {
            event: self._edges(draft, alternatives, f"{draft.location}.on.{event}")
            for event, alternatives in spec.on.items()
        }
        after: list[After] = []
        for duration, alternatives in spec.after.items():
            edges = self._edges(draft, alternatives, f"{draft.location}.after.{duration}")
            if _DURATION.fullmatch(duration):
                key = draft.path if len(spec.after) == 1 else f"{draft.path}#{duration}"
                if key.startswith(SEND_TIMER_PREFIX):
                    self._problem(
                        f"{draft.location}.after.{duration}",
                        f"its timer key {key!r} starts with {SEND_TIMER_PREFIX!r}, the form of a delayed "
                        "send's timer; rename the state",
                    )
                elif key in self.timers:
                    self._problem(
                        f"{draft.location}.after.{duration}",
                        f"its timer key {key!r} is also the key of the timer of the state {self.timers[key][0]!r}; "
                        "rename one of the states",
                    )
                self.timers[key] = (draft.path, len(after))
                after.append(After(parse_duration(duration), edges, duration, key))
        children: tuple[str, ...] = ()
        histories: tuple[str, ...] = ()
        if spec.states:
            children = tuple(f"{draft.path}.{name}" for name in spec.states)
            histories = tuple(f"{draft.path}.{name}" for name, child in spec.states.items() if child.history)
        elif spec.parallel:
            children = tuple(f"{draft.path}.{name}" for name in spec.parallel)
        return Node(
            path=draft.path,
            kind=draft.kind,
            parent=draft.parent,
            scope=draft.scope,
            children=children,
            initial=f"{draft.path}.{spec.initial}" if draft.kind == "compound" else None,
            entry=self._actions(draft, spec.entry, f"{draft.location}.entry"),
            exit=self._actions(draft, spec.exit, f"{draft.location}.exit"),
            on=on,
            after=tuple(after),
            always=self._edges(draft, spec.always, f"{draft.location}.always"),
            on_done=self._edges(draft, spec.on_done, f"{draft.location}.on_done"),
            on_region_done={
                region: self._edges(draft, alternatives, f"{draft.location}.on_region_done.{region}")
                for region, alternatives in spec.on_region_done.items()
            },
            histories=histories,
            final_status=ExecutionStatus(spec.status or "completed") if draft.kind == "final" else None,
            result=spec.result if draft.kind == "final" else None,
        )

    def _edges(self, source: _Draft, alternatives: tuple[Transition, ...], location: str) -> tuple[Edge, ...]:
        edges = []
        for index, transition in enumerate(alternatives):
            edge = self._edge(
                source, transition, f"{location}.{index}" if len(alternatives) > 1 else location
            )
            if edge is not None:
                edges.append(edge)
        return tuple(edges)

    def _edge(self, source: _Draft, transition: Transition, location: str) -> Edge | None:
        actions = self._actions(source, transition.actions, f"{location}.actions")
        guard = transition.guard
        name = guard if isinstance(guard, str) else None
        in_state = None
        if isinstance(guard, StateGuard):
            in_state = self._state_guard(source, guard.state, f"{location}.guard.in")
            if in_state is None:
                return None
        if transition.target is None:
            if transition.reenter:
                self._problem(f"{location}.reenter", "a transition without a target enters nothing again")
            return Edge(source.path, None, name, actions, in_state)
        target = self._resolve(source, transition.target)
        if target is None:
            what = "state at path" if "." in transition.target else "state named"
            self._problem(location, f"no {what} {transition.target!r}")
            return None
        problem = self._placement_problem(source, target)
        if problem is not None:
            self._problem(location, problem)
            return None
        inside = target.path == source.path or target.path.startswith(f"{source.path}.")
        if inside and not transition.reenter:
            # the source is the domain: it stays active, only what is below it is exited and entered
            depth = source.path.count(".") + 1
        else:
            depth = _domain_depth(source.path, target.path)
        if target.kind == "history":
            enter = tuple(_prefixes(target.path)[depth:-1])  # down to its parent; the rest when taken
            history: str | None = target.path
        elif target.path == source.path and not transition.reenter:
            enter, history = self._descent(target.path)[1:], None
        else:
            enter, history = (*_prefixes(target.path)[depth:-1], *self._descent(target.path)), None
        return Edge(
            source.path,
            target.path,
            name,
            actions,
            in_state,
            transition.reenter,
            enter=enter,
            exit_depth=depth,
            history=history,
        )

    def _actions(
        self, source: _Draft, specs: tuple[str | SendAction | CancelAction, ...], location: str
    ) -> tuple[ChartAction, ...]:
        """An action list with the chart's own `send:` and `cancel:` checked and made `Send`s and `Cancel`s;
        two sends with one id in a list are refused (the second would replace the first at once)."""
        actions: list[ChartAction] = []
        ids: dict[str, int] = {}
        for index, spec in enumerate(specs):
            here = f"{location}.{index}"
            if isinstance(spec, str):
                actions.append(spec)
            elif isinstance(spec, CancelAction):
                problem = send_id_problem(spec.cancel)
                if problem is not None:
                    self._problem(f"{here}.cancel", problem)
                else:
                    actions.append(Cancel(spec.cancel))
            else:
                send = self._send(source, spec.send, f"{here}.send")
                if send is None:
                    continue
                if send.id is not None:
                    if send.id in ids:
                        self._problem(
                            f"{here}.send.id",
                            f"the send at {location}.{ids[send.id]} has the id {send.id!r} too; a send "
                            "replaces a pending one with its id, so the first would never be delivered",
                        )
                    ids.setdefault(send.id, index)
                actions.append(send)
        return tuple(actions)

    def _send(self, source: _Draft, spec: SendSpec, location: str) -> Send | None:
        """The `Send` a chart's `send:` action makes, refused (None, the problems recorded) where a step
        would refuse it with InvalidSend, and where the event could never be handled or stored."""
        before = len(self.problems)
        name, data = (spec.event, {}) if isinstance(spec.event, str) else (spec.event.name, spec.event.data)
        if not name:
            self._problem(f"{location}.event", "an event name cannot be empty")
        elif name.startswith(RESERVED_EVENT_PREFIX):
            self._problem(
                f"{location}.event", f"event names starting with {RESERVED_EVENT_PREFIX!r} are the engine's"
            )
        if data:
            try:
                check_json(data, "data")
            except InvalidContext as exc:
                self._problem(
                    f"{location}.event.data" + (f".{exc.key_path}" if exc.key_path else ""), exc.reason
                )
        problem = self._address_problem(source, spec.to)
        if problem is not None:
            self._problem(f"{location}.to", problem)
        seconds: float | None = None
        if isinstance(spec.delay, str):
            try:
                seconds = parse_duration(spec.delay)
            except InvalidDuration as exc:
                self._problem(f"{location}.delay", str(exc))
        elif spec.delay is not None:
            if spec.delay < 0 or not math.isfinite(spec.delay):
                self._problem(f"{location}.delay", f"delay {spec.delay!r} is not a duration")
            else:
                seconds = spec.delay
        if spec.queue == "internal":
            if spec.delay is not None:
                self._problem(f"{location}.queue", "a delayed event is external: it cannot be internal")
            elif spec.to != "self":
                self._problem(
                    f"{location}.queue",
                    "only an event to self can be internal; other executions get theirs by mailbox",
                )
        if spec.id is not None:
            if spec.delay is None:
                self._problem(
                    f"{location}.id",
                    "an id names a delayed send for a cancel; give a delay, or remove the id",
                )
            elif (problem := send_id_problem(spec.id)) is not None:
                self._problem(f"{location}.id", problem)
        if len(self.problems) > before:
            return None
        return Send(name, to=spec.to, data=data, queue=spec.queue, delay=seconds, id=spec.id)

    def _address_problem(self, source: _Draft, to: str) -> str | None:
        """Why the state `source` can never send to `to`, or None: what a step would find at once."""
        if not to:
            return "an address is 'self', 'parent', 'sibling:<region>' or an execution id, not empty"
        if to == "parent" and source.scope is None:
            return (
                f"{source.path!r} is in no region of a parallel state: it runs in the root execution, "
                "which has no parent"
            )
        if not to.startswith(SIBLING_PREFIX):
            return None
        region = to.removeprefix(SIBLING_PREFIX)
        if source.scope is None:
            return f"{source.path!r} is in no region of a parallel state: it has no sibling regions"
        parallel = self.drafts[source.scope].parent
        assert parallel is not None
        spec = self.drafts[parallel].spec
        siblings = list(spec.parallel or {}) if isinstance(spec, State) else []
        if region not in siblings:
            return f"no sibling region {region!r} (siblings: {', '.join(siblings)})"
        return None

    def _state_guard(self, source: _Draft, name: str, location: str) -> str | None:
        """The path a `guard: {in: name}` tests; None (a problem recorded) when the execution running the
        transition could never see that state active."""
        found = self._resolve(source, name)
        if found is None:
            what = "state at path" if "." in name else "state named"
            self._problem(location, f"no {what} {name!r}")
            return None
        if found.kind in ("region", "history"):
            what = "a region" if found.kind == "region" else "a history state, never active itself"
            self._problem(location, f"{found.path!r} is {what}; name a state")
            return None
        if found.scope != source.scope:
            inside = f"the region {found.scope!r}" if found.scope is not None else "the parent execution"
            self._problem(
                location,
                f"{found.path!r} is in {inside}, which runs as another execution: a guard sees only its "
                "own execution's configuration (send an event across instead)",
            )
            return None
        return found.path

    def _history_default(self, draft: _Draft, target_name: str | None) -> str | None:
        """The resolved default target of a history state (None: its parent's initial state)."""
        if target_name is None or draft.parent is None:
            return None
        location = f"{draft.location}.target"
        found = self._resolve(draft, target_name)
        if found is None:
            what = "state at path" if "." in target_name else "state named"
            self._problem(location, f"no {what} {target_name!r}")
            return None
        if not found.path.startswith(f"{draft.parent}.") or found.kind == "history":
            self._problem(
                location,
                f"a history state's default target is a state inside its parent {draft.parent!r}, not "
                f"{found.path!r}",
            )
            return None
        problem = self._placement_problem(draft, found)
        if problem is not None:
            self._problem(location, problem)
            return None
        return found.path

    def _descent(self, path: str) -> tuple[str, ...]:
        """`path`, then the initial state of each compound state below it, outer to inner."""
        entered = [path]
        draft = self.drafts.get(path)
        while draft is not None and draft.kind == "compound" and isinstance(draft.spec, State):
            draft = self.drafts.get(f"{draft.path}.{draft.spec.initial}")
            if draft is None:
                break
            entered.append(draft.path)
        return tuple(entered)

    def _resolve(self, source: _Draft, target: str) -> _Draft | None:
        if "." in target:
            return self.drafts.get(target)
        level = source.parent
        while True:
            found = self.drafts.get(target if level is None else f"{level}.{target}")
            if found is not None or level is None:
                return found
            level = self.drafts[level].parent

    def _placement_problem(self, source: _Draft, target: _Draft) -> str | None:
        if target.kind == "region":
            return (
                f"{target.path!r} is a region of the parallel state {target.parent!r}, not a state; "
                f"target {target.parent!r} to start all of its regions"
            )
        if source.scope is not None and not target.path.startswith(f"{source.scope}."):
            return (
                f"target {target.path!r} is outside the region {source.scope!r}; a region runs as its own "
                "child execution and cannot be left from the inside. Send an event to the parent instead "
                f"(Send(..., to='parent')) and handle it with a transition on "
                f"{self.drafts[source.scope].parent!r}"
            )
        parts = target.path.split(".")
        for depth in range(1, len(parts)):
            region = self.drafts.get(".".join(parts[:depth]))
            if region is not None and region.kind == "region" and region.scope == source.scope:
                return (
                    f"target {target.path!r} is inside the region {region.path!r}, which cannot be entered "
                    f"from outside; target the parallel state {region.parent!r} (each region starts at its "
                    "initial state)"
                )
        return None

    # pass 3: the interpreter's indexes ------------------------------------------------------------------

    def _index(self, node: Node) -> Node:
        depth = node.path.count(".") + 1
        if node.kind == "region":
            inside = f"{node.path}."
            inner = {
                d
                for path, other in self.nodes.items()
                if path.startswith(inside)
                for key in other.on
                for d in event_descriptors(key)
            }
            return replace(
                node,
                depth=depth,
                handles=frozenset(d for d in inner if not is_pattern(d)),
                handles_patterns=tuple(sorted(d for d in inner if is_pattern(d))),
                start=self._descent(node.initial or ""),
            )
        top = 0 if node.scope is None else node.scope.count(".") + 1
        chain = tuple(_prefixes(node.path)[top:])
        handlers: dict[str, list[Edge]] = {}
        entries: list[tuple[tuple[str, ...], tuple[Edge, ...]]] = []
        eventless: list[Edge] = []
        for path in reversed(chain):
            state = self.nodes[path]
            for key, edges in state.on.items():
                descriptors = event_descriptors(key)
                entries.append((descriptors, edges))
                for descriptor in descriptors:
                    handlers.setdefault(descriptor, []).extend(edges)
            eventless.extend(state.always)
        patterned = any(is_pattern(d) for descriptors, _ in entries for d in descriptors)
        restore_default: tuple[str, ...] = ()
        if node.kind == "history" and node.parent is not None:
            parent = self.nodes[node.parent]
            target = node.default or parent.initial or ""
            restore_default = (*_prefixes(target)[depth - 1 : -1], *self._descent(target))
        return replace(
            node,
            depth=depth,
            chain=chain,
            handlers={event: tuple(edges) for event, edges in handlers.items()},
            patterned=tuple(entries) if patterned else (),
            eventless=tuple(eventless),
            descent=self._descent(node.path),
            restore_default=restore_default,
        )


State.model_rebuild()


# --- loading --------------------------------------------------------------------------------------------


class _ChartLoader(yaml.SafeLoader):
    """YAML 1.1 reads `on`, `off`, `yes` and `no` as booleans, which would turn a chart's `on:` key into
    `True`. This loader keeps only `true` and `false` as booleans (the YAML 1.2 rule)."""


_ChartLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ChartLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_chart(source: Mapping[str, Any] | str | Path) -> Chart:
    """A validated Chart from a dict, YAML or JSON text, or a path to a .yaml/.yml/.json file.

    Raises ChartError listing every problem found (unreadable file, parse errors and duplicate keys
    included)."""
    data = _read(source)
    chart_id = data.get("id") if isinstance(data.get("id"), str) else None
    try:
        return Chart.model_validate(data)
    except ValidationError as exc:
        raise ChartError(chart_id, [_shape_problem(error, data) for error in exc.errors()]) from None


def _read(source: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, Path):
        return _read_file(source)
    if isinstance(source, str):
        if "\n" not in source and source.strip().endswith(CHART_SUFFIXES):
            return _read_file(Path(source.strip()))
        try:
            parsed = _parse_json(source)
        except ValueError:
            return _parse_yaml(source, "chart text")
        return _as_chart_mapping(_unique_keys(parsed, "chart text"), "chart text")
    raise TypeError(f"a chart is a dict, YAML/JSON text or a file path, not {type(source).__name__}")


def _read_file(path: Path) -> dict[str, Any]:
    if path.suffix not in CHART_SUFFIXES:
        raise ChartError(None, [f"{path}: a chart file ends in {', '.join(CHART_SUFFIXES)}"])
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ChartError(None, [f"{path}: cannot read the file ({exc.strerror or exc})"]) from None
    if path.suffix == ".json":
        try:
            parsed = _parse_json(text)
        except ValueError as exc:
            raise ChartError(None, [f"{path}: not valid JSON ({exc})"]) from None
        return _as_chart_mapping(_unique_keys(parsed, str(path)), str(path))
    return _parse_yaml(text, str(path))


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as the parser saw it, every key kept, duplicates included."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_json(text: str) -> Any:
    """JSON text with every object kept as its key/value pairs; NaN and Infinity refused."""
    return json.loads(text, object_pairs_hook=_Pairs, parse_constant=_no_constant)


def _unique_keys(parsed: Any, where: str) -> Any:
    """Plain data from `_parse_json`'s output; ChartError naming every key given twice in one object."""
    duplicates: list[str] = []

    def build(value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, _Pairs):
            built: dict[str, Any] = {}
            for key, item in value:
                if key in built:
                    duplicates.append(f"{_key_path((*path, key))}: duplicate key {key!r}")
                built[key] = build(item, (*path, key))
            return built
        if isinstance(value, list):
            return [build(item, (*path, str(index))) for index, item in enumerate(value)]
        return value

    data = build(parsed, ())
    if duplicates:
        raise ChartError(None, [f"{where}: {problem}" for problem in duplicates])
    return data


def _parse_yaml(text: str, where: str) -> dict[str, Any]:
    loader = _ChartLoader(text)  # a SafeLoader: builds plain data only
    try:
        node = loader.get_single_node()
        duplicates = list(_yaml_duplicates(node, ()))
        if duplicates:
            raise ChartError(None, [f"{where}: {problem}" for problem in duplicates])
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise ChartError(None, [f"{where}: not valid YAML ({exc})"]) from None
    finally:
        loader.dispose()
    return _as_chart_mapping(data, where)


def _yaml_duplicates(node: yaml.Node | None, path: tuple[str, ...]) -> Iterator[str]:
    """`<key path>: duplicate key` for every key given twice in one YAML mapping (merge keys `<<` aside:
    overriding a merged key is what they are for)."""
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or key == "<<":
                continue
            line = key_node.start_mark.line + 1
            if key in first_line:
                yield (
                    f"{_key_path((*path, key))}: duplicate key {key!r} (line {line}; "
                    f"first given on line {first_line[key]})"
                )
            else:
                first_line[key] = line
            yield from _yaml_duplicates(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _yaml_duplicates(item, (*path, str(index)))


def _key_path(parts: tuple[str, ...]) -> str:
    return ".".join(parts) or "chart"


def _as_chart_mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        hint = "; a file path must end in .yaml, .yml or .json" if isinstance(data, str) else ""
        raise ChartError(None, [f"{where}: a chart is a mapping, got {type(data).__name__}{hint}"])
    return data


def _shape_problem(error: Any, data: Any) -> str:
    location = _source_location(error["loc"], data)
    if error["type"] == "extra_forbidden":
        return f"{location}: unknown key"
    if error["type"] == "missing":
        return f"{location}: required"
    return f"{location}: {error['msg']}"


def _source_location(loc: tuple[Any, ...], data: Any) -> str:
    """The key path of a validation error as the author wrote it: a transition given alone (not in a list)
    is validated as a list of one, so its `0` is dropped."""
    parts: list[str] = []
    here = data
    for part in loc:
        if isinstance(part, int) and not isinstance(here, list | tuple):
            continue
        if part in _UNION_TAGS and not (isinstance(here, Mapping) and part in here):
            continue
        parts.append(str(part))
        if isinstance(here, Mapping):
            here = here.get(part)
        elif isinstance(here, list | tuple) and isinstance(part, int) and part < len(here):
            here = here[part]
        else:
            here = None
    return ".".join(parts) or "chart"
