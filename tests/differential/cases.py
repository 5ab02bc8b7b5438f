"""The event scripts the differential charts run: after each step the two sides are compared.

A step is `Send(events...)` (sent to the root one after the other, without waiting in between), or
`Wait(seconds)` (the clock jumps forward: harel's worker clock, then sismic's simulated clock follows it).
Every wait ends at least a second away from a timer's due time, so the milliseconds the harel side spends
processing cannot move a timer to the other side of a comparison.

`DIFFERENCES` are charts whose scripts reach a documented difference: up to its last step both sides
agree, at the last step they must differ, as docs/semantics.md says they do.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Send:
    events: tuple[str, ...]

    def __init__(self, *events: str) -> None:
        object.__setattr__(self, "events", events)


@dataclass(frozen=True)
class Wait:
    seconds: float


Script = tuple[Send | Wait, ...]

AGREEMENTS: dict[str, Script] = {
    "nested": (
        Send("next"),
        Send("next"),
        Send("up"),
        Send("deep"),
        Send("reset"),
        Send("jump"),
        Send("back"),
        Send("jump"),
        Send("finish"),
    ),
    "guards": (
        Send("go"),
        Send("back"),
        Send("bump"),
        Send("go"),
        Send("back"),
        Send("bump", "bump"),
        Send("go"),
    ),
    "priority": (
        Send("ping"),
        Send("go"),
        Send("return"),
        Send("arm"),
        Send("go"),
        Send("go"),
        Send("again"),
        Send("ping"),
    ),
    "eventless": (Send("start"), Send("reset"), Send("start"), Send("bump"), Send("bump")),
    "selfsend": (Send("kick"), Send("kick"), Send("kick", "kick")),
    "timers": (
        Wait(2),
        Send("poke"),  # re-armed: due 4 s from here
        Wait(2.5),
        Wait(3),  # fired; t1's 3 s and the outer 7 s timer run
        Wait(3),  # t2
        Wait(3.5),  # the outer timer fired: elsewhere
        Send("back"),
        Send("leave"),  # the timer is cancelled with its state
        Wait(6),
    ),
    "ties": (Wait(5),),
    "join": (Send("go"), Send("finish")),
    "forward": (Send("step_a"), Send("both"), Send("step_b"), Send("abort")),
    "approval": (
        Send("alice_yes"),
        Send("bob_no"),
        Send("retry"),
        Send("bob_yes"),
        Send("alice_yes"),
    ),
    "finals": (Send("bad"), Send("ok"), Send("fin")),
    "messages": (Send("go"), Send("finish")),
    "nestedpar": (Send("tick"), Send("tock")),
    "regiontimers": (Wait(5), Wait(4)),
    "history": (
        Send("deep"),  # nothing recorded: the default, address (then street)
        Send("next"),
        Send("pause"),
        Send("deep"),  # form.address.city
        Send("pause"),
        Send("shallow"),  # form.address, from street
        Send("pause"),
        Send("shallow"),
        Send("next"),
    ),
    "severaltimers": (
        Wait(1),
        Send("poke"),  # re-armed: due at 3 s and 6 s
        Wait(1),
        Wait(2),  # the 2 s timer fired at 3 s: reminded, its timers due at 5 s and 9 s
        Wait(2),  # back to waiting at 5 s
        Wait(2),  # reminded again at 7 s
    ),
    "delayed": (
        Send("go"),  # ping due in 5 s, pong in 2 s
        Wait(1),
        Wait(2.5),  # pong: halfway
        Wait(3),  # ping: idle
        Send("go"),
        Wait(7),
    ),
    "inguard": (
        Send("poke"),
        Send("close"),  # neither approved nor in review: ignored
        Send("submit"),
        Send("poke"),  # not in draft: ignored
        Send("close"),
        Send("reopen"),
        Send("submit", "approve"),
        Send("close"),
    ),
}

DIFFERENCES: dict[str, tuple[Script, str]] = {
    # harel: the guard is checked when the timer fires (false), the timer is spent; sismic keeps checking
    # `after(3) and n >= 1` and leaves once `bump` makes it true.
    "guardedafter": ((Wait(4.5), Send("bump")), "sem-diff-guarded-after"),
    # harel: the region incremented its own copy of `n`; the parent's `n` is still 0 at the join (the
    # region's count is in regions.only.context). sismic: one shared context, n is 1.
    "regioncontext": ((Send("finish"),), "sem-diff-regions-context"),
    # harel: `rewind` targets its own source without `reenter`, which stays entered (exit_b, enter_a);
    # sismic exits and re-enters `outer` as well.
    "reenter": ((Send("next"), Send("again"), Send("rewind")), "sem-diff-reenter"),
}
