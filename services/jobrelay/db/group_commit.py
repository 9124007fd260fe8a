"""Group commit: calls that arrive together run as one statement, each still answered alone.

A consumer with many deliveries in flight would otherwise pay a round trip, a statement and a
commit (an fsync) per claim and per completion. ``GroupCommit`` gathers the requests made in the
same turn of the event loop, and every request made while earlier groups are still running,
into one group for one statement (``run``), up to ``max_size`` requests. Under a light load a
request runs at once, alone: batching adds no latency where nothing waits to share the trip.

``run`` answers each request of a group by its position. One request's trouble never touches its
neighbours: a row the statement did not change (a stale lease, say) is answered as such and
looked into by that request's caller alone. Only a failure of the whole statement (the database
unreachable) fails every request of its group, and each caller then retries on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Request = TypeVar("Request")
Answer = TypeVar("Answer")


class GroupCommit(Generic[Request, Answer]):
    def __init__(
        self,
        run: Callable[[Sequence[Request]], Awaitable[Sequence[Answer]]],
        *,
        max_size: int = 64,
        max_running: int = 1,
    ) -> None:
        """``max_running``: groups in flight at once (each holds a pooled connection); requests
        made while that many run wait and form the next group. One is the default: a second
        group in flight halves the groups (docs/operating.md, "Running jobs: consumers")."""
        if max_size < 1 or max_running < 1:
            raise ValueError("a group holds at least one request, and at least one group runs")
        self._run = run
        self.max_size = max_size
        self.max_running = max_running
        self._waiting: list[tuple[Request, asyncio.Future[Answer]]] = []
        self._running = 0
        self._scheduled: asyncio.Handle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.groups = 0  # how many statements ran, for tests

    async def submit(self, request: Request) -> Answer:
        """Run ``request`` in the next group and return its answer (or raise its group's
        error). A caller cancelled while its group runs does not stop the group."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        if len(self._waiting) >= self.max_size:
            self._start_groups()
        elif self._scheduled is None:  # the others of this turn of the loop join it
            self._scheduled = asyncio.get_running_loop().call_soon(self._start_groups)
        return await future

    def _start_groups(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        # A caller cancelled before its group started is not run for: a claim nobody waits for
        # would hold the job until its lease expired.
        self._waiting = [
            (request, future) for request, future in self._waiting if not future.done()
        ]
        while self._waiting and self._running < self.max_running:
            group, self._waiting = self._waiting[: self.max_size], self._waiting[self.max_size :]
            self._running += 1
            task = asyncio.create_task(self._run_group(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_group(self, group: list[tuple[Request, asyncio.Future[Answer]]]) -> None:
        try:
            answers = await self._run([request for request, _ in group])
            if len(answers) != len(group):
                raise RuntimeError(f"a group of {len(group)} got {len(answers)} answers")
        except asyncio.CancelledError:  # the loop is closing: every waiting caller hears it
            for _, future in group:
                future.cancel()
            raise
        except Exception as error:  # the whole statement failed: every caller retries alone
            for _, future in group:
                if not future.done():
                    future.set_exception(error)
        else:
            for (_, future), answer in zip(group, answers, strict=True):
                if not future.done():  # its caller was cancelled
                    future.set_result(answer)
        finally:
            self._running -= 1
            self.groups += 1
            if self._waiting and self._scheduled is None:
                self._start_groups()

    async def close(self) -> None:
        """Wait for the groups in flight (their answers may be a committed write)."""
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(set(self._tasks))
