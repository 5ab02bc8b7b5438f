"""The driver's errors, translated where they leave a store or transport into the SDK's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harel.errors import ExecutionTooLarge
from harel.executions.fields import MAX_DOCUMENT_BYTES

# Server error codes for a document that outgrew 16 MiB: BSONObjectTooLarge, and the code older
# servers return when the result of an update is too large.
TOO_LARGE_CODES = frozenset({10334, 17419})


@contextmanager
def too_large_as_typed(execution_id: str, size: int) -> Iterator[None]:
    """Map the driver's and the server's "document too large" errors to ExecutionTooLarge."""
    from pymongo.errors import DocumentTooLarge, OperationFailure

    try:
        yield
    except DocumentTooLarge as exc:
        raise ExecutionTooLarge(execution_id, size, MAX_DOCUMENT_BYTES) from exc
    except OperationFailure as exc:
        if exc.code in TOO_LARGE_CODES:
            raise ExecutionTooLarge(execution_id, size, MAX_DOCUMENT_BYTES) from exc
        raise
