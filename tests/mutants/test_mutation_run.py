"""Every planted bug of tests/mutants/catalog.py is caught: each mutant is planted in a scratch copy of the
SDK, and the tests named to kill it run against that copy and must fail. `make mutate` runs the same list
(after proving those tests pass on an unchanged copy) and prints the table in tests/README.md."""

from __future__ import annotations

import pytest

from tests.mutants.catalog import MUTANTS, Mutant
from tests.mutants.runner import plant

pytestmark = pytest.mark.mutation


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_planted_bug_is_caught(mutant: Mutant) -> None:
    outcome = plant(mutant)
    assert outcome.killed, (
        f"mutant {mutant.name} ({mutant.bug}, in {mutant.where}) {outcome.status}: "
        f"the tests named to catch it passed ({', '.join(outcome.passed) or 'none ran'})\n{outcome.output[-4000:]}"
    )
