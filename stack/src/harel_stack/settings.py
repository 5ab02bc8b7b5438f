"""compose/.env: written once with random secrets, then read into the settings every command uses."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from harel_stack.errors import EnvFileError
from harel_stack.project import Project

SECRET_VARIABLES = (
    "HAREL_MONGO_ROOT_PASSWORD",
    "HAREL_APP_PASSWORD",
    "HAREL_MONITOR_PASSWORD",
    "HAREL_BACKUP_PASSWORD",
    "HAREL_GRAFANA_ADMIN_PASSWORD",
)
# Secrets go into connection URLs unencoded, so they are limited to URL-unreserved characters.
URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
APP_USER = "harel"
APP_DB = "harel"
MEMBER_COUNTS = (1, 3)
# mongod's --tlsMode values; clients use TLS from preferTLS on (compose/docker-compose.yml, service `tls`).
TlsMode = Literal["disabled", "allowTLS", "preferTLS", "requireTLS"]
CLIENT_TLS_MODES = ("preferTLS", "requireTLS")


def new_secret() -> str:
    # 24 random bytes, URL-safe base64: 32 characters from [A-Za-z0-9_-].
    return secrets.token_urlsafe(24)


def fill_secrets(example: str) -> str:
    """The example's text with every empty secret assignment given a fresh random value."""
    lines = []
    for line in example.splitlines():
        match = ASSIGNMENT.match(line)
        if match and match.group(1) in SECRET_VARIABLES and not match.group(2):
            lines.append(f"{match.group(1)}={new_secret()}")
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def ensure_env_file(env_file: Path, example: Path) -> bool:
    """Write `env_file` from `example` with new secrets, mode 0600, unless it exists. True when written."""
    text = fill_secrets(example.read_text(encoding="utf-8"))
    try:
        # O_EXCL: an existing file, even one created a moment ago by another process, is never replaced.
        descriptor = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)
    return True


def add_missing_secrets(env_file: Path) -> list[str]:
    """Append a fresh value for each secret `env_file` lacks (a compose/.env written before that secret existed);
    never changes a line already there. The names added, in order."""
    text = env_file.read_text(encoding="utf-8")
    present = {name for name, value in parse_env(text).items() if value}
    missing = [name for name in SECRET_VARIABLES if name not in present]
    if missing:
        additions = "".join(f"{name}={new_secret()}\n" for name in missing)
        separator = "" if text.endswith("\n") or not text else "\n"
        # Appended, so a later assignment overrides an empty one above it, as compose reads the file.
        with env_file.open("a", encoding="utf-8") as handle:
            handle.write(f"{separator}# added by harel-stack (see compose/.env.example)\n{additions}")
    return missing


def parse_env(text: str) -> dict[str, str]:
    """KEY=value lines; blank lines and `#` comments skipped (the format compose/.env.example describes)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = ASSIGNMENT.match(line.strip())
        if match:
            values[match.group(1)] = match.group(2)
    return values


Secret = Annotated[SecretStr, Field(min_length=1)]


class StackSettings(BaseModel):
    """The variables of compose/.env that harel-stack itself needs (compose reads the file on its own)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    members: int = Field(3, alias="HAREL_MEMBERS")
    observability: bool = Field(False, alias="HAREL_OBSERVABILITY")
    # The sharded cluster of compose/sharded.yml instead of the replica set (`up --sharded` chooses it for one run).
    sharded: bool = Field(False, alias="HAREL_SHARDED")
    prometheus_port: int = Field(9090, ge=1, le=65535, alias="HAREL_PROMETHEUS_PORT")
    grafana_port: int = Field(3000, ge=1, le=65535, alias="HAREL_GRAFANA_PORT")
    backups_dir: str = Field("./backups", min_length=1, alias="HAREL_BACKUPS_DIR")
    backup_keep: int = Field(7, ge=1, alias="HAREL_BACKUP_KEEP")
    workers: int = Field(2, ge=1, alias="HAREL_WORKERS")
    mongo_port: int = Field(27017, ge=1, le=65535, alias="HAREL_MONGO_PORT")
    root_user: str = Field("root", min_length=1, alias="HAREL_MONGO_ROOT_USER")
    root_password: Secret = Field(alias="HAREL_MONGO_ROOT_PASSWORD")
    app_password: Secret = Field(alias="HAREL_APP_PASSWORD")
    tls_mode: TlsMode = Field("disabled", alias="HAREL_TLS_MODE")
    tls_dir: str = Field("./tls", min_length=1, alias="HAREL_TLS_DIR")
    # The user's App (module:attribute); set, the workers run it (compose/app.yml).
    app: str = Field("", alias="HAREL_APP")
    # compose/, which HAREL_TLS_DIR is relative to; load_settings sets it from where compose/.env is.
    compose_dir: Path = Path("compose")

    @field_validator("members")
    @classmethod
    def _members(cls, value: int) -> int:
        if value not in MEMBER_COUNTS:
            raise ValueError("must be 1 or 3")
        return value

    @field_validator("root_user", "root_password", "app_password")
    @classmethod
    def _url_safe(cls, value: str | SecretStr) -> str | SecretStr:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not URL_SAFE.fullmatch(text):
            raise ValueError("only URL-safe characters are allowed: A-Z a-z 0-9 - . _ ~")
        return value

    @property
    def tls_ca_file(self) -> Path | None:
        """The members' CA on the host, once clients use TLS."""
        if self.tls_mode not in CLIENT_TLS_MODES:
            return None
        return (self.compose_dir / self.tls_dir / "ca.crt").resolve()

    def host_url(self, user: str, password: str, database: str) -> str:
        # directConnection to mongo1, published on the host's loopback only (see compose/docker-compose.yml); for the
        # sharded cluster the router, mongos, on the same port (compose/sharded.yml): a router is no replica-set
        # member to connect to directly. The certificate names the containers, not 127.0.0.1: the CA is checked, the
        # host name is not.
        tls = (
            f"&tls=true&tlsCAFile={quote(str(self.tls_ca_file))}&tlsAllowInvalidHostnames=true"
            if self.tls_ca_file
            else ""
        )
        return (
            f"mongodb://{user}:{password}@127.0.0.1:{self.mongo_port}/{database}"
            f"?{'' if self.sharded else 'directConnection=true&'}authSource=admin{tls}"
        )

    def backups_path(self, project: Project) -> Path:
        """HAREL_BACKUPS_DIR on the host: relative paths start at compose/, as compose resolves them."""
        return (project.compose_file.parent / self.backups_dir).resolve()

    @property
    def app_url(self) -> str:
        return self.host_url(APP_USER, self.app_password.get_secret_value(), APP_DB)

    @property
    def app_url_shown(self) -> str:
        return self.host_url(APP_USER, "<HAREL_APP_PASSWORD>", APP_DB)


def load_settings(env_file: Path) -> StackSettings:
    if not env_file.is_file():
        raise EnvFileError(str(env_file), ["missing: `make up` writes it (with new random secrets)"])
    values = {key: value for key, value in parse_env(env_file.read_text(encoding="utf-8")).items() if value}
    try:
        return StackSettings.model_validate(values | {"compose_dir": env_file.parent})
    except ValidationError as exc:
        # Only the variable and the problem: pydantic's own message would repeat the (secret) value.
        raise EnvFileError(
            str(env_file),
            [f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()],
        ) from None
