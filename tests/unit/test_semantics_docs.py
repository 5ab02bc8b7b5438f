"""The documents and the tests cannot drift apart.

docs/semantics.md: every statement's anchor (`<a id="sem-…">`) is named by at least one test
(`@pytest.mark.semantics("sem-…")`), and every anchor a test names exists. The test files are read as
source (not collected), so the check holds whichever tests a run selects.

docs/charts.md: every key of the chart format (the chart's own `send` and `cancel` actions included) has
its section, and every YAML example is a chart that loads.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from harel.chart import CancelAction, Chart, Region, SendAction, State, Transition, load_chart

ROOT = Path(__file__).parents[2]
SEMANTICS = ROOT / "docs" / "semantics.md"
CHARTS = ROOT / "docs" / "charts.md"
ANCHOR = re.compile(r'<a id="(sem-[a-z0-9-]+)"></a>')


def documented() -> list[str]:
    return ANCHOR.findall(SEMANTICS.read_text(encoding="utf-8"))


@cache
def anchors_in_tests() -> dict[str, set[str]]:
    """Anchor -> the tests (`file::function`) that name it in a `pytest.mark.semantics(...)` decorator."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for decorator in function.decorator_list:
                for anchor in _semantics_args(decorator):
                    found.setdefault(anchor, set()).add(f"{path.relative_to(ROOT)}::{function.name}")
    return found


def _semantics_args(decorator: ast.expr) -> Iterator[str]:
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "semantics"
        and isinstance(decorator.func.value, ast.Attribute)
        and decorator.func.value.attr == "mark"
    ):
        for arg in decorator.args:
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), ast.dump(arg)
            yield arg.value


def test_every_statement_in_semantics_md_is_backed_by_a_test() -> None:
    untested = [anchor for anchor in documented() if anchor not in anchors_in_tests()]
    assert untested == [], f"statements of docs/semantics.md no test names: {untested}"


def test_every_anchor_a_test_names_is_in_semantics_md() -> None:
    unknown = {
        anchor: sorted(tests) for anchor, tests in anchors_in_tests().items() if anchor not in documented()
    }
    assert unknown == {}, f"tests name statements docs/semantics.md does not have: {unknown}"


def test_each_anchor_is_given_once() -> None:
    anchors = documented()
    assert len(anchors) == len(set(anchors)), sorted(a for a in anchors if anchors.count(a) > 1)
    assert len(anchors) >= 40


def chart_examples() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", CHARTS.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.parametrize("example", chart_examples(), ids=lambda text: text.split("\n", 1)[0])
def test_every_yaml_example_in_charts_md_is_a_chart_that_loads(example: str) -> None:
    chart = load_chart(example)
    assert isinstance(chart, Chart)


def test_every_key_of_the_format_has_a_section_in_charts_md() -> None:
    text = CHARTS.read_text(encoding="utf-8")
    headings = set(re.findall(r"^### `([a-z_]+)`", text, flags=re.MULTILINE))
    keys = {
        *Chart.model_fields,
        *State.model_fields,
        *Region.model_fields,
        *Transition.model_fields,
        *SendAction.model_fields,
        *CancelAction.model_fields,
    }
    assert keys - headings == set()
    assert len(chart_examples()) >= 10
