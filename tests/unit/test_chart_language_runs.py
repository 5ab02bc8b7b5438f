"""The chart-language examples of docs/charts.md on `mongomock://`: each scenario of tests/chart_language.py
through the client API and a worker, the worker replaced between steps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harel.backend import Backend, open_backend
from tests.chart_language import SCENARIOS, ChartRun, docs_chart


@pytest.fixture
def backend() -> Iterator[Backend]:
    opened = open_backend("mongomock://")
    yield opened
    opened.close()


@pytest.mark.semantics(
    "sem-event-patterns",
    "sem-event-patterns-order",
    "sem-domain",
    "sem-reenter",
    "sem-state-guard",
    "sem-history-durable",
    "sem-region-done-each",
    "sem-rtc-external-self",
    "sem-delayed-durable",
    "sem-delayed-cancel",
    "sem-chart-send",
)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_example_runs_on_the_embedded_store(backend: Backend, name: str) -> None:
    chart_id, script = SCENARIOS[name]
    script(ChartRun(backend.store, backend.transport, docs_chart(chart_id), f"lang-{name}"))
