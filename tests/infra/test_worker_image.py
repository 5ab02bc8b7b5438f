"""The worker image's inputs are pinned: its base image by version and digest, its Python dependencies by the lock
file compose/worker-requirements.txt (every file's hash), which `make worker-lock` writes and this test writes again.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.infra.compose_render import COMPOSE_DIR, REPOSITORY_ROOT

pytestmark = pytest.mark.infra

DOCKERFILE = COMPOSE_DIR / "Dockerfile.worker"
LOCK = COMPOSE_DIR / "worker-requirements.txt"
SDK_PROJECT = REPOSITORY_ROOT / "sdk" / "pyproject.toml"
PINNED_BASE = re.compile(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}")
# `name==version \` then its `--hash=sha256:...` lines.
PINNED = re.compile(r"^([A-Za-z0-9._-]+)==(\S+) \\$")
HASH = re.compile(r"^    --hash=sha256:[0-9a-f]{64}( \\)?$")


def _locked() -> dict[str, tuple[str, int]]:
    """Each locked distribution's version and how many hashes it carries, by canonical name."""
    locked: dict[str, tuple[str, int]] = {}
    name = ""
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(("#", "    #")):
            continue
        if match := PINNED.match(line):
            name = canonicalize_name(match[1])
            locked[name] = (match[2], 0)
        else:
            assert HASH.match(line), f"not a pin nor a hash: {line!r}"
            version, hashes = locked[name]
            locked[name] = (version, hashes + 1)
    return locked


def test_the_base_image_is_pinned_by_version_and_digest_in_every_stage() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert PINNED_BASE.fullmatch(base), base
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == [
        "${PYTHON_IMAGE}",
        "${PYTHON_IMAGE}",
        "runtime",
    ]


def test_the_image_installs_the_lock_with_hashes_and_the_sdk_wheel_without_resolving() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert (
        "--mount=type=bind,source=compose/worker-requirements.txt,target=/tmp/worker-requirements.txt" in text
    )
    assert "--require-hashes --only-binary :all: \\\n        -r /tmp/worker-requirements.txt" in text
    assert "pip install --no-cache-dir --root-user-action=ignore --no-deps /wheels/*.whl" in text
    # The build context sends the lock file (compose/Dockerfile.worker.dockerignore sends nothing else unasked).
    ignore = (COMPOSE_DIR / "Dockerfile.worker.dockerignore").read_text(encoding="utf-8").splitlines()
    assert "!compose/worker-requirements.txt" in ignore


def test_the_lock_pins_every_runtime_dependency_of_the_sdk_within_its_range_with_hashes() -> None:
    locked = _locked()
    declared = [
        Requirement(text)
        for text in tomllib.loads(SDK_PROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    ]
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in the lock"
        assert requirement.specifier.contains(locked[name][0]), (
            f"{name}=={locked[name][0]} outside {requirement}"
        )
    assert all(hashes for _, hashes in locked.values()), "a pin without --hash"
    # Nothing for development or tests: the lock is the runtime's.
    assert not {"mongomock", "pytest", "harel", "harel-dev"} & set(locked)


def test_make_worker_lock_writes_the_checked_in_lock_again(tmp_path: Path) -> None:
    """The documented command, from the Makefile itself, into a scratch file: uv resolves against PyPI as of the
    Makefile's WORKER_LOCK_DATE, so the same command gives the same file until that date is moved."""
    regenerated = tmp_path / "worker-requirements.txt"
    result = subprocess.run(
        # -o: the venv is what the test runs in; make must not try to reinstall it.
        [
            "make",
            "--no-print-directory",
            "-o",
            ".venv/.installed",
            "worker-lock",
            f"WORKER_LOCK={regenerated}",
        ],
        cwd=REPOSITORY_ROOT,
        env={key: value for key, value in os.environ.items() if not key.startswith("UV_")},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert regenerated.read_text(encoding="utf-8") == LOCK.read_text(encoding="utf-8")
