"""`harel chart show CHART`: a chart as a Mermaid or Graphviz dot diagram (`harel.diagram`); `harel status ID
--diagram` draws the same with the execution's active states marked."""

from __future__ import annotations

from contextlib import closing

import click

from harel.app import App
from harel.chart import Chart
from harel.cli.exits import Exit, epilog
from harel.cli.options import app_options, connection_options, json_option
from harel.cli.output import Output
from harel.cli.settings import URL_FILE_VARIABLE, URL_VARIABLE, Connection
from harel.diagram import render_dot, render_mermaid
from harel.errors import InvalidArgument, UnknownChart
from harel.smoke import SMOKE_CHART_ID

RENDERERS = {"mermaid": render_mermaid, "dot": render_dot}
# The charts every App comes with (`harel.serve.build_app`), by the short name `harel chart show` takes too.
BUILT_IN = {"smoke": SMOKE_CHART_ID}


def draw(chart: Chart, diagram_format: str, active: frozenset[str] = frozenset()) -> str:
    return RENDERERS[diagram_format](chart, active)


def show_drawing(out: Output, chart: Chart, diagram_format: str, drawing: str, **extra: object) -> None:
    if out.json:
        out.document(
            {
                "chart": chart.id,
                "version": chart.version,
                "format": diagram_format,
                **extra,
                "diagram": drawing,
            }
        )
    else:
        out.out.file.write(drawing)
        out.out.file.flush()


format_option = click.option(
    "--format",
    "diagram_format",
    type=click.Choice(sorted(RENDERERS)),
    default="mermaid",
    show_default=True,
    help="mermaid (stateDiagram-v2, for Markdown) or dot (Graphviz: `dot -Tsvg`)",
)


@click.group(short_help="charts: draw one as a diagram")
def chart() -> None:
    """The charts workers run (published to the deployment's catalog), --charts/--app give, or harel has
    built in."""


@chart.command("show", epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED))
@click.argument("chart_id", metavar="CHART")
@click.option("--version", "version", type=click.IntRange(min=1), metavar="N", help="[default: the newest]")
@format_option
@app_options
@connection_options
@json_option
def show(
    chart_id: str, version: int | None, diagram_format: str, app: App, connection: Connection, out: Output
) -> int:
    """Draw CHART as a diagram: states, regions, and transitions labelled `event [guard] / actions`.

    CHART is the first found of: the chart of that id in --charts/--app or built in (harel.smoke); the
    chart of that id the deployment's workers published (looked up only when a deployment is given: --url,
    HAREL_MONGO_URL, HAREL_MONGO_URL_FILE or a running `harel dev`; the in-process default has no catalog);
    the built-in chart of that short name (smoke for harel.smoke), so `harel chart show smoke` works on a
    fresh install, with no deployment."""
    found = app.registered_chart(chart_id, version)
    if found is None and not connection.embedded:
        with closing(connection.open_shared("chart show")) as backend:
            found = backend.catalog.get(chart_id, version)
    if found is None and chart_id in BUILT_IN:
        found = app.registered_chart(BUILT_IN[chart_id], version)
    if found is None:
        raise unknown(UnknownChart(chart_id, version), connection)
    show_drawing(out, found, diagram_format, draw(found, diagram_format))
    return Exit.OK


def unknown(error: UnknownChart, connection: Connection) -> InvalidArgument:
    """The chart is nowhere `show` looked: say where it looked, and how to give it."""
    if connection.embedded:
        given = "the default, " if connection.source == "default" else ""
        where = (
            f"{connection.url} ({given}an in-process store) has no catalog of published charts; give it with "
            f"--charts DIR or --app MODULE:APP, or the deployment's URL with --url, {URL_VARIABLE} or "
            f"{URL_FILE_VARIABLE}"
        )
    else:
        where = (
            "no worker published it; give it with --charts DIR or --app MODULE:APP, or start a worker that "
            "serves it"
        )
    built_in = ", ".join(f"{short} ({full})" for short, full in BUILT_IN.items())
    return InvalidArgument("CHART", f"{error}, and {where}; built in: {built_in}")


COMMANDS = (chart,)
