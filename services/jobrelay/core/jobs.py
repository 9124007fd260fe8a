"""The job as a frozen value, and the outcome of one attempt decided as a pure function."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobrelay.core.errors import HandlerError, PermanentError
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState

IDEMPOTENCY_KEY_MAX = 200
SAFE_ERROR_MAX = 500


@dataclass(frozen=True)
class Job:
    id: uuid.UUID
    client_id: uuid.UUID
    idempotency_key: str
    type: str
    payload: Any
    state: JobState
    attempts: int
    max_attempts: int
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    lease_token: uuid.UUID | None = None
    lease_until: datetime | None = None
    last_error_code: str | None = None
    last_error: str | None = None
    result: dict[str, Any] | None = None


def is_valid_idempotency_key(key: str | None) -> bool:
    """1–200 visible ASCII characters (0x21–0x7E)."""
    return (
        key is not None
        and 1 <= len(key) <= IDEMPOTENCY_KEY_MAX
        and all("!" <= ch <= "~" for ch in key)
    )


def safe_error_text(error: BaseException) -> str:
    """A short message fit for ``jobs.last_error``.

    Only ``HandlerError`` messages are written by handler authors for this purpose; any other
    exception may carry a payload or a secret in its text, so only its class name is kept.
    """
    text = str(error) or error.code if isinstance(error, HandlerError) else type(error).__name__
    return text[:SAFE_ERROR_MAX]


# --- the outcome of an attempt ------------------------------------------------------------------


@dataclass(frozen=True)
class Succeeded:
    result: dict[str, Any]


@dataclass(frozen=True)
class RetryLater:
    available_at: datetime
    error_code: str
    error: str


@dataclass(frozen=True)
class Quarantine:
    reason_code: str
    error: str


Outcome = Succeeded | RetryLater | Quarantine


def decide_outcome(
    *,
    attempt: int,
    max_attempts: int,
    result: dict[str, Any] | None,
    error: BaseException | None,
    now: datetime,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> Outcome:
    """What one finished attempt means, with the clock passed in. The caller stores it once."""
    if error is None:
        return Succeeded(result if result is not None else {})
    code = error.code if isinstance(error, HandlerError) else "unexpected_error"
    text = safe_error_text(error)
    if isinstance(error, PermanentError):
        return Quarantine(reason_code=code, error=text)
    if attempt >= max_attempts:
        return Quarantine(
            reason_code="attempts_exhausted", error=f"{code}: {text}"[:SAFE_ERROR_MAX]
        )
    delay = policy.delay(attempt, rng)
    return RetryLater(available_at=now + timedelta(seconds=delay), error_code=code, error=text)
