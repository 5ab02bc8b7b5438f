"""The replica-set init scripts of compose/mongo-init/ (rs_init.py and the membership plan it imports), loaded as
the worker image runs them: with that directory on the import path."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

MONGO_INIT = Path(__file__).resolve().parents[2] / "compose" / "mongo-init"


def load(name: str) -> ModuleType:
    if str(MONGO_INIT) not in sys.path:
        sys.path.insert(0, str(MONGO_INIT))
    return importlib.import_module(name)
