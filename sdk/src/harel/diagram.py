"""A chart as a picture: Graphviz dot and Mermaid (stateDiagram-v2), with an execution's active states marked.

    render_dot(chart)                                   # the chart alone
    render_dot(chart, active=active_paths(chart, execution_tree(store.load, "order-42")))
    render_mermaid(chart, active=...)                   # the same, for Markdown that renders Mermaid

Compound states and regions are boxes around their children (dashed for a region, each region of a parallel
state side by side); final states have a double border; a black dot points at each initial state.
Transitions are labelled `event [guard] / action, action`; a timer `after 30s`, an eventless transition
`always`, a completion `done`; a transition without a target is drawn as a loop on its state. `active`
holds state and region paths (as `active_paths` returns them): active states are filled, active compound
states and regions get a bold border.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from harel.chart import Chart, Edge, Node, action_label, parse_duration
from harel.model import Execution

ACTIVE_FILL = "#ffd966"
ACTIVE_STROKE = "#b07d00"


def execution_tree(load: Callable[[str], Execution | None], root_id: str) -> list[Execution]:
    """The execution `root_id` and, depth first, the children it waits for (its regions), as `load` finds
    them. Children already gone from the store are left out."""
    found: list[Execution] = []
    pending = [root_id]
    while pending:
        execution = load(pending.pop(0))
        if execution is None:
            continue
        found.append(execution)
        pending[:0] = list(execution.children)
    return found


def active_paths(chart: Chart, executions: Iterable[Execution]) -> frozenset[str]:
    """Every state active in `executions` (an execution and its regions' executions) and every region one
    of them runs."""
    active: set[str] = set()
    for execution in executions:
        if execution.root_path is not None:
            active.add(execution.root_path)
        if execution.configuration:
            active.update(chart.node(execution.configuration[-1]).chain)
    return frozenset(active)


def transition_label(slot: str, edge: Edge) -> str:
    """`approve [order_is_valid] / charge_card`: the trigger, the guard, the actions."""
    if slot.startswith("on:"):
        trigger = slot.removeprefix("on:")
    elif slot.startswith("after:"):
        trigger = f"after {_duration(parse_duration(slot.removeprefix('after:')))}"
    elif slot == "on_done":
        trigger = "done"
    elif slot.startswith("on_region_done:"):
        trigger = f"done {slot.removeprefix('on_region_done:')}"
    else:
        trigger = "always"
    parts = [trigger]
    if edge.guard is not None:
        parts.append(f"[{edge.guard}]")
    elif edge.in_state is not None:
        parts.append(f"[in {edge.in_state}]")
    if edge.actions:
        parts.append("/ " + ", ".join(map(action_label, edge.actions)))
    return " ".join(parts)


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def _transitions(chart: Chart) -> Iterable[tuple[Node, Edge, str]]:
    for node in chart.nodes.values():
        for slot, edge in node.edges():
            yield node, edge, transition_label(slot, edge)


def _top(chart: Chart) -> list[Node]:
    return [node for node in chart.nodes.values() if node.parent is None]


# --- Graphviz dot ---------------------------------------------------------------------------------------


def _q(text: str) -> str:
    """A double-quoted dot string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(chart: Chart, active: Iterable[str] = ()) -> str:
    """The chart as a Graphviz digraph (`dot -Tsvg` draws it)."""
    marked = frozenset(active)
    lines = [
        f"digraph {_q(f'{chart.id} v{chart.version}')} {{",
        "  compound=true;",
        f"  label={_q(f'{chart.id} v{chart.version}')}; labelloc=t; fontname=Helvetica;",
        "  node [shape=box, style=rounded, fontname=Helvetica, fontsize=11];",
        "  edge [fontname=Helvetica, fontsize=9];",
    ]
    _dot_initial(lines, "", chart.node(chart.initial), "  ")
    for node in _top(chart):
        _dot_node(chart, node, marked, lines, "  ")
    for node, edge, label in _transitions(chart):
        lines.append("  " + _dot_edge(chart, node, edge, label))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_initial(lines: list[str], scope: str, initial: Node, indent: str) -> None:
    start = _q(f"{scope}.[*]" if scope else "[*]")
    head = f" [lhead={_q(f'cluster_{initial.path}')}]" if _is_cluster(initial) else ""
    lines.append(f'{indent}{start} [shape=point, width=0.12, label=""];')
    lines.append(f"{indent}{start} -> {_q(initial.path)}{head};")


def _dot_node(chart: Chart, node: Node, marked: frozenset[str], lines: list[str], indent: str) -> None:
    on = node.path in marked
    if node.kind == "history":  # a pseudo-state, never active: SCXML's H (shallow) or H* (deep) circle
        mark = "H*" if node.history == "deep" else "H"
        lines.append(f"{indent}{_q(node.path)} [label={_q(mark)}, shape=circle, tooltip={_q(node.name)}];")
        return
    if node.kind in ("atomic", "final"):
        style = "rounded,filled,bold" if on else "rounded"
        attributes = [f"label={_q(node.name)}", f"style={_q(style)}"]
        if on:
            attributes += [f"fillcolor={_q(ACTIVE_FILL)}", f"color={_q(ACTIVE_STROKE)}", "penwidth=2"]
        if node.kind == "final":
            attributes.append("peripheries=2")
        lines.append(f"{indent}{_q(node.path)} [{', '.join(attributes)}];")
        return
    # compound, parallel and region: a cluster, with an invisible point to attach transitions to
    title = node.name + (" ∥" if node.kind == "parallel" else "")
    style = "dashed" if node.kind == "region" else "rounded"
    lines.append(f"{indent}subgraph {_q(f'cluster_{node.path}')} {{")
    inner = indent + "  "
    lines.append(f"{inner}label={_q(title)}; style={_q(style + (',bold' if on else ''))};")
    if on:
        lines.append(f"{inner}color={_q(ACTIVE_STROKE)}; penwidth=2;")
    lines.append(f'{inner}{_q(node.path)} [shape=point, style=invis, width=0.01, label=""];')
    if node.kind in ("compound", "region") and node.initial is not None:
        _dot_initial(lines, node.path, chart.node(node.initial), inner)
    for child in node.children:
        _dot_node(chart, chart.node(child), marked, lines, inner)
    lines.append(f"{indent}}}")


def _is_cluster(node: Node) -> bool:
    return node.kind in ("compound", "parallel", "region")


def _dot_edge(chart: Chart, node: Node, edge: Edge, label: str) -> str:
    target = chart.node(edge.target) if edge.target is not None else node
    attributes = [f"label={_q(label)}"]
    if edge.target is None:
        attributes.append("style=dashed")  # actions only: the configuration stays
    # attach at the cluster's border, unless one end lies inside the other's cluster
    if _is_cluster(node) and not target.path.startswith(f"{node.path}.") and target is not node:
        attributes.append(f"ltail={_q(f'cluster_{node.path}')}")
    if _is_cluster(target) and not node.path.startswith(f"{target.path}.") and target is not node:
        attributes.append(f"lhead={_q(f'cluster_{target.path}')}")
    return f"{_q(node.path)} -> {_q(target.path)} [{', '.join(attributes)}];"


# --- Mermaid --------------------------------------------------------------------------------------------


def render_mermaid(chart: Chart, active: Iterable[str] = ()) -> str:
    """The chart as a Mermaid stateDiagram-v2. Active states are styled (class `active`) and, since not
    every Mermaid renderer styles states inside composite ones, also labelled with a leading ●."""
    marked = frozenset(active)
    ids = {path: f"s{index}" for index, path in enumerate(chart.nodes)}
    lines = ["stateDiagram-v2", f"  [*] --> {ids[chart.initial]}"]
    for node in _top(chart):
        _mermaid_node(chart, node, ids, marked, lines, "  ")
    for node, edge, label in _transitions(chart):
        target = ids[edge.target] if edge.target is not None else ids[node.path]
        lines.append(f"  {ids[node.path]} --> {target} : {_mermaid_text(label)}")
    for path, node in chart.nodes.items():
        if node.kind == "final":
            lines.append(f"  {ids[path]} --> [*]")
    lines.append(
        f"  classDef active fill:{ACTIVE_FILL},stroke:{ACTIVE_STROKE},stroke-width:2px,font-weight:bold"
    )
    shown = [
        ids[path] for path in chart.nodes if path in marked and chart.node(path).kind in ("atomic", "final")
    ]
    if shown:
        lines.append(f"  class {','.join(shown)} active")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # `;` ends a statement and `#` starts an entity code in Mermaid: keep them out of labels
    return text.replace(";", ",").replace("#", "")


def _mermaid_node(
    chart: Chart, node: Node, ids: dict[str, str], marked: frozenset[str], lines: list[str], indent: str
) -> None:
    name = ("● " if node.path in marked else "") + node.name
    lines.append(f"{indent}{ids[node.path]} : {_mermaid_text(name)}")
    if not _is_cluster(node):
        return
    lines.append(f"{indent}state {ids[node.path]} {{")
    inner = indent + "  "
    if node.kind == "parallel":
        for index, region in enumerate(node.children):
            if index:
                lines.append(f"{inner}--")
            _mermaid_node(chart, chart.node(region), ids, marked, lines, inner)
    else:
        if node.initial is not None:
            lines.append(f"{inner}[*] --> {ids[node.initial]}")
        for child in node.children:
            _mermaid_node(chart, chart.node(child), ids, marked, lines, inner)
    lines.append(f"{indent}}}")
