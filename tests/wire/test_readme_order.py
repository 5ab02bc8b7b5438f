"""The README's order example, run as written: its chart and application files taken from README.md, a
`harel worker --app orders.app:app` process, `harel start` and `harel send` as docs/deploying.md types them —
against the fake replica set. After the join the root holds `charged`, taken from the payment region's
result."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from harel.model import ExecutionStatus
from harel.store.mongo import MongoStore
from tests.documents import file_blocks
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.wire.processes import HAREL, clean_environment

pytestmark = pytest.mark.wire


def project(tmp_path: Path) -> Path:
    """The example app's files (the code blocks that open with `# path/of/the/file`) where they go."""
    for path, text in file_blocks().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


def environment(directory: Path, url: str) -> dict[str, str]:
    """What the shell of the docs has: the URL exported, the project importable."""
    return {**clean_environment(), "PYTHONPATH": str(directory), "HAREL_MONGO_URL": url}


def harel(directory: Path, url: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HAREL, *arguments],
        cwd=directory,
        env=environment(directory, url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_readme_order_example_shows_charged_at_the_root_after_the_join(
    fake_rs: FakeDeployment, tmp_path: Path
) -> None:
    directory = project(tmp_path)
    url = fake_rs.url
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [HAREL, "worker", "--app", "orders.app:app", "--http-port", "0", "--drain-seconds", "2"],
        cwd=directory,
        env=environment(directory, url),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while (
            started := harel(
                directory, url, "start", "order", "--context", '{"total": 12}', "--id", "order-42"
            )
        ).returncode:
            assert time.monotonic() < deadline, f"harel start kept failing: {started.stderr}"
            time.sleep(0.3)  # until the worker has published the chart
        assert started.stdout.startswith("order-42 started"), started.stdout
        sent = harel(directory, url, "send", "order-42", "approve")
        assert sent.returncode == 0, sent.stderr

        with MongoClient(url, **CLIENT_OPTIONS) as client:
            store = MongoStore(client)
            deadline = time.monotonic() + 30
            while (root := store.load("order-42")) is None or root.status is ExecutionStatus.RUNNING:
                assert time.monotonic() < deadline, f"order-42 did not finish: {root}"
                time.sleep(0.2)
        assert root.status is ExecutionStatus.COMPLETED
        assert root.configuration == ["delivered"]
        assert root.context["charged"] is True
        payment = root.context["regions"]["payment"]
        assert (payment["state"], payment["status"], payment["result"]) == ("paid", "completed", "charged")
        assert root.context["regions"]["shipping"]["state"] == "shipped"
    finally:
        worker.terminate()
        worker.wait(timeout=15)
        log.close()
