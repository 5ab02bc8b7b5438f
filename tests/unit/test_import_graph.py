"""The SDK's import graph, read from its sources with `ast` (nothing is imported): no import cycle, no
module reaching into another package's private module, and the driver's errors only at the boundary.

Every module of sdk/src/harel is a node. An import adds an edge to each SDK module it names:
`import harel.a.b` and `from harel.a import b` where `b` is a module lead to `harel.a.b`; `from harel.a import
name` where `name` is not a module leads to `harel.a` (its `__init__`); relative imports resolve against the
importing module's package. A package's `__init__` is not added to the modules below it: importing
`harel.a.b` runs `harel/a/__init__.py` too, but a package whose `__init__` is being imported is already
in `sys.modules`, so that edge never makes a cycle of its own.

Cycles: an import under `if TYPE_CHECKING:` never runs, so it is left out. Every other import counts, at
module level (in top-level `if`/`try` blocks too) and inside functions alike: a function-local import only
runs later, so it cannot fail the way a module-level cycle does, but it still ties the two modules together,
and a cycle hidden in a function is a cycle all the same.

Private modules: a module whose name starts with `_` (not `__init__`, `__main__`) is imported only by the
modules of its own package, every import counted (TYPE_CHECKING and function-local ones too).

The driver's errors: `pymongo.errors` is named (imported anywhere in a module, or reached as
`pymongo.errors.X`) only by the modules that talk to the deployment and translate what it raises
(`DRIVER_BOUNDARY`); the worker, the clients, the CLI and the rest see the SDK's errors only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sdk" / "src" / "harel"
# The stores and transports (sync and async), the connection (connect, check) and the translation itself.
DRIVER_BOUNDARY = (
    "harel.store",
    "harel.aio_store",
    "harel.transport",
    "harel.connection",
    "harel.driver_errors",
)


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    runs: bool  # False for an import under `if TYPE_CHECKING:`
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sdk_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(node: ast.AST, runs: bool = True) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement under `node`, and whether it runs (it is not under `if TYPE_CHECKING:`)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for part in child.body:
                yield from _statements(ast.Module(body=[part], type_ignores=[]), runs=False)
            for part in child.orelse:
                yield from _statements(ast.Module(body=[part], type_ignores=[]), runs=runs)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, runs
        yield from _statements(child, runs)


def _sdk_module(name: str, modules: dict[str, Path]) -> str | None:
    """The SDK module `name` is or lies in (`harel.a.b.c`, not a module, lies in `harel.a.b`); None outside."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_in(module: str, package: str, source: str, modules: dict[str, Path]) -> list[Import]:
    """The SDK modules `source` (the text of `module`, of `package`) imports."""
    found: list[Import] = []
    for statement, runs in _statements(ast.parse(source)):
        if isinstance(statement, ast.Import):
            names = [alias.name for alias in statement.names]
        else:
            assert isinstance(statement, ast.ImportFrom)
            base = statement.module or ""
            if statement.level:
                anchor = package.split(".")[: len(package.split(".")) - statement.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in statement.names
            ]
        for name in dict.fromkeys(names):
            imported = _sdk_module(name, modules)
            if imported is not None and imported != module:
                found.append(Import(module, imported, runs, statement.lineno))
    return found


def all_imports() -> list[Import]:
    modules = sdk_modules()
    return [
        found
        for module, path in modules.items()
        for found in imports_in(module, package_of(module, path), path.read_text(encoding="utf-8"), modules)
    ]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def is_private(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last.startswith("_") and last not in {"__init__", "__main__"}


def test_the_sdk_has_no_import_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for found in all_imports():
        if found.runs:
            edges.setdefault(found.importer, set()).add(found.imported)
    assert cycles(edges) == []


def test_no_module_imports_another_packages_private_module() -> None:
    modules = sdk_modules()
    reaching = [
        f"{found.importer}:{found.line} imports {found.imported}"
        for found in all_imports()
        if is_private(found.imported)
        and package_of(found.importer, modules[found.importer]) != found.imported.rpartition(".")[0]
    ]
    assert reaching == []


def names_driver_errors(source: str) -> bool:
    """Whether `source` imports `pymongo.errors` (or a name from it), or reaches it as `pymongo.errors.X`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(alias.name == "pymongo.errors" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (
            node.module == "pymongo.errors"
            or (node.module == "pymongo" and any(alias.name == "errors" for alias in node.names))
        ):
            return True
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "errors"
            and isinstance(node.value, ast.Name)
            and node.value.id == "pymongo"
        ):
            return True
    return False


def in_boundary(module: str) -> bool:
    return any(module == part or module.startswith(f"{part}.") for part in DRIVER_BOUNDARY)


def test_only_the_driver_boundary_names_the_drivers_errors() -> None:
    naming = [
        module
        for module, path in sdk_modules().items()
        if names_driver_errors(path.read_text(encoding="utf-8")) and not in_boundary(module)
    ]
    assert naming == []


# --- the checks themselves --------------------------------------------------------------------------------


def test_a_cycle_is_found_and_a_chain_is_not() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import harel.store.mongo", [("harel.store.mongo", True)]),
        (
            "from harel.executions import commits, fields",
            [("harel.executions.commits", True), ("harel.executions.fields", True)],
        ),
        ("from harel.errors import StoreConflict", [("harel.errors", True)]),
        ("from . import base", [("harel.store.base", True)]),
        ("from ..executions.fields import EXECUTIONS", [("harel.executions.fields", True)]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harel.worker import Worker",
            [("harel.worker", False)],
        ),
        ("def f():\n    from harel.connection import connect", [("harel.connection", True)]),
        ("import pymongo", []),
    ],
    ids=[
        "import",
        "from-package-modules",
        "from-module-name",
        "relative",
        "relative-up",
        "type-checking",
        "local",
        "outside",
    ],
)
def test_imports_are_read_as_the_interpreter_resolves_them(
    source: str, expected: list[tuple[str, bool]]
) -> None:
    found = imports_in("harel.store.memory", "harel.store", source, sdk_modules())
    assert [(f.imported, f.runs) for f in found] == expected


def test_a_private_module_is_one_whose_name_starts_with_an_underscore() -> None:
    assert is_private("harel.store._documents")
    assert not is_private("harel.store.__init__") and not is_private("harel.store.mongo")


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("from pymongo.errors import PyMongoError", True),
        ("import pymongo.errors", True),
        ("from pymongo import errors", True),
        ("import pymongo\n\ndef f():\n    return pymongo.errors.AutoReconnect", True),
        ("from pymongo import ReturnDocument", False),
        ("from harel.errors import DeploymentError", False),
    ],
    ids=["from", "import", "from-package", "attribute", "other-pymongo", "harel-errors"],
)
def test_the_drivers_errors_are_found_however_they_are_named(source: str, names: bool) -> None:
    assert names_driver_errors(source) is names


def test_the_boundary_is_its_packages_and_modules_only() -> None:
    assert in_boundary("harel.store.mongo") and in_boundary("harel.driver_errors")
    assert not in_boundary("harel.worker") and not in_boundary("harel.storekeeper")
