"""The chart-language examples of docs/charts.md over the wire: each scenario of tests/chart_language.py on
the replica set (the fake one, and a real one when configured), through the client API and a worker over
real clients, the worker replaced between steps."""

from __future__ import annotations

import pytest

from tests.chart_language import SCENARIOS, ChartRun, docs_chart
from tests.wire.in_process import Seams

pytestmark = pytest.mark.wire


@pytest.mark.semantics(
    "sem-history-durable",
    "sem-rtc-external-self",
    "sem-region-done-each",
    "sem-delayed-durable",
    "sem-chart-send",
)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_example_runs_over_the_wire(seams: Seams, name: str) -> None:
    chart_id, script = SCENARIOS[name]
    seam = seams.open(f"lang-{name}")
    script(ChartRun(seam.store, seam.transport, docs_chart(chart_id), f"lang-{name}"))
