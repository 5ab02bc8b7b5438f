"""The suite's skip rule (tests/conftest.py): a skip is allowed in the real-server tier only; anywhere else it
is reported as a failure that names what is missing and how to install it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

TESTS = """
import pytest

@pytest.mark.skipif(True, reason="frobnicate is not installed")
def test_needs_a_tool():
    pass

def test_skips_itself():
    pytest.skip("no frobnicate here")

@pytest.mark.real
@pytest.mark.skipif(True, reason="HAREL_TEST_MONGO_URL is not set")
def test_on_a_real_server():
    pass

def test_runs():
    pass
"""


def test_a_skip_outside_the_real_tier_fails_and_says_how_to_install(tmp_path: Path) -> None:
    (tmp_path / "test_skips.py").write_text(TESTS)
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-rA",
            str(tmp_path),
        ],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = finished.stdout
    assert finished.returncode == 1, out
    assert re.search(r"^ERROR \S*test_skips.py::test_needs_a_tool", out, re.MULTILINE), out
    assert re.search(r"^FAILED \S*test_skips.py::test_skips_itself", out, re.MULTILINE), out
    assert re.search(r"^PASSED \S*test_skips.py::test_runs", out, re.MULTILINE), out
    assert re.search(r"^SKIPPED \[1\] .*HAREL_TEST_MONGO_URL is not set", out, re.MULTILINE), (
        "the real tier may skip"
    )
    assert "frobnicate is not installed" in out and "no frobnicate here" in out
    # Each of the two refused skips carries the hint in its own report. The short summary below the reports
    # may repeat it or cut it off, depending on the terminal's width and on pytest's CI detection.
    reports = out.split("short test summary info", 1)[0]
    assert reports.count("`.ci/run` installs the system tools") == 2, reports
