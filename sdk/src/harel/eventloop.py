"""The worker process's event loop: where `async def` actions and guards run.

`interpreter.step` is synchronous and runs on a consumer thread. An async action or guard is run on one
asyncio loop that lives on a thread of its own, while the consumer waits for its result, at most `timeout`
seconds (a call that takes longer is cancelled and fails the attempt with AsyncCallTimeout, like any action
that raises).

There is one loop per process (`PROCESS_LOOP`), shared by every worker in it: objects an app binds to a
loop (a client session, a lock) work from every action. Each worker acquires it when it starts and releases
it when it stops; the loop runs while at least one worker holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any

from harel.errors import AsyncCallTimeout, AsyncUnavailable

log = logging.getLogger("harel.eventloop")

_STOP_SECONDS = 5.0


class EventLoopThread:
    """An asyncio loop on a daemon thread, started by the first `acquire` and stopped by the last
    `release`."""

    def __init__(self, name: str = "harel-event-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._holders = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._loop is not None

    def acquire(self) -> None:
        with self._lock:
            self._holders += 1
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=self._name, daemon=True)
                self._thread.start()

    def release(self) -> None:
        with self._lock:
            self._holders = max(0, self._holders - 1)
            if self._holders or self._loop is None:
                return
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        with contextlib.suppress(TimeoutError):  # a call blocking the loop: it is left to the daemon thread
            asyncio.run_coroutine_threadsafe(_cancel_others(), loop).result(_STOP_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        assert thread is not None
        thread.join(_STOP_SECONDS)
        if not thread.is_alive():
            loop.close()

    def run(self, coroutine: Coroutine[Any, Any, Any], what: str, timeout: float) -> Any:
        """Run `coroutine` on the loop and return its result (or raise what it raised); AsyncCallTimeout
        after `timeout` seconds, the coroutine cancelled. `what` names the call in errors."""
        loop = self._loop
        if loop is None:
            coroutine.close()
            raise AsyncUnavailable(what)
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            if future.done():  # the coroutine raised TimeoutError itself
                raise
            future.cancel()
            raise AsyncCallTimeout(what, timeout) from None


async def _cancel_others() -> None:
    """Cancel the tasks still on the loop (calls whose consumer gave up), and let them unwind."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    with contextlib.suppress(Exception):
        await asyncio.gather(*tasks, return_exceptions=True)
    if tasks:
        log.info("async calls cancelled at stop", extra={"count": len(tasks)})


PROCESS_LOOP = EventLoopThread()
