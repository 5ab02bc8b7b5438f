"""Where the compose stack lives: the repository's compose/ directory and the compose project name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harel_stack.errors import ProjectNotFound

COMPOSE_FILE = Path("compose") / "docker-compose.yml"
# Read after COMPOSE_FILE for the sharded cluster (HAREL_SHARDED=1, `up --sharded`), and by `down` always.
SHARDED_COMPOSE_FILE = Path("compose") / "sharded.yml"
# The sharded cluster's sets, router and P, as its init reads them: the shards `up` waits for are these.
SHARDED_INIT_SETTINGS = Path("compose") / "mongo-init" / "sharded-compose.json"
# Read after COMPOSE_FILE when compose/.env sets HAREL_APP: the workers run the user's app.
APP_COMPOSE_FILE = Path("compose") / "app.yml"
# Read after APP_COMPOSE_FILE when the sharded cluster runs the user's app: the app's image builds on sharded-init's.
SHARDED_APP_COMPOSE_FILE = Path("compose") / "sharded-app.yml"


@dataclass(frozen=True)
class Project:
    root: Path
    # The compose project name: containers are harel-<service>-<n>, volumes harel_<volume>.
    name: str = "harel"

    @property
    def compose_file(self) -> Path:
        return self.root / COMPOSE_FILE

    @property
    def sharded_compose_file(self) -> Path:
        return self.root / SHARDED_COMPOSE_FILE

    def shard_names(self) -> tuple[str, ...]:
        """The shards of the compose stack's sharded cluster, by replica-set name (the names listShards reports)."""
        settings = json.loads((self.root / SHARDED_INIT_SETTINGS).read_text(encoding="utf-8"))
        return tuple(str(shard["replicaSetName"]) for shard in settings["shards"])

    @property
    def app_compose_file(self) -> Path:
        return self.root / APP_COMPOSE_FILE

    @property
    def sharded_app_compose_file(self) -> Path:
        return self.root / SHARDED_APP_COMPOSE_FILE

    @property
    def env_file(self) -> Path:
        return self.root / "compose" / ".env"

    @property
    def env_example(self) -> Path:
        return self.root / "compose" / ".env.example"


def find_project(*starts: Path) -> Project:
    """The first directory, from each start upwards, that holds compose/docker-compose.yml."""
    for start in starts:
        for directory in (start, *start.parents):
            if (directory / COMPOSE_FILE).is_file():
                return Project(root=directory)
    raise ProjectNotFound([str(start) for start in starts])
