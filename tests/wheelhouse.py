"""Wheels of distributions installed in this test environment, so that tests install the SDK into a fresh
virtualenv with `pip --no-index`: nothing is downloaded, and the versions are the ones tested here."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def runtime_dependencies(distribution: str) -> set[str]:
    """Every distribution `distribution` needs at run time (no extras), by canonical name, itself excluded."""
    root = canonicalize_name(distribution)
    found: set[str] = set()
    pending = [root]
    while pending:
        name = canonicalize_name(pending.pop())
        if name in found:
            continue
        found.add(name)
        for text in importlib.metadata.distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return found - {root}


def pack_installed_wheel(distribution: importlib.metadata.Distribution, directory: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists (bytecode caches left out).

    The tests install the SDK's dependencies from these with `pip --no-index`, so the run downloads nothing
    and installs exactly the versions this environment was tested with.
    """
    files = distribution.files or []
    info_dir = next(path.parts[0] for path in files if path.parts[0].endswith(".dist-info"))
    wheel_metadata = (distribution.read_text("WHEEL") or "").splitlines()
    tags = [line.removeprefix("Tag:").strip() for line in wheel_metadata if line.startswith("Tag:")]
    tag = "-".join(".".join(sorted({t.split("-")[part] for t in tags})) for part in range(3))
    name = re.sub(r"[-_.]+", "_", distribution.metadata["Name"])
    wheel = directory / f"{name}-{distribution.version}-{tag}.whl"
    skipped_metadata = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in files:
            outside = path.parts[0] == ".."
            if (
                outside
                or "__pycache__" in path.parts
                or (path.parts[0] == info_dir and path.name in skipped_metadata)
            ):
                continue
            data = Path(str(distribution.locate_file(path))).read_bytes()
            archive.writestr(path.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path.as_posix()},sha256={digest},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        archive.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return wheel


def fill_wheelhouse(directory: Path, distributions: Iterable[str]) -> Path:
    """`directory`, holding a wheel of each of `distributions`."""
    for name in sorted(distributions):
        pack_installed_wheel(importlib.metadata.distribution(name), directory)
    return directory
