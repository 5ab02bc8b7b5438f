"""The embedded backend under threads: concurrent writers racing on one execution serialize through the CAS.

`harel demo`, `harel smoke` on mongomock:// and the in-process tests run several workers, each with its
consumers, relay and sweep threads, on one mongomock. A server gives each command its atomicity; here the
embedded client's lock must (plain mongomock lets two threads win one version). Every racing step must
take effect exactly once: its state change, its emitted event and its dedupe mark.
"""

from __future__ import annotations

import threading
import time

import pytest

from harel.errors import StoreConflict
from harel.model import Event, Execution
from harel.store.mongo import MongoStore
from harel_dev.embedded import EmbeddedClient

WRITERS = 4
STEPS = 50


@pytest.mark.usefixtures("eager_thread_switches")
def test_racing_writers_each_take_effect_once() -> None:
    store = MongoStore(EmbeddedClient())
    store.commit(Execution(id="shared", definition_id="counter", definition_version=1, context={"n": 0}))
    start = threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        start.wait()
        for step in range(STEPS):
            event_id = f"w{number}-{step}"
            while True:
                exe, seen = store.load_for_event("shared", event_id)
                assert exe is not None and not seen
                exe.context["n"] += 1
                time.sleep(0)  # let another writer in between the load and the commit
                try:
                    store.commit(
                        exe,
                        emits=[(None, Event(id=f"{event_id}-out", name="tick"))],
                        processed_event_id=event_id,
                    )
                    break
                except StoreConflict:
                    continue

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    final = store.load("shared")
    assert final is not None
    assert final.context["n"] == WRITERS * STEPS
    assert final.version == 1 + WRITERS * STEPS
    outbox = store.pending_outbox(limit=WRITERS * STEPS + 1)
    assert len(outbox) == WRITERS * STEPS
    assert len({entry.seq for entry in outbox}) == WRITERS * STEPS
    assert all(store.is_processed("shared", f"w{n}-{s}") for n in range(WRITERS) for s in range(STEPS))
