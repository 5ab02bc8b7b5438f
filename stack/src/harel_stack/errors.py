"""Errors of the stack CLI. Each carries what the operator needs to act, and the exit code it maps to."""

from __future__ import annotations

from collections.abc import Sequence

from harel.errors import HarelError

# Exit codes shared with the `harel` CLI: 1 ran and failed, 2 bad input, 3 unreachable before the deadline.
FAILED = 1
BAD_INPUT = 2
UNREACHABLE = 3


class StackError(HarelError):
    exit_code = FAILED


class DockerUnavailable(StackError):
    """No Docker engine answers at the endpoint the Docker client would use."""

    exit_code = UNREACHABLE

    def __init__(self, endpoint: str, reason: str) -> None:
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(
            f"Docker is not running (or not reachable at {endpoint}): start it, or use `make demo` to run "
            "everything in-process"
        )


class ComposeUnavailable(StackError):
    """The Docker engine answers, but the `docker compose` (v2) command is missing."""

    exit_code = UNREACHABLE

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"`docker compose` is not available ({reason}): install the Docker Compose v2 plugin "
            "(Docker Desktop includes it)"
        )


class ProjectNotFound(StackError):
    exit_code = BAD_INPUT

    def __init__(self, searched: Sequence[str]) -> None:
        self.searched = list(searched)
        super().__init__(
            "no compose/docker-compose.yml found in or above "
            + ", ".join(self.searched)
            + ": run harel-stack from the harel-stack repository"
        )


class EnvFileError(StackError):
    """compose/.env is missing or holds a value the stack cannot use. Never shows a value: it may be a secret."""

    exit_code = BAD_INPUT

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        self.path = path
        self.problems = list(problems)
        super().__init__(f"{path}: " + "; ".join(self.problems))


class ProbeFailure(StackError):
    """One readiness or status probe did not succeed (yet). `reason` is one line, secrets redacted."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class StackNotReady(StackError):
    """`up` gave up waiting. `missing` lists every condition not met, each with its last reason (or None)."""

    exit_code = UNREACHABLE

    def __init__(self, waited: float, missing: Sequence[tuple[str, str | None]], init_service: str) -> None:
        self.waited = waited
        self.missing = list(missing)
        parts = [f"{name} ({reason})" if reason else name for name, reason in self.missing]
        super().__init__(
            f"the stack is not ready after {waited:.0f}s; still missing: {'; '.join(parts)}. "
            f"See `make status` and `make logs SERVICE={init_service}`"
        )


class ArchiveError(StackError):
    """A file `harel-stack restore` was given that is not a mongodump archive it can restore. Nothing was touched."""

    exit_code = BAD_INPUT

    def __init__(self, reason: str, path: str | None = None) -> None:
        self.reason = reason
        self.path = path
        super().__init__(
            f"{path}: not a backup archive harel-stack can restore: {reason}; nothing was changed"
            if path
            else reason
        )
