"""``GET /v1/jobs/{id}?wait=S``: answer as soon as the job is finished, woken by PostgreSQL.

One connection per API process listens (``api/notifications.py``); a finished job's id wakes
the requests waiting for it, which read the job again. No request polls while that connection is
up: many waiters cost one connection and no statements. While it is down, waiters read their
job once a second instead. Waiting requests do not count against load shedding (they hold no
database connection while they wait), so they have their own bound: past ``max_waiters`` in a
process a wait answers ``503 overloaded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable

from jobrelay.core.jobs import Job
from jobrelay.core.states import TERMINAL_STATES

MAX_WAIT_SECONDS = 60.0
MAX_WAITERS = 1000
POLL_SECONDS = 1.0  # while notifications cannot be relied on


class TooManyWaiters(Exception):
    """The process already holds ``max_waiters`` waiting requests."""


class FinishWaiters:
    def __init__(self, max_waiters: int = MAX_WAITERS) -> None:
        self.max_waiters = max_waiters
        self.listening = False
        self._waiting: dict[uuid.UUID, set[asyncio.Future[None]]] = {}
        self._count = 0

    def finished(self, payload: str) -> None:
        """A notification: the job with this id is terminal now."""
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        for future in self._waiting.get(job_id, ()):
            if not future.done():
                future.set_result(None)

    def wake_all(self) -> None:
        """After a reconnect anything may have been missed: every waiter reads its job again."""
        for job_id in list(self._waiting):
            self.finished(str(job_id))

    def set_listening(self, listening: bool) -> None:
        self.listening = listening

    async def wait(
        self, job: Job, seconds: float, read: Callable[[], Awaitable[Job | None]]
    ) -> Job:
        """The job once terminal, or as it is after ``seconds``. ``read`` reads it again."""
        if job.state in TERMINAL_STATES:
            return job
        if self._count >= self.max_waiters:
            raise TooManyWaiters()
        deadline = time.monotonic() + min(seconds, MAX_WAIT_SECONDS)
        self._count += 1
        try:
            while True:
                # Registered before the read: a notification between the two is not missed.
                future = asyncio.get_running_loop().create_future()
                self._waiting.setdefault(job.id, set()).add(future)
                try:
                    job = await read() or job
                    left = deadline - time.monotonic()
                    if job.state in TERMINAL_STATES or left <= 0:
                        return job
                    timeout = left if self.listening else min(left, POLL_SECONDS)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(future, timeout)
                finally:
                    self._forget(job.id, future)
        finally:
            self._count -= 1

    def _forget(self, job_id: uuid.UUID, future: asyncio.Future[None]) -> None:
        futures = self._waiting.get(job_id)
        if futures is not None:
            futures.discard(future)
            if not futures:
                del self._waiting[job_id]
