"""Every command docs/sharded-clusters.md shows (the sharded deployments, their backups and the runbooks for moving an install),
checked as the deployment guides' commands are (tests/infra/test_readme_commands.py), in order against a scratch
copy of compose/ and playbooks/: `helm install|upgrade` rendered by the real Helm library with the command's values,
`docker compose` by Compose's own binary with the command's files and profiles, `ansible-playbook --syntax-check`
(and its tags), `cd` / `cp` for real. A command that needs a running cluster says so on its line,
`# not run here: <why>`; every other command must be checked, and a marked one must not be one that could be."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.documents import DOCS
from tests.infra.test_readme_commands import (
    LOCAL,
    Scratch,
    check_ansible,
    check_compose,
    check_helm,
    check_local,
    console_blocks,
    program_of,
)

pytestmark = pytest.mark.infra

PAGE = DOCS / "sharded-clusters.md"
NOT_RUN = re.compile(r"\s{2,}# not run here: (?P<why>\S.*)$")


def page_commands(text: str) -> Iterator[tuple[str, str | None]]:
    """Each command of the page's console blocks (continuation lines joined) and, when its line says so, why it is not
    run here."""
    for block in console_blocks(text):
        pending = ""
        for line in textwrap.dedent(block).splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            command, pending = pending + line, ""
            marked = NOT_RUN.search(command)
            yield (
                (command[: marked.start()] if marked else command),
                (marked.group("why") if marked else None),
            )


def checker(program: str, subcommand: str) -> str | None:
    if program in LOCAL:
        return "local"
    if program == "docker compose":
        return "compose"
    if program == "helm" and subcommand in ("install", "upgrade", "template"):
        return "helm"
    if program == "ansible-playbook":
        return "ansible"
    return None


def test_every_command_of_the_sharding_page_is_checked_or_says_why_not(tmp_path: Path) -> None:
    scratch = Scratch.make(tmp_path)
    checked, failures = [], []
    for command, why_not in page_commands(PAGE.read_text(encoding="utf-8")):
        kind = checker(*program_of(command))
        if why_not is not None:
            if kind is not None:
                failures.append(f"{command}: marked not run here, but it can be checked")
            continue
        try:
            match kind:
                case "local":
                    check_local(scratch, command)
                case "compose":
                    check_compose(scratch, command)
                case "helm":
                    check_helm(scratch, command)
                case "ansible":
                    check_ansible(scratch, command)
                case _:
                    raise AssertionError("neither checked nor marked `# not run here: <why>`")
        except AssertionError as exc:
            failures.append(f"{command}\n    -> {exc}")
        else:
            checked.append(command)
    assert failures == [], "\n".join(failures)
    # Each path's commands: Helm, Compose, Ansible, and the runbooks'.
    assert len(checked) >= 12, checked


def test_the_page_is_in_the_site_and_linked_from_the_readme() -> None:
    assert "sharded-clusters.md" in (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    assert "(docs/sharded-clusters.md)" in (DOCS.parent / "README.md").read_text(encoding="utf-8")
