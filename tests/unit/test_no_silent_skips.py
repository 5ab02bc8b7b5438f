"""The suite's skip rule (tests/conftest.py): a skip is allowed in the real-server tier only; anywhere else it
is reported as a failure that names what is missing and how to install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

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


def _outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """Each test's outcome as the junit report records it (pytest's own record, whatever the terminal shows),
    with the text of its failure, error or skip."""
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        verdict = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if verdict is None:
            outcomes[case.get("name", "")] = ("passed", "")
        else:
            outcomes[case.get("name", "")] = (
                verdict.tag,
                f"{verdict.get('message', '')}\n{verdict.text or ''}",
            )
    return outcomes


def test_a_skip_outside_the_real_tier_fails_and_says_how_to_install(tmp_path: Path) -> None:
    (tmp_path / "test_skips.py").write_text(TESTS)
    report = tmp_path / "report.xml"
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            str(tmp_path / "test_skips.py"),
        ],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 1, finished.stdout
    outcomes = _outcomes(report)
    assert {name: verdict for name, (verdict, _) in outcomes.items()} == {
        "test_needs_a_tool": "error",
        "test_skips_itself": "failure",
        "test_on_a_real_server": "skipped",
        "test_runs": "passed",
    }, finished.stdout
    for name, missing in (
        ("test_needs_a_tool", "frobnicate is not installed"),
        ("test_skips_itself", "no frobnicate here"),
    ):
        text = outcomes[name][1]
        assert missing in text and "`.ci/run` installs the system tools" in text, text
    assert "HAREL_TEST_MONGO_URL is not set" in outcomes["test_on_a_real_server"][1]
