"""Periodic schedules as values: when their ticks fall, and the idempotency key of each tick.

A schedule makes one job a tick. Its ticks are

- ``every=N`` seconds: the multiples of N seconds since the Unix epoch (``every=3600`` ticks on
  the hour, ``every=86400`` at midnight UTC), whatever the time a dispatcher starts;
- ``cron="m h dom mon dow"``: the minutes a classic five-field cron expression names, read in
  UTC (so no tick is skipped or doubled by a daylight-saving change). ``croniter`` reads it.

The job of a tick is owned by the built-in client ``jobrelay-scheduler`` under the idempotency
key ``schedule:<name>:<tick, UTC ISO 8601>`` (``Schedule.key``): every dispatcher may make it, and
the key keeps it one job. Pure: the clock is always passed in.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import CroniterBadDateError, croniter

from jobrelay.core.bounds import MAX_ATTEMPTS_MAX
from jobrelay.core.flow import check_priority

SCHEDULER_CLIENT = "jobrelay-scheduler"
"""The built-in client that owns the jobs of schedules (migration 0005 creates it)."""

KEY_PREFIX = "schedule:"
NAME_MAX = 100
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_name(name: object) -> str:
    """A schedule's name: 1–100 visible ASCII characters without ``:`` (it is a part of the
    idempotency keys, whose parts ``:`` separates)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"schedule name must be a non-empty string, got {name!r}")
    if len(name) > NAME_MAX:
        raise ValueError(f"schedule name {name[:20]!r}… is longer than {NAME_MAX} characters")
    if not all("!" <= ch <= "~" for ch in name) or ":" in name:
        raise ValueError(
            f"schedule name {name!r} must be visible ASCII characters (no spaces) without ':'"
        )
    return name


def check_every(every: object) -> int:
    """A period in whole seconds, at least 1 (an int or a ``timedelta``)."""
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
        if seconds != int(seconds):
            raise ValueError(f"every must be a whole number of seconds, got {every}")
        every = int(seconds)
    if isinstance(every, bool) or not isinstance(every, int):
        raise ValueError(
            f"every must be a whole number of seconds (an int or a timedelta), got {every!r}"
        )
    if every < 1:
        raise ValueError(f"every must be at least 1 second, got {every}")
    return every


def check_cron(cron: object) -> str:
    """A five-field cron expression (minute hour day-of-month month day-of-week) that matches
    some minute; returned with its fields separated by single spaces."""
    if not isinstance(cron, str):
        raise ValueError(f"cron must be a string like '*/15 * * * *', got {cron!r}")
    fields = cron.split()
    if len(fields) != len(CRON_FIELDS):
        raise ValueError(
            f"cron {cron!r} must have 5 fields ({' '.join(CRON_FIELDS)}), got {len(fields)}"
        )
    expression = " ".join(fields)
    try:
        croniter(expression, EPOCH).get_next(datetime)
    except CroniterBadDateError:  # a valid expression that no date matches: 31 February
        raise ValueError(f"cron {cron!r} never matches a date") from None
    except (ValueError, KeyError, TypeError) as error:  # croniter's own errors are ValueErrors
        raise ValueError(f"cron {cron!r} is not a valid expression: {error}") from None
    return expression


def check_payload(payload: object) -> dict[str, Any]:
    """A JSON object that PostgreSQL can store, copied (later changes to the caller's dict do
    not reach the schedule)."""
    if not isinstance(payload, Mapping):
        kind = type(payload).__name__
        raise ValueError(f"a schedule's payload must be a JSON object, got {kind}")
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(payload), allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ValueError(f"a schedule's payload must be plain JSON: {error}") from None
    return copied


def check_max_attempts(max_attempts: object) -> int | None:
    if max_attempts is None:
        return None
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_MAX
    ):
        raise ValueError(
            f"max_attempts must be an int from 1 to {MAX_ATTEMPTS_MAX}, got {max_attempts!r}"
        )
    return max_attempts


def as_utc(now: datetime) -> datetime:
    if now.utcoffset() is None:
        raise ValueError("a schedule's clock needs an aware datetime (UTC), got a naive one")
    return now.astimezone(UTC)


@dataclass(frozen=True)
class Schedule:
    """One periodic job: ``type`` with ``payload`` at each tick of ``every`` seconds or of the
    ``cron`` expression (exactly one of them). Built by ``Registry.schedule``, which also checks
    the type and the payload against the registry."""

    name: str
    type: str
    payload: dict[str, Any] = field(default_factory=dict, hash=False)
    every: int | None = None
    cron: str | None = None
    max_attempts: int | None = None  # None: the type's limit, else JOBRELAY_MAX_ATTEMPTS
    priority: int | None = None  # None: the type's priority (docs/flow-control.md)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not isinstance(self.type, str) or not self.type:
            raise ValueError(f"schedule {self.name!r}: type must be a job type's name")
        if (self.every is None) == (self.cron is None):
            raise ValueError(
                f"schedule {self.name!r}: give exactly one of every (seconds) and cron"
            )
        try:
            if self.every is not None:
                object.__setattr__(self, "every", check_every(self.every))
            if self.cron is not None:
                object.__setattr__(self, "cron", check_cron(self.cron))
            object.__setattr__(self, "payload", check_payload(self.payload))
            check_max_attempts(self.max_attempts)
            if self.priority is not None:
                check_priority(self.priority)
        except ValueError as error:
            raise ValueError(f"schedule {self.name!r}: {error}") from None

    # --- ticks ----------------------------------------------------------------------------

    def latest_tick(self, now: datetime) -> datetime:
        """The latest tick at or before ``now`` (UTC)."""
        now = as_utc(now)
        if self.every is not None:
            period = timedelta(seconds=self.every)
            return EPOCH + ((now - EPOCH) // period) * period
        # Cron ticks are whole minutes: the latest one before the next whole minute.
        next_minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        return self._cron_tick(next_minute, forward=False)

    def next_tick(self, now: datetime) -> datetime:
        """The first tick after ``now`` (UTC)."""
        now = as_utc(now)
        if self.every is not None:
            return self.latest_tick(now) + timedelta(seconds=self.every)
        return self._cron_tick(now.replace(second=0, microsecond=0), forward=True)

    def _cron_tick(self, start: datetime, *, forward: bool) -> datetime:
        """The cron tick just after (forward) or just before ``start``, never ``start``."""
        assert self.cron is not None
        ticks = croniter(self.cron, start)
        found: datetime = ticks.get_next(datetime) if forward else ticks.get_prev(datetime)
        return found.astimezone(UTC)

    # --- jobs -----------------------------------------------------------------------------

    @property
    def key_prefix(self) -> str:
        """What the idempotency keys of every tick of this schedule start with."""
        return f"{KEY_PREFIX}{self.name}:"

    def key(self, tick: datetime) -> str:
        """The idempotency key of the job of ``tick``: ``schedule:<name>:<UTC ISO 8601>``."""
        return f"{self.key_prefix}{as_utc(tick).isoformat()}"

    @property
    def timing(self) -> str:
        """``every 60s`` or ``cron 0 3 * * *``."""
        return f"every {self.every}s" if self.every is not None else f"cron {self.cron}"


@dataclass(frozen=True)
class MadeJob:
    """What asking for a tick's job found: the job made now (``created``), or the one another
    dispatcher (or an earlier round) made; ``conflict`` when that one has another type or
    payload (the schedule changed since)."""

    job_id: uuid.UUID
    created: bool
    conflict: bool = False
