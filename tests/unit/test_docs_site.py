"""The documentation site and the README that leads into it.

`mkdocs build --strict` (mkdocs.yml at the repository root, the pages in docs/) builds without a warning: every
page is in the nav, and every link between pages, and every anchor a link names, exists. The README is not a page
of the site, so its links are checked here the same way: each relative link names a file of the repository, and
an anchor in a link to a page is one of the ids that page's headings and `<a id>` anchors get, as MkDocs renders
it. The README stays a front door: 300 lines at most, with a command table that names every `harel` command and
every `make` target.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import markdown

from harel.cli.main import harel
from tests.documents import DOCS, README, REPOSITORY

README_MOST_LINES = 300
# [text](target), not an image's ![alt](target) — images are checked as files too, by the same rule.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = build(REPOSITORY, tmp_path / "site")

    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    assert (tmp_path / "site" / "semantics" / "index.html").is_file()


def test_a_link_to_a_missing_anchor_fails_the_build(tmp_path: Path) -> None:
    shutil.copy(REPOSITORY / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    with (tmp_path / "docs" / "index.md").open("a", encoding="utf-8") as page:
        page.write("\n[the order](behaviour.md#no-such-section)\n")

    built = build(tmp_path, tmp_path / "site")

    assert built.returncode != 0
    assert "does not contain an anchor '#no-such-section'" in built.stderr


def ids(page: Path) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's toc, as mkdocs.yml configures it), and the ids
    of its raw `<a id>` anchors."""
    html = markdown.markdown(page.read_text(encoding="utf-8"), extensions=["toc", "tables", "fenced_code"])
    return set(re.findall(r'id="([^"]+)"', html))


def broken_links(text: str, base: Path) -> list[str]:
    """The relative links of a markdown text (read from `base`) to a file that does not exist, or to an anchor its
    target page does not have."""
    broken = []
    for link in LINK.findall(text):
        if re.match(r"[a-z]+:", link):
            continue  # a URL: not checked offline
        path, _, anchor = link.partition("#")
        target = (base / path).resolve()
        if not target.is_file() or (anchor and anchor not in ids(target)):
            broken.append(link)
    return broken


def test_every_link_of_the_readme_leads_somewhere() -> None:
    text = README.read_text(encoding="utf-8")

    assert len(LINK.findall(text)) >= 10
    assert broken_links(text, README.parent) == []


def test_a_link_to_a_missing_page_or_anchor_is_found() -> None:
    text = (
        "[a](docs/nowhere.md) [b](docs/behaviour.md#no-such-section) [c](docs/behaviour.md#order) "
        "[d](docs/semantics.md#sem-step-pure) [e](https://example.org/x.md)"
    )

    assert broken_links(text, REPOSITORY) == ["docs/nowhere.md", "docs/behaviour.md#no-such-section"]


def test_the_readme_is_a_front_door() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= README_MOST_LINES


def command_table() -> str:
    text = README.read_text(encoding="utf-8")
    table = text[text.index("\n## Commands\n") :]
    return "\n".join(line for line in table.splitlines()[1:] if line.startswith("|"))


def test_the_readme_command_table_names_every_command_and_target() -> None:
    table = command_table()
    named = set(re.findall(r"`((?:harel|make) [a-z-]+(?: [a-z]+)?)`", table))
    commands = {
        f"harel {name} {sub}" if sub else f"harel {name}"
        for name, command in harel.commands.items()
        for sub in (getattr(command, "commands", None) or [None])
    }
    targets = re.findall(r"^([a-z-]+):.*## ", (REPOSITORY / "Makefile").read_text(encoding="utf-8"), re.M)

    assert commands - named == set()
    assert {f"make {target}" for target in targets} - named == set()
