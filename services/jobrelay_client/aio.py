"""``AsyncClient``: the API from asyncio code. Each method does what ``Client``'s of the same
name does (see there), awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from jobrelay_client import _calls
from jobrelay_client._calls import Attempts, Call, ClientBase, JobId, Outcome, Wait, WorkflowId
from jobrelay_client.errors import ApiError
from jobrelay_client.flow import Flow, PolicyOptions
from jobrelay_client.models import Job, Signal, WorkflowView
from jobrelay_client.workflows import OnFailure, Workflow

T = TypeVar("T")


class AsyncClient(ClientBase[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """``Client`` for asyncio: the same arguments, with an ``httpx.AsyncBaseTransport`` as
    ``transport``; ``async with``, or ``await close()``."""

    def _open(
        self, transport: httpx.AsyncBaseTransport | None, **options: Any
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, **options)

    _sleep: Callable[[float], Awaitable[Any]] = staticmethod(asyncio.sleep)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    aclose = close  # contextlib.aclosing

    async def submit(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        max_attempts: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> Job:
        call = _calls.submit(
            type,
            payload,
            key=key,
            max_attempts=max_attempts,
            run_at=run_at,
            delay=delay,
            flow=Flow(priority, concurrency_key, unique_key, **policies),
        )
        return await self._run(call)

    async def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Job | ApiError]:
        return await self._run(_calls.submit_many(jobs))

    # The name of the argument is the API's (Client.wait); it bounds the whole wait.
    async def wait(self, id: JobId, timeout: float) -> Job:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while True:
            job = await self._run(_calls.wait_step(id, deadline))
            if (done := _calls.waited(job, deadline, id)) is not None:
                return done

    async def get(self, id: JobId, *, steps: str | None = None) -> Job:
        return await self._run(_calls.get(id, steps=steps))

    async def signal(
        self, id: JobId, name: str, value: Any, *, idempotency_key: str | None = None
    ) -> Signal:
        return await self._run(_calls.signal(id, name, value, key=idempotency_key))

    async def cancel(self, id: JobId) -> Job:
        return await self._run(_calls.cancel(id))

    async def jobs(
        self, state: str | None = None, type: str | None = None, *, page_size: int | None = None
    ) -> AsyncIterator[Job]:
        cursor: str | None = None
        while True:
            page = await self._run(_calls.page(state, type, page_size, cursor))
            for job in page.items:
                yield job
            if (cursor := page.next_cursor) is None:
                return

    async def submit_workflow(
        self,
        workflow: Workflow,
        *,
        key: str | None = None,
        on_failure: OnFailure | str = OnFailure.CANCEL_DEPENDENTS,
    ) -> WorkflowView:
        return await self._run(_calls.submit_workflow(workflow, key=key, on_failure=on_failure))

    async def get_workflow(self, id: WorkflowId) -> WorkflowView:
        return await self._run(_calls.get_workflow(id))

    async def cancel_workflow(self, id: WorkflowId) -> WorkflowView:
        return await self._run(_calls.cancel_workflow(id))

    async def _run(self, call: Call[T]) -> T:
        attempts = Attempts(call, self._policy)
        while True:
            settled = attempts.settle(await self._send(call))
            if not isinstance(settled, Wait):
                return settled
            await self._sleep(settled.seconds)

    async def _send(self, call: Call[Any]) -> Outcome:
        try:
            return await self._http.send(call.request(self._http))
        except httpx.TransportError as error:
            return error
