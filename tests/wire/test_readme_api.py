"""The FastAPI example of docs/actions.md (`orders/api.py`), as written, under FastAPI's TestClient:
`harel.aio.Client` on AsyncMongoClient against the fake replica set, with a `harel worker` process running the
README's order app, whose `charge_card` is `async def`. An order is placed, approved and completed through the join; the
API answers 404 and 409 where the client raises UnknownExecution and ExecutionFinished."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from tests.fake_mongod.fixtures import FakeDeployment
from tests.wire.processes import WorkerProcesses, wait_until
from tests.wire.test_readme import write_example_app

pytestmark = pytest.mark.wire

MODULES = ("orders", "orders.app", "orders.api")


@pytest.fixture
def api_module(
    tmp_path: Path,
    fake_rs: FakeDeployment,
    worker_processes: WorkerProcesses,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[ModuleType]:
    write_example_app(tmp_path)
    assert (tmp_path / "orders" / "api.py").is_file(), "docs/actions.md shows orders/api.py"
    worker = worker_processes.harel_worker(fake_rs.url, "--app", "orders.app:app", cwd=tmp_path)
    wait_until(lambda: "worker started" in worker.log() or not worker.running(), 30, "the worker")
    assert worker.running(), worker.log()
    monkeypatch.setenv("HAREL_MONGO_URL", fake_rs.url)
    monkeypatch.chdir(tmp_path)  # orders/app.py names its chart relative to the folder it runs in
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    import orders.api  # type: ignore[import-not-found]

    yield orders.api
    for name in MODULES:
        sys.modules.pop(name, None)
    assert "attempt failed" not in worker.log(), "the async action never failed an attempt"


def test_the_readme_api_places_approves_and_completes_an_order(api_module: ModuleType) -> None:
    with TestClient(api_module.api) as http:
        placed = http.post("/orders/o-1", params={"total": 12})
        assert placed.status_code == 200, placed.text
        assert placed.json() == {"id": "o-1", "status": "running"}

        approved = http.post("/orders/o-1/approve")
        assert approved.status_code == 200 and approved.json()["event_id"]

        # the join waits for shipping's 2 s timer; a region's done can also wait for the background relay,
        # up to a lease (30 s), when two consumers race the committing worker's relay
        done = http.get("/orders/o-1", params={"wait": 60})
        assert done.status_code == 200, done.text
        assert done.json() == {"id": "o-1", "status": "completed", "active": ["delivered"]}

        assert http.post("/orders/o-1/approve").status_code == 409, "a finished order takes no more events"
        missing = http.get("/orders/nobody")
        assert missing.status_code == 404 and "no execution with id 'nobody'" in missing.json()["detail"]
