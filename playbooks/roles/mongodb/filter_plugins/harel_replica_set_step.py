"""The `harel_replica_set_step` filter: the membership plan of compose/mongo-init/replica_set_plan.py, the one
copy compose's mongo-init and the Helm chart's init Job decide with, loaded from there by its path in the
repository, so the three deployments make the same decision from the same file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PLAN = Path(__file__).resolve().parents[4] / "compose" / "mongo-init" / "replica_set_plan.py"
MODULE = "harel_replica_set_plan"


def _plan() -> ModuleType:
    if MODULE in sys.modules:  # Ansible may load a plugin file more than once in one run
        return sys.modules[MODULE]
    spec = importlib.util.spec_from_file_location(MODULE, PLAN)
    if spec is None or spec.loader is None:
        raise ImportError(f"the membership plan is not at {PLAN}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


FilterModule = _plan().FilterModule
