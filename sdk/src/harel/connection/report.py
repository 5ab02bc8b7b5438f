"""What a check returns: one finding per rule, and the report that holds them in a fixed order."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harel.connection.urls import embedded_backend, redact
from harel.errors import DeploymentCheckError, DeploymentRefused, InvalidURL


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"
    RELAXED = "relaxed"


class Finding(BaseModel):
    """One check's outcome. Errors (and relaxed errors) carry the exception that names them."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    check: str
    found: str
    required: str
    status: Status
    fix: str | None = None
    error: DeploymentCheckError | None = Field(default=None, exclude=True)

    def document(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "error": type(self.error).__name__ if self.error else None}


class CheckReport(BaseModel):
    """Every finding of one check, in a fixed order."""

    model_config = ConfigDict(frozen=True)

    target: str
    deployment: str
    dev_override: bool = False
    embedded: bool = False
    findings: tuple[Finding, ...] = ()

    @property
    def errors(self) -> list[DeploymentCheckError]:
        return [f.error for f in self.findings if f.status is Status.ERROR and f.error is not None]

    @property
    def passed(self) -> bool:
        return not self.errors

    def count(self, status: Status) -> int:
        return sum(1 for f in self.findings if f.status is status)

    def raise_for_errors(self) -> None:
        """Raise DeploymentRefused listing every error; relaxed errors and warnings pass."""
        if self.errors:
            raise DeploymentRefused(self.errors)

    def document(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "deployment": self.deployment,
            "embedded": self.embedded,
            "dev_override": self.dev_override,
            "passed": self.passed,
            "counts": {status.value: self.count(status) for status in Status},
            "findings": [f.document() for f in self.findings],
        }


def embedded_report(url: str) -> CheckReport:
    """The report for an embedded backend: there is no deployment to check."""
    backend = embedded_backend(url)
    if backend is None:
        raise InvalidURL(redact(url), "not the embedded backend (mongomock://)")
    return CheckReport(
        target=f"{backend}://",
        deployment=f"embedded, in-process backend ({backend}): no deployment to check",
        embedded=True,
    )


def ok(check: str, found: str, required: str) -> Finding:
    return Finding(check=check, found=found, required=required, status=Status.OK)


def warning(check: str, found: str, required: str, fix: str) -> Finding:
    return Finding(check=check, found=found, required=required, status=Status.WARNING, fix=fix)


def violation(
    error_type: type[DeploymentCheckError], found: str, required: str, fix: str, *, relaxed: bool = False
) -> Finding:
    """An error finding (or, under the development override, a relaxed one) carrying the error that names it."""
    return Finding(
        check=error_type.check,
        found=found,
        required=required,
        status=Status.RELAXED if relaxed else Status.ERROR,
        fix=fix,
        error=error_type(found, required, fix),
    )
