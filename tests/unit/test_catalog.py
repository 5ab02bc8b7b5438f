"""The chart catalog workers publish to, and the App's lookup through it."""

from __future__ import annotations

import mongomock
import pytest

from harel.app import App
from harel.catalog import Catalog, MongoCatalog
from harel.chart import load_chart
from harel.errors import ChartError, UnknownChart


def chart(version: int, target: str = "done") -> dict[str, object]:
    return {
        "id": "doc",
        "version": version,
        "initial": "draft",
        "states": {"draft": {"on": {"publish": target}}, "done": {}, "elsewhere": {}},
    }


@pytest.fixture
def catalog() -> Catalog:
    return MongoCatalog(mongomock.MongoClient())


def test_publish_is_idempotent_and_get_finds_a_version_or_the_newest(catalog: Catalog) -> None:
    v1, v2 = load_chart(chart(1)), load_chart(chart(2))
    catalog.publish([v1])
    catalog.publish([v1, v2])  # a second worker with the same charts
    assert catalog.get("doc", 1) == v1
    assert catalog.get("doc") == v2
    assert catalog.get("doc", 3) is None
    assert catalog.get("other") is None


def test_a_version_published_with_another_definition_is_refused(catalog: Catalog) -> None:
    catalog.publish([load_chart(chart(1))])
    with pytest.raises(ChartError, match="version 1 is already published with a different definition"):
        catalog.publish([load_chart(chart(1, target="elsewhere"))])
    assert catalog.get("doc", 1) == load_chart(chart(1)), "the first definition stays"


def test_app_looks_up_what_it_does_not_register(catalog: Catalog) -> None:
    catalog.publish([load_chart(chart(1)), load_chart(chart(2))])
    app = App()
    with pytest.raises(UnknownChart):
        app.get_chart("doc")
    app.use_catalog(catalog)
    assert app.get_chart("doc").version == 2
    assert app.get_chart("doc", 1).version == 1
    with pytest.raises(UnknownChart):
        app.get_chart("doc", 7)


def test_registered_charts_come_before_the_catalog(catalog: Catalog) -> None:
    catalog.publish([load_chart(chart(2))])
    app = App()
    app.chart(chart(1))
    app.use_catalog(catalog)
    assert app.get_chart("doc").version == 1, "the application's own newest version decides"
