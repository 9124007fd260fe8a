"""The two sides of the execution store's contract test
(``tests/integration/test_execution_store_contract.py``): the in-memory store of
``tests/support/consumer_fakes.py`` and ``db/execution_store.py::PgExecutionStore`` on a real
migrated database, each behind the same small harness.

A scenario sets a job up, drives the store through ``port`` (the ``ExecutionStore`` port, and
nothing else), and reads what happened: the job, its journal, its outbox rows, its result. What
the port does not cover (a client's cancel, an operator's pause, a runtime limit, a lease that
ran out) each side does its own way: the fake through its test hooks, PostgreSQL through the
stores the API and the CLI use, or a column written by ``tests/support/factories.py``.

Times: the fake runs on a hand-driven clock, PostgreSQL on its own; ``now()`` reads each side's
clock, so a scenario brackets an operation with two reads and checks the times it wrote fall
between them (the same instant on the fake).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import func, text

from jobrelay.core.execution import ExecutionStore
from jobrelay.core.flow import Limit
from jobrelay.core.jobs import Job
from jobrelay.core.registry import Registry
from jobrelay.core.states import JobEvent, JobState
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.flow_store import FlowStore
from jobrelay.db.store import Store
from tests.support import factories
from tests.support.consumer_fakes import InMemoryExecutionStore
from tests.support.worker_fakes import Clock

# A running job's lease, as the sides set it up: live for a minute, or expired a minute ago.
LEASE_SECONDS = 60.0


class Side(Protocol):
    """One store under the contract, with what a scenario needs around it."""

    name: str
    port: ExecutionStore

    async def add(
        self,
        job_type: str = "demo.sleep",
        *,
        state: JobState = JobState.QUEUED,
        attempts: int | None = None,
        max_attempts: int = 3,
        due_in: float = 0.0,
        lease_token: uuid.UUID | None = None,
        lease_expired: bool = False,
        concurrency_key: str | None = None,
        last_error_code: str | None = None,
    ) -> uuid.UUID:
        """A job in ``state`` (attempts: 1 once claimed, else 0, unless given), due in
        ``due_in`` seconds; running: under ``lease_token`` (a new one unless given), live or
        expired."""
        ...

    async def job(self, job_id: uuid.UUID) -> Job: ...

    async def events(self, job_id: uuid.UUID) -> list[JobEvent]:
        """The job's journal, oldest first."""
        ...

    async def outbox(self, job_id: uuid.UUID) -> list[datetime]:
        """When each outbox row of the job is due, oldest row first."""
        ...

    async def result(self, job_id: uuid.UUID) -> tuple[Any, int] | None:
        """The job's stored result and the attempt that stored it; None: none."""
        ...

    async def now(self) -> datetime: ...

    async def request_cancel(self, job_id: uuid.UUID) -> None:
        """Its client asks to cancel the running job (``POST /v1/jobs/{id}/cancel``)."""
        ...

    async def pause(self) -> None:
        """An operator pauses the consumer's queue (``default``)."""
        ...

    async def resume(self) -> None: ...

    async def set_limit(self, job_type: str, limit: Limit) -> None:
        """A runtime limit of ``job_type`` (``jobrelay limits set``)."""
        ...

    async def close(self) -> None: ...


def _default_attempts(state: JobState) -> int:
    return 0 if state in (JobState.QUEUED, JobState.CANCELLED, JobState.WAITING) else 1


