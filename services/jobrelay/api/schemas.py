"""Request and response models: they are also the OpenAPI document."""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobrelay.core.jobs import Job
from jobrelay.core.states import JobState


class SubmitJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=200, examples=["catalog.export"])
    payload: dict[str, Any] = Field(default_factory=dict, examples=[{"course": "JavaScript"}])
    max_attempts: int | None = Field(None, ge=1, le=100)

    @field_validator("payload")
    @classmethod
    def _storable(cls, payload: dict[str, Any]) -> dict[str, Any]:
        problem = unstorable_json(payload)
        if problem is not None:
            raise ValueError(problem)
        return payload


def unstorable_json(value: Any) -> str | None:
    """Why PostgreSQL's jsonb would refuse the value (a NUL character, NaN or an infinity), or
    None. Iterative: the parser allows nesting deeper than a recursive walk could follow."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a string contains a NUL character"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "a number is NaN or infinite"
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


class JobLinks(BaseModel):
    self: str
    events: str


class JobView(BaseModel):
    id: uuid.UUID
    type: str
    state: JobState
    idempotency_key: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    available_at: datetime
    finished_at: datetime | None
    lease_until: datetime | None
    last_error_code: str | None
    last_error: str | None
    result: dict[str, Any] | None
    links: JobLinks

    @classmethod
    def of(cls, job: Job) -> JobView:
        location = job_location(job.id)
        return cls(
            id=job.id,
            type=job.type,
            state=job.state,
            idempotency_key=job.idempotency_key,
            payload=job.payload if isinstance(job.payload, dict) else {},
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            created_at=job.created_at,
            updated_at=job.updated_at,
            available_at=job.available_at,
            finished_at=job.finished_at,
            lease_until=job.lease_until,
            last_error_code=job.last_error_code,
            last_error=job.last_error,
            result=job.result if job.state == JobState.SUCCEEDED else None,
            links=JobLinks(self=location, events=f"{location}/events"),
        )


class JobPage(BaseModel):
    items: list[JobView]
    next_cursor: str | None = Field(None, description="Pass as ?cursor= for the next page")


class EventView(BaseModel):
    at: datetime
    event: str
    attempt: int
    detail: str | None


class EventList(BaseModel):
    job_id: uuid.UUID
    events: list[EventView]


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    code: str
    detail: str | None = None
    errors: list[dict[str, Any]] | None = Field(
        None, description="Where and what, for a request that failed validation"
    )


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


def job_location(job_id: uuid.UUID) -> str:
    return f"/v1/jobs/{job_id}"
