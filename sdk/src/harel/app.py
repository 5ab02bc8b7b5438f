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

Actions and guards may be `async def`: a worker runs them on its process's event loop
(`harel.eventloop`), each call bounded by its async timeout, while the step waits for the result.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import os
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from harel.errors import (
    AsyncUnavailable,
    ChartError,
    HarelError,
    InvalidArgument,
    UnknownAction,
    UnknownChart,
)
from harel.model import Event
from harel.sends import Cancel, Send

if TYPE_CHECKING:
    from harel.catalog import Catalog
    from harel.chart import Chart
    from harel.eventloop import EventLoopThread

# Send and Cancel live in harel.sends (the chart builds them too); actions import them from here as well
__all__ = ["ActionContext", "ActionResult", "App", "Cancel", "Registry", "Send", "is_async", "load_app"]


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
    """Shallow updates to the execution's context, and what to send: `Send`s and `Cancel`s, taking effect in
    the order given. `cancel=["id", ...]` is shorthand for a `Cancel("id")` each after everything in `send`."""

    context: Mapping[str, Any] = field(default_factory=dict)
    send: tuple[Send | Cancel, ...] | list[Send | Cancel] = ()
    cancel: tuple[str, ...] | list[str] = ()


Action = Callable[[ActionContext], ActionResult | Awaitable[ActionResult | None] | None]
Guard = Callable[[ActionContext], bool | Awaitable[bool]]
_Callable = TypeVar("_Callable", Action, Guard)


class Registry:
    """Actions and guards by name. A registered `async def` is handed out as a plain callable that runs it on
    the event loop of the view `on_loop` made (a worker's), and waits for its result."""

    def __init__(self) -> None:
        self.actions: dict[str, Action] = {}
        self.guards: dict[str, Guard] = {}
        self._loop: EventLoopThread | None = None
        self._timeout = 0.0

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

    def on_loop(self, loop: EventLoopThread, timeout: float) -> Registry:
        """This registry (the same names, later registrations included) running its async callables on
        `loop`, each call for at most `timeout` seconds."""
        view = copy.copy(self)
        view._loop, view._timeout = loop, timeout
        return view

    def get_action(self, name: str) -> Action:
        return self._callable("action", name, self.actions)

    def get_guard(self, name: str) -> Guard:
        return self._callable("guard", name, self.guards)

    def _callable(self, kind: str, name: str, table: Mapping[str, _Callable]) -> _Callable:
        try:
            fn = table[name]
        except KeyError:
            raise UnknownAction(kind, name) from None
        if not is_async(fn):
            return fn
        return cast(_Callable, functools.partial(self._run_async, f"{kind} {name!r}", fn))

    def _run_async(self, what: str, fn: Callable[[ActionContext], Any], ctx: ActionContext) -> Any:
        if self._loop is None:
            raise AsyncUnavailable(what)
        return self._loop.run(fn(ctx), what, self._timeout)


def is_async(fn: Callable[..., Any]) -> bool:
    """An `async def` function, a partial of one, or an object whose `__call__` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


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
        chart = self.registered_chart(chart_id, version)
        if chart is None and self._catalog is not None:
            chart = self.adopt(self._catalog.get(chart_id, version))
        if chart is None:
            raise UnknownChart(chart_id, version)
        return chart

    def registered_chart(self, chart_id: str, version: int | None = None) -> Chart | None:
        """The chart registered here (or adopted from a catalog) at `version`, or its newest version."""
        versions = [v for (cid, v) in self._charts if cid == chart_id]
        return self._charts.get((chart_id, version if version is not None else max(versions, default=0)))

    def adopt(self, published: Chart | None) -> Chart | None:
        """Keep a chart read from a catalog, so the next lookup of its version needs no read."""
        if published is not None:
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
