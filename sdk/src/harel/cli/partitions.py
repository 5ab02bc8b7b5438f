"""`harel partitions init | show`: the partition count and zones of a deployment (docs/sharding.md)."""

from __future__ import annotations

import click
from rich.text import Text

from harel.cli.exits import Exit, epilog
from harel.cli.options import connection_options, json_option
from harel.cli.output import Output, table
from harel.cli.settings import Connection
from harel.connection import connect, redact
from harel.errors import InvalidArgument
from harel.executions.fields import EXECUTIONS
from harel.executions.partitions import DEFAULT_SHARDED_COUNT, MAX_COUNT, META, meta_find, parse_partitions
from harel.partitioning import init, is_router, sharded_key

DB_NAME = "harel"  # the database workers use (`harel.backend.open_backend`)
database_option = click.option(
    "--database",
    default=DB_NAME,
    show_default=True,
    metavar="NAME",
    help="the database of the executions (the workers' is harel)",
)


@click.group(short_help="partitions of a sharded deployment (init, show)")
def partitions() -> None:
    """Executions are split into P partitions so that each command reaches one shard of a sharded cluster.
    P is chosen once, by `init`; one replica set needs none (P = 1)."""


@partitions.command(
    "init",
    short_help="partition the executions, shard them, set one zone per shard",
    epilog=epilog(Exit.FAILED, Exit.USAGE, Exit.UNREACHABLE),
)
@click.option(
    "--partitions",
    "count",
    type=click.IntRange(1, MAX_COUNT),
    default=DEFAULT_SHARDED_COUNT,
    show_default=True,
    help="P: fixed once executions carry it; many more than the shards you will ever have",
)
@database_option
@connection_options
@json_option
def init_command(count: int, database: str, connection: Connection, out: Output) -> int:
    """Give every execution its partition `p`, create the partitioned indexes, and on a sharded cluster
    (through mongos) shard `executions` on {p: 1, _id: 1} with one zone of partitions per shard; then record
    P and the zones in `harel_meta`. Every step looks first: a rerun changes nothing. Restart the workers
    after the first run: they read the partitions when they start."""
    if connection.embedded:
        raise InvalidArgument(
            "--url", f"{connection.url} is an in-process store: there is nothing to partition"
        )
    client = connect(connection.url, deadline=connection.deadline)
    try:
        report = init(client, database, count, progress=lambda step: out.note(f"harel partitions: {step}"))
    finally:
        client.close()
    if out.json:
        out.document(report.document())
        return Exit.OK
    steps = table("step", "outcome", "detail")
    for step, outcome, detail in report.steps:
        steps.add_row(step, outcome, detail)
    where = "sharded cluster" if report.sharded else "replica set"
    out.show(Text(f"harel partitions init {redact(connection.url)} ({where})", style="bold"), steps)
    out.show(Text("changed: restart the workers" if report.changed else "unchanged"))
    return Exit.OK


@partitions.command(
    "show", short_help="P, the zones and the shard key", epilog=epilog(Exit.USAGE, Exit.UNREACHABLE)
)
@database_option
@connection_options
@json_option
def show_command(database: str, connection: Connection, out: Output) -> int:
    """P and the zones as `harel_meta` records them, and the shard key of `executions` on a sharded
    cluster. Changes nothing."""
    if connection.embedded:
        raise InvalidArgument("--url", f"{connection.url} is an in-process store: it has one partition")
    client = connect(connection.url, deadline=connection.deadline)
    try:
        found = meta_find().one(client[database][META])
        stored = parse_partitions(found)
        router = is_router(client)
        key = sharded_key(client, f"{database}.{EXECUTIONS}") if router else None
    finally:
        client.close()
    document = {
        "partitions": stored.count,
        "recorded": found is not None,
        "sharded": router,
        "shard_key": key,
        "zones": [{"name": z.name, "start": z.start, "stop": z.stop, "shard": z.shard} for z in stored.zones],
    }
    if out.json:
        out.document(document)
        return Exit.OK
    zones = table("zone", "partitions", "shard")
    for zone in stored.zones:
        zones.add_row(zone.name, f"{zone.start}..{zone.stop - 1}", zone.shard or "-")
    recorded = "" if found is not None else " (no partition map: one partition)"
    out.show(
        Text(f"P = {stored.count}{recorded}"), Text(f"shard key: {key}" if router else "not sharded"), zones
    )
    return Exit.OK


COMMANDS = (partitions,)
