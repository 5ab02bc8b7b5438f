"""The App that the `harel worker` processes of tests/wire/test_delayed_send_kill.py run
(`--app tests.wire.follow_up_app:app`): the follow-up chart of docs/charts.md, whose sends and cancel are
the chart's own, with both delays ("3 days", "7 days") shortened to `DELAY_SECONDS` — long enough for a
worker to be killed and another started before they are due. `send_reminder` logs to the context."""

from __future__ import annotations

from tests.chart_language import docs_chart, language_app

CHART_ID = "follow-up"
DELAY_SECONDS = 8.0

app = language_app(
    docs_chart(CHART_ID, {"delay: 3d": f"delay: {DELAY_SECONDS}", "delay: 7d": f"delay: {DELAY_SECONDS}"})
)
