"""The documentation the tests hold to the code: README.md, the front door, and the pages of the documentation
site (docs/*.md, built by MkDocs from mkdocs.yml). A test that checks what the documentation shows reads it from
here, so a block moved between the README and a page is still found, and still checked."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"
DOCS = REPOSITORY / "docs"
# A code block that opens with `# path/of/the/file`: a file of the example app, written where the path says.
FILE_BLOCK = re.compile(r"^```(?:yaml|python)\n# (\S+)\n(.*?)^```", re.S | re.M)


def documents() -> list[Path]:
    """README.md, then every page of the site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def file_blocks() -> dict[str, str]:
    """The example app's files (`charts/order.yaml`, `orders/app.py`, `orders/api.py`) by path, from whichever
    document shows each; a file shown twice is an error, since the two could differ."""
    files: dict[str, str] = {}
    for document in documents():
        for match in FILE_BLOCK.finditer(document.read_text(encoding="utf-8")):
            assert match.group(1) not in files, f"{match.group(1)} is shown twice (again in {document.name})"
            files[match.group(1)] = match.group(2)
    return files


def section(text: str, title: str, level: int = 2) -> str:
    """The section of `text` under the heading `title` at `level` (2 or more), up to the next heading of a level
    from 2 to `level`. (A line `# ...` is not looked for: in console blocks it is a comment or a root prompt.)"""
    heading = "#" * level
    start = text.index(f"\n{heading} {title}\n")
    ends = (text.find(f"\n{'#' * n} ", start + 1) for n in range(2, level + 1))
    return text[start : min((end for end in ends if end != -1), default=len(text))]
