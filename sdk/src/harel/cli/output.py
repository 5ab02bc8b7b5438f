"""What commands print: results on stdout, notes on stderr; tables and colour on a terminal, plain text
otherwise (and whenever NO_COLOR is set); one JSON document instead with `--json`.

Plain output is what scripts and tests read, so it never wraps and carries no trailing blanks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Console, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

# Plain output goes to files and pipes: never wrap it (a cropped id or a split table row helps nobody).
UNWRAPPED = 1_000_000

STATUS_STYLES = {
    "running": "cyan",
    "completed": "green",
    "failed": "bold red",
    "cancelled": "yellow",
    "ok": "green",
    "warning": "yellow",
    "ERROR": "bold red",
    "relaxed": "magenta",
}


def make_console(*, stderr: bool) -> Console:
    probe = Console(stderr=stderr)
    return Console(
        stderr=stderr,
        width=None if probe.is_terminal else UNWRAPPED,
        highlight=False,
        markup=False,
        emoji=False,
    )


def styled(text: str) -> Text:
    """`text` in the colour of the status it names (running, completed, ERROR, ...)."""
    return Text(text, style=STATUS_STYLES.get(text, ""))


def table(*columns: str) -> Table:
    """Columns two spaces apart under a header line and a rule of dashes; cells never wrap, so one row is
    one line."""
    grid = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for column in columns:
        grid.add_column(column, no_wrap=True)
    grid.add_row(*(Rule(characters="-", style="dim") for _ in columns))
    return grid


def pairs(rows: Iterable[tuple[str, RenderableType]]) -> Table:
    """Label and value, one pair a line, values aligned."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for label, value in rows:
        grid.add_row(label, value)
    return grid


class Output:
    def __init__(self, *, as_json: bool) -> None:
        self.json = as_json
        self.out = make_console(stderr=False)
        self.err = make_console(stderr=True)

    def document(self, value: Any) -> None:
        """One JSON document on stdout (what --json prints)."""
        self.out.file.write(json.dumps(value, indent=2, default=str, ensure_ascii=False) + "\n")
        self.out.file.flush()

    def lines(self, renderable: RenderableType) -> list[Text]:
        """`renderable` as lines for this console, styles kept, trailing blanks removed."""
        rendered = self.out.render_lines(renderable, self.out.options, pad=False)
        lines = []
        for segments in rendered:
            line = Text()
            for segment in segments:
                if not segment.control:
                    line.append(segment.text, segment.style)
            line.rstrip()
            lines.append(line)
        return lines

    def show(self, *renderables: RenderableType) -> None:
        for renderable in renderables:
            for line in self.lines(renderable) if isinstance(renderable, Table) else [renderable]:
                self.out.print(line, soft_wrap=True)

    def note(self, text: str | Text) -> None:
        """A line for the person at the terminal, on stderr: never part of what a script reads."""
        self.err.print(text, soft_wrap=True, style="dim" if isinstance(text, str) else "")
