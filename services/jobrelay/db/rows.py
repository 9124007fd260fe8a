"""Rows to the core's values: one mapping per value, shared by every store."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from jobrelay.core.durable import StepKind, StepRecord, StepStatus
from jobrelay.core.flow import Limit, Rate, Throttle
from jobrelay.core.jobs import Job, JournalEntry
from jobrelay.core.states import JobState


def limit_from_row(row: Any) -> Limit:
    """The limit a ``type_limits`` row sets (its columns, under the same names in any row)."""
    rate = None if row.rate_count is None else Rate(row.rate_count, row.rate_period_seconds)
    return Limit(concurrency=row.concurrency, rate=rate, per_key=bool(row.per_key))


def throttle_from_row(row: Any) -> Throttle | None:
    """The throttle a ``type_limits`` or ``job_types`` row sets (migration 0019); None: none."""
    if row.throttle_count is None:
        return None
    return Throttle(row.throttle_count, row.throttle_period_seconds)


def job_from_row(row: Any) -> Job:
    """A job from a SQLAlchemy row, a psycopg named tuple or a mapping."""
    data: Mapping[str, Any]
    if isinstance(row, Row):
        data = dict(row._mapping)
    elif hasattr(row, "_asdict"):
        data = row._asdict()
    else:
        data = row
    return Job(
        id=data["id"],
        client_id=data["client_id"],
        idempotency_key=data["idempotency_key"],
        type=data["type"],
        payload=data["payload"],
        state=JobState(data["state"]),
        attempts=data["attempts"],
        max_attempts=data["max_attempts"],
        available_at=data["available_at"],
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        finished_at=data["finished_at"],
        lease_token=data["lease_token"],
        lease_until=data["lease_until"],
        last_error_code=data["last_error_code"],
        last_error=data["last_error"],
        result=data.get("result"),
        run_at=data.get("run_at"),
        cancel_requested_at=data.get("cancel_requested_at"),
        traceparent=data.get("traceparent"),
        priority=data.get("priority") or 0,
        concurrency_key=data.get("concurrency_key"),
        unique_key=data.get("unique_key"),
        workflow_id=data.get("workflow_id"),
        workflow_ref=data.get("workflow_ref"),
        progress=data.get("progress"),
        replayed_attempts=data.get("replayed_attempts") or 0,
        no_consumer=data.get("no_consumer"),
        wake_at=data.get("wake_at"),
        waiting_for=data.get("waiting_on"),
        parent_job_id=data.get("parent_job_id"),
        sequence_key=data.get("sequence_key"),
        blocked_by=data.get("blocked_by"),
        steps=None if data.get("steps") is None else steps_from_json(data["steps"]),
    )


def steps_from_json(rows: list[Mapping[str, Any]]) -> tuple[StepRecord, ...]:
    """A job's ``job_steps`` as a statement aggregates them (``jsonb_agg`` of the rows, in the
    order they were recorded): the claim's column ``steps``, the job view's."""
    return tuple(
        StepRecord(
            name=row["name"],
            kind=StepKind(row["kind"]),
            attempt=row["attempt"],
            at=_timestamp(row["at"]),
            status=StepStatus(row["status"]),
            value=row.get("value"),
            wake_at=None if row.get("wake_at") is None else _timestamp(row["wake_at"]),
            child_id=None if row.get("child_id") is None else uuid.UUID(row["child_id"]),
        )
        for row in rows
    )


def _timestamp(text: str) -> datetime:
    """A timestamptz as jsonb writes it (ISO 8601 with its offset)."""
    return datetime.fromisoformat(text)


def journal_entry(row: Any) -> JournalEntry:
    return JournalEntry(row.at, row.event, row.attempt, row.detail, row.error)
