"""The workload benchmarks 1 and 5 run: the built-in fork/join smoke workflow with short durable timers."""

from __future__ import annotations

from harel.app import App
from harel.smoke import REGIONS, register_smoke

# Short timers keep runs quick; the counts do not depend on them.
TIMER_SECONDS = 0.05
# The root's start and its final timer; per region, the child's start, greeting and timer, and its done
# handled by the root.
EVENTS_PER_RUN = 2 + 4 * len(REGIONS)
TIMERS_PER_RUN = 1 + len(REGIONS)


def register(app: App) -> str:
    return register_smoke(app, region_timer=TIMER_SECONDS, final_timer=TIMER_SECONDS)


def bench_app() -> tuple[App, str]:
    """The app every benchmark worker serves, and the chart to start."""
    app = App("bench")
    return app, register(app)
