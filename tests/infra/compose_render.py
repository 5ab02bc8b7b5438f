"""The local stack as Docker Compose renders it: compose/.env written from .env.example the way `make up` fills it
(every secret given a known value), then `docker compose ... config` by Compose's own binary (tests/tools/), which
resolves the profiles, the included observability.yml with its TLS mode file, and every variable; no engine needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harel_stack.settings import SECRET_VARIABLES
from tests.infra.tools import docker_compose

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPOSITORY_ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
# Read after COMPOSE_FILE once HAREL_APP is set: the workers run the user's app.
APP_FILE = COMPOSE_DIR / "app.yml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"


def secret_value(variable: str) -> str:
    """The value env_file gives the secret `variable`: recognisable wherever it turns up."""
    return f"secret-{variable.lower()}"


def env_file(directory: Path, **overrides: str) -> Path:
    """compose/.env as `make up` writes it from the example (secrets filled with secret_value), with `overrides`,
    written into `directory`."""
    lines = []
    for example in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        key = example.split("=", 1)[0]
        if key in overrides:
            lines.append(f"{key}={overrides.pop(key)}")
        elif key in SECRET_VARIABLES:
            lines.append(f"{key}={secret_value(key)}")
        else:
            lines.append(example)
    path = directory / ".env"
    path.write_text("\n".join(lines + [f"{k}={v}" for k, v in overrides.items()]) + "\n", encoding="utf-8")
    return path


def render(
    env: Path,
    *profiles: str,
    variables: Mapping[str, str] | None = None,
    files: Sequence[Path] = (COMPOSE_FILE,),
) -> dict[str, Any]:
    """`docker compose -f compose/docker-compose.yml --env-file ENV -p harel [--profile P]... config`, as JSON, with
    `variables` in compose's environment (as harel-stack runs it); `files` replaces the one -f (compose/app.yml
    after the compose file, as harel-stack adds it once HAREL_APP is set)."""
    arguments = [option for path in files for option in ("-f", str(path))]
    arguments += ["--env-file", str(env), "-p", "harel"]
    for profile in profiles:
        arguments += ["--profile", profile]
    result = docker_compose(
        [*arguments, "config", "--format", "json"], cwd=REPOSITORY_ROOT, variables=variables
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))
