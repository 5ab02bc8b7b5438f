"""Diagrams: the dot output is laid out by the real Graphviz `dot` (Debian package `graphviz`) and read back
from its JSON output, and what `harel chart show --format dot` prints is drawn by it as SVG; the Mermaid
output is checked line by line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harel.chart import Chart, load_chart
from harel.diagram import ACTIVE_FILL, active_paths, execution_tree, render_dot, render_mermaid
from harel.model import ChildRef, Execution, ExecutionStatus
from harel.smoke import smoke_chart
from tests.documents import DOCS, file_blocks

from .test_chart import ORDER_YAML

CHARTS = sorted((Path(__file__).parents[1] / "differential" / "charts").glob("*.yaml"))
SMOKE = load_chart(smoke_chart())
ORDER = load_chart(ORDER_YAML)


HAREL = str(Path(sys.executable).with_name("harel"))
SVG = "{http://www.w3.org/2000/svg}"


def run_dot(dot_source: str, output_format: str) -> str:
    """What Graphviz's `dot -T<format>` makes of the source; fails on any error or warning."""
    binary = shutil.which("dot")
    if binary is None:
        pytest.fail("Graphviz `dot` is not installed: apt-get install graphviz")
    done = subprocess.run(
        [binary, f"-T{output_format}"], input=dot_source, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return done.stdout


def graphviz(dot_source: str) -> dict[str, Any]:
    """Graphviz's own reading of the source (`dot -Tjson`)."""
    layout: dict[str, Any] = json.loads(run_dot(dot_source, "json"))
    return layout


def clusters(layout: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["name"]: o for o in layout.get("objects", []) if o["name"].startswith("cluster_")}


def nodes(layout: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["name"]: o for o in layout.get("objects", []) if not o["name"].startswith("cluster_")}


def edge_labels(layout: dict[str, Any]) -> list[str]:
    return sorted(edge.get("label", "") for edge in layout.get("edges", []))


def test_the_smoke_chart_renders_with_graphviz() -> None:
    layout = graphviz(render_dot(SMOKE))
    assert set(clusters(layout)) == {
        "cluster_fork",
        "cluster_fork.alpha",
        "cluster_fork.beta",
        "cluster_fork.gamma",
    }
    assert clusters(layout)["cluster_fork"]["label"] == "fork ∥"
    states = nodes(layout)
    for region in ("alpha", "beta", "gamma"):
        assert states[f"fork.{region}.working"]["label"] == "working"
        assert states[f"fork.{region}.finished"]["peripheries"] == "2"
    assert states["completed"]["peripheries"] == "2"
    assert edge_labels(layout).count("greeting") == 3
    assert edge_labels(layout).count("after 1s") == 4
    assert "done" in edge_labels(layout)


@pytest.mark.parametrize("name", ["smoke", "harel.smoke"])
def test_chart_show_of_the_smoke_chart_is_drawn_by_graphviz_with_no_deployment(
    tmp_path: Path, name: str
) -> None:
    # A fresh install: no HAREL_* variable and no `harel dev` in the folder, so the URL is the in-process default.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HAREL_")}
    shown = subprocess.run(
        [HAREL, "chart", "show", name, "--format", "dot"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout == render_dot(SMOKE)

    svg = ET.fromstring(run_dot(shown.stdout, "svg"))
    drawn: dict[str, set[str]] = {}  # Graphviz draws each cluster, node and edge as a <g> with a <title>
    for group in svg.iter(f"{SVG}g"):
        title = group.find(f"{SVG}title")
        if title is not None and title.text:
            drawn.setdefault(group.get("class", ""), set()).add(title.text)
    assert drawn["cluster"] == {
        "cluster_fork",
        "cluster_fork.alpha",
        "cluster_fork.beta",
        "cluster_fork.gamma",
    }
    assert {"fork.alpha.working", "fork.gamma.finished", "cooling", "completed"} <= drawn["node"]
    assert len(drawn["edge"]) > 8


def test_nested_states_guards_timers_and_actions_are_labelled() -> None:
    layout = graphviz(render_dot(ORDER))
    assert {"cluster_fulfilling", "cluster_fulfilling.payment", "cluster_fulfilling.shipping"} <= set(
        clusters(layout)
    )
    labels = edge_labels(layout)
    assert "approve [order_is_valid]" in labels
    assert "after 30s" in labels and "after 2s" in labels
    assert "charged" in labels and "reject" in labels and "done" in labels
    guarded = load_chart(
        {
            "id": "g",
            "version": 1,
            "initial": "a",
            "states": {
                "a": {
                    "on": {"go": [{"target": "b", "guard": "ok", "actions": ["x", "y"]}, {"target": "c"}]},
                    "always": {"target": "c", "guard": "late"},
                    "after": {"250ms": {"actions": ["tick"]}},
                },
                "b": {"initial": "b1", "states": {"b1": {"final": True}}, "on_done": "c"},
                "c": {},
            },
        }
    )
    labels = [label for label in edge_labels(graphviz(render_dot(guarded))) if label]  # initial arrows: none
    assert labels == sorted(["go [ok] / x, y", "go", "always [late]", "after 250ms / tick", "done"])


@pytest.mark.parametrize("path", CHARTS, ids=lambda p: p.stem)
def test_every_differential_chart_renders_without_a_graphviz_warning(path: Path) -> None:
    chart = load_chart(path)
    layout = graphviz(render_dot(chart))
    drawn = {name for name in nodes(layout) if not name.endswith("[*]")}
    states = {p for p, n in chart.nodes.items() if n.kind in ("atomic", "final", "compound", "parallel")}
    assert states <= drawn  # compound and parallel states through their anchor point


def smoke_executions(working: str = "working") -> list[Execution]:
    """The smoke run half way: alpha still working, beta resting, gamma finished."""
    root = Execution(
        id="s", definition_id=SMOKE.id, definition_version=1, configuration=["fork"], children={}
    )
    children = [
        Execution(
            id=f"s/fork.{region}@0",
            definition_id=SMOKE.id,
            definition_version=1,
            root_path=f"fork.{region}",
            parent_id="s",
            configuration=[f"fork.{region}.{state}"],
            status=ExecutionStatus.COMPLETED if state == "finished" else ExecutionStatus.RUNNING,
        )
        for region, state in (("alpha", working), ("beta", "resting"), ("gamma", "finished"))
    ]
    return [root, *children]


def test_the_active_states_of_an_execution_and_its_regions_are_marked() -> None:
    executions = smoke_executions()
    active = active_paths(SMOKE, executions)
    assert active == {
        "fork",
        "fork.alpha",
        "fork.alpha.working",
        "fork.beta",
        "fork.beta.resting",
        "fork.gamma",
        "fork.gamma.finished",
    }
    layout = graphviz(render_dot(SMOKE, active=active))
    states = nodes(layout)
    filled = {name for name, node in states.items() if node.get("fillcolor") == ACTIVE_FILL}
    assert filled == {"fork.alpha.working", "fork.beta.resting", "fork.gamma.finished"}
    assert clusters(layout)["cluster_fork"]["penwidth"] == "2"
    assert "penwidth" not in clusters(graphviz(render_dot(SMOKE)))["cluster_fork"]


def test_execution_tree_walks_the_children_a_parent_waits_for() -> None:
    root, *children = smoke_executions()
    refs = {c.id: ChildRef(root_path=c.root_path or "", fork="fork") for c in children}
    root = root.model_copy(update={"children": refs})
    store = {e.id: e for e in [root, *children[:2]]}  # gamma's execution is gone
    tree = execution_tree(store.get, "s")
    assert [e.id for e in tree] == ["s", "s/fork.alpha@0", "s/fork.beta@0"]
    assert execution_tree(store.get, "nobody") == []


def test_mermaid_nests_regions_and_marks_active_states() -> None:
    text = render_mermaid(SMOKE, active=active_paths(SMOKE, smoke_executions()))
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert text.count("{") == text.count("}") == 4  # fork and its three regions
    assert [line.strip() for line in lines].count("--") == 2  # three regions side by side
    ids = dict(re.findall(r"^\s*(s\d+) : (.+)$", text, flags=re.MULTILINE))
    assert sorted(ids.values()).count("working") == 2 and "● working" in ids.values()
    assert "● fork" in ids.values() and "cooling" in ids.values()
    [classes] = [line for line in lines if line.strip().startswith("class ")]
    marked = {ids[i] for i in classes.split()[1].split(",")}
    assert marked == {"● working", "● resting", "● finished"}
    assert sum(": after 1s" in line for line in lines) == 4
    assert sum(line.strip().endswith("--> [*]") for line in lines) == 4  # the four final states


def test_mermaid_keeps_statement_separators_out_of_labels() -> None:
    chart: Chart = load_chart(
        {
            "id": "m",
            "version": 1,
            "initial": "a",
            "states": {"a": {"on": {"go": {"target": "b", "actions": ["x;y#1"]}}}, "b": {}},
        }
    )
    assert "s0 --> s1 : go / x,y1" in render_mermaid(chart)


def test_the_docs_show_the_order_chart_as_render_mermaid_draws_it() -> None:
    """The README's order chart, drawn in docs/getting-started.md."""
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    drawn = re.search(r"```mermaid\n(.*?)```", page, flags=re.DOTALL)
    assert drawn is not None
    assert drawn.group(1) == render_mermaid(load_chart(file_blocks()["charts/order.yaml"]))
