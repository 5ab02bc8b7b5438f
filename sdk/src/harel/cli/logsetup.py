"""Log lines on stderr: HAREL_LOG_LEVEL and HAREL_LOG_FORMAT, checked before anything is logged.

The worker logs at INFO by default, in JSON lines unless stderr is a terminal; the other commands log only
warnings, as text. Either variable overrides that for every command.
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


def configure(*, default_level: str, default_format: str | None = None, json_lines: bool = False) -> None:
    """`default_format` None: JSON lines unless stderr is a terminal. `json_lines` (--json) forces JSON."""
    level = os.environ.get(LEVEL_VARIABLE, "").strip().upper() or default_level
    if level not in LEVELS:
        raise InvalidArgument(
            LEVEL_VARIABLE, f"{level.lower()!r} is not a level: use one of {', '.join(LEVELS)}"
        )
    fmt = os.environ.get(FORMAT_VARIABLE, "").strip().lower() or default_format
    if fmt is not None and fmt not in FORMATS:
        raise InvalidArgument(FORMAT_VARIABLE, f"{fmt!r} is not a format: use text or json")
    configure_logging("json" if json_lines else fmt, logging.getLevelName(level))
