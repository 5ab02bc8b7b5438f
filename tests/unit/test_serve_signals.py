"""What SIGTERM and SIGINT do to `harel worker` and `harel dev` (`harel.serve.Stop`), in this process: while
starting they interrupt it; once the worker runs the handler only records the signal, and the main thread's
wait notices it and says so. A burst of real signals at a real worker is tests/wire/test_worker_process.py's."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest

from harel.serve import Stop, StoppedStarting, stop_on_signals


@pytest.fixture(autouse=True)
def signal_handlers_kept() -> Iterator[None]:
    """`stop_on_signals` replaces pytest's handlers: put them back."""
    kept = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in kept.items():
        signal.signal(number, handler)


def test_while_starting_a_signal_interrupts_and_names_itself() -> None:
    stop = Stop(starting=True)

    with pytest.raises(StoppedStarting) as stopped:
        stop.on_signal(signal.SIGINT, None)

    assert stopped.value.signal_name == "SIGINT" and stop.received == []


def test_once_running_the_handler_only_records_and_the_wait_says_so(caplog: pytest.LogCaptureFixture) -> None:
    stop = Stop(starting=False)
    stop.on_signal(signal.SIGTERM, None)
    stop.on_signal(signal.SIGINT, None)

    assert caplog.records == [], "nothing is logged from the handler"
    with caplog.at_level(logging.INFO, logger="harel.serve"):
        stop.wait()

    assert stop.received == [signal.SIGTERM, signal.SIGINT]
    assert [(r.getMessage(), getattr(r, "signal", None)) for r in caplog.records] == [
        ("signal received, draining", "SIGTERM")
    ]


def test_stop_on_signals_puts_its_handler_on_both_signals() -> None:
    stop = stop_on_signals(starting=False)

    assert signal.getsignal(signal.SIGTERM) == stop.on_signal == signal.getsignal(signal.SIGINT)
