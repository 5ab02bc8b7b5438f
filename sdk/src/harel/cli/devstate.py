"""Where `harel dev` says which store it runs, so that other `harel` commands find it without flags.

`harel dev` writes `.harel/dev.json` in the folder it runs in:

    {"url": "mongodb://127.0.0.1:PORT/?replicaSet=rs0", "pid": 4242, "data": "/path/dev.db" | null,
     "started_at": <epoch seconds>}

and holds an exclusive advisory lock on it (flock) for as long as it runs. A command run in that folder or
below it reads the nearest such file whose lock is held; a file whose lock is free was left by a `harel dev`
that is gone (killed, or the machine restarted) and is ignored. The kernel drops the lock when the process
ends, however it ends, so a recycled process id can never make a stale file look live. The same lock keeps
a second `harel dev` from starting in a folder that has one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harel.errors import InvalidArgument

STATE_FILE = Path(".harel") / "dev.json"


@dataclass(frozen=True)
class DevStore:
    """A running `harel dev`'s store, as its state file says."""

    url: str
    pid: int
    path: Path
    data: str | None = None


def find(folder: Path) -> DevStore | None:
    """The store of the `harel dev` running for `folder` or the nearest folder above it; None if none runs."""
    for candidate in (folder, *folder.parents):
        found = _live(candidate / STATE_FILE)
        if found is not None:
            return found
    return None


def _live(path: Path) -> DevStore | None:
    try:
        with path.open("r", encoding="utf-8") as state:
            if _lockable(state.fileno()):
                return None  # nobody holds it: its harel dev is gone
            recorded = json.loads(state.read())
            return DevStore(str(recorded["url"]), int(recorded["pid"]), path, recorded.get("data"))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, unreadable, or still being written by a harel dev that is starting


def _lockable(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


class DevState:
    """The state file a running `harel dev` holds: `claim` it before starting, `publish` the URL once the
    store listens, `release` it at the end."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def claim(cls, folder: Path) -> DevState:
        """Take the folder's state file; InvalidArgument when a `harel dev` already runs for it."""
        path = folder / STATE_FILE
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise InvalidArgument(
                str(STATE_FILE),
                f"cannot write {path} ({error.strerror or error}), where other harel commands would find "
                "this store; run it in a folder you can write to",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            running = _live(path)
            os.close(fd)
            who = f" (pid {running.pid}, {running.url})" if running is not None else ""
            raise InvalidArgument(
                str(STATE_FILE),
                f"another harel dev runs for {folder}{who}; use its store, or stop it first",
            ) from None
        return cls(path, fd)

    def publish(self, url: str, data: Path | None) -> None:
        recorded: dict[str, Any] = {
            "url": url,
            "pid": os.getpid(),
            "data": str(data) if data is not None else None,
            "started_at": time.time(),
        }
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (json.dumps(recorded, indent=2) + "\n").encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        """Remove the file (while still holding it, so no reader mistakes it for a new one), then let go."""
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # only when empty: the folder may hold the user's own files
        os.close(self._fd)
