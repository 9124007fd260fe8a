"""When the client sends a request again, and how long it waits first: pure, with no HTTP
library, shared by ``Client`` and ``AsyncClient``.

A failure is one of two kinds. ``UNSENT``: the server did not act on the request (the
connection was refused, or it answered 429 or 503, which it sends before doing anything), so
any request may be sent again. ``AMBIGUOUS``: it may have acted (the connection broke after the
request went out, or a proxy answered 502/504), so only a request that is safe to repeat is
sent again: a submission, because it carries the same ``Idempotency-Key`` every time, and a
read.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import Enum

from jobrelay_client.backoff import backoff


class Failure(Enum):
    UNSENT = "unsent"
    AMBIGUOUS = "ambiguous"


RETRY_STATUSES: Mapping[int, Failure] = {
    429: Failure.UNSENT,  # rate_limited
    503: Failure.UNSENT,  # overloaded, database_unavailable; a proxy with no upstream
    502: Failure.AMBIGUOUS,
    504: Failure.AMBIGUOUS,
}


def status_failure(status: int) -> Failure | None:
    """The kind of failure an answer with this status is, or None when it is final."""
    return RETRY_STATUSES.get(status)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: whole seconds or an HTTP date (RFC 9110
    10.2.3); a date in the past is 0. None when the header is absent or not understood."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` further tries after the first, with jittered exponential backoff
    (``jobrelay_client/backoff.py``: uniform in [c/2, c], c doubling from ``backoff_base`` up
    to ``backoff_max``), or as long as the server's ``Retry-After`` says, at most
    ``retry_after_max``. With the defaults a request is given up after 8 to 16 seconds of
    waiting, a Retry-After aside."""

    retries: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    retry_after_max: float = 60.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be 0 or more")

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1 = the first retry) without a Retry-After."""
        return backoff(retry, self.backoff_base, self.backoff_max, rng)

    def wait(
        self,
        retry: int,
        failure: Failure | None,
        *,
        repeatable: bool,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based) after ``failure``, or None
        when the failure is final: not retryable, ambiguous for a request that is not
        ``repeatable``, or the retries are spent."""
        if failure is None or retry > self.retries:
            return None
        if failure is Failure.AMBIGUOUS and not repeatable:
            return None
        if retry_after is not None:
            return min(retry_after, self.retry_after_max)
        return self.backoff(retry, rng)
