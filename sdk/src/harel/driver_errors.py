"""The driver's errors, translated where they leave a store, a transport or a reader of the deployment
into the SDK's own, so the worker, the clients and the CLI never see PyMongo's:

    the deployment did not answer in time: unreachable, no primary,   DeploymentUnavailable
    a timeout, a write a majority did not acknowledge within its bound
    the same, on a commit's own update: it may have been applied       CommitOutcomeUnknown
    a commit's document would outgrow 16 MiB                          ExecutionTooLarge
    any other failure or refusal of a command                         DeploymentError

Each carries the driver's error kind and message, with the driver's error as its `__cause__`. What is not a
failure but an answer (a duplicate key on a create, a bulk create that found children, an index already
gone) the store reads itself, inside these.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pymongo.errors import (
    ConnectionFailure,
    DocumentTooLarge,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)

from harel.deadlines import one_operation
from harel.errors import (
    CommitOutcomeUnknown,
    DeploymentError,
    DeploymentUnavailable,
    ExecutionTooLarge,
)
from harel.executions.fields import MAX_DOCUMENT_BYTES

# Server error codes for a document that outgrew 16 MiB: BSONObjectTooLarge, and the code older
# servers return when the result of an update is too large.
TOO_LARGE_CODES = frozenset({10334, 17419})
# The label the server gives an error a retried write may cure (a primary stepping down or shutting down).
RETRYABLE_WRITE = "RetryableWriteError"

Class = TypeVar("Class", bound=type)


def _unavailable(error: PyMongoError) -> bool:
    # `timeout`: the driver's own say, for what a deadline cut short (`harel.deadlines`) in any error class
    return (
        isinstance(error, ConnectionFailure | ExecutionTimeout | WriteConcernError)
        or error.has_error_label(RETRYABLE_WRITE)
        or error.timeout
    )


def translated(error: PyMongoError) -> DeploymentError:
    kind = DeploymentUnavailable if _unavailable(error) else DeploymentError
    return kind(type(error).__name__, str(error))


@contextmanager
def mapped() -> Iterator[None]:
    """Raise the SDK's error for a driver error raised inside."""
    try:
        yield
    except PyMongoError as error:
        raise translated(error) from error


@contextmanager
def committing(execution_id: str, size: int) -> Iterator[None]:
    """`mapped`, for a commit's update of `size` bytes: a document too large is ExecutionTooLarge, and an
    unavailable deployment leaves the commit's outcome unknown."""
    try:
        yield
    except DocumentTooLarge as error:
        raise ExecutionTooLarge(execution_id, size, MAX_DOCUMENT_BYTES) from error
    except PyMongoError as error:
        if isinstance(error, OperationFailure) and error.code in TOO_LARGE_CODES:
            raise ExecutionTooLarge(execution_id, size, MAX_DOCUMENT_BYTES) from error
        if _unavailable(error):
            raise CommitOutcomeUnknown(execution_id, type(error).__name__, str(error)) from error
        raise translated(error) from error


def translating(cls: Class) -> Class:
    """`cls` with each of its public methods, sync or coroutine, under `mapped`: the class is a boundary. Each
    call is also one operation, under its own deadline where the caller asked for one
    (`harel.deadlines.per_operation`)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _under_mapped(member))
    return cls


def _under_mapped(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            with mapped(), one_operation():
                return await method(*args, **kwargs)

        return awaited

    @functools.wraps(method)
    def called(*args: Any, **kwargs: Any) -> Any:
        with mapped(), one_operation():
            return method(*args, **kwargs)

    return called
