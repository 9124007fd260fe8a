"""The gauges operators alert on, exported by the API's ``/metrics`` from the same snapshot as
``GET /v1/admin/stats`` (``Store.stats``, ``core/stats.py``).

They are read at scrape time, not counted by the processes: the outbox backlog, expired leases
or the quarantine are facts of the database, whoever changed them. ``StatsSnapshots`` reads them
at most once every ``max_age`` seconds per process, however many scrapers ask (one Prometheus
per API worker, or several), and ``StatsCollector`` turns the latest snapshot into gauges. With
several API workers they are added to the scrape as the answering worker read them, never
summed over the workers (``api/multiprocess.py``).

A database that cannot be read makes a scrape with ``jobrelay_stats_up 0`` and without these
gauges, never an error: the API's own metrics matter most when the database is in trouble.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.states import JobState
from jobrelay.core.stats import SystemStats

log = logging.getLogger("jobrelay.api")

# Long enough that scrapes from every Prometheus of a site cost one stats read per worker every
# few seconds; short next to the minutes an alert waits before it fires.
STATS_MAX_AGE_SECONDS = 5.0


class StatsSource(Protocol):
    async def stats(self) -> SystemStats: ...


class StatsSnapshots:
    """The latest ``SystemStats`` read for the metrics, or ``None`` when that read failed;
    read again once it is ``max_age`` seconds old (a failure is kept as long, so a database
    that is down does not make every scrape wait for it)."""

    def __init__(
        self,
        *,
        max_age: float = STATS_MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age = max_age
        self.latest: SystemStats | None = None
        self._clock = clock
        self._read_at: float | None = None
        self._failing = False
        # Concurrent scrapes wait for the one read in flight rather than start their own.
        self._lock = asyncio.Lock()

    async def refresh(self, source: StatsSource) -> SystemStats | None:
        async with self._lock:
            if self._read_at is None or self._clock() - self._read_at >= self.max_age:
                self.latest = await self._read(source)
                self._read_at = self._clock()
        return self.latest

    async def _read(self, source: StatsSource) -> SystemStats | None:
        try:
            stats = await source.stats()
        except StoreUnavailable:
            self._failed("the database is unavailable", "metrics_stats_unavailable")
            return None
        except Exception:
            # Whatever broke the read (a database not migrated yet, a bug), the rest of the
            # scrape is still worth having: the gauges are reported down, the error logged.
            self._failed("reading them failed", "metrics_stats_failed", unexpected=True)
            return None
        self._failing = False
        return stats

    def _failed(self, why: str, event: str, *, unexpected: bool = False) -> None:
        """Logged when reads start failing, not at every read while they go on failing."""
        if not self._failing:
            log.log(
                logging.ERROR if unexpected else logging.WARNING,
                "the metrics leave out the system's counts: %s",
                why,
                exc_info=unexpected,
                extra={"event": event},
            )
        self._failing = True


class StatsCollector(Collector):
    """The gauges of the latest snapshot, at each scrape (after ``StatsSnapshots.refresh``)."""

    def __init__(self, snapshots: StatsSnapshots) -> None:
        self.snapshots = snapshots

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return stats_families(self.snapshots.latest)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # no names to reserve: nothing else in the registry is named like these


def stats_families(stats: SystemStats | None) -> list[GaugeMetricFamily]:
    """The gauges of one snapshot; ``None`` (unread): ``jobrelay_stats_up 0`` alone."""
    up = GaugeMetricFamily(
        "jobrelay_stats_up",
        "1 when the system's counts (the gauges below, as GET /v1/admin/stats) were read; 0 "
        "when the database could not be read, and they are left out of this scrape.",
        value=0 if stats is None else 1,
    )
    if stats is None:
        return [up]
    return [
        up,
        _jobs_by_state(stats),
        _gauge(
            "jobrelay_outbox_unpublished_rows",
            "Outbox rows not yet published (due or not).",
            stats.outbox.unpublished,
        ),
        _gauge(
            "jobrelay_outbox_due_rows",
            "Outbox rows due and not yet published: what the dispatchers have to relay now.",
            stats.outbox.due,
        ),
        _gauge(
            "jobrelay_outbox_oldest_due_age_seconds",
            "How long the oldest due, unpublished outbox row has waited (0 when none): grows "
            "while no dispatcher relays (down, or the broker refuses).",
            stats.outbox.oldest_due_age_seconds or 0.0,
        ),
        _gauge(
            "jobrelay_expired_leases",
            "Running jobs whose lease expired (their consumer died or froze); the dispatcher "
            "puts them back to queued.",
            stats.expired_leases,
        ),
        _gauge(
            "jobrelay_published_never_claimed_jobs",
            "Jobs due and published long ago (GET /v1/admin/stats "
            "published_never_claimed_after_seconds) that no consumer claimed since: their "
            "message may be lost.",
            stats.published_never_claimed,
        ),
        _gauge(
            "jobrelay_redispatched_messages_last_hour",
            "Messages published again over the last hour because they were lost (the "
            "dispatcher's healing and jobs redispatch).",
            stats.redispatched_last_hour,
        ),
        _by_reason(
            "jobrelay_quarantined_jobs",
            "Quarantined jobs by reason code (only reasons with jobs).",
            stats.quarantined_by_code,
        ),
        _by_reason(
            "jobrelay_failed_jobs",
            "Jobs not quarantined that met an error, by its code: finished ones, and live ones "
            "retrying or deferred (only codes with jobs).",
            stats.failed_by_code,
        ),
        _gauge(
            "jobrelay_broker_blocked_dispatchers",
            "Dispatchers the broker blocks from publishing now (a memory or disk alarm).",
            len(stats.broker_blocks),
        ),
    ]


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _jobs_by_state(stats: SystemStats) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "jobrelay_jobs", "Jobs by state (every state, 0 too).", labels=["state"]
    )
    for state in JobState:
        family.add_metric([state.value], stats.jobs_by_state.get(state.value, 0))
    return family


def _by_reason(name: str, text: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=["reason"])
    for reason, n in sorted(counts.items()):
        family.add_metric([reason], n)
    return family
