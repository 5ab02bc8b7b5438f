"""Order over the worker: what a region sends its parent before it finishes is applied before its done."""

from __future__ import annotations

import pytest

from harel.chart import load_chart

from .harel_side import HarelRun

VOTES = load_chart(
    {
        "id": "votes",
        "version": 1,
        "initial": "ballot",
        "states": {
            "ballot": {
                "on": {"vote": {"actions": ["inc:votes:ballot"]}},
                "parallel": {
                    name: {
                        "initial": "open",
                        "states": {
                            "open": {"on": {"approve": {"target": "cast", "actions": [f"up:vote:{name}"]}}},
                            "cast": {"final": True},
                        },
                    }
                    for name in ("alice", "bob", "carol")
                },
                "on_done": [{"target": "carried", "guard": "ge:votes:3"}, {"target": "lost"}],
            },
            "carried": {"final": True},
            "lost": {"final": True},
        },
    }
)


@pytest.mark.semantics("sem-order-per-sender", "sem-region-forward", "sem-region-join")
@pytest.mark.parametrize("run", range(5))
def test_every_vote_sent_before_a_region_finished_is_counted_at_the_join(run: int) -> None:
    harel = HarelRun(VOTES, root_id=f"votes-{run}")
    try:
        harel.send("approve")  # forwarded to the three regions; each votes, then finishes
        root = harel.backend.store.load(harel.root_id)
        assert root is not None
        assert root.configuration == ["carried"], root.context
        assert root.context["votes"] == 3
    finally:
        harel.close()
