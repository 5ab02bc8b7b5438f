"""tests/report.py: the counts and timings tests/README.md shows come from a junit report, per directory."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.report import BEGIN, END, README, read, render, replace_block, reported_name

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5"
 time="754.2" timestamp="2026-11-30T19:57:27.892990+00:00" hostname="vm">
<testcase classname="tests.unit.test_a" name="test_one" time="0.5" />
<testcase classname="tests.unit.test_a" name="test_two" time="1.5"><failure message="x">boom</failure></testcase>
<testcase classname="tests.wire.test_b" name="test_three[fake-rs]" time="42.0" />
<testcase classname="tests.wire.test_b" name="test_three[real-rs]" time="0.0"><skipped message="no url"/></testcase>
<testcase classname="tests.infra.test_c" name="test_four" time="3.0"><error message="setup">x</error></testcase>
</testsuite></testsuites>
"""


def test_the_run_is_summed_per_directory_with_its_wall_time_and_slowest_tests(tmp_path: Path) -> None:
    report = tmp_path / "last-run.xml"
    report.write_text(JUNIT)
    block = render(read(report))
    assert block.startswith(BEGIN) and block.endswith(END)
    assert "Last run: 2026-11-30 19:57 UTC, wall time 12 min 34 s" in block
    assert "| `tests/infra` | 1 | 0 | 1 | 0 | 3.0 s |" in block
    assert "| `tests/unit` | 2 | 1 | 1 | 0 | 2.0 s |" in block
    assert "| `tests/wire` | 2 | 1 | 0 | 1 | 42 s |" in block
    assert "| **total** | 5 | 2 | 2 | 1 | 47 s |" in block
    assert block.index("`wire/test_b.py::test_three[fake-rs]`") < block.index("`infra/test_c.py::test_four`")


def test_a_tests_xdist_group_is_left_out_of_its_name_and_an_at_in_its_parameters_kept() -> None:
    def case(name: str) -> str:
        return reported_name(
            ElementTree.fromstring(f'<testcase classname="tests.unit.test_a" name="{name}" />')
        )

    assert case("test_one@tests.infra.test_helm") == "test_one"
    assert case("test_two[order@3]@tests.unit.test_ids") == "test_two[order@3]"
    assert case("test_two[order@3]") == "test_two[order@3]"
    assert case("test_one") == "test_one"
    # as the junit report writes a parametrized test's id once its group is appended
    assert case("test_three[compose]@tests.infra.test_readme_commands.outcomes]") == "test_three[compose]"


def test_the_readme_has_one_generated_block_and_only_it_is_replaced() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    replaced = replace_block(text, f"{BEGIN}\nnew\n{END}")
    assert (
        replaced.replace(f"{BEGIN}\nnew\n{END}", "")
        == text[: text.index(BEGIN)] + text[text.index(END) + len(END) :]
    )
    with pytest.raises(ValueError, match="no generated block"):
        replace_block("no block here", "x")
