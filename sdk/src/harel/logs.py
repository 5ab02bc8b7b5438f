"""Structured logging: JSON lines when stdout is not a terminal (containers, systemd), text otherwise."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

_HANDLER_NAME = "harel"
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        line = super().format(record)
        return line + ("  " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else "")


def configure_logging(fmt: str | None = None, level: str | int | None = None) -> None:
    """`fmt`: "json" or "text"; default from HAREL_LOG_FORMAT, else json unless stderr is a terminal.
    Calling it again replaces the handler it installed; handlers installed by others stay."""
    fmt = fmt or os.environ.get("HAREL_LOG_FORMAT") or ("text" if sys.stderr.isatty() else "json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if h.get_name() != _HANDLER_NAME] + [handler]
    root.setLevel(level or os.environ.get("HAREL_LOG_LEVEL", "INFO"))
