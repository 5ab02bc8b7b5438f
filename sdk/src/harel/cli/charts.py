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
from harel.cli.settings import Connection
from harel.diagram import render_dot, render_mermaid
from harel.errors import InvalidArgument, UnknownChart

RENDERERS = {"mermaid": render_mermaid, "dot": render_dot}


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
    """The charts workers run (published to the deployment's catalog) or --charts/--app give."""


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
    """Draw CHART (from --charts/--app, else from the catalog the workers publish to) as a diagram: states,
    regions, and transitions labelled `event [guard] / actions`."""
    found = app.registered_chart(chart_id, version)
    if found is None:
        with closing(connection.open_shared("chart show")) as backend:
            found = backend.catalog.get(chart_id, version)
    if found is None:
        raise InvalidArgument(
            "CHART",
            f"{UnknownChart(chart_id, version)}, and no worker published it; give it with --charts DIR or "
            "--app MODULE:APP, or start a worker that serves it",
        )
    show_drawing(out, found, diagram_format, draw(found, diagram_format))
    return Exit.OK


COMMANDS = (chart,)
