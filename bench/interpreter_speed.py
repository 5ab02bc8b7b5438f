"""Benchmark 4: interpreter speed — `harel.interpreter.step` next to sismic on the same chart, same process.

The chart: a parallel state with two regions; each region waits for its own event (`go_left`,
`go_right`), then waits on a one-second timer, then ends; when both have ended the join leaves the parallel
state for a final state. One *run* takes it from start to completion and is the unit of equal work: both
interpreters enter the same states, take the same transitions and fire the same two timers.

harel steps one execution per region (the parallel state forks child executions), so one run is 9 steps:
the parent's start, each child's start, `go_*` and timer, and each child's `done` at the parent (the last
one fires the join). Here they are driven in memory, without a store: spawned children are created, emitted
events and timer events are delivered in order on a simulated clock.

sismic runs the regions inside one interpreter: one run is `execute()` after creation (the initial
configuration), `go_left` and `go_right`, then the clock moved past the timers. Its timers are `after(1)`
guards on eventless transitions and its join is an eventless transition guarded by `active(...)`; a sismic
step is one macro step.

Both sides receive the same two external events per run and their simulated clocks advance the same way.
Each is timed over the same number of runs in CPU time of the benchmark's thread, best of `REPEATS` passes
taken in turn; the ratio compares runs per second.

A harel Step builds its trace record on first read (a worker reads it when it records traces, the default;
`WorkerConfig.trace=False` never does). harel is timed twice: as `step` returns (trace not read), and with
each step's trace read, as a tracing worker does; both ratios are reported.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sismic.clock import SimulatedClock
from sismic.interpreter import Interpreter
from sismic.io import import_from_yaml
from sismic.model import Statechart

from bench.report import Row, number
from harel.chart import Chart, load_chart
from harel.interpreter import step
from harel.model import START_EVENT, TIMER_EVENT, ChildSeed, Event, Execution, ExecutionStatus, SpawnEntry

REPEATS = 3
REGIONS = ("left", "right")


def region(name: str) -> dict[str, Any]:
    first, waiting, ended = (f"{name[0]}{n}" for n in (1, 2, 3))
    return {
        "initial": first,
        "states": {
            first: {"on": {f"go_{name}": waiting}},
            waiting: {"after": {"1s": ended}},
            ended: {"final": True},
        },
    }


HAREL_CHART: dict[str, Any] = {
    "id": "bench.parallel",
    "version": 1,
    "initial": "working",
    "states": {
        "working": {"parallel": {name: region(name) for name in REGIONS}, "on_done": "done"},
        "done": {"final": True},
    },
}

SISMIC_CHART = """
statechart:
  name: bench.parallel
  root state:
    name: root
    initial: working
    states:
    - name: working
      parallel states:
      - name: left
        initial: l1
        states:
        - name: l1
          transitions:
          - {target: l2, event: go_left}
        - name: l2
          transitions:
          - {target: l3, guard: after(1)}
        - {name: l3, type: final}
      - name: right
        initial: r1
        states:
        - name: r1
          transitions:
          - {target: r2, event: go_right}
        - name: r2
          transitions:
          - {target: r3, guard: after(1)}
        - {name: r3, type: final}
      transitions:
      - {target: done, guard: active('l3') and active('r3')}
    - {name: done, type: final}
"""


@dataclass(frozen=True)
class Timing:
    runs: int
    steps: int
    seconds: float

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds


@dataclass(frozen=True)
class InterpreterSpeed:
    harel: Timing
    harel_traced: Timing
    sismic: Timing

    @property
    def ratio(self) -> float:
        """How many times more runs per second harel completes than sismic."""
        return self.harel.runs_per_second / self.sismic.runs_per_second

    @property
    def traced_ratio(self) -> float:
        """The same, with every harel step's trace record built."""
        return self.harel_traced.runs_per_second / self.sismic.runs_per_second


