"""The mutation list itself: every mutant still applies to the current source, and every test it names
exists. A mutant whose anchor is gone fails here, naming itself, before any mutation run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.mutants.catalog import (
    MUTANTS,
    Edit,
    Mutant,
    MutantNoLongerApplies,
    current_sources,
    mutated_sources,
)
from tests.mutants.runner import REPOSITORY_ROOT, short


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_still_applies_and_changes_its_files(mutant: Mutant) -> None:
    before = current_sources(mutant)
    after = mutated_sources(mutant, before)
    assert set(after) == {edit.path for edit in mutant.edits}
    assert all(after[path] != before[path] for path in after), "an edit that changes nothing plants nothing"


def test_a_mutant_whose_anchor_is_gone_says_so() -> None:
    gone = Mutant("renamed-away", "nothing", (Edit("worker.py", "def no_such_function(", "x"),), ("t",))
    with pytest.raises(MutantNoLongerApplies, match="mutant renamed-away no longer applies"):
        mutated_sources(gone, current_sources(gone))


def test_names_are_unique_and_every_mutant_names_its_killers() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    assert all(m.killed_by and m.bug for m in MUTANTS)


def test_every_named_test_exists() -> None:
    node_ids = sorted({node for mutant in MUTANTS for node in mutant.killed_by})
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *node_ids],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert f"{len(node_ids)} tests collected" in collected.stdout


def test_the_readme_table_is_the_list_as_it_stands() -> None:
    """tests/README.md's table, pasted from `make mutate`, has one row per mutant of the list, with its bug and
    its files as the list says, each killed by tests the list names for it: a mutant added, renamed or
    re-aimed without a new run of `make mutate` fails here."""
    readme = (REPOSITORY_ROOT / "tests" / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## The mutation run\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0] != "`mutant`":
            rows[cells[0].strip("`")] = cells
    assert list(rows) == [m.name for m in MUTANTS]
    for mutant in MUTANTS:
        _, bug, where, killers, _ = rows[mutant.name]
        assert (bug, where) == (mutant.bug, f"`{mutant.where}`"), mutant.name
        named = {short(node) for node in mutant.killed_by}
        listed = {killer.strip("`") for killer in killers.split("<br>")}
        assert listed and listed <= named, (mutant.name, listed - named)
