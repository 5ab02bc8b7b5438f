"""MinKey, MaxKey and Timestamp in mongomock's BSON comparison order, so the config collections' chunk and zone
bounds (`{p: MinKey, _id: MinKey}`) and versions sort as MongoDB sorts them (mongomock refuses to sort them:
mongosh's `sh.status()` sorts chunks by `min`).

`install()` patches mongomock for the whole process, once, when a fake cluster is built; it only turns
mongomock's refusal into MongoDB's order (MinKey below every type, Timestamp between dates and regular
expressions, MaxKey above every type: the canonical type values of bsontypes.h)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from bson import MaxKey, MinKey, Timestamp
from mongomock import filtering

_CANONICAL = ((MinKey, -1), (Timestamp, 47), (MaxKey, 127))
_installed = False
_install_lock = threading.Lock()


def install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        filtering._get_compare_type = _ordered(filtering._get_compare_type)
        _installed = True


def _ordered(compare_type: Callable[[Any], int]) -> Callable[[Any], int]:
    def with_bson_keys(value: Any) -> int:
        for kind, canonical in _CANONICAL:
            if isinstance(value, kind):
                return canonical
        return compare_type(value)

    return with_bson_keys
