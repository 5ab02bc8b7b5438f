"""harel and harel-dev kept apart: the production `harel` imports nothing of harel-dev (nor mongomock), mongomock
is patched only once a local backend is built, and what needs harel-dev says how to install it when it is
missing. The packages as pip builds and installs them: tests/infra/test_packaging.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harel.backend import open_backend
from harel.cli import main
from harel.errors import DevServerNotInstalled

# Every module of both packages, imported in a fresh interpreter (no module of either is a script).
IMPORT_ALL = """
import importlib, pkgutil, sys
import harel
for module in pkgutil.walk_packages(harel.__path__, "harel."):
    importlib.import_module(module.name)
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("harel_dev", "mongomock"))
print("harel alone loads:", loaded)
import harel_dev
for module in pkgutil.walk_packages(harel_dev.__path__, "harel_dev."):
    importlib.import_module(module.name)
"""
# What `mongomock_patches.install()` replaces: mongomock's document scan and its expression parser.
SHOW_PATCHED = """
from mongomock import aggregate, collection
print("scan:", collection.Collection._iter_documents.__qualname__)
print("parse:", aggregate._Parser.parse.__qualname__)
"""
UNPATCHED = ["scan: Collection._iter_documents", "parse: _Parser.parse"]
INSTALL_HINT = "install it with `pip install ./sdk ./sdk/dev` from the root of a harel-stack checkout"


def python(source: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", source], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_harel_imports_nothing_of_harel_dev_nor_mongomock() -> None:
    assert python(IMPORT_ALL)[0] == "harel alone loads: []"


def test_importing_harel_and_harel_dev_leaves_mongomock_unpatched() -> None:
    assert python(IMPORT_ALL + SHOW_PATCHED)[1:] == UNPATCHED


@pytest.mark.parametrize(
    "build",
    [
        "from harel_dev.embedded import EmbeddedClient; EmbeddedClient()",
        "from harel_dev.engine import Engine; Engine()",
        "from harel.backend import open_backend; open_backend('mongomock://').close()",
    ],
)
def test_building_a_local_backend_patches_mongomock(build: str) -> None:
    shown = python(f"{build}\n{SHOW_PATCHED}")
    assert shown == ["scan: narrowed.<locals>.iter_documents", "parse: _array_literals.<locals>.parse"]


@pytest.fixture
def without_harel_dev(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as if harel-dev were not installed: `import harel_dev...` raises ModuleNotFoundError."""
    for name in [name for name in sys.modules if name.split(".")[0] == "harel_dev"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "harel_dev", None)  # type: ignore[arg-type]
    yield


@pytest.mark.usefixtures("without_harel_dev")
def test_mongomock_without_harel_dev_is_the_named_error() -> None:
    with pytest.raises(DevServerNotInstalled) as missing:
        open_backend("mongomock://")

    assert str(missing.value) == (
        "mongomock:// (the embedded backend, the default URL) is in harel-dev, the development distribution, "
        f"which is not installed here; {INSTALL_HINT}"
    )
    assert missing.value.__cause__ is None, "one error, not an ImportError behind it"


@pytest.fixture
def signal_handlers_kept() -> Iterator[None]:
    """`harel worker` sets SIGTERM and SIGINT handlers for its drain before it connects: put pytest's back."""
    kept = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in kept.items():
        signal.signal(number, handler)


@pytest.mark.usefixtures("without_harel_dev", "signal_handlers_kept")
@pytest.mark.parametrize(
    ("argv", "needed_by"),
    [
        (
            ["worker", "--http-port", "0"],
            "harel worker: mongomock:// (the embedded backend, the default URL)",
        ),
        (["demo"], "harel demo: mongomock:// (the embedded backend, the default URL)"),
        (["dev"], "harel dev: the local development server"),
    ],
)
def test_the_cli_without_harel_dev_says_how_to_install_it(
    argv: list[str],
    needed_by: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("HAREL_MONGO_URL", raising=False)
    monkeypatch.delenv("HAREL_MONGO_URL_FILE", raising=False)
    monkeypatch.chdir(tmp_path)

    code = main(argv)
    err = capsys.readouterr().err

    assert code == 2
    assert err.splitlines()[-1] == (
        f"{needed_by} is in harel-dev, the development distribution, which is not installed here; {INSTALL_HINT}"
    )
    assert "Traceback" not in err
    assert not (tmp_path / ".harel").exists(), "harel dev claimed nothing before it could run"
