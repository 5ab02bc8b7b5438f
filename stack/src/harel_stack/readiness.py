"""`up`'s wait: conditions checked in order until all are met, shown one line each, or a timeout naming the rest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TextIO

from harel_stack.errors import ProbeFailure, StackNotReady
from harel_stack.probe import StackProbe, WorkerBeat

# A worker beats every 5 s; three missed beats and it no longer counts as alive.
BEAT_FRESHNESS = timedelta(seconds=15)


@dataclass(frozen=True)
class Condition:
    name: str
    # Returns a short detail when the condition holds; raises ProbeFailure (why not yet) otherwise.
    check: Callable[[], str]


def fresh_beats(beats: Sequence[WorkerBeat], now: datetime) -> list[WorkerBeat]:
    return [beat for beat in beats if now - beat.last_beat <= BEAT_FRESHNESS]


def stack_conditions(probe: StackProbe, workers: int, now: Callable[[], datetime]) -> list[Condition]:
    """The replica set's. Each condition presumes the ones before it: no app user before a primary, no check before
    the app user."""

    def primary() -> str:
        replica_set = probe.replica_set()
        if replica_set.primary is None:
            raise ProbeFailure(f"no primary: {replica_set.describe() or 'no members'}")
        return replica_set.primary

    return [Condition("replica set has a primary", primary), *_harel_conditions(probe, workers, now)]


def sharded_conditions(
    probe: StackProbe, shards: Sequence[str], workers: int, now: Callable[[], datetime]
) -> list[Condition]:
    """The sharded cluster's, in the order sharded-init brings them about: the router up, the shards added, the app
    user created through it, `harel partitions init` run (which `harel check` then reports)."""

    def router() -> str:
        return f"mongos on {probe.router()}"

    def listed() -> str:
        names = {shard.name for shard in probe.shards()}
        missing = [name for name in shards if name not in names]
        if missing:
            raise ProbeFailure(
                f"{len(shards) - len(missing)} of {len(shards)} shards listed, not yet {', '.join(missing)} "
                "(sharded-init adds them)"
            )
        return ", ".join(shards)

    return [
        Condition("router answers", router),
        Condition("shards listed", listed),
        *_harel_conditions(probe, workers, now),
    ]


def _harel_conditions(probe: StackProbe, workers: int, now: Callable[[], datetime]) -> list[Condition]:
    """Either topology's last three: through mongo1 or through the router, the same client's view."""

    def app_user() -> str:
        probe.authenticate_app_user()
        return "harel@admin"

    def check() -> str:
        probe.harel_check()
        return "no errors"

    def heartbeats() -> str:
        beating = len(fresh_beats(probe.workers(), now()))
        if beating < workers:
            raise ProbeFailure(f"{beating} of {workers} workers beating")
        return f"{beating} of {workers}"

    return [
        Condition("app user authenticates", app_user),
        Condition("harel check passes", check),
        Condition("workers heartbeat", heartbeats),
    ]


@dataclass
class Progress:
    """One line per condition: `ok` with the time it took, or `waiting` with the time so far and why."""

    out: TextIO
    names: Sequence[str]
    interactive: bool
    met: dict[str, tuple[float, str]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    _drawn: int = 0

    def line(self, name: str, elapsed: float) -> str:
        width = max(len(n) for n in self.names)
        if name in self.met:
            took, detail = self.met[name]
            return f"  ok       {name:<{width}}  {took:6.1f}s  {detail}"
        reason = self.reasons.get(name, "")
        return f"  waiting  {name:<{width}}  {elapsed:6.1f}s  {reason}".rstrip()

    def show(self, elapsed: float, newly_met: Sequence[str]) -> None:
        if self.interactive:
            # Redraw the block in place: cursor up over the previous block, clear each line.
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F")
            for name in self.names:
                self.out.write("\x1b[2K" + self.line(name, elapsed) + "\n")
            self._drawn = len(self.names)
        else:
            # A log, not a screen: one line per condition as it is met.
            for name in newly_met:
                self.out.write(self.line(name, elapsed) + "\n")
        self.out.flush()

    def finish(self, elapsed: float) -> None:
        if not self.interactive:
            for name in self.names:
                if name not in self.met:
                    self.out.write(self.line(name, elapsed) + "\n")
            self.out.flush()


def wait_until_ready(
    conditions: Sequence[Condition],
    *,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    out: TextIO,
    init_service: str,
    interval: float = 2.0,
) -> float:
    """Poll until every condition holds; return the seconds it took. StackNotReady at `timeout`, pointing at the
    logs of `init_service`, the one-shot that brings the conditions about."""
    progress = Progress(out, [c.name for c in conditions], interactive=out.isatty())
    started = clock()
    while True:
        newly_met: list[str] = []
        for condition in conditions:
            if condition.name in progress.met:
                continue
            try:
                detail = condition.check()
            except ProbeFailure as exc:
                progress.reasons[condition.name] = exc.reason
                break
            progress.met[condition.name] = (clock() - started, detail)
            newly_met.append(condition.name)
        elapsed = clock() - started
        progress.show(elapsed, newly_met)
        if len(progress.met) == len(conditions):
            return elapsed
        if elapsed >= timeout:
            progress.finish(elapsed)
            missing = [
                (c.name, progress.reasons.get(c.name)) for c in conditions if c.name not in progress.met
            ]
            raise StackNotReady(elapsed, missing, init_service)
        sleep(interval)
