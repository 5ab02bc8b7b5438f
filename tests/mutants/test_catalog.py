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
from tests.mutants.runner import REPOSITORY_ROOT


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
