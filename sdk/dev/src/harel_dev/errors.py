"""Command errors as a server reports them: `{ok: 0, code, codeName, errmsg, errorLabels}`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The subset of MongoDB's error codes the local server (or a test double built on it) answers with.
CODE_NAMES: dict[int, str] = {
    1: "InternalError",
    2: "BadValue",
    6: "HostUnreachable",
    7: "HostNotFound",
    9: "FailedToParse",
    11: "UserNotFound",
    13: "Unauthorized",
    14: "TypeMismatch",
    17: "ProtocolError",
    18: "AuthenticationFailed",
    20: "IllegalOperation",
    23: "AlreadyInitialized",
    26: "NamespaceNotFound",
    31: "RoleNotFound",
    27: "IndexNotFound",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    64: "WriteConcernFailed",
    72: "InvalidOptions",
    59: "CommandNotFound",
    73: "InvalidNamespace",
    74: "NodeNotFound",
    76: "NoReplicationEnabled",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    93: "InvalidReplicaSetConfig",
    94: "NotYetInitialized",
    103: "NewReplicaSetConfigurationIncompatible",
    112: "WriteConflict",
    189: "PrimarySteppedDown",
    225: "TransactionTooOld",
    237: "CursorKilled",
    238: "NotImplemented",
    280: "ChangeStreamFatalError",
    286: "ChangeStreamHistoryLost",
    334: "MechanismUnavailable",
    262: "ExceededTimeLimit",
    9001: "SocketException",
    10107: "NotWritablePrimary",
    11000: "DuplicateKey",
    11600: "InterruptedAtShutdown",
    11602: "InterruptedDueToReplStateChange",
    13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
}

# Codes after which the server labels a retryable write's failure `RetryableWriteError`.
RETRYABLE_WRITE_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})

RETRYABLE_WRITE_LABEL = "RetryableWriteError"
RETRYABLE_WRITE_COMMANDS = frozenset({"insert", "update", "delete", "findAndModify", "findandmodify"})


def code_name(code: int) -> str:
    """The server's name for `code`; codes without a name are reported as `Location<code>`."""
    return CODE_NAMES.get(code, f"Location{code}")


@dataclass(eq=False)
class CommandError(Exception):
    """A command failed as a whole; the reply is `{ok: 0, ...}`."""

    code: int
    message: str
    labels: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def reply(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ok": 0.0,
            "errmsg": self.message,
            "code": self.code,
            "codeName": code_name(self.code),
        }
        doc.update(self.extra)
        if self.labels:
            doc["errorLabels"] = list(self.labels)
        return doc


def not_modelled(what: str) -> CommandError:
    """MongoDB would do this; the local server refuses loudly instead of answering wrongly."""
    return CommandError(238, f"harel_dev does not model {what}")


def is_retryable_write(command: dict[str, Any]) -> bool:
    return next(iter(command), "") in RETRYABLE_WRITE_COMMANDS and "txnNumber" in command


def error_labels(requested: list[str] | None, code: int, command: dict[str, Any]) -> list[str]:
    """`requested` when given; otherwise the label a server adds to a retryable write's retryable error."""
    if requested is not None:
        return requested
    if is_retryable_write(command) and code in RETRYABLE_WRITE_CODES:
        return [RETRYABLE_WRITE_LABEL]
    return []
