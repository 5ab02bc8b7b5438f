"""Log lines on stderr: HAREL_LOG_LEVEL and HAREL_LOG_FORMAT, checked before anything is logged.

By default the worker logs at INFO, in JSON lines unless stderr is a terminal; `harel dev` at INFO, as text;
the demo only errors (its own output tells the story); the other commands warnings, as text. Either variable overrides that.
"""

from __future__ import annotations

import logging
import os

from harel.errors import InvalidArgument
from harel.logs import configure_logging

LEVEL_VARIABLE = "HAREL_LOG_LEVEL"
FORMAT_VARIABLE = "HAREL_LOG_FORMAT"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
DEFAULT_LEVELS = {"worker": "INFO", "dev": "INFO", "demo": "ERROR"}
DEFAULT_LEVEL = "WARNING"


def configure(command: str, *, json_lines: bool = False) -> None:
    """Logging for `harel COMMAND`. Like `logging.basicConfig`, it leaves a setup already in place (a
    program's that runs `main`, a test's) as it is, unless `json_lines` (--json) asks for JSON lines."""
    level = os.environ.get(LEVEL_VARIABLE, "").strip().upper() or DEFAULT_LEVELS.get(command, DEFAULT_LEVEL)
    if level not in LEVELS:
        raise InvalidArgument(
            LEVEL_VARIABLE, f"{level.lower()!r} is not a level: use one of {', '.join(LEVELS)}"
        )
    fmt = os.environ.get(FORMAT_VARIABLE, "").strip().lower() or (None if command == "worker" else "text")
    if fmt is not None and fmt not in FORMATS:
        raise InvalidArgument(FORMAT_VARIABLE, f"{fmt!r} is not a format: use text or json")
    if json_lines or not logging.getLogger().handlers:
        configure_logging("json" if json_lines else fmt, logging.getLevelName(level))
