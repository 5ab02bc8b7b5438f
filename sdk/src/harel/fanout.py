"""A fork's size: what the commit that enters a parallel state writes, and the context it can carry.

Entering a parallel state of R regions appends R spawn entries to the parent's commit, each the seed's
`{seq, parent_id, child_id, root_path, context, at}` whose `context` (a `ChildSeed`) holds a copy of the
parent's context and the ids of all R regions (`siblings`). The relay creates each child from its entry
alone, whenever it runs — the parent may have moved on by then — so the copy is what keeps a child's
initial context exact. The commit therefore grows as about R × (context + R × id) next to the parent's own
state, and is refused (ExecutionTooLarge) at SAFE_COMMIT_BYTES: with a 100 KB context about 145 regions
fit, with a 1 MB context 14, and with an empty one under 600 (the ids alone).

A chart does not declare its context (a start gives it, actions grow it), so what can be known when a
worker starts is the largest context each fork still commits with (`context_budget`); a worker warns of
every fork whose budget is under STATE_WARN_BYTES, the size at which a context draws a warning of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harel.chart import Chart
from harel.errors import ExecutionTooLarge
from harel.executions.commits import STATE_WARN_BYTES, commit_parts, plan_commit
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, SAFE_COMMIT_BYTES
from harel.executions.records import StepRecord
from harel.ids import child_id
from harel.model import ChildRef, ChildSeed, Execution

# The parent a fork is sized for: a root with an id of the shape a client gives one (`<chart>-<12 hex>`),
# forking at version 100 (child ids carry the parent's version).
ROOT_ID_SUFFIX = "-" + "0" * 12
FORK_VERSION = 100
# The context bytes the budget is measured with: the commit grows by one byte per context byte in the
# parent's state and in each spawn.
PROBE_BYTES = 1024


@dataclass(frozen=True)
class Fork:
    """One parallel state's fork: `empty_bytes` is its commit with an empty context, `context_budget` the
    largest context (bytes of its JSON) it still commits with (0: refused whatever the context)."""

    chart: str
    state: str
    regions: int
    empty_bytes: int
    context_budget: int


def forks(chart: Chart) -> list[Fork]:
    """Every parallel state of `chart`, sized."""
    return [_sized(chart, path) for path, node in chart.nodes.items() if node.kind == "parallel"]


def oversized_forks(charts: Iterable[Chart]) -> list[Fork]:
    """The forks refused at a context smaller than the one that draws a warning of its own."""
    return [fork for chart in charts for fork in forks(chart) if fork.context_budget < STATE_WARN_BYTES]


def fork_commit_bytes(chart: Chart, state: str, context_bytes: int) -> int:
    """The size of the commit that enters the parallel state `state` with a context of about
    `context_bytes` bytes of JSON (what plan_commit measures, refused or not)."""
    node = chart.node(state)
    parent_id = _execution_id(chart, node.scope)
    context = {"blob": "x" * context_bytes}
    children = {region: child_id(parent_id, region, FORK_VERSION) for region in node.children}
    siblings = {region[len(state) + 1 :]: child for region, child in children.items()}
    seed = ChildSeed(
        definition_id=chart.id, definition_version=chart.version, context=context, siblings=siblings
    ).model_dump()
    parent = Execution(
        id=parent_id,
        definition_id=chart.id,
        definition_version=chart.version,
        version=FORK_VERSION,
        configuration=[state],
        context=context,
        children={child: ChildRef(root_path=region, fork=state) for region, child in children.items()},
    )
    spawns = tuple((child, region, seed) for region, child in children.items())
    # the step's trace lists the children too (its other fields are a few hundred bytes)
    record = StepRecord("probe", (), spawns, {"spawns": list(children.values())})
    parts = commit_parts(parent, [record], expected=FORK_VERSION, timers_changed=False)
    try:
        return plan_commit(parts, DEFAULT_TRACE_MAX, DEFAULT_DEDUPE_WINDOW).size
    except ExecutionTooLarge as refused:
        return refused.size


def _sized(chart: Chart, state: str) -> Fork:
    empty = fork_commit_bytes(chart, state, 0)
    per_byte = (fork_commit_bytes(chart, state, PROBE_BYTES) - empty) / PROBE_BYTES
    budget = max(0, int((SAFE_COMMIT_BYTES - 1 - empty) / per_byte))
    return Fork(f"{chart.id}@{chart.version}", state, len(chart.node(state).children), empty, budget)


def _execution_id(chart: Chart, scope: str | None) -> str:
    """The id of the execution that runs `scope` (a region's path; None: the root)."""
    if scope is None:
        return chart.id + ROOT_ID_SUFFIX
    parallel = chart.node(scope).parent
    assert parallel is not None  # a region lies in a parallel state
    return child_id(_execution_id(chart, chart.node(parallel).scope), scope, FORK_VERSION)
