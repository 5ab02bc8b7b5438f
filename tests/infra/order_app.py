"""The README's order app as docs/deploying-your-app.md deploys it: the README's chart and module, the page's own
files (its code blocks that open with `# path/of/the/file`: pyproject.toml, .dockerignore, the Helm values, the
compose/.env lines, the workers' group_vars), and the template compose/Dockerfile.app copied in as Dockerfile."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.documents import file_blocks

REPOSITORY = Path(__file__).resolve().parents[2]
PAGE = REPOSITORY / "docs" / "deploying-your-app.md"
TEMPLATE = REPOSITORY / "compose" / "Dockerfile.app"
# The files of the README's order app, as the README names them.
README_FILES = ("charts/order.yaml", "orders/app.py")
FILE_BLOCK = re.compile(r"^```\w+\n# (\S+)\n(.*?)^```", re.S | re.M)


def page_files() -> dict[str, str]:
    """The page's code blocks that open with `# path/of/the/file`, by that path."""
    return {match.group(1): match.group(2) for match in FILE_BLOCK.finditer(PAGE.read_text(encoding="utf-8"))}


def lay_out(directory: Path) -> Path:
    """The app's folder as the page has it, in `directory`: the README's files, the page's pyproject.toml and
    .dockerignore, and the template as Dockerfile (the page's first step)."""
    readme = file_blocks()
    page = page_files()
    files = {path: readme[path] for path in README_FILES} | {
        path: page[path] for path in ("pyproject.toml", ".dockerignore")
    }
    for path, text in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text, encoding="utf-8")
    shutil.copyfile(TEMPLATE, directory / "Dockerfile")
    return directory
