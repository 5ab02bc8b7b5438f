"""`harel.aio.Client` on AsyncMongoClient over sockets, with a `harel worker` process whose app has `async def`
actions and guards: a workflow completes, each refusal is the error the sync client raises, a wait gives up
after its timeout, and an async action past the worker's --async-timeout fails its attempt, saying so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harel.aio import Client
from harel.errors import (
    ExecutionFinished,
    ExecutionIdTaken,
    UnknownChart,
    UnknownEvent,
    UnknownExecution,
    WaitTimedOut,
)
from harel.model import ExecutionStatus
from tests.fake_mongod.fixtures import FakeDeployment
from tests.wire.processes import WorkerProcesses, wait_until

pytestmark = pytest.mark.wire

PAYMENTS_APP = """
import asyncio

from harel.app import ActionContext, ActionResult, App, Send

app = App("payments")
app.chart({
    "id": "pay",
    "version": 1,
    "initial": "cart",
    "states": {
        "cart": {"on": {"pay": {"target": "paying", "guard": "in_stock"}, "stall": {"actions": ["hang"]}}},
        "paying": {"entry": ["charge"], "on": {"charged": "paid"}},
        "paid": {"final": True},
    },
})


@app.guard("in_stock")
async def in_stock(ctx: ActionContext) -> bool:
    await asyncio.sleep(0.01)
    return ctx.context.get("stock", 0) > 0


@app.action("charge")
async def charge(ctx: ActionContext) -> ActionResult:
    await asyncio.sleep(0.05)
    return ActionResult(context={"charged_by": ctx.event.id}, send=[Send("charged", to="self")])


@app.action("hang")
async def hang(ctx: ActionContext) -> None:
    await asyncio.sleep(60)
"""


@pytest.fixture
def payments(tmp_path: Path, fake_rs: FakeDeployment, worker_processes: WorkerProcesses) -> str:
    (tmp_path / "payments").mkdir()
    (tmp_path / "payments" / "app.py").write_text(PAYMENTS_APP)
    worker = worker_processes.harel_worker(
        fake_rs.url, "--app", "payments.app:app", "--async-timeout", "0.5", cwd=tmp_path
    )
    wait_until(lambda: "worker started" in worker.log() or not worker.running(), 30, "the worker")
    assert worker.running(), worker.log()
    return fake_rs.url


def test_an_async_workflow_through_the_async_client(payments: str) -> None:
    async def scenario() -> None:
        async with await Client.connect(payments, deadline=20) as client:  # charts from the catalog
            started = await client.start("pay", context={"stock": 1}, execution_id="a-1")
            assert (started.id, started.status) == ("a-1", ExecutionStatus.RUNNING)
            again = await client.start("pay", context={"stock": 1}, execution_id="a-1")
            assert again.id == "a-1", "an idempotency key"
            with pytest.raises(ExecutionIdTaken):
                await client.start("pay", execution_id="a-1")  # another context: another request
            paid = await client.send("a-1", "pay")
            done = await client.wait("a-1", timeout=30)
            assert done.status is ExecutionStatus.COMPLETED and done.configuration == ["paid"]
            assert done.context["charged_by"] == paid.id, "the async action ran in the step that took pay"

            with pytest.raises(ExecutionFinished, match="has finished \\(completed\\)"):
                await client.send("a-1", "pay")
            with pytest.raises(UnknownExecution):
                await client.status("nobody")
            other = await client.start("pay")
            with pytest.raises(UnknownEvent, match="known: charged, pay, stall"):
                await client.send(other.id, "refund")
            with pytest.raises(UnknownChart):
                await client.start("nothing")

            await client.start("pay", execution_id="a-3")
            await client.cancel("a-3")
            assert (await client.wait("a-3", timeout=30)).status is ExecutionStatus.CANCELLED

    asyncio.run(scenario())


def test_an_async_action_past_the_timeout_fails_its_attempt(payments: str) -> None:
    async def scenario() -> None:
        async with await Client.connect(payments, deadline=20) as client:
            await client.start("pay", execution_id="a-2")
            await client.send("a-2", "stall")
            with pytest.raises(WaitTimedOut, match=r"execution 'a-2' is still running after 0\.3s"):
                await client.wait("a-2", timeout=0.3)
            for _ in range(300):
                stored = await client.store.document("a-2")
                if stored and stored.get("attempts"):
                    break
                await asyncio.sleep(0.1)
            assert stored is not None and stored["attempts"] >= 1
            assert stored["last_error"].startswith(
                "AsyncCallTimeout: async action 'hang' did not finish within 0.5s and was cancelled"
            )
            assert (await client.status("a-2")).configuration == ["cart"], (
                "nothing of the stalled step applied"
            )

    asyncio.run(scenario())
