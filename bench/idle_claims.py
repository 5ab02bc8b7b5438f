"""Benchmark 3: what one timer sweep reads when many executions hold timers and few are due.

The same collection answers both queries: `executions` executions each holding one durable timer, `due`
of them past due, the rest an hour or more in the future. Ours is the sweep's query (`due_timers`: the
sparse, indexed `next_fire_at` range, projected to `timers`, limited to the worker's batch); the seed's
is its scan (`{timers: {$exists: true, $ne: {}}}` over every document, projected to `timers`, the due ones
picked out client-side).

On mongomock the figure is documents returned, counted with `count_documents` on each query's filter (and
limit): mongomock's find cursor copies its whole result list on every document it hands out, so reading
100,000 documents through it would take minutes without telling anything more. Documents *examined* need
a server's query planner: with HAREL_TEST_MONGO_URL set, the same documents are written there and both
queries run for real under `explain` (executionStats).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.deployments import client_for, scratch_database
from bench.report import Row, number
from harel.commands import Find
from harel.executions import commits, queries
from harel.executions.fields import EXECUTIONS, chart_key
from harel.model import Execution
from harel.store.mongo import MongoStore
from harel.worker import WorkerConfig
from harel_dev.embedded import EmbeddedClient

TIMER_PATH = "waiting"
FUTURE_SECONDS = 3600.0
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
class SweepCost:
    executions: int
    due: int
    ours_returned: int
    seed_returned: int
    due_found: int
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
        built.append(commits.created_document(parts, (), chart_key(exe.definition_id, 1), now))
    return built


def measure(executions: int, due: int, real_url: str | None) -> SweepCost:
    batch = WorkerConfig().batch
    now = time.time()
    client = EmbeddedClient(clock=lambda: now)
    store = MongoStore(client, "harel")
    store.ensure_indexes()
    collection = client["harel"][EXECUTIONS]
    built = documents(executions, due, now)
    collection.insert_many(built)
    ours = queries.due_find(now + 1.0, batch)
    found = store.due_timers(now + 1.0, batch)
    return SweepCost(
        executions=executions,
        due=due,
        ours_returned=collection.count_documents(ours.filter, limit=ours.limit),
        seed_returned=collection.count_documents(SEED_SCAN.filter),
        due_found=len(found),
        examined=None if real_url is None else explain_on_server(real_url, built, ours),
    )


def explain_on_server(url: str, built: list[dict[str, Any]], ours: Find) -> Examined:
    with client_for(url) as client, scratch_database(client) as db_name:
        MongoStore(client, db_name).ensure_indexes()
        collection = client[db_name][EXECUTIONS]
        for start in range(0, len(built), INSERT_BATCH):
            collection.insert_many(built[start : start + INSERT_BATCH], ordered=False)
        ours_stats = ours.open(collection).explain()["executionStats"]
        seed_stats = SEED_SCAN.open(collection).explain()["executionStats"]
    return Examined(
        ours=int(ours_stats["totalDocsExamined"]),
        seed=int(seed_stats["totalDocsExamined"]),
        ours_returned=int(ours_stats["nReturned"]),
        seed_returned=int(seed_stats["nReturned"]),
    )


def rows(result: SweepCost) -> list[Row]:
    setting = f"{number(result.executions)} executions with a timer, {number(result.due)} due"
    examined = result.examined
    return [
        Row(
            3,
            f"documents returned per sweep ({setting})",
            f"{number(result.ours_returned)} (indexed next_fire_at query)",
            f"{number(result.seed_returned)} (the seed's scan of every document with a timer)",
            f"on mongomock, same documents; our sweep found {result.due_found} due timers",
        ),
        Row(
            3,
            "documents examined per sweep (explain, executionStats)",
            NOT_MEASURED if examined is None else number(examined.ours),
            NOT_MEASURED if examined is None else number(examined.seed),
            "set HAREL_TEST_MONGO_URL to measure on a real server"
            if examined is None
            else f"on HAREL_TEST_MONGO_URL; returned there: {number(examined.ours_returned)} vs "
            f"{number(examined.seed_returned)}",
        ),
    ]
