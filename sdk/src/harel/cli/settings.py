"""Where a command finds its deployment, and how long it waits for it.

The URL, first found: `--url`; `HAREL_MONGO_URL`; the file `HAREL_MONGO_URL_FILE` names (a secret mounted as a
file); the store of a `harel dev` running for the current folder or one above it (`.harel/dev.json`,
`harel.cli.devstate`); else the embedded `mongomock://`. The deadline: `--deadline`, else `HAREL_CONNECT_DEADLINE`, else 60
seconds; 0 waits for the deployment indefinitely.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harel.backend import DEFAULT_URL, Backend, is_embedded, open_backend
from harel.cli import devstate
from harel.cli.devstate import DevStore
from harel.errors import InvalidArgument

URL_VARIABLE = "HAREL_MONGO_URL"
URL_FILE_VARIABLE = "HAREL_MONGO_URL_FILE"
DEADLINE_VARIABLE = "HAREL_CONNECT_DEADLINE"
DEV_VARIABLE = "HAREL_DEV"
DEFAULT_DEADLINE = 60.0


@dataclass(frozen=True)
class Connection:
    """The deployment one command talks to. `deadline` None: wait for it indefinitely."""

    url: str
    source: str  # "--url", the variable it came from, "harel dev", or "default"
    dev: bool
    deadline: float | None
    dev_store: DevStore | None = None  # the running `harel dev` whose store this is

    @property
    def embedded(self) -> bool:
        return is_embedded(self.url)

    def open(self) -> Backend:
        """The store, transport and catalog on this deployment, checked (DeploymentRefused on errors)."""
        return open_backend(self.url, allow_standalone=self.dev, deadline=self.deadline)

    def open_shared(self, command: str) -> Backend:
        """`open`, for commands that read or change what other processes share: an embedded store lives
        inside this one process, so there is nothing in it to read and whatever is written vanishes."""
        if self.embedded:
            given = "the default, " if self.source == "default" else ""
            raise InvalidArgument(
                "--url",
                f"{self.url} ({given}an in-process store) lives only as long as this `harel {command}`, so "
                f"other processes can neither see nor serve it; run `harel dev` in this folder, or give the "
                f"deployment's URL with --url, {URL_VARIABLE} or {URL_FILE_VARIABLE} (`harel demo` runs a "
                "whole workflow in one process)",
            )
        return self.open()


def resolve_url(
    option: str | None, environ: Mapping[str, str], folder: Path
) -> tuple[str, str, DevStore | None]:
    """The URL, where it came from, and the running `harel dev` it belongs to (if it does)."""
    if option:
        return option, "--url", None
    if environ.get(URL_VARIABLE):
        return environ[URL_VARIABLE], URL_VARIABLE, None
    path = environ.get(URL_FILE_VARIABLE)
    if path:
        return _read_url_file(Path(path)), URL_FILE_VARIABLE, None
    running = devstate.find(folder)
    if running is not None:
        return running.url, "harel dev", running
    return DEFAULT_URL, "default", None


def _read_url_file(path: Path) -> str:
    try:
        url = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise InvalidArgument(
            URL_FILE_VARIABLE,
            f"cannot read {path} ({error.strerror or error}); point it at a readable file holding the URL",
        ) from None
    except UnicodeDecodeError:
        raise InvalidArgument(URL_FILE_VARIABLE, f"{path} is not UTF-8 text; it must hold the URL") from None
    if not url:
        raise InvalidArgument(URL_FILE_VARIABLE, f"{path} is empty; it must hold the deployment's URL")
    return url


def resolve_deadline(option: float | None) -> float | None:
    """Seconds to wait for the deployment (`--deadline` or HAREL_CONNECT_DEADLINE); 0 waits indefinitely."""
    seconds = DEFAULT_DEADLINE if option is None else option
    return None if seconds == 0 else seconds


def resolve(
    url: str | None,
    dev: bool,
    deadline: float | None,
    environ: Mapping[str, str] | None = None,
    folder: Path | None = None,
) -> Connection:
    environ = os.environ if environ is None else environ
    resolved, source, dev_store = resolve_url(url, environ, Path.cwd() if folder is None else folder)
    return Connection(resolved, source, dev, resolve_deadline(deadline), dev_store)