class MemorySide:
    name = "memory"

    def __init__(self) -> None:
        self.clock = Clock()
        self.store = InMemoryExecutionStore(self.clock)
        self.port: ExecutionStore = self.store

    async def add(
        self,
        job_type: str = "demo.sleep",
        *,
        state: JobState = JobState.QUEUED,
        attempts: int | None = None,
        max_attempts: int = 3,
        due_in: float = 0.0,
        lease_token: uuid.UUID | None = None,
        lease_expired: bool = False,
        concurrency_key: str | None = None,
        last_error_code: str | None = None,
    ) -> uuid.UUID:
        now = self.clock()
        job = self.store.add(
            job_type,
            {"seconds": 0},
            state=state,
            attempts=_default_attempts(state) if attempts is None else attempts,
            max_attempts=max_attempts,
            concurrency_key=concurrency_key,
        )
        changes: dict[str, Any] = {
            "available_at": now + timedelta(seconds=due_in),
            "last_error_code": last_error_code,
        }
        if state is JobState.RUNNING:
            lease = -LEASE_SECONDS if lease_expired else LEASE_SECONDS
            changes["lease_token"] = lease_token or uuid.uuid4()
            changes["lease_until"] = now + timedelta(seconds=lease)
        self.store.jobs[job.id] = dataclasses.replace(job, **changes)
        return job.id

    async def job(self, job_id: uuid.UUID) -> Job:
        return self.store.jobs[job_id]

    async def events(self, job_id: uuid.UUID) -> list[JobEvent]:
        return self.store.events(job_id)

    async def outbox(self, job_id: uuid.UUID) -> list[datetime]:
        return [due for row_job, due in self.store.outbox if row_job == job_id]

    async def result(self, job_id: uuid.UUID) -> tuple[Any, int] | None:
        stored = self.store.results.get(job_id)
        return None if stored is None else (stored.result, stored.attempt)

    async def now(self) -> datetime:
        return self.clock()

    async def request_cancel(self, job_id: uuid.UUID) -> None:
        assert self.store.request_cancel(job_id)

    async def pause(self) -> None:
        self.store.paused_queues.add(self.store.queue)

    async def resume(self) -> None:
        self.store.paused_queues.discard(self.store.queue)

    async def set_limit(self, job_type: str, limit: Limit) -> None:
        self.store.runtime_limits[job_type] = limit

    async def close(self) -> None:
        pass


class PostgresSide:
    name = "postgresql"

    def __init__(self, store: Store) -> None:
        self.store = store
        self.executions = PgExecutionStore(store)
        self.port: ExecutionStore = self.executions
        self.flow = FlowStore(store)

    async def add(
        self,
        job_type: str = "demo.sleep",
        *,
        state: JobState = JobState.QUEUED,
        attempts: int | None = None,
        max_attempts: int = 3,
        due_in: float = 0.0,
        lease_token: uuid.UUID | None = None,
        lease_expired: bool = False,
        concurrency_key: str | None = None,
        last_error_code: str | None = None,
    ) -> uuid.UUID:
        values: dict[str, Any] = {
            "attempts": _default_attempts(state) if attempts is None else attempts,
            "available_at": func.now() + timedelta(seconds=due_in),
            "concurrency_key": concurrency_key,
        }
        if last_error_code is not None:
            values["last_error_code"] = last_error_code
        if state is JobState.RUNNING:
            lease = -LEASE_SECONDS if lease_expired else LEASE_SECONDS
            values["lease_token"] = lease_token or uuid.uuid4()
            values["lease_until"] = func.now() + timedelta(seconds=lease)
        made = await factories.job(
            self.store, state=state, job_type=job_type, max_attempts=max_attempts, **values
        )
        return uuid.UUID(str(made.id))

    async def job(self, job_id: uuid.UUID) -> Job:
        found = await self.store.get_job(job_id)
        assert found is not None
        return found

    async def events(self, job_id: uuid.UUID) -> list[JobEvent]:
        # What the statements wrote: a job's journal (job_journal) starts with its `received`
        # entry, told by its row, which the fake's ``add`` has no counterpart of.
        journal = await self.store.job_events(job_id)
        return [JobEvent(entry.event) for entry in journal if entry.event != JobEvent.RECEIVED]

    async def outbox(self, job_id: uuid.UUID) -> list[datetime]:
        rows = await self._rows(
            "SELECT available_at FROM jobrelay.outbox WHERE job_id = :id ORDER BY id", id=job_id
        )
        return [row.available_at for row in rows]

    async def result(self, job_id: uuid.UUID) -> tuple[Any, int] | None:
        rows = await self._rows(
            "SELECT result, attempt FROM jobrelay.job_results WHERE job_id = :id", id=job_id
        )
        return None if not rows else (rows[0].result, rows[0].attempt)

    async def now(self) -> datetime:
        # The clock each statement reads for itself, as the claims' and holds' times are.
        [row] = await self._rows("SELECT clock_timestamp() AS now")
        now: datetime = row.now
        return now

    async def request_cancel(self, job_id: uuid.UUID) -> None:
        answer = await self.store.cancel_job(job_id, client_id=None, detail="by its client")
        assert answer is not None

    async def pause(self) -> None:
        assert await self.flow.pause_queue("default", by="the contract test")

    async def resume(self) -> None:
        assert await self.flow.resume_queue("default")

    async def set_limit(self, job_type: str, limit: Limit) -> None:
        await self.flow.set_limit(job_type, limit, registry=Registry())

    async def close(self) -> None:
        await self.executions.close()  # the groups in flight

    async def _rows(self, sql: str, **params: Any) -> list[Any]:
        async with self.store.transaction() as connection:
            return list((await connection.execute(text(sql), params)).all())
