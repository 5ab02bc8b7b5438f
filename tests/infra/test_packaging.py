"""The production SDK and its development distribution as pip builds and installs them.

- The `harel` wheel, built as compose/Dockerfile.worker builds it (`pip wheel --no-deps ./sdk`), holds no
  harel-dev module and requires no mongomock.
- `pip install ./sdk` alone into a fresh virtualenv, as a worker image or host has it: `import harel` works,
  `import mongomock` fails, and `harel worker` (on its default `mongomock://`), `harel demo`, `harel dev` and
  `open_backend("mongomock://")` stop with DevServerNotInstalled, one line and exit 2, no traceback.
- The command that line gives, run from the root of a checkout, installs harel-dev: mongomock:// then opens.

The checkout is a copy of sdk/ (without build output) in a temporary directory, so nothing built earlier in
the working tree can reach the wheels. Nothing is downloaded: pip installs from wheels packed from this test
environment (`--no-index`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.wheelhouse import fill_wheelhouse, runtime_dependencies

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
BASE_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
BUILD = {"setuptools", "wheel"}  # what pip builds sdk/ and sdk/dev/ with
PIP_TIMEOUT = 300
INSTALL_COMMAND = re.compile(r"`(pip install [^`]+)` from the root of a harel-stack checkout")


@dataclass
class Checkout:
    root: Path
    environment: dict[str, str]

    def run(self, *command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(part) for part in command],
            cwd=cwd or self.root,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT,
            check=False,
        )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    """sdk/ and sdk/dev/ as a fresh clone has them, and pip pointed at wheels of this environment only."""
    scratch = tmp_path_factory.mktemp("packaging")
    root = scratch / "harel-stack"
    shutil.copytree(
        REPOSITORY / "sdk",
        root / "sdk",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    wheelhouse = scratch / "wheels"
    wheelhouse.mkdir()
    # harel itself is built from the checkout; harel-dev's dependencies include harel's
    fill_wheelhouse(wheelhouse, runtime_dependencies("harel-dev") - {"harel"} | BUILD)
    outside = {
        k: v for k, v in os.environ.items() if not k.startswith(("HAREL_", "PIP_")) and k != "PYTHONPATH"
    }
    environment = {
        **outside,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    return Checkout(root, environment)


@dataclass
class Venv:
    path: Path
    checkout: Checkout

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def run(self, *command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`command` with this virtualenv first on PATH (as when it is activated), in it unless `cwd`."""
        path = f"{self.path / 'bin'}{os.pathsep}{os.environ['PATH']}"
        activated = Checkout(self.checkout.root, {**self.checkout.environment, "PATH": path})
        return activated.run(*command, cwd=cwd or self.path)


def production_venv(checkout: Checkout, name: str) -> Venv:
    """A fresh virtualenv with `pip install ./sdk`, and nothing else."""
    venv = Venv(checkout.root.parent / name, checkout)
    made = checkout.run(BASE_PYTHON, "-m", "venv", venv.path)
    assert made.returncode == 0, made.stderr
    installed = checkout.run(venv.python, "-m", "pip", "install", "--quiet", "./sdk")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


@pytest.fixture(scope="module")
def production(checkout: Checkout) -> Venv:
    return production_venv(checkout, "production")


def test_the_harel_wheel_has_no_dev_server_and_no_mongomock(checkout: Checkout) -> None:
    built = checkout.run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", "wheels", "./sdk")
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (checkout.root / "wheels").glob("harel-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()

    assert "harel/backend.py" in names and "harel_entry.py" in names  # the console script's entry
    assert [name for name in names if name.startswith(("harel/local/", "harel_dev/"))] == []
    required = {
        canonicalize_name(Requirement(text).name)
        for text in Parser().parsestr(metadata).get_all("Requires-Dist")
    }
    assert "pymongo" in required
    assert required & {"mongomock", "harel-dev"} == set()


def test_the_production_sdk_imports_without_mongomock(production: Venv) -> None:
    harel = production.run(
        production.python, "-c", "import harel.cli.main, harel.backend; print(harel.__file__)"
    )
    assert harel.returncode == 0, harel.stderr
    assert harel.stdout.startswith(str(production.path)), "installed, not linked to the checkout"
    for missing in ("mongomock", "harel_dev"):
        imported = production.run(production.python, "-c", f"import {missing}")
        assert imported.returncode == 1
        assert f"ModuleNotFoundError: No module named '{missing}'" in imported.stderr


@pytest.mark.parametrize(
    ("command", "needed_by"),
    [
        (
            ["worker", "--http-port", "0"],
            "harel worker: mongomock:// (the embedded backend, the default URL)",
        ),
        (["demo"], "harel demo: mongomock:// (the embedded backend, the default URL)"),
        (["dev"], "harel dev: the local development server"),
    ],
)
def test_what_needs_harel_dev_is_one_line_saying_how_to_install_it(
    production: Venv, command: list[str], needed_by: str
) -> None:
    ran = production.run(production.path / "bin" / "harel", *command)

    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ran.stderr.splitlines()[-1] == (
        f"{needed_by} is in harel-dev, the development distribution, which is not installed here; install it "
        "with `pip install ./sdk ./sdk/dev` from the root of a harel-stack checkout"
    )
    assert "Traceback" not in ran.stdout + ran.stderr


def test_the_install_command_it_names_makes_mongomock_work(checkout: Checkout) -> None:
    venv = production_venv(checkout, "developer")
    opening = "from harel.backend import open_backend; open_backend('mongomock://').close()"
    refused = venv.run(venv.python, "-c", opening)
    assert refused.returncode == 1
    assert "harel.errors.DevServerNotInstalled: mongomock://" in refused.stderr
    found = INSTALL_COMMAND.search(refused.stderr)
    assert found is not None, refused.stderr

    installed = venv.run(*found.group(1).split(), cwd=checkout.root)  # the virtualenv's pip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    opened = venv.run(venv.python, "-c", opening)
    assert opened.returncode == 0, opened.stderr
    listed = venv.run(venv.python, "-m", "pip", "list", "--format=freeze")
    assert {line.split("==")[0].lower() for line in listed.stdout.splitlines()} >= {
        "harel",
        "harel-dev",
        "mongomock",
    }
