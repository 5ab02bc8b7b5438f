"""What the local backends change in mongomock, applied once per process before any of them is used:
its aggregation expressions corrected where they answer differently from MongoDB (`expressions`), and its
document lookups narrowed as an index would (`lookup`)."""

from __future__ import annotations

import threading

from harel.local import expressions, lookup

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
