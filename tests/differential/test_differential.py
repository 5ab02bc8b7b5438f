"""harel next to sismic, chart by chart: the same event scripts, the same configurations and the same
actions in the same order (per execution), except where docs/semantics.md lists a difference.

Every chart is kept as YAML and as JSON (tests/differential/charts); each format runs through the real
worker on the embedded store, and through sismic (tests/differential/sismic_side.py translates it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harel.chart import Chart, load_chart

from .cases import AGREEMENTS, DIFFERENCES, Script, Send, Wait
from .harel_side import HarelRun
from .observation import Observation
from .sismic_side import SismicRun

CHARTS = Path(__file__).parent / "charts"
FORMATS = ("yaml", "json")


def chart_file(name: str, fmt: str) -> Chart:
    return load_chart(CHARTS / f"{name}.{fmt}")


@pytest.fixture
def runs(request: pytest.FixtureRequest) -> Iterator[tuple[HarelRun, SismicRun]]:
    name, fmt = request.param
    chart = chart_file(name, fmt)
    harel = HarelRun(chart, root_id=f"{name}-{fmt}")
    try:
        yield harel, SismicRun(chart)
    finally:
        harel.close()


def step_both(harel: HarelRun, sismic: SismicRun, op: Send | Wait) -> tuple[Observation, Observation]:
    if isinstance(op, Send):
        sismic.advance_to(harel.elapsed())  # what came due before the send, on both sides
        harel.send(*op.events)
        sismic.send(*op.events)
    else:
        harel.wait(op.seconds)
    sismic.advance_to(harel.elapsed())
    return harel.observe(), sismic.observe()


def describe(op: Send | Wait | None, harel: Observation, sismic: Observation) -> str:
    return f"after {op}:\n  harel  {harel}\n  sismic {sismic}"


def comparable(observation: Observation) -> tuple[object, ...]:
    lanes = {lane: actions for lane, actions in observation.lanes.items() if actions}
    return observation.active, observation.ended, lanes


def play(harel: HarelRun, sismic: SismicRun, script: Script) -> None:
    first = (harel.observe(), sismic.observe())
    assert comparable(first[0]) == comparable(first[1]), describe(None, *first)
    for op in script:
        ours, theirs = step_both(harel, sismic, op)
        assert comparable(ours) == comparable(theirs), describe(op, ours, theirs)


@pytest.mark.semantics(
    "sem-differential",
    "sem-diff-region-entry-order",
    "sem-history-restore",
    "sem-state-guard",
    "sem-delayed-send",
)
@pytest.mark.parametrize("runs", [(n, f) for n in AGREEMENTS for f in FORMATS], indirect=True, ids="-".join)
def test_harel_agrees_with_sismic(runs: tuple[HarelRun, SismicRun]) -> None:
    harel, sismic = runs
    name = harel.chart.id.removeprefix("diff.")
    play(harel, sismic, AGREEMENTS[name])


@pytest.mark.semantics("sem-diff-guarded-after", "sem-diff-regions-context", "sem-diff-reenter")
@pytest.mark.parametrize("runs", [(n, f) for n in DIFFERENCES for f in FORMATS], indirect=True, ids="-".join)
def test_the_documented_differences_show_where_documented(runs: tuple[HarelRun, SismicRun]) -> None:
    harel, sismic = runs
    script, anchor = DIFFERENCES[harel.chart.id.removeprefix("diff.")]
    play(harel, sismic, script[:-1])
    ours, theirs = step_both(harel, sismic, script[-1])
    assert comparable(ours) != comparable(theirs), (
        f"{anchor} should show here: {describe(script[-1], ours, theirs)}"
    )


@pytest.mark.parametrize("name", sorted({*AGREEMENTS, *DIFFERENCES}))
def test_each_chart_is_the_same_in_yaml_and_json(name: str) -> None:
    assert chart_file(name, "yaml") == chart_file(name, "json")


def test_every_chart_file_has_a_script() -> None:
    assert {path.stem for path in CHARTS.glob("*.yaml")} == {*AGREEMENTS, *DIFFERENCES}
    assert len(AGREEMENTS) >= 12
