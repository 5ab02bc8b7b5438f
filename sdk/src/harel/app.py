"""An application: the charts a worker runs and the actions and guards they name.

Charts are data; behaviour is Python registered by name:

    app = App("orders")
    app.chart("charts/order.yaml")

    @app.action("charge_card")
    def charge_card(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"charged": True}, send=[Send("charged", to="self")])

    @app.guard("order_is_valid")
    def order_is_valid(ctx: ActionContext) -> bool:
        return ctx.context.get("total", 0) > 0

Actions run inside `interpreter.step`; their own side effects (an HTTP call, an email) may repeat when an
event is redelivered — delivery is at least once — so make them idempotent or key them by `ctx.event.id`.
"""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harel.errors import ChartError, HarelError, InvalidArgument, UnknownAction, UnknownChart
from harel.model import Event

if TYPE_CHECKING:
    from harel.catalog import Catalog
    from harel.chart import Chart


@dataclass(frozen=True)
class Send:
    """An event an action sends. `to`: "parent", "self", "sibling:<region>", or any execution id."""

    event: str
    to: str = "parent"
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActionContext:
    """What an action or guard sees. `context` is a read-only view; return updates in an ActionResult."""

    execution_id: str
    state: str
    event: Event
    now: float
    context: Mapping[str, Any]


@dataclass(frozen=True)
class ActionResult:
    """Shallow updates to the execution's context, and events to send after the step commits."""

    context: Mapping[str, Any] = field(default_factory=dict)
    send: tuple[Send, ...] | list[Send] = ()


Action = Callable[[ActionContext], ActionResult | None]
Guard = Callable[[ActionContext], bool]


class Registry:
    """Actions and guards by name."""

    def __init__(self) -> None:
        self.actions: dict[str, Action] = {}
        self.guards: dict[str, Guard] = {}

    def action(self, name: str | None = None) -> Callable[[Action], Action]:
        def register(fn: Action) -> Action:
            self.actions[name or fn.__name__] = fn
            return fn

        return register

    def guard(self, name: str | None = None) -> Callable[[Guard], Guard]:
        def register(fn: Guard) -> Guard:
            self.guards[name or fn.__name__] = fn
            return fn

        return register

    def get_action(self, name: str) -> Action:
        try:
            return self.actions[name]
        except KeyError:
            raise UnknownAction("action", name) from None

    def get_guard(self, name: str) -> Guard:
        try:
            return self.guards[name]
        except KeyError:
            raise UnknownAction("guard", name) from None


EMPTY_REGISTRY = Registry()


class App:
    """Charts by (id, version) plus the registry of their actions and guards."""

    def __init__(self, name: str = "app") -> None:
        self.name = name
        self.registry = Registry()
        self._charts: dict[tuple[str, int], Chart] = {}
        self._catalog: Catalog | None = None
        self.action = self.registry.action
        self.guard = self.registry.guard

    def chart(self, source: Chart | Mapping[str, Any] | str | Path) -> Chart:
        """Register a chart given as a Chart, a dict, a path to a YAML/JSON file, or YAML/JSON text."""
        from harel.chart import Chart, load_chart

        chart = source if isinstance(source, Chart) else load_chart(source)
        key = (chart.id, chart.version)
        existing = self._charts.get(key)
        if existing is not None and existing != chart:
            raise ChartError(
                chart.id,
                [
                    f"version {chart.version} is already registered with a different definition; bump `version`"
                ],
            )
        self._charts[key] = chart
        return chart

    def charts_dir(self, directory: str | Path) -> list[Chart]:
        """Register every *.yaml, *.yml and *.json chart in `directory`."""
        paths = sorted(
            p for p in Path(directory).iterdir() if p.suffix in {".yaml", ".yml", ".json"} and p.is_file()
        )
        return [self.chart(p) for p in paths]

    def get_chart(self, chart_id: str, version: int | None = None) -> Chart:
        """The chart an execution pinned (`version` given), or the newest version for new executions.
        Charts registered here come first; then the catalog, when one is attached (`use_catalog`)."""
        versions = [v for (cid, v) in self._charts if cid == chart_id]
        key = (chart_id, version if version is not None else max(versions, default=0))
        if key in self._charts:
            return self._charts[key]
        published = self._catalog.get(chart_id, version) if self._catalog is not None else None
        if published is None:
            raise UnknownChart(chart_id, version)
        self._charts[(published.id, published.version)] = published
        return published

    def use_catalog(self, catalog: Catalog) -> None:
        """Look up charts this App does not register in the catalog the workers publish to."""
        self._catalog = catalog

    @property
    def charts(self) -> list[Chart]:
        return [self._charts[k] for k in sorted(self._charts)]

    def validate(self) -> None:
        """Every action and guard a registered chart names must be registered: fail at start-up, not mid-run."""
        problems = [
            f"{chart.id} v{chart.version}: {kind} {name!r} is not registered"
            for chart in self.charts
            for kind, name in chart.references()
            if name not in (self.registry.actions if kind == "action" else self.registry.guards)
        ]
        if problems:
            raise ChartError(None, problems)


def load_app(spec: str) -> App:
    """Import `package.module:attribute` and return the App it names. Every way this can fail is an
    InvalidArgument naming `--app` and what to change; a ChartError the module raises passes through."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidArgument("--app", f"{spec!r} is not MODULE:ATTRIBUTE (for example orders.app:app)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name + ".").startswith(error.name + "."):
            raise InvalidArgument(
                "--app",
                f"no module named {error.name!r} in {os.getcwd()} or on the Python path; run harel from the "
                "folder that holds it, or add that folder to PYTHONPATH",
            ) from None
        raise InvalidArgument(
            "--app", f"importing {module_name} failed: {error}; install what it imports"
        ) from None
    except HarelError:
        raise
    except Exception as error:  # the user's module ran and raised: name the error and where, not a traceback
        raise InvalidArgument(
            "--app", f"importing {module_name} raised {_where(error)}; fix the module and run again"
        ) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        found = "nothing" if app is None else f"a {type(app).__name__}"
        raise InvalidArgument(
            "--app",
            f"{module_name}.{attribute} is {found}, not a harel.app.App; name the App after the colon",
        )
    return app


def _where(error: Exception) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, SyntaxError) or not frames:
        return f"{type(error).__name__}: {error}"
    return f"{type(error).__name__}: {error} (at {frames[-1].filename}:{frames[-1].lineno})"
