"""The package's public face: `harel/__init__.py` exports what applications write against, and every error
the SDK defines, so user code imports from `harel` alone."""

from __future__ import annotations

import inspect

import harel
import harel.errors


def test_every_exported_name_exists_and_the_list_is_sorted_without_repeats() -> None:
    missing = [name for name in harel.__all__ if not hasattr(harel, name)]
    assert missing == []
    assert harel.__all__ == sorted(set(harel.__all__))


def test_what_an_application_writes_against_is_exported() -> None:
    needed = {
        "App", "ActionContext", "ActionResult", "Send", "load_chart", "load_app", "Worker", "WorkerConfig",
        "Client", "AsyncClient", "MongoStore", "AsyncMongoStore", "MongoTransport", "AsyncMongoTransport",
    }  # fmt: skip
    assert needed <= set(harel.__all__)
    assert harel.AsyncClient is not harel.Client, "the async client is the twin, not an alias"


def test_every_error_the_sdk_defines_is_exported() -> None:
    defined = {
        name
        for name, value in vars(harel.errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == "harel.errors"
    }
    assert defined, "harel.errors defines the SDK's errors"
    assert defined - set(harel.__all__) == set()
    assert all(issubclass(getattr(harel, name), harel.HarelError) for name in defined)
