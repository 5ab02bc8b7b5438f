"""The one table every run prints, with the machine, the versions and the date above it."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "latest.md"
VERSIONED = ("pymongo", "mongomock", "harel", "sismic")


@dataclass(frozen=True)
class Row:
    """One line of the table: which benchmark, what figure, our number, the baseline's, and how to read it."""

    bench: int
    figure: str
    harel: str
    baseline: str = ""
    note: str = ""


def progress(message: str) -> None:
    """Progress goes to stderr so stdout carries the table alone."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def machine() -> str:
    return f"{os.cpu_count()} cores, {_memory()}, {_cpu_model()}"


def versions() -> str:
    found = [f"python {platform.python_version()}"]
    found += [f"{name} {metadata.version(name)}" for name in VERSIONED]
    return ", ".join(found)


def _memory() -> str:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        return "memory unknown"
    return f"{kib / 1024 / 1024:.1f} GiB memory"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def render(rows: list[Row], *, mode: str, targets: list[str]) -> str:
    """The markdown document: a header naming machine, versions, date and what ran, then the table."""
    lines = [
        "# harel benchmarks",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}",
        f"- versions: {versions()}",
        f"- mode: {mode}",
        f"- ran against: {'; '.join(targets)}",
        "- what each figure means: [bench/README.md](../README.md)",
        "",
        "| # | figure | harel | baseline | note |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {row.bench} | {_cell(row.figure)} | {_cell(row.harel)} | {_cell(row.baseline)} | {_cell(row.note)} |"
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def number(value: float, digits: int = 0) -> str:
    """Thousands separated, so 10000 and 100000 read at a glance."""
    return f"{value:,.{digits}f}"
