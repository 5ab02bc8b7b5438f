"""Benchmark 3: what a claim reads when many executions wait on timers and few are due.

`executions` execution documents, built with the store's own document builders, each holding one durable
timer: `due` of them past due, the rest an hour or more away. There is no timer sweep: an execution's
`wake_at` is its earliest timer while its mailbox is empty, and the claim that takes it once that time has
passed fires the timer in the same command. Ours is the claim's filter (`claim_write`: a range on the
partial `wake` index, decided against the server's clock); the baseline is the seed's sweep, a scan of
every document holding a timer (`{timers: {$exists: true, $ne: {}}}`), the due ones picked out client-side.

On mongomock the figure is documents selected, counted with `count_documents` on each filter: mongomock's
find cursor copies its whole result list on every document it hands out, so reading 100,000 documents
through it would take minutes without telling anything more. Then claims are taken until one finds
nothing, counting the timers they fired. Documents *examined* need a server's query planner: with
HAREL_TEST_MONGO_URL set, the same documents are written there and the claim's query (its filter, sort and
limit of one) and the seed's scan run under `explain` (executionStats).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.deployments import client_for, scratch_database
from bench.report import Row, number
from harel.commands import Find
from harel.executions import commits, writes
from harel.executions.fields import EXECUTIONS, chart_key
from harel.model import TIMER_EVENT, Execution
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel_dev.embedded import EmbeddedClient

CHART = chart_key("bench.sleeper", 1)
TIMER_PATH = "waiting"
FUTURE_SECONDS = 3600.0
LEASE_SECONDS = 60.0
SEED_SCAN = Find({"timers": {"$exists": True, "$ne": {}}}, {"timers": 1})
INSERT_BATCH = 10_000
NOT_MEASURED = "n/a (no server)"


@dataclass(frozen=True)
class Examined:
    ours: int
    seed: int
    ours_returned: int
    seed_returned: int


@dataclass(frozen=True)
class IdleClaims:
    executions: int
    due: int
    ours_selected: int  # documents the claim's filter selects
    seed_returned: int  # documents the seed's sweep reads
    claims: int  # claims taken until one found nothing, that one included
    timers_fired: int  # timer events those claims appended
    examined: Examined | None


def fire_at(index: int, due: int, now: float) -> float:
    """The first `due` executions are past due; the others fire an hour or more from `now`."""
    return now - 1.0 - index if index < due else now + FUTURE_SECONDS + index


def documents(executions: int, due: int, now: float) -> list[dict[str, Any]]:
    """Execution documents as MongoStore creates them (the shared builders), each with one armed timer."""
    built = []
    for index in range(executions):
        exe = Execution(
            id=f"sleeper-{index:06d}",
            definition_id="bench.sleeper",
            definition_version=1,
            configuration=[TIMER_PATH],
            timers={TIMER_PATH: fire_at(index, due, now)},
            created_at=now,
            updated_at=now,
        )
        parts = commits.commit_parts(exe, (), expected=0, timers_changed=True)
        built.append(commits.created_document(parts, (), CHART, now))
    return built


def measure(executions: int, due: int, real_url: str | None) -> IdleClaims:
    now = time.time()
    client = EmbeddedClient(clock=lambda: now)
    MongoStore(client, "harel").ensure_indexes()
    collection = client["harel"][EXECUTIONS]
    built = documents(executions, due, now)
    collection.insert_many(built)
    transport = MongoTransport(client, "harel", watch=False)
    ours = writes.claim_write([CHART], "bench", LEASE_SECONDS, now + 1.0)
    selected = collection.count_documents(ours.filter)
    claims, fired = 0, 0
    while True:
        claims += 1
        claim = transport.claim([CHART], LEASE_SECONDS, now + 1.0)
        if claim is None:
            break
        fired += sum(1 for pending in claim.pending if pending.event.name == TIMER_EVENT)
    transport.close()
    return IdleClaims(
        executions=executions,
        due=due,
        ours_selected=selected,
        seed_returned=collection.count_documents(SEED_SCAN.filter),
        claims=claims,
        timers_fired=fired,
        examined=None if real_url is None else explain_on_server(real_url, built),
    )


def explain_on_server(url: str, built: list[dict[str, Any]]) -> Examined:
    with client_for(url) as client, scratch_database(client) as db_name:
        MongoStore(client, db_name).ensure_indexes()
        collection = client[db_name][EXECUTIONS]
        for start in range(0, len(built), INSERT_BATCH):
            collection.insert_many(built[start : start + INSERT_BATCH], ordered=False)
        claim = writes.claim_write([CHART], "bench", LEASE_SECONDS, time.time() + 1.0)
        ours = Find(claim.filter, {"_id": 1}, sort=claim.sort, limit=1)
        ours_stats = ours.open(collection).explain()["executionStats"]
        seed_stats = SEED_SCAN.open(collection).explain()["executionStats"]
    return Examined(
        ours=int(ours_stats["totalDocsExamined"]),
        seed=int(seed_stats["totalDocsExamined"]),
        ours_returned=int(ours_stats["nReturned"]),
        seed_returned=int(seed_stats["nReturned"]),
    )


def rows(result: IdleClaims) -> list[Row]:
    setting = f"{number(result.executions)} executions with a timer, {number(result.due)} due"
    examined = result.examined
    return [
        Row(
            3,
            f"documents the claim's filter matches ({setting})",
            f"{number(result.ours_selected)} (the claim's range on the partial wake index)",
            f"{number(result.seed_returned)} (the seed's timer sweep: every document with a timer)",
            f"on mongomock, same documents; {number(result.claims)} claims fired "
            f"{number(result.timers_fired)} timers (the last found nothing); no sweep command",
        ),
        Row(
            3,
            "documents examined per claim (explain, executionStats)",
            NOT_MEASURED if examined is None else number(examined.ours),
            NOT_MEASURED if examined is None else number(examined.seed),
            "set HAREL_TEST_MONGO_URL to measure on a real server"
            if examined is None
            else f"on HAREL_TEST_MONGO_URL, against the seed's sweep; returned there: "
            f"{number(examined.ours_returned)} vs {number(examined.seed_returned)}",
        ),
    ]
