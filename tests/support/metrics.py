"""Scrapes read as samples, and a database arranged so that every alert the docs name has
something to show (``docs/operating.md``, ``docs/observability.md``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func

from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from tests.support import factories

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: Samples, name: str, **labels: str) -> float | None:
    return scraped.get((name, frozenset(labels.items())))


def monotonic_samples(text: str) -> Samples:
    """The samples of counters and histograms: the ones that must never go backwards."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        if family.type in ("counter", "histogram")
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


# What ``arrange_alerts`` makes the stats gauges say (the outbox age aside: at least 600 s).
ARRANGED: dict[tuple[str, Labels], float] = {
    ("jobrelay_stats_up", frozenset()): 1,
    ("jobrelay_jobs", frozenset({("state", "queued")})): 2,
    ("jobrelay_jobs", frozenset({("state", "running")})): 1,
    ("jobrelay_jobs", frozenset({("state", "retrying")})): 1,
    ("jobrelay_jobs", frozenset({("state", "quarantined")})): 3,
    ("jobrelay_jobs", frozenset({("state", "succeeded")})): 0,
    ("jobrelay_jobs", frozenset({("state", "cancelled")})): 0,
    ("jobrelay_outbox_unpublished_rows", frozenset()): 1,
    ("jobrelay_outbox_due_rows", frozenset()): 1,
    ("jobrelay_expired_leases", frozenset()): 1,
    ("jobrelay_published_never_claimed_jobs", frozenset()): 1,
    ("jobrelay_redispatched_messages_last_hour", frozenset()): 1,
    ("jobrelay_quarantined_jobs", frozenset({("reason", "permanent_error")})): 2,
    ("jobrelay_quarantined_jobs", frozenset({("reason", "delivery_limit")})): 1,
    ("jobrelay_failed_jobs", frozenset({("reason", "transient_error")})): 1,
    ("jobrelay_broker_blocked_dispatchers", frozenset()): 0,
}
OLD_OUTBOX_ROW_AGE = timedelta(minutes=10)


async def arrange_alerts(store: Store) -> None:
    """Rows as a troubled system leaves them (``ARRANGED``): quarantined jobs of two reasons, a
    running job whose lease expired, a due outbox row nobody relayed for 10 minutes, a job
    published an hour ago and never claimed (and redispatched once), a job retrying after an
    error."""
    owner: Any = (await factories.client(store)).id
    await factories.jobs(store, 2, client_id=owner, state=JobState.QUARANTINED)
    await factories.job(
        store, client_id=owner, state=JobState.QUARANTINED, last_error_code="delivery_limit"
    )
    await factories.job(
        store,
        client_id=owner,
        state=JobState.RUNNING,
        lease_until=func.now() - timedelta(minutes=1),
    )
    await factories.job(
        store, client_id=owner, available_at=func.now() - OLD_OUTBOX_ROW_AGE, with_outbox=True
    )
    stranded = await factories.job(
        store, client_id=owner, available_at=func.now() - timedelta(hours=1)
    )
    await factories.outbox(store, [stranded], published_at=func.now() - timedelta(minutes=30))
    await factories.job_events(store, [stranded.id], "redispatched")
    await factories.job(
        store,
        client_id=owner,
        state=JobState.RETRYING,
        last_error_code="transient_error",
        available_at=func.now() + timedelta(hours=1),
    )


def assert_arranged(scraped: Samples, *, submitted: int = 0) -> None:
    """The scrape shows ``ARRANGED``, with ``submitted`` jobs accepted since (queued, each
    with a due outbox row)."""
    expected = dict(ARRANGED)
    expected[("jobrelay_jobs", frozenset({("state", "queued")}))] += submitted
    expected[("jobrelay_outbox_unpublished_rows", frozenset())] += submitted
    expected[("jobrelay_outbox_due_rows", frozenset())] += submitted
    shown = {key: scraped.get(key) for key in expected}
    assert shown == expected
    stats_reasons = {
        key for key in scraped if key[0] in ("jobrelay_quarantined_jobs", "jobrelay_failed_jobs")
    }
    assert stats_reasons <= set(expected)  # no other reason
    age = value(scraped, "jobrelay_outbox_oldest_due_age_seconds")
    assert age is not None and OLD_OUTBOX_ROW_AGE.total_seconds() <= age < 3600
