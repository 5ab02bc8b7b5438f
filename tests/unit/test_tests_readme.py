"""tests/README.md names the tests that prove its claims: every test it names exists, and every row of the
fault suite's tables names at least one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
README = TESTS / "README.md"
# `wire/test_faults.py::test_name[params]` or a module alone, `wire/test_faults.py`, paths under tests/
NAMED = re.compile(r"`(?:tests/)?((?:[a-z_]+/)+test_\w+\.py)(?:::(test_\w+)(?:\[[^\]`]*\])?)?`")


def _functions(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_test_the_readme_names_exists() -> None:
    named = NAMED.findall(README.read_text(encoding="utf-8"))
    assert len(named) > 30
    missing = []
    for path, function in named:
        module = TESTS / path
        if not module.is_file():
            missing.append(path)
        elif function and function not in _functions(module):
            missing.append(f"{path}::{function}")
    assert missing == [], f"tests/README.md names tests that do not exist: {missing}"


def test_every_row_of_the_fault_tables_names_the_test_that_proves_it() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The fault suite") : text.index("### `make chaos`")]
    rows = [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith(("| scenario", "| ---"))
    ]
    assert len(rows) > 25
    unproved = [row.split(" | ")[0] for row in rows if not NAMED.search(row)]
    assert unproved == [], f"rows that name no test: {unproved}"
