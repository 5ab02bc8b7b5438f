"""The chart catalog: workers publish the charts they run, so that clients without the application's code
(`harel start` and `harel send` on an operator's machine) can start the newest version and check event
names against the chart an execution pinned.

One document per chart version in the `charts` collection, written once and never changed:

    {_id: "<chart id>@<version>", chart_id, version, definition: <the chart as data>}

A version is immutable: a worker whose chart differs from the published definition of the same id and
version refuses to start (`ChartError`), so two workers can never run different charts under one version.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from harel.chart import Chart, load_chart
from harel.commands import Find, only
from harel.driver_errors import translating
from harel.errors import ChartError
from harel.executions.fields import chart_key

CHARTS = "charts"


def chart_document(chart: Chart) -> dict[str, Any]:
    return {
        "_id": chart_key(chart.id, chart.version),
        "chart_id": chart.id,
        "version": chart.version,
        "definition": chart.model_dump(mode="json", exclude_none=True, by_alias=True),
    }


def _same_or_refuse(chart: Chart, published: dict[str, Any]) -> None:
    if load_chart(published["definition"]) != chart:
        raise ChartError(
            chart.id,
            [
                f"version {chart.version} is already published with a different definition; "
                "bump `version` (running executions keep the version they pinned)"
            ],
        )


def newest_find(chart_id: str, version: int | None) -> Find:
    """The published chart at `version`, or its newest version."""
    query: dict[str, Any] = {"chart_id": chart_id}
    if version is not None:
        query["version"] = version
    return Find(query, only("definition"), sort=(("version", -1),), limit=1)


def parse_newest(found: list[dict[str, Any]]) -> Chart | None:
    return load_chart(found[0]["definition"]) if found else None


class Catalog(Protocol):
    def publish(self, charts: Iterable[Chart]) -> None: ...

    def get(self, chart_id: str, version: int | None = None) -> Chart | None:
        """The published chart at `version`, or its newest version; None when none is published."""


@translating
class MongoCatalog:
    def __init__(self, client: Any, db_name: str = "harel") -> None:
        self._charts = client[db_name][CHARTS]

    def publish(self, charts: Iterable[Chart]) -> None:
        for chart in charts:
            document = chart_document(chart)
            self._charts.update_one({"_id": document["_id"]}, {"$setOnInsert": document}, upsert=True)
            published = self._charts.find_one({"_id": document["_id"]})
            if published is not None:
                _same_or_refuse(chart, published)

    def get(self, chart_id: str, version: int | None = None) -> Chart | None:
        return parse_newest(list(newest_find(chart_id, version).open(self._charts)))


@translating
class AsyncMongoCatalog:
    """The catalog's reads for async clients (`harel.aio`); workers publish with MongoCatalog."""

    def __init__(self, client: Any, db_name: str = "harel") -> None:
        self._charts = client[db_name][CHARTS]

    async def get(self, chart_id: str, version: int | None = None) -> Chart | None:
        return parse_newest([d async for d in newest_find(chart_id, version).open(self._charts)])
