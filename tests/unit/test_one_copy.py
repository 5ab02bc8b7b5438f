"""No file of more than 20 lines is kept twice in the repository: one copy of each, referenced from the other
places (the Helm chart's files/ for the operations scripts, the dashboard and the alert rules; compose/mongo-init/
for the membership plan).

What is compared: every path `git ls-files --cached --others --exclude-standard` lists (tracked, and new files
not ignored), except under a `node_modules` directory, as a checkout shows it. A symbolic link is read through to
its target, because whatever copies the tree without links (an archive, a role or a chart installed on its own, a
checkout without symlink support) turns it into a second copy. Each file's bytes are compared by SHA-256; files of
20 lines or fewer (package markers, one-line settings) are left out.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
MOST_LINES_KEPT_TWICE = 20


def repository_files(root: Path) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    paths = [root / name for name in listed.split("\0") if name]
    return [path for path in paths if "node_modules" not in path.parts and path.is_file()]


def copies(paths: Iterable[Path], root: Path) -> list[list[str]]:
    """Groups of two or more paths (relative to `root`) whose contents are equal and longer than 20 lines."""
    by_digest: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        content = path.read_bytes()  # through a symbolic link, to what it points at
        if content.count(b"\n") + (not content.endswith(b"\n") and bool(content)) > MOST_LINES_KEPT_TWICE:
            by_digest[hashlib.sha256(content).hexdigest()].append(os.path.relpath(path, root))
    return sorted(sorted(group) for group in by_digest.values() if len(group) > 1)


def test_no_file_of_more_than_20_lines_is_kept_twice() -> None:
    files = repository_files(REPOSITORY)

    assert len(files) > 300, "the listing reads the repository"
    assert copies(files, REPOSITORY) == []


def test_a_copy_and_a_link_are_found_and_short_files_are_left_out(tmp_path: Path) -> None:
    long_text = "".join(f"line {n}\n" for n in range(21))
    short_text = "".join(f"line {n}\n" for n in range(20))
    (tmp_path / "chart").mkdir()
    (tmp_path / "role").mkdir()
    (tmp_path / "chart" / "script.sh").write_text(long_text)
    (tmp_path / "role" / "script.sh").write_text(long_text)
    (tmp_path / "chart" / "rules.yml").write_text(long_text + "more\n")
    (tmp_path / "role" / "rules.yml").symlink_to(tmp_path / "chart" / "rules.yml")
    (tmp_path / "chart" / "short.txt").write_text(short_text)
    (tmp_path / "role" / "short.txt").write_text(short_text)
    (tmp_path / "chart" / "unterminated.txt").write_text(long_text.rstrip("\n"))
    (tmp_path / "role" / "unterminated.txt").write_text(long_text.rstrip("\n"))

    found = copies(sorted(path for path in tmp_path.rglob("*") if path.is_file()), tmp_path)

    assert found == [
        ["chart/rules.yml", "role/rules.yml"],
        ["chart/script.sh", "role/script.sh"],
        ["chart/unterminated.txt", "role/unterminated.txt"],
    ]
