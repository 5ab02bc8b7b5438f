"""The actions and guards the differential charts name, each implemented twice: as a harel action or guard,
and as sismic code. Every action also logs its own name, so both sides record the order actions ran in.

    log:<tag>              nothing else
    inc:<key>[:<tag>]      context[key] += 1 (from 0)
    set:<key>:<int>        context[key] = int
    self:<event>           send <event> to self
    later:<event>:<secs>   send <event> to self in <secs> seconds (a delayed send; sismic: send(..., delay=))
    up:<event>             send <event> to the parent (sismic: an internal event, one interpreter holds all)
    sib:<region>:<event>   send <event> to the sibling region (sismic: the same)

    ge:<key>:<int>         context[key] >= int
    sum_ge:<key>:<int>     the regions' results add up: sum of regions.*.context[key] >= int (sismic: the
                           one shared context's key, which both regions incremented)
    results_all:<value>    every region's result is <value> (sismic: every region is in a final state
                           whose `result` is <value>)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harel.app import ActionContext, ActionResult, Registry, Send
from harel.chart import Chart, Node

Action = Callable[[ActionContext], ActionResult | None]
Guard = Callable[[ActionContext], bool]


def harel_registry(chart: Chart) -> Registry:
    registry = Registry()
    for kind, name in chart.references():
        if kind == "action":
            registry.actions[name] = harel_action(name)
        else:
            registry.guards[name] = harel_guard(name)
    return registry


def harel_action(name: str) -> Action:
    verb, *args = name.split(":")
    if verb == "log":
        return lambda ctx: None
    if verb == "inc":
        key = args[0]
        return lambda ctx: ActionResult(context={key: ctx.context.get(key, 0) + 1})
    if verb == "set":
        key, value = args[0], int(args[1])
        return lambda ctx: ActionResult(context={key: value})
    if verb == "self":
        return lambda ctx: ActionResult(send=[Send(args[0], to="self")])
    if verb == "later":
        delayed = Send(args[0], to="self", delay=float(args[1]))
        return lambda ctx: ActionResult(send=[delayed])
    if verb == "up":
        return lambda ctx: ActionResult(send=[Send(args[0], to="parent")])
    if verb == "sib":
        return lambda ctx: ActionResult(send=[Send(args[1], to=f"sibling:{args[0]}")])
    raise ValueError(f"no such differential action: {name!r}")


def harel_guard(name: str) -> Guard:
    verb, *args = name.split(":")
    if verb == "ge":
        key, bound = args[0], int(args[1])
        return lambda ctx: ctx.context.get(key, 0) >= bound
    if verb == "sum_ge":
        key, bound = args[0], int(args[1])
        return lambda ctx: sum(r["context"].get(key, 0) for r in ctx.context["regions"].values()) >= bound
    if verb == "results_all":
        return lambda ctx: all(r["result"] == args[0] for r in ctx.context["regions"].values())
    raise ValueError(f"no such differential guard: {name!r}")


def sismic_action(name: str) -> str:
    verb, *args = name.split(":")
    effect = {
        "log": "",
        "inc": f"{args[0]} = {args[0]} + 1" if verb == "inc" else "",
        "set": f"{args[0]} = {args[1]}" if verb == "set" else "",
        "self": f"send({args[0]!r})" if verb == "self" else "",
        "later": f"send({args[0]!r}, delay={float(args[-1])})" if verb == "later" else "",
        "up": f"send({args[0]!r})" if verb == "up" else "",
        "sib": f"send({args[-1]!r})" if verb == "sib" else "",
    }[verb]
    return "\n".join(line for line in (f"log({name!r})", effect) if line)


def sismic_guard(name: str, source: Node, chart: Chart) -> str:
    verb, *args = name.split(":")
    if verb in ("ge", "sum_ge"):
        return f"{args[0]} >= {int(args[1])}"
    if verb == "results_all":
        per_region = []
        for region in source.children:
            finals = [
                path
                for path in chart.node(region).children
                if chart.node(path).kind == "final" and chart.node(path).result == args[0]
            ]
            per_region.append("(" + " or ".join(f"active({p!r})" for p in finals or ["-"]) + ")")
        return " and ".join(per_region)
    raise ValueError(f"no such differential guard: {name!r}")


def context_keys(chart: Chart) -> dict[str, Any]:
    """Every context key the chart's actions and guards touch, at 0: sismic needs them defined."""
    keys: dict[str, Any] = {}
    for _, name in chart.references():
        verb, *args = name.split(":")
        if verb in ("inc", "set", "ge", "sum_ge"):
            keys[args[0]] = 0
    return keys
