"""harel-dev, the development distribution (sdk/dev): the embedded `mongomock://` backend and the local server
of `harel dev`. The production `harel` runs without it, so what uses it imports it at the point of use,
inside `requires_harel_dev`, and an environment without it gets DevServerNotInstalled, not an ImportError."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harel.errors import DevServerNotInstalled


@contextmanager
def requires_harel_dev(needed_by: str) -> Iterator[None]:
    """Imports of `harel_dev` in the block raise DevServerNotInstalled when it, or the module asked for, is not
    installed. Any other missing module is left to propagate."""
    try:
        yield
    except ModuleNotFoundError as missing:
        if (missing.name or "").partition(".")[0] != "harel_dev":
            raise
        raise DevServerNotInstalled(needed_by) from None