def harel_run(chart: Chart, index: int, *, read_trace: bool = False) -> int:
    """One run of the chart through `step`, parent and children in memory; returns the steps taken.
    `read_trace`: build each step's trace record, as a worker that records traces does."""
    parent = Execution(id=f"run-{index}", definition_id=chart.id, definition_version=chart.version)
    executions = {parent.id: parent}
    inbox: deque[tuple[str, Event]] = deque([(parent.id, Event(id=f"{parent.id}:start", name=START_EVENT))])
    timers: list[tuple[float, str, str]] = []
    now = 0.0
    steps = 0
    while inbox or timers:
        if not inbox:
            fire_at, target, path = heapq.heappop(timers)
            now = max(now, fire_at)
            data = {"path": path, "fire_at": fire_at}
            inbox.append((target, Event(id=f"{target}:timer:{path}", name=TIMER_EVENT, data=data)))
        target, event = inbox.popleft()
        result = step(chart, executions[target], event, now)
        if read_trace:
            result.trace  # noqa: B018 - building the record is the work measured
        steps += 1
        exe = result.execution
        exe.version += 1
        executions[target] = exe
        for op in result.timers:
            if op.action == "schedule":
                heapq.heappush(timers, (op.fire_at, target, op.path))
        for child_id, root_path, seed in result.spawns:
            entry = SpawnEntry(0, exe.id, child_id, root_path, seed)
            executions[child_id] = ChildSeed.model_validate(seed).to_execution(entry, now)
            inbox.append((child_id, Event(id=f"{child_id}:start", name=START_EVENT)))
        for receiver, emitted in result.emits:
            if receiver is not None:
                inbox.append((receiver, emitted))
        if event.name == START_EVENT and exe.root_path is not None:
            go = f"go_{exe.root_path.rsplit('.', 1)[-1]}"
            inbox.append((exe.id, Event(id=f"{exe.id}:{go}", name=go)))
    if executions[parent.id].status is not ExecutionStatus.COMPLETED:
        raise RuntimeError(f"harel run {index} ended {executions[parent.id].status.value}, not completed")
    return steps


def sismic_run(statechart: Statechart, index: int) -> int:
    """One run of the equivalent sismic statechart; returns its macro steps."""
    clock = SimulatedClock()
    interpreter = Interpreter(statechart, clock=clock)
    steps = len(interpreter.execute())
    interpreter.queue("go_left").queue("go_right")
    steps += len(interpreter.execute())
    clock.time += 1
    steps += len(interpreter.execute())
    if not interpreter.final:
        raise RuntimeError(f"sismic run {index} stopped in {interpreter.configuration}, not final")
    return steps


def timed(runs: int, **contenders: Callable[[int], int]) -> dict[str, Timing]:
    """The fastest of REPEATS passes over `runs` runs for each contender (after one warm-up run each), in
    this thread's CPU time: other work on the machine does not count. The passes alternate between
    contenders, so what load still shows (caches, clock speed) weighs on all of them alike."""
    for run in contenders.values():
        run(-1)
    best: dict[str, Timing] = {}
    for _ in range(REPEATS):
        for name, run in contenders.items():
            started = time.thread_time()
            steps = sum(run(index) for index in range(runs))
            timing = Timing(runs, steps, time.thread_time() - started)
            if name not in best or timing.seconds < best[name].seconds:
                best[name] = timing
    return best


def measure(runs: int) -> InterpreterSpeed:
    chart = load_chart(HAREL_CHART)
    statechart = import_from_yaml(SISMIC_CHART)
    return InterpreterSpeed(
        **timed(
            runs,
            harel=lambda index: harel_run(chart, index),
            harel_traced=lambda index: harel_run(chart, index, read_trace=True),
            sismic=lambda index: sismic_run(statechart, index),
        )
    )


def rows(result: InterpreterSpeed) -> list[Row]:
    harel, sismic = result.harel, result.sismic
    return [
        Row(
            4,
            "interpreter steps per second (parallel chart with timers, no store)",
            f"{number(harel.steps_per_second)} steps/s ({harel.steps // harel.runs} steps per run)",
            f"sismic {number(sismic.steps_per_second)} macro steps/s ({sismic.steps // sismic.runs} per run)",
            f"same process, {number(harel.runs)} runs each, best of {REPEATS}",
        ),
        Row(
            4,
            "interpreter runs per second, harel ÷ sismic (equal work per run)",
            f"{result.ratio:.2f}×",
            f"harel {number(harel.runs_per_second)} runs/s, sismic {number(sismic.runs_per_second)} runs/s",
            "a run: start to completion, both regions through their event and timer, then the join; "
            "harel's trace records built on demand, not read",
        ),
        Row(
            4,
            "· the same, every step's trace record built (a worker recording traces)",
            f"{result.traced_ratio:.2f}×",
            f"harel {number(result.harel_traced.runs_per_second)} runs/s",
            "",
        ),
    ]
