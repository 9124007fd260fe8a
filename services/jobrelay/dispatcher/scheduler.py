"""Periodic schedules in the dispatcher: each tick of a schedule becomes one ordinary job.

Every dispatcher runs a ``Scheduler`` beside its relay, over the schedules of its registry
(``Registry.schedule``, loaded from JOBRELAY_HANDLERS like the API's and the consumers'). A round
reads the database's clock (every dispatcher agrees on it), and for each schedule asks for the
job of its latest tick at or before that time: ``Store.accept_job`` as the built-in client
``jobrelay-scheduler`` under the key ``schedule:<name>:<tick>``. That accept is idempotent, so
however many dispatchers ask for a tick, exactly one job exists for it. Then the scheduler sleeps
until the next tick of any schedule.

- Only the latest tick is made: ticks missed while no dispatcher ran are not replayed. A
  dispatcher that starts makes the latest tick when nobody made it yet.
- A tick older than the retention period is not made: its job may have finished and been
  deleted by retention since, and making it again would repeat it.
- An outage of the database is logged and tried again after a backoff, never fatal; the tick
  that was due is made when the database answers again (if it is still the latest).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.jobs import Flow, JobRequest
from jobrelay.core.registry import Registry
from jobrelay.core.retry import backoff
from jobrelay.core.schedules import SCHEDULER_CLIENT, MadeJob, Schedule
from jobrelay.core.settings import Settings
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.eventloop import stopped_within

log = logging.getLogger(__name__)


class SchedulerStore(Protocol):
    """What the scheduler needs of the database (``jobrelay.db.schedule_store``)."""

    async def scheduler_client_id(self) -> uuid.UUID | None: ...

    async def now(self) -> datetime: ...

    async def make_job(self, client_id: uuid.UUID, request: JobRequest) -> MadeJob: ...


class SchedulerClientMissing(StoreUnavailable):
    """The database has no ``jobrelay-scheduler`` client yet (``jobrelay migrate`` not run):
    waited out like an outage."""

    code = "scheduler_client_missing"


@dataclass(frozen=True)
class SchedulerConfig:
    default_max_attempts: int = 3  # JOBRELAY_MAX_ATTEMPTS, for types without their own limit
    # Ticks at least this old are not made (None: any age): the shortest retention of a
    # finished job, which frees its idempotency key.
    horizon_seconds: float | None = None
    # The longest sleep between rounds, whatever the next tick: the clocks are read again.
    max_sleep_seconds: float = 30.0
    # A little past the tick, so that the round after the sleep finds it due.
    wake_margin_seconds: float = 0.005
    outage_base_seconds: float = 0.2
    outage_max_seconds: float = 5.0


def scheduler_config(settings: Settings) -> SchedulerConfig:
    retentions = [settings.retention_hours * 3600]
    if settings.quarantine_retention_hours is not None:
        retentions.append(settings.quarantine_retention_hours * 3600)
    return SchedulerConfig(
        default_max_attempts=settings.max_attempts, horizon_seconds=min(retentions)
    )


class Scheduler:
    def __init__(
        self,
        store: SchedulerStore,
        registry: Registry,
        config: SchedulerConfig | None = None,
        metrics: DispatcherMetrics | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.config = config or SchedulerConfig()
        self.metrics = metrics or DispatcherMetrics()
        self.rng = rng or random.Random()
        self._client_id: uuid.UUID | None = None
        # Per schedule, the latest tick whose job this process knows to exist (made, found,
        # or too old to make): it is not asked for again.
        self._settled: dict[str, datetime] = {}
        self._outages = 0

    @property
    def schedules(self) -> list[Schedule]:
        return list(self.registry.schedules.values())

    # --- one round ----------------------------------------------------------------------------

    async def run_once(self, now: datetime | None = None) -> float | None:
        """Make the job of each schedule's latest tick at or before ``now`` (the database's
        clock when None) unless it exists; returns the seconds until the next tick of any
        schedule (None: no schedule). Raises ``StoreUnavailable``; the ticks it did not
        settle are asked for again by the next round."""
        schedules = self.schedules
        if not schedules:
            return None
        if now is None:
            now = await self.store.now()
        for schedule in schedules:
            await self._settle(schedule, schedule.latest_tick(now), now)
        upcoming = min(schedule.next_tick(now) for schedule in schedules)
        return (upcoming - now).total_seconds()

    async def _settle(self, schedule: Schedule, tick: datetime, now: datetime) -> None:
        if self._settled.get(schedule.name) == tick:
            return
        horizon = self.config.horizon_seconds
        if horizon is not None and (now - tick).total_seconds() >= horizon:
            self._settled[schedule.name] = tick  # its job may be gone: never made again
            return
        made = await self.store.make_job(await self.client_id(), self.request(schedule, tick))
        self._settled[schedule.name] = tick
        if made.created:
            self.metrics.scheduled.labels(schedule=schedule.name).inc()
            log.info(
                "schedule %s made job %s for the tick %s",
                schedule.name,
                made.job_id,
                tick.isoformat(),
                extra={
                    "event": "scheduled",
                    "schedule": schedule.name,
                    "job_id": str(made.job_id),
                    "job_type": schedule.type,
                    "tick": tick.isoformat(),
                },
            )
        elif made.conflict:
            log.warning(
                "schedule %s: the job %s of the tick %s has another type or payload (the "
                "schedule changed since it was made); the next tick uses the new one",
                schedule.name,
                made.job_id,
                tick.isoformat(),
                extra={
                    "event": "schedule_conflict",
                    "schedule": schedule.name,
                    "job_id": str(made.job_id),
                    "tick": tick.isoformat(),
                },
            )

    def request(self, schedule: Schedule, tick: datetime) -> JobRequest:
        """The submission of ``tick``'s job."""
        max_attempts = schedule.max_attempts
        if max_attempts is None:
            max_attempts = self.registry.max_attempts_for(
                schedule.type, self.config.default_max_attempts
            )
        asked = Flow(priority=schedule.priority)
        payload = self.registry.validate_payload(schedule.type, schedule.payload)
        return JobRequest(
            idempotency_key=schedule.key(tick),
            type=schedule.type,
            payload=schedule.payload,
            max_attempts=max_attempts,
            flow=asked,
            defaults=self.registry.flow_defaults(schedule.type, payload, asked),
        )

    async def client_id(self) -> uuid.UUID:
        """The scheduler client's id, read once."""
        if self._client_id is None:
            found = await self.store.scheduler_client_id()
            if found is None:
                raise SchedulerClientMissing(
                    f"the database has no client {SCHEDULER_CLIENT!r}: run jobrelay migrate"
                )
            self._client_id = found
        return self._client_id

    # --- the loop -----------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Rounds until ``stopping`` is set, each at the next tick; never raises (but
        ``CancelledError``)."""
        if not self.schedules:
            return
        while not stopping.is_set():
            delay = await self._round()
            await stopped_within(stopping, delay)

    async def _round(self) -> float:
        """One round; the seconds to sleep after it."""
        config = self.config
        try:
            until_next = await self.run_once()
        except StoreUnavailable as error:
            self._outages += 1
            delay = backoff(
                self._outages, config.outage_base_seconds, config.outage_max_seconds, self.rng
            )
            log.warning(
                "schedules skipped: %s; retrying in %.1fs",
                error,
                delay,
                extra={"event": "outage", "reason": error.code},
            )
            return delay
        except Exception:
            log.exception("schedules failed", extra={"event": "maintenance_failed"})
            return config.outage_max_seconds
        if self._outages:
            log.info("schedules evaluated again", extra={"event": "recovered"})
            self._outages = 0
        if until_next is None:
            return config.max_sleep_seconds
        return min(config.max_sleep_seconds, max(0.0, until_next) + config.wake_margin_seconds)
