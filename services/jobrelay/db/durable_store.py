"""``core.durable.DurableStore`` on PostgreSQL (docs/durable-execution.md): a handler's steps,
sleeps, waits for a signal and child jobs, each written under the attempt's lease token by the
named statements of ``db/sql/durable.sql``.

A step is one statement, shared by the steps of every job in flight (``db/group_commit.py``); a
sleep is one statement. A wait for a signal or a child is one transaction that takes the job's
row first, then looks (a new statement, a fresh snapshot), so a signal sent or a child finished
at the same instant is either seen here or wakes the job once it sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from jobrelay.core.durable import (
    LEASE_GONE,
    Asleep,
    ChildEnded,
    ChildRequest,
    ChildStarted,
    Fence,
    Gone,
    SignalTaken,
    StepKind,
    StepRecord,
    StepStatus,
    TimedOut,
)
from jobrelay.core.errors import PermanentError
from jobrelay.core.idempotency import check_submission
from jobrelay.core.jobs import Flow
from jobrelay.core.states import JobState
from jobrelay.db import queries as q
from jobrelay.db.accept import accept_steps, drive_async, rows_on
from jobrelay.db.group_commit import GroupCommit
from jobrelay.db.store import Store

# What ``context.run_child(..., **options)`` may set on the child, as a submission would.
CHILD_OPTIONS = frozenset(
    {"priority", "max_attempts", "delay_seconds", "run_at", "concurrency_key"}
)


@dataclass(frozen=True)
class _StepRequest:
    fence: Fence
    name: str
    value: Any
    value_json: str


def _recorded(request: _StepRequest, row: Any) -> StepRecord | Gone:
    """A request's record: written now (the value asked), or by its own earlier try whose
    answer was lost (the value that try recorded); None: not written, the lease is gone."""
    if row is None:
        return LEASE_GONE
    value = row.value if row.earlier else request.value
    return StepRecord(request.name, StepKind.STEP, row.attempt, row.at, StepStatus.DONE, value)


class PgDurableStore:
    """Steps go in groups of at most ``GROUP_SIZE``, one group in flight."""

    GROUP_SIZE = 64

    def __init__(self, store: Store) -> None:
        self.store = store
        self._steps = GroupCommit(self._record_group, max_size=self.GROUP_SIZE)

    async def close(self) -> None:
        """Wait for the group in flight (its answers may be committed steps)."""
        await self._steps.close()

    # --- steps ------------------------------------------------------------------------------

    async def record_step(self, fence: Fence, name: str, value: Any) -> StepRecord | Gone:
        return await self._steps.submit(_StepRequest(fence, name, value, json.dumps(value)))

    async def _record_group(self, requests: Sequence[_StepRequest]) -> list[StepRecord | Gone]:
        """One statement for the group (RECORD_STEPS); each request gets its row (written now,
        or by its own earlier try whose answer was lost), else ``LEASE_GONE``."""
        rows = await self.store.fetch_all(
            q.RECORD_STEPS,
            ids=[r.fence.job_id for r in requests],
            lease_tokens=[r.fence.lease_token for r in requests],
            attempts=[r.fence.attempt for r in requests],
            names=[r.name for r in requests],
            step_values=[r.value_json for r in requests],
        )
        found = {(row.job_id, row.name, row.attempt): row for row in rows}
        return [
            _recorded(r, found.get((r.fence.job_id, r.name, r.fence.attempt))) for r in requests
        ]

    # --- sleeps -----------------------------------------------------------------------------

    async def sleep(
        self, fence: Fence, name: str, *, seconds: float | None, until: datetime | None
    ) -> Asleep | Gone:
        row = await self.store.fetch_one(
            q.SLEEP_JOB,
            **_sleep_params(fence, name, StepKind.SLEEP, seconds=seconds, until=until),
        )
        return _asleep(row, None)

    # --- signals ----------------------------------------------------------------------------

    async def wait_for_signal(
        self, fence: Fence, name: str, signal: str, timeout_seconds: float | None
    ) -> SignalTaken | TimedOut | Asleep | Gone:
        async with self.store.transaction() as connection:
            locked = await _first(connection, q.LOCK_FOR_WAIT, _fenced(fence))
            if locked is None:
                return LEASE_GONE
            recorded = await _first(
                connection, q.STEP_OF_JOB, {"job_id": fence.job_id, "name": name}
            )
            if recorded is not None and recorded.status == StepStatus.DONE:
                return SignalTaken(recorded.value)  # taken by an earlier try whose answer was lost
            if recorded is not None and recorded.status == StepStatus.TIMED_OUT:
                return TimedOut()  # a signal sent since is kept, never returned to this wait
            step = {"job_id": fence.job_id, "name": name, "attempt": fence.attempt}
            taken = await _first(connection, q.TAKE_SIGNAL, {**step, "signal": signal})
            if taken is not None:
                return SignalTaken(taken.value)
            if _deadline_passed(recorded, timeout_seconds, locked.database_now):
                await connection.execute(q.TIME_OUT_WAIT, step)
                return TimedOut()
            waiting_on = {"signal": signal}
            params = _sleep_params(
                fence, name, StepKind.SIGNAL, seconds=timeout_seconds, waiting_on=waiting_on
            )
            return await _sleep_in(connection, params, waiting_on)

    # --- children ---------------------------------------------------------------------------

    async def child(
        self, fence: Fence, name: str, request: ChildRequest, *, wait: bool
    ) -> ChildEnded | ChildStarted | Asleep | Gone:
        recorded = await self.store.fetch_one(q.STEP_OF_JOB, job_id=fence.job_id, name=name)
        child_id: uuid.UUID | None = None if recorded is None else recorded.child_id
        if child_id is None:
            child_id = await self._submit(fence, request)
            if child_id is None:
                return LEASE_GONE
        async with self.store.transaction() as connection:
            if await _first(connection, q.LOCK_FOR_WAIT, _fenced(fence)) is None:
                return LEASE_GONE
            if not wait:
                await _record_child(connection, fence, name, child_id, StepStatus.DONE)
                return ChildStarted(child_id)
            if recorded is not None and recorded.status == StepStatus.DONE:
                return ChildEnded(child_id, JobState.SUCCEEDED, recorded.value)
            return await self._child_or_sleep(connection, fence, name, child_id)

    async def _submit(self, fence: Fence, request: ChildRequest) -> uuid.UUID | None:
        """Accept the child like any job of the parent's client (db/accept.py) and name its
        parent, in a transaction of its own, before the parent's row is taken: an accept whose
        key's job is being finished waits for that finish, which waits for the parent's row (to
        wake it), so holding that row here could deadlock. None: the lease is gone. A child
        accepted for an attempt that then loses its lease is the job the next attempt submits
        (the same key)."""
        submission = _child_submission(request)
        async with self.store.transaction() as connection:
            parent = await _first(connection, q.FENCED_JOB, _fenced(fence))
            if parent is None:
                return None
            submission = dataclasses.replace(submission, traceparent=parent.traceparent)
            accepted = await drive_async(
                accept_steps(parent.client_id, submission), rows_on(connection)
            )
            if accepted.conflict:
                raise PermanentError(
                    f"child key {request.key[:100]!r} is held by a job of another type or payload",
                    code="invalid_child",
                )
            child = {"child_id": accepted.job.id, "parent_id": fence.job_id}
            await connection.execute(q.ADOPT_CHILD, child)
            return accepted.job.id

    async def _child_or_sleep(
        self, connection: AsyncConnection, fence: Fence, name: str, child_id: uuid.UUID
    ) -> ChildEnded | Asleep | Gone:
        """The child's end, read after the parent's row was taken (its success recorded as the
        step's value; a failure is not, so a replayed child can still succeed); else the
        parent sleeps until the statement that ends the child wakes it."""
        end = await _first(connection, q.CHILD_END, {"child_id": child_id})
        if end is None:  # retention deleted it: it can no longer give a result
            return ChildEnded(child_id, "deleted", error_code="child_deleted")
        if end.state == JobState.SUCCEEDED:
            await _record_child(
                connection, fence, name, child_id, StepStatus.DONE, json.dumps(end.result)
            )
            return ChildEnded(child_id, end.state, end.result)
        if end.state in (JobState.QUARANTINED, JobState.CANCELLED):
            await _record_child(connection, fence, name, child_id, StepStatus.WAITING)
            return ChildEnded(child_id, end.state, error_code=end.last_error_code)
        waiting_on = {"child": str(child_id)}
        params = _sleep_params(
            fence, name, StepKind.CHILD, waiting_on=waiting_on, child_id=child_id
        )
        return await _sleep_in(connection, params, waiting_on)


# --- helpers ---------------------------------------------------------------------------------


def _fenced(fence: Fence) -> dict[str, Any]:
    return {"job_id": fence.job_id, "lease_token": fence.lease_token}


async def _first(connection: AsyncConnection, statement: TextClause, params: dict[str, Any]) -> Any:
    return (await connection.execute(statement, params)).first()


def _sleep_params(
    fence: Fence,
    name: str,
    kind: StepKind,
    *,
    seconds: float | None = None,
    until: datetime | None = None,
    waiting_on: Mapping[str, str] | None = None,
    child_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """SLEEP_JOB's parameters: a sleep is recorded done (its value is its wake time), a wait
    is recorded waiting until its signal or child comes."""
    status = StepStatus.DONE if kind is StepKind.SLEEP else StepStatus.WAITING
    return {
        **_fenced(fence),
        "name": name,
        "kind": kind.value,
        "status": status.value,
        "seconds": seconds,
        "until": until,
        "waiting_on": None if waiting_on is None else json.dumps(dict(waiting_on)),
        "child_id": child_id,
    }


async def _sleep_in(
    connection: AsyncConnection, params: dict[str, Any], waiting_on: Mapping[str, str]
) -> Asleep | Gone:
    row = await _first(connection, q.SLEEP_JOB, params)
    return _asleep(row, dict(waiting_on))


def _asleep(row: Any, waiting_on: dict[str, str] | None) -> Asleep | Gone:
    """SLEEP_JOB's answer: asleep; or not, its cancel pending; or not, the lease gone."""
    if row is None:
        return LEASE_GONE
    return Gone.CANCEL if row.cancel_requested else Asleep(row.wake_at, waiting_on)


def _deadline_passed(recorded: Any, timeout_seconds: float | None, now: datetime) -> bool:
    """A wait's recorded deadline has come (judged by the database's clock); a first wait
    with no time at all (``timeout=0``) times out at once."""
    if recorded is None:
        return timeout_seconds is not None and timeout_seconds <= 0
    return recorded.wake_at is not None and recorded.wake_at <= now


def _child_submission(request: ChildRequest) -> Any:
    unknown = sorted(set(request.options) - CHILD_OPTIONS)
    if unknown:
        raise PermanentError(
            f"a child takes the options {sorted(CHILD_OPTIONS)}, not {unknown}",
            code="invalid_child",
        )
    options = request.options
    try:
        return check_submission(
            request.type,
            request.payload,
            request.key,
            options.get("run_at"),
            options.get("delay_seconds"),
            options.get("max_attempts"),
            None,
            Flow(priority=options.get("priority"), concurrency_key=options.get("concurrency_key")),
        )
    except (TypeError, ValueError) as error:
        raise PermanentError(f"child job not accepted: {error}", code="invalid_child") from None


async def _record_child(
    connection: AsyncConnection,
    fence: Fence,
    name: str,
    child_id: uuid.UUID,
    status: StepStatus,
    value_json: str | None = None,
) -> None:
    await connection.execute(
        q.RECORD_CHILD,
        {
            "job_id": fence.job_id,
            "name": name,
            "status": status.value,
            "attempt": fence.attempt,
            "step_value": value_json,
            "child_id": child_id,
        },
    )
