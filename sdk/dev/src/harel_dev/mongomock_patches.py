"""What the local backends change in mongomock: its aggregation expressions corrected where they answer
differently from MongoDB (`expressions`), and its document lookups narrowed as an index would (`lookup`).

Applied once per process when the first local backend is built (`EmbeddedClient`, the server's `Engine`),
never on import: a process that imports harel or harel_dev and uses mongomock itself gets mongomock as is."""

from __future__ import annotations

import threading

from harel_dev import expressions, lookup

_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Patch mongomock in this process (idempotent, thread-safe)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        expressions.patch()
        lookup.patch()
        _installed = True
