"""What both sides are compared on: the active states, whether the statechart ended, and the actions in the
order they ran, per lane (the execution that runs them: the root, or the child of one region)."""

from __future__ import annotations

from dataclasses import dataclass

from harel.chart import Chart

ROOT_LANE = ""


@dataclass(frozen=True)
class Observation:
    active: frozenset[str]  # every active state and region path; empty once the statechart ended
    ended: bool
    lanes: dict[str, list[str]]  # region path (ROOT_LANE for the root) -> action names in the order run


def lanes_of_actions(chart: Chart) -> dict[str, str]:
    """Which lane runs each action: the region enclosing the state that names it (a parallel state's own
    entry and exit run in its parent's lane). Each differential chart names each action in one lane only."""
    lane_of: dict[str, str] = {}
    for node in chart.nodes.values():
        if node.kind == "region":
            continue
        names = [*node.entry, *node.exit, *(name for _, edge in node.edges() for name in edge.actions)]
        for name in names:
            lane = node.scope or ROOT_LANE
            assert lane_of.setdefault(name, lane) == lane, f"{name!r} is named in two lanes"
    return lane_of
