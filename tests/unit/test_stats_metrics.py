"""The gauges operators alert on (``api/stats_metrics.py``): what one snapshot exports, and how
often the snapshot is read, against an in-memory source and a hand-driven clock."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobrelay.api.stats_metrics import StatsCollector, StatsSnapshots
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.stats import BrokerBlock, OutboxBacklog, RetryingSummary, SystemStats

STATS = SystemStats(
    jobs_by_state={"queued": 7, "running": 2, "quarantined": 3},
    outbox=OutboxBacklog(unpublished=9, due=4, oldest_due_age_seconds=612.5),
    expired_leases=1,
    retrying=RetryingSummary(0, None),
    quarantined_by_code={"permanent_error": 2, "delivery_limit": 1},
    failed_by_code={"transient_error": 5},
    published_never_claimed=6,
    published_never_claimed_after_seconds=300.0,
    redispatched_last_hour=8,
    broker_blocks=[BrokerBlock("d1", "low on memory", datetime(2026, 1, 1, tzinfo=UTC))],
)


class FakeSource:
    """A store's ``stats`` that counts its reads; ``failure`` makes them raise it."""

    def __init__(self, stats: SystemStats = STATS) -> None:
        self.stats_value = stats
        self.reads = 0
        self.failure: Exception | None = None
        self.release: asyncio.Event | None = None

    async def stats(self) -> SystemStats:
        self.reads += 1
        if self.release is not None:
            await self.release.wait()
        if self.failure is not None:
            raise self.failure
        return self.stats_value


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scraped(snapshots: StatsSnapshots) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the collector exports, by name and labels."""
    registry = CollectorRegistry()
    registry.register(StatsCollector(snapshots))
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_a_snapshot_becomes_gauges_named_by_prometheus_conventions() -> None:
    snapshots = StatsSnapshots()
    await snapshots.refresh(FakeSource())
    assert scraped(snapshots) == {
        ("jobrelay_stats_up", ()): 1,
        ("jobrelay_jobs", (("state", "queued"),)): 7,
        ("jobrelay_jobs", (("state", "waiting"),)): 0,
        ("jobrelay_jobs", (("state", "sleeping"),)): 0,
        ("jobrelay_jobs", (("state", "running"),)): 2,
        ("jobrelay_jobs", (("state", "retrying"),)): 0,
        ("jobrelay_jobs", (("state", "succeeded"),)): 0,
        ("jobrelay_jobs", (("state", "quarantined"),)): 3,
        ("jobrelay_jobs", (("state", "cancelled"),)): 0,
        ("jobrelay_outbox_unpublished_rows", ()): 9,
        ("jobrelay_outbox_due_rows", ()): 4,
        ("jobrelay_outbox_oldest_due_age_seconds", ()): 612.5,
        ("jobrelay_expired_leases", ()): 1,
        ("jobrelay_published_never_claimed_jobs", ()): 6,
        ("jobrelay_redispatched_messages_last_hour", ()): 8,
        ("jobrelay_quarantined_jobs", (("reason", "delivery_limit"),)): 1,
        ("jobrelay_quarantined_jobs", (("reason", "permanent_error"),)): 2,
        ("jobrelay_failed_jobs", (("reason", "transient_error"),)): 5,
        ("jobrelay_broker_blocked_dispatchers", ()): 1,
    }


async def test_no_due_outbox_row_is_an_age_of_zero() -> None:
    quiet = SystemStats(
        jobs_by_state={},
        outbox=OutboxBacklog(0, 0, None),
        expired_leases=0,
        retrying=RetryingSummary(0, None),
        quarantined_by_code={},
        failed_by_code={},
        published_never_claimed=0,
        published_never_claimed_after_seconds=300.0,
        redispatched_last_hour=0,
    )
    snapshots = StatsSnapshots()
    await snapshots.refresh(FakeSource(quiet))
    samples = scraped(snapshots)
    assert samples[("jobrelay_outbox_oldest_due_age_seconds", ())] == 0
    assert not any(name == "jobrelay_quarantined_jobs" for name, _ in samples)


async def test_scrapes_within_the_max_age_share_one_read_then_it_is_read_again() -> None:
    clock, source = Clock(), FakeSource()
    snapshots = StatsSnapshots(max_age=5.0, clock=clock)
    for _ in range(20):
        await snapshots.refresh(source)
        clock.now += 0.2
    assert source.reads == 1  # 20 scrapes over 4 s
    clock.now += 1.0
    await snapshots.refresh(source)
    assert source.reads == 2


async def test_concurrent_scrapes_wait_for_the_one_read_in_flight() -> None:
    source = FakeSource()
    source.release = asyncio.Event()
    snapshots = StatsSnapshots(clock=Clock())
    scrapes = [asyncio.create_task(snapshots.refresh(source)) for _ in range(10)]
    await asyncio.sleep(0)
    source.release.set()
    assert await asyncio.gather(*scrapes) == [STATS] * 10
    assert source.reads == 1


async def test_a_database_that_is_down_leaves_only_stats_up_zero_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, source = Clock(), FakeSource()
    snapshots = StatsSnapshots(max_age=5.0, clock=clock)
    await snapshots.refresh(source)
    source.failure = StoreUnavailable("connection refused")
    clock.now += 5.0
    with caplog.at_level(logging.WARNING, logger="jobrelay.api"):
        for _ in range(3):
            assert await snapshots.refresh(source) is None
            assert scraped(snapshots) == {("jobrelay_stats_up", ()): 0}
            clock.now += 5.0
    assert source.reads == 4  # the failure is kept as long as a snapshot: one read per 5 s
    assert [r.getMessage() for r in caplog.records] == [
        "the metrics leave out the system's counts: the database is unavailable"
    ]
    source.failure = None
    assert await snapshots.refresh(source) == STATS
    assert scraped(snapshots)[("jobrelay_stats_up", ())] == 1


async def test_any_other_failure_of_the_read_is_a_scrape_with_stats_up_zero_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = FakeSource()
    source.failure = RuntimeError("relation jobs does not exist")
    snapshots = StatsSnapshots()
    with caplog.at_level(logging.WARNING, logger="jobrelay.api"):
        assert await snapshots.refresh(source) is None
    assert scraped(snapshots) == {("jobrelay_stats_up", ()): 0}
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info  # a bug: with its traceback
